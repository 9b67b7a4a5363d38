// The prompts of a run as one list, and their one digest: what `run` records, what --resume
// restores and compares, what a report's own digests and `diff` recompute. Kept apart (and small)
// so that every reader of reports hashes prompts with this one definition.
#include <optional>

#include "repro/audit/plan.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {
const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}
}  // namespace

std::string prompts_digest(const std::vector<Prompt>& prompts) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : prompts) {
    nlohmann::json e = {{"id", p.id}, {"text", p.text}};
    if (p.messages.is_array() && !p.messages.empty()) e["messages"] = p.messages;
    if (!p.tools.is_null()) e["tools"] = p.tools;
    if (!p.chat_template_kwargs.is_null()) e["chat_template_kwargs"] = p.chat_template_kwargs;
    if (!p.task.empty()) e["task"] = p.task;
    if (!p.variant.empty()) e["variant"] = p.variant;
    list.push_back(std::move(e));
  }
  // The compact canonical form of src/report/canonical.cpp: sorted keys, no whitespace, invalid
  // UTF-8 replaced by U+FFFD, so the digest can be recomputed from the report's own JSON.
  return sha256_hex(list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::optional<Prompt> report_prompt(const AuditReport& r, const std::string& id) {
  auto it = r.prompts.find(id);
  if (it == r.prompts.end()) return std::nullopt;
  const nlohmann::json* pm = member(r.plan, "prompt_messages");
  const nlohmann::json* px = member(r.plan, "prompt_chat_extras");
  Prompt p;
  p.id = id;
  p.text = it->second;
  // Chat prompts keep their messages, so a resumed run sends them as they were, not flattened.
  if (pm && pm->is_object() && pm->contains(id)) p.messages = pm->at(id);
  if (px && px->is_object() && px->contains(id) && px->at(id).is_object()) {
    p.tools = px->at(id).value("tools", nlohmann::json());
    p.chat_template_kwargs = px->at(id).value("chat_template_kwargs", nlohmann::json());
  }
  for (const auto& pv : r.prompt_variants)
    if (pv.prompt_id == p.id) p.task = pv.task, p.variant = pv.variant;
  return p;
}

std::vector<Prompt> report_prompts(const AuditReport& r) {
  std::vector<std::string> ids;
  const nlohmann::json* listed = member(r.plan, "prompt_ids");
  if (listed && listed->is_array()) {
    for (const auto& id : *listed)
      if (id.is_string()) ids.push_back(id.get<std::string>());
  } else {
    for (const auto& [id, text] : r.prompts) ids.push_back(id);
  }
  std::vector<Prompt> out;
  for (const auto& id : ids)
    if (auto p = report_prompt(r, id)) out.push_back(std::move(*p));
  return out;
}

}  // namespace repro
