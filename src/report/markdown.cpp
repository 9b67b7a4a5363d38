// Markdown report: verdict, headline table per mode, throughput, then every case with its clusters.
#include <fmt/core.h>

#include <cctype>

#include "repro/audit/analysis.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/audit/verdict.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {

// "DIVERGENT", "NO ANSWER", "NO COMPLETIONS": the case headings shout what needs a look.
std::string upper_verdict(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// Text inside a table cell: escape what Markdown would interpret, keep it on one line.
std::string cell(const std::string& s, size_t max_bytes = 0) {
  std::string out;
  size_t n = s.size();
  bool cut = false;
  if (max_bytes > 0 && n > max_bytes) {
    n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // UTF-8 boundary
    cut = true;
  }
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    switch (c) {
      case '|': out += "\\|"; break;
      case '\\': out += "\\\\"; break;
      case '`': out += "\\`"; break;
      case '*': out += "\\*"; break;
      case '_': out += "\\_"; break;
      // '<' could open an HTML tag and '&' an entity: backslash escapes, which render as the character
      // itself and read as text in the file ("a -> b" stays as written)
      case '<': out += "\\<"; break;
      case '&':
        out += i + 1 < n && (std::isalnum(static_cast<unsigned char>(s[i + 1])) || s[i + 1] == '#') ? "\\&" : "&";
        break;
      case '[': out += "\\["; break;
      case ']': out += "\\]"; break;
      case '\n': out += "⏎"; break;
      case '\r': break;
      case '\t': out += ' '; break;
      default:
        if ((static_cast<unsigned char>(c) < 0x20 || c == 0x7F))
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));  // control characters shown, never sent
        else
          out += c;
    }
  }
  if (cut) out += "…";
  return out;
}

std::string md_table(const TextTable& t) {
  std::string o = "|";
  for (const auto& h : t.head) o += " " + cell(h) + " |";
  o += "\n|";
  for (size_t i = 0; i < t.head.size(); ++i) o += i == 0 ? "---|" : "---:|";
  o += "\n";
  for (const auto& row : t.rows) {
    o += "|";
    for (const auto& c : row) o += " " + cell(c) + " |";
    o += "\n";
  }
  return o + "\n";
}

std::string md_drift_sections(const AuditReport& r) {
  std::string o = "## Size of the drift against the reference context\n\n";
  o += md_table(drift_mode_table(r));
  auto factors = drift_factor_tables(r);
  if (!factors.empty()) {
    o += "### Attribution to factors\n\n";
    for (const auto& [title, t] : factors) o += "**" + cell(title) + "**\n\n" + md_table(t);
  }
  return o;
}

std::string md_environment(const AuditReport& r) {
  std::string o = "## Environment\n\n| what | value |\n|---|---|\n";
  auto rows = environment_rows(r);
  for (const auto& [what, value] : rows) o += "| " + cell(what) + " | " + cell(value) + " |\n";
  if (rows.empty()) o += "| (not recorded) | |\n";
  o += "\n";
  TextTable ep = endpoint_table(r);
  if (!ep.rows.empty()) o += "### Endpoint responses\n\n" + md_table(ep);
  return o;
}

std::string md_structured_sections(const AuditReport& r) {
  if (!has_structured(r)) return "";
  std::string o = "## Structured output\n\n";
  o += md_table(structured_mode_table(r));
  if (TextTable t = retry_table(r); !t.rows.empty())
    o += "### Validation with retry (--retry-invalid), reported separately\n\n" + md_table(t);
  if (TextTable t = field_agreement_table(r); !t.rows.empty()) o += "### Per-field agreement\n\n" + md_table(t);
  return o;
}


// Prompt variants per task, and the response-cache signs of endpoints (src/report/variants_text.cpp).
std::string md_variant_sections(const AuditReport& r) {
  std::string o;
  if (!r.variants.empty()) {
    o += "## Prompt variants\n\n" + cell(variants_intro()) + "\n\n" + md_table(variants_table(r));
    for (const auto& f : variant_findings(r)) o += "- **Finding:** " + cell(f) + "\n";
    o += "\n";
  }
  if (!r.evidence.empty()) {
    o += "## Endpoints: posture and co-batching\n\n" + cell(evidence_intro()) + "\n\n" + md_table(posture_table(r)) +
         "\n" + md_table(cobatch_table(r));
    if (auto seeds = seed_table(r); !seeds.rows.empty()) o += "\n" + md_table(seeds);
    o += "\n";
  }
  if (auto panel = panel_table(r); !panel.rows.empty()) o += "## Replica panel\n\n" + md_table(panel) + "\n";
  if (auto dist = distribution_table(r); !dist.rows.empty())
    o += "## Sampled outputs as distributions\n\n" + md_table(dist) + "\n";
  if (auto tp = tp_table(r); !tp.rows.empty())
    o += "## Tensor parallelism against TP 1\n\n" + md_table(tp) + "\n";
  if (auto dv = device_table(r); !dv.rows.empty())
    o += "## Cross-device: each device against the first\n\n" + md_table(dv) + "\n";
  if (auto sp = speculative_table(r); !sp.rows.empty())
    o += "## Speculative decoding: each setting against off\n\n" + md_table(sp) + "\n";
  if (auto rt = routing_table(r); !rt.rows.empty())
    o += "## Expert routing against the reference\n\n" + md_table(rt) + "\n";
  if (auto ef = evidence_findings(r); !ef.empty()) {
    for (const auto& f : ef) o += "- **Finding:** " + cell(f) + "\n";
    o += "\n";
  }
  auto cache = response_cache_table(r);
  if (!cache.rows.empty()) {
    o += "## Response cache\n\n" + cell(response_cache_intro()) + "\n\n" + md_table(cache);
    for (const auto& f : response_cache_findings(r)) o += "- **Finding:** " + cell(f) + "\n";
    o += "\n";
  }
  return o;
}

}  // namespace

std::string to_markdown(const AuditReport& r) {
  const Summary& s = r.summary;
  std::string o;
  o += "# repro-audit report\n\n";
  const VerdictBanner banner = verdict_banner(r);
  o += fmt::format("**{}** (exit {}): {} of {} cases divergent, at most {} unique completions per case; "
                   "{} completions, {} errors.\n\n",
                   cell(banner.title), exit_code_for(r), s.divergent_cases, s.cases, s.max_unique, s.completions,
                   s.errors);
  if (std::string why = verdict_cause(r); !why.empty()) o += "Why: " + cell(why) + "\n\n";
  for (const auto& m : banner.modes)
    o += fmt::format("- {} **{}**: {}\n", cell(m.label), m.verdict, cell(m.detail));
  o += "\n" + cell(banner.gate) + "\n\n";
  o += "## What to do\n\n";
  for (size_t i = 0; i < r.advice.size(); ++i) {
    auto lines = advice_lines(r.advice[i]);
    o += fmt::format("{}. **{}**", i + 1, cell(lines[0]));
    for (size_t j = 1; j < lines.size(); ++j) o += "  \n   " + cell(lines[j]);
    o += "\n";
  }
  if (r.advice.empty()) o += "Not computed (a report written before advice was recorded).\n";
  o += "\n";
  if (s.interrupted) o += "The run was interrupted: this report covers what finished.\n\n";
  if (std::string note = model_switch_note(r.environment); !note.empty()) o += "Note: " + cell(note) + "\n\n";
  o += fmt::format("Schema `{}`", kReportSchema);
  if (!r.profile.empty()) o += fmt::format(" · profile `{}`", cell(r.profile));
  if (!r.created.empty()) o += fmt::format(" · created {}", cell(r.created));
  o += "\n\n";

  o += "## Reproducibility and throughput per mode\n\n";
  o += "| mode | cases | TARr@N | mean unique | bit-divergent | divergent cases | max \\|dlogprob\\| | tokens ≠ reference "
       "| throughput vs default (mean ±sd, n cells) | errors | failed requests | verdict | gate |\n";
  o += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n";
  for (const auto& m : s.modes)
    o += fmt::format("| {} | {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} of {} ({}) | {} | {} |\n", cell(mode_label(m.mode, m.precision)),
                     m.cases, fmt_percent(m.tarr_rate), m.mean_unique, fmt_percent(m.bit_divergent_share),
                     m.divergent_cases, fmt_dlogprob(m.drift_size.max_dlogprob),
                     fmt::format("{} of {}", m.drift_size.token_differ.k, m.drift_size.token_differ.n),
                     mode_speed_text(m), m.errors, m.failed_requests,
                     m.requests, fmt_percent(m.error_rate), m.verdict, m.gate.empty() ? "-" : m.gate);
  o += "\n";
  for (const auto& m : s.modes)
    if (!m.drift_size.finding.empty()) o += "- **Finding:** " + cell(m.drift_size.finding) + "\n";
  o += "\n";
  o += "## Trade-off: approaches to reproducibility, measured in this run\n\n";
  o += cell(tradeoff_intro()) + "\n\n";
  o += md_table(tradeoff_table(r));
  o += md_drift_sections(r);
  o += md_structured_sections(r);
  o += md_variant_sections(r);
  if (auto kinds = error_kinds(r); !kinds.empty()) {
    o += "## Errors (first of each kind)\n\n| mode | kind | count | first message |\n|---|---|---:|---|\n";
    for (const auto& e : kinds)
      o += fmt::format("| {} | {} | {} | {} |\n", cell(e.mode), cell(e.kind), e.count, cell(e.first, 300));
    o += "\n";
  }
  if (r.shard || r.merge) {
    o += "## Shards\n\n" + cell(shard_intro(r), 2000) + "\n\n";
    if (TextTable t = shard_table(r); !t.rows.empty()) o += md_table(t);
    if (TextTable t = host_table(r); !t.rows.empty()) o += md_table(t);
  }
  if (r.baseline) {
    const BaselineResult& b = *r.baseline;
    o += fmt::format("## Baseline\n\nCompared with `{}` (report digest `{}`{}): **{}**.\n\n", cell(b.file),
                     short_hash(b.report_sha256), b.digest_ok ? ", digest OK" : ", DOES NOT MATCH its content",
                     b.drifted ? "drift" : "no drift");
    for (const auto& c : b.config_changes) o += "- configuration: " + cell(c) + "\n";
    for (const auto& c : b.changes) o += "- " + cell(c) + "\n";
    if (!b.config_changes.empty() || !b.changes.empty()) o += "\n";
  }

  if (!r.throughput.empty()) {
    o += "## Throughput\n\n";
    for (const auto& line : throughput_cost_lines(r)) o += "- " + cell(line) + "\n";
    o += "\n" + md_table(throughput_table(r));
    o += "tokens/s = tokens / seconds over the cell; \"per run\" = the statistics of its measurements (local: each "
         "batched run; endpoints: each concurrency level's probe stream); \\* noisy: standard deviation above " +
         fmt::format("{:.0f}", kNoisyCv * 100) + "% of the mean.\n\n";
  }

  o += md_environment(r);

  if (!r.cross_mode.empty()) {
    o += "## Outputs across modes\n\n";
    o += "| prompt | decoding | outputs per mode | modes disagree |\n|---|---|---|---|\n";
    for (const auto& x : r.cross_mode) {
      std::string per;
      for (size_t v = 0; v < x.table.values.size(); ++v) {
        if (v) per += "; ";
        per += cell(x.table.values[v]) + ":";
        for (size_t c = 0; c < x.hashes.size(); ++c)
          if (x.table.counts[v][c] > 0) per += fmt::format(" {} x{}", short_hash(x.hashes[c]), x.table.counts[v][c]);
      }
      o += fmt::format("| {} | {} | {} | {} |\n", cell(prompt_snippet(r, x.prompt_id)), cell(x.decoding_id), per,
                       x.hashes.size() > 1 ? (x.table.explains ? "yes (each mode consistent)" : "yes") : "no");
    }
    o += "\n";
  }

  o += "## Cases\n";
  for (const auto& c : r.cases) {
    o += fmt::format(
        "\n### {} · {} · {}: {}\n\n", cell(prompt_snippet(r, c.prompt_id)), cell(c.decoding_id),
        cell(mode_label(c.mode, c.precision)),
        c.n == 0 || c.divergent || c.no_answer ? upper_verdict(case_verdict(c)) : case_verdict(c));
    if (!c.prompt_text.empty())
      o += "Prompt (" + cell(c.prompt_id) + "): " + cell(display_text(c.prompt_text), 200) + "\n\n";
    o += fmt::format("N = {}, unique = {}, TARr@N = {}", c.n, c.unique, c.tarr ? "yes" : "no");
    if (c.tara) o += ", " + cell(answer_status(c));
    o += fmt::format(", bit-level variants = {}{}", c.bit_unique, c.bit_divergent ? " (bit-divergent)" : "");
    if (c.errors) o += fmt::format(", errors = {}", c.errors);
    o += "\n\n";
    if (c.drift_size.reference >= 0) o += "Drift: " + cell(drift_summary(c.drift_size, &r)) + "\n\n";
    if (std::string st = structured_case_text(c); !st.empty()) o += "Structured output: " + cell(st) + "\n\n";
    if (c.clusters.empty()) continue;
    o += "| # | count | hash | first divergence: majority vs this cluster | family | distance | bit variants "
         "| text (divergent part in ⟦ ⟧) |\n";
    o += "|---:|---:|---|---|---:|---:|---:|---|\n";
    for (size_t i = 0; i < c.clusters.size(); ++i) {
      const Cluster& k = c.clusters[i];
      std::string text;
      if (k.majority || k.first_divergence_char < 0) {
        text = cell(display_text(k.text), 160);
      } else {
        size_t at = std::min(static_cast<size_t>(k.first_divergence_char), k.text.size());
        size_t from = at > 60 ? at - 60 : 0;
        while (from > 0 && (static_cast<unsigned char>(k.text[from]) & 0xC0) == 0x80) --from;
        text = (from > 0 ? "…" : "") + cell(display_text(k.text.substr(from, at - from))) + "⟦" +
               cell(display_text(k.text.substr(at)), 100) + "⟧";
      }
      if (k.answer) text += " → answer: " + cell(display_text(*k.answer), 60);
      else if (c.tara) text += " → answer missing";
      o += fmt::format("| {} | {} | `{}` | {} | {} | {:.3f} | {} | {} |\n", i + 1, k.count, short_hash(k.hash),
                       k.majority ? "majority" : cell(divergence_label(r, c, k)), k.family, k.distance_to_majority,
                       k.bit_variants, text);
    }
    bool any_cmd = false;
    for (const auto& k : c.clusters) any_cmd = any_cmd || !k.repro_command.empty();
    if (any_cmd) {
      o += "\n" + cell(repro_intro(c)) + "\n\n```sh\n";
      for (size_t i = 0; i < c.clusters.size(); ++i)
        if (!c.clusters[i].repro_command.empty())
          o += fmt::format("# c{}{}\n{}\n", i + 1, c.clusters[i].majority ? " (majority)" : "",
                           c.clusters[i].repro_command);
      o += "```\n";
    }
    for (const auto& f : c.factors) {
      o += fmt::format("\nBy {}{}:\n\n| {} |", cell(f.factor), f.explains ? " (explains the clusters)" : "",
                       cell(f.factor));
      for (size_t i = 0; i < c.clusters.size(); ++i) o += fmt::format(" c{} |", i + 1);
      o += "\n|---|";
      for (size_t i = 0; i < c.clusters.size(); ++i) o += "---:|";
      o += "\n";
      for (size_t v = 0; v < f.values.size(); ++v) {
        o += "| " + (f.values[v].empty() ? std::string("(none)") : cell(f.values[v])) + " |";
        for (int n : f.counts[v]) o += fmt::format(" {} |", n);
        o += "\n";
      }
    }
  }
  o += "\n## Glossary\n\n";
  for (const auto& [term, def] : glossary(r)) o += "- **" + cell(term) + "**: " + cell(def) + "\n";
  return o;
}

}  // namespace repro
