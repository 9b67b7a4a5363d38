// The profiles/*.json files, embedded at build time (cmake/embed_profiles.cmake): name -> JSON text.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace repro {
const std::vector<std::pair<std::string, std::string>>& builtin_profiles();
// docs/examples/long-prompt.txt (about 1,300 words of prose, about 1,700 tokens for a Llama tokenizer),
// embedded at build time (cmake/embed_text.cmake): what the long profile sends to endpoints, whose
// tokenizer the tool does not have to generate prompts of a token count.
const std::string& long_prompt_text();
}
