// Speculative decoding: the text form of the setting, the draft vocabulary check and the n-gram
// (prompt lookup) draft. The verify step itself is part of the engine's step (src/engine/engine.cpp)
// and the acceptance rule part of sampling (src/engine/sampling.cpp).
#include <cstdlib>
#include <string>
#include <vector>

#include "repro/common/error.hpp"
#include "repro/engine/engine.hpp"

namespace repro {

namespace {
[[noreturn]] void bad(const char* flag, const std::string& text, const std::string& why) {
  throw UsageError(std::string(flag) + " '" + text + "': " + why +
                   "; use off, ngram:K or draft:FILE:K with K from 1 to " + std::to_string(kMaxDraftWidth));
}

int parse_width(const char* flag, const std::string& text, const std::string& k) {
  const bool digits = !k.empty() && k.size() <= 6 && k.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) bad(flag, text, "the draft width '" + k + "' is not a number");
  const int v = std::atoi(k.c_str());
  if (v < 1 || v > kMaxDraftWidth)
    bad(flag, text, "the draft width " + std::to_string(v) + " is out of range");
  return v;
}
}  // namespace

Speculative parse_speculative(const std::string& text, const char* flag) {
  Speculative s;
  if (text == "off" || text.empty()) return s;
  if (text.rfind("ngram:", 0) == 0) {
    s.kind = DraftKind::Ngram;
    s.width = parse_width(flag, text, text.substr(6));
    return s;
  }
  if (text.rfind("draft:", 0) == 0) {
    const size_t colon = text.rfind(':');
    if (colon <= 5) bad(flag, text, "give the draft model and the width");
    s.kind = DraftKind::Model;
    s.draft_file = text.substr(6, colon - 6);
    if (s.draft_file.empty()) bad(flag, text, "the draft model file is missing");
    s.width = parse_width(flag, text, text.substr(colon + 1));
    return s;
  }
  bad(flag, text, "unknown kind of draft");
}

std::string speculative_name(const Speculative& s) {
  switch (s.kind) {
    case DraftKind::Off: return "off";
    case DraftKind::Ngram: return "ngram:" + std::to_string(s.width);
    case DraftKind::Model: return "draft:" + s.draft_file + ":" + std::to_string(s.width);
  }
  return "off";
}

void check_draft_vocabulary(const Model& target, const Model& draft, const std::string& draft_file, const char* flag) {
  const std::string head = std::string(flag) + ": the draft model " + draft_file +
                           " and the model " + (target.path.empty() ? "(the target)" : target.path) + " ";
  const std::string fix = "; use a draft model with the target's tokenizer";
  const int nd = draft.config.vocab_size, nt = target.config.vocab_size;
  if (nd != nt)
    throw UsageError(head + "have other vocabularies (" + std::to_string(nd) + " vs " + std::to_string(nt) +
                     " tokens)" + fix);
  if (!draft.tokenizer || !target.tokenizer) return;  // no texts to compare: the sizes agree
  for (int id = 0; id < nt; ++id)
    if (draft.tokenizer->token_text(id) != target.tokenizer->token_text(id))
      throw UsageError(head + "have other vocabularies (token " + std::to_string(id) + " differs)" + fix);
}

// Prompt lookup (Saxena 2023; vLLM's and llama.cpp's n-gram drafts): the longest suffix of the
// sequence, from kNgramMaxMatch tokens down to kNgramMinMatch, that occurred earlier; its latest
// earlier occurrence proposes the tokens that followed it. A single-token match is not used: it
// drafts too often where nothing repeats, and each wrong draft costs a verify row.
std::vector<int> ngram_draft(const std::vector<int>& ctx, int width) {
  const int len = static_cast<int>(ctx.size());
  for (int n = kNgramMaxMatch; n >= kNgramMinMatch; --n) {
    if (n >= len) continue;
    // occurrences starting at a, a + n <= len - 1 (an earlier one: not the suffix itself)
    for (int a = len - n - 1; a >= 0; --a) {
      bool match = true;
      for (int i = 0; i < n && match; ++i) match = ctx[static_cast<size_t>(a + i)] == ctx[static_cast<size_t>(len - n + i)];
      if (!match) continue;
      // What followed the match, and past the end of the context the same text again with the
      // match's period (len - n - a): a loop of p tokens is drafted K tokens ahead, not p.
      const int period = len - n - a;
      std::vector<int> out;
      for (int i = a + n; static_cast<int>(out.size()) < width; ++i) {
        int at = i;
        while (at >= len) at -= period;
        out.push_back(ctx[static_cast<size_t>(at)]);
      }
      return out;
    }
  }
  return {};
}

}  // namespace repro
