// The experts a mixture of experts routed each position to, as servers return them beside a
// completion (docs/REMOTE.md "Routed experts"). Three encodings are read:
//  - SGLang (request "return_routed_experts": true, server flag --enable-return-routed-experts): the
//    response's sglext.routed_experts, a base64 string of little-endian int32 ids, flat, one row per
//    position fed to the model (prompt_tokens + completion_tokens - 1 rows: the last generated
//    token is never fed), each row num_layers x top_k ids. The flat form does not say how a row
//    splits into layers; decode_routed_experts takes top_k as the largest divisor of the row width
//    for which every group of that many ids is all distinct (or all zero: a dense layer's row).
//    A wrong split can only merge layers: whether a step's routes differ does not depend on it.
//  - vLLM, nested lists (server flag --enable-return-routed-experts; no request field):
//    choices[].routed_experts [generated position][layer][k] and the response's
//    prompt_routed_experts [prompt position][layer][k].
//  - vLLM, base64 of a .npy file (choices[].routed_experts as a string): shape
//    (prompt_tokens + completion_tokens - 1, layers, k), integer dtype.
// Each becomes one route per generated token: the row whose logits chose it (for token t, position
// prompt_tokens - 1 + t), as the local engine records GenResult::routing; prompt rows are dropped.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace repro {

using RouteRows = std::vector<std::vector<std::vector<int>>>;  // [row][layer][k]

// What a response carried (ParsedResponse::routed_experts): {"sglext": string} and/or
// {"choice": string or array, "prompt": array}; null when none of them came.
struct RoutedDecode {
  RouteRows steps;    // [generated token][layer][k]; empty when unknown
  std::string form;   // "sglang int32", "vllm lists", "vllm npy"; "" when nothing came
  std::string error;  // why what came could not be read ("" when read, or when nothing came)
};

// `raw` as above; prompt_tokens and generated (the completion's tokens) from the response's usage.
RoutedDecode decode_routed_experts(const nlohmann::json& raw, int prompt_tokens, int generated);

// SGLang's encoding of rows (every row of one width): base64 of the ids as little-endian int32.
std::string encode_routed_experts_sglang(const RouteRows& rows);

std::string base64_encode(const std::string& bytes);
// false on a character outside the standard alphabet (padding optional)
bool base64_decode(const std::string& text, std::string& bytes);

}  // namespace repro
