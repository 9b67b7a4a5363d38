// Routed experts on the wire (repro/openai/routed_experts.hpp): SGLang's flat int32, vLLM's nested
// lists and vLLM's .npy, each aligned to one route per generated token.
#include "repro/openai/routed_experts.hpp"

#include <cstdint>
#include <cstring>

namespace repro {

using nlohmann::json;

namespace {

const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Rows of one width `width` from flat ids: top_k is the largest divisor of the width for which every
// group of top_k ids is all distinct or all zero (top-k picks distinct experts; a dense layer's row
// is zeros).
RouteRows split_rows(const std::vector<int64_t>& ids, size_t rows, size_t width) {
  size_t k = width;
  for (; k > 1; --k) {
    if (width % k != 0) continue;
    bool ok = true;
    for (size_t g = 0; ok && g < ids.size(); g += k) {
      bool zero = true, distinct = true;
      for (size_t a = g; a < g + k; ++a) {
        zero = zero && ids[a] == 0;
        for (size_t b = g; b < a && distinct; ++b) distinct = ids[a] != ids[b];
      }
      ok = zero || distinct;
    }
    if (ok) break;
  }
  RouteRows out(rows);
  for (size_t r = 0; r < rows; ++r)
    for (size_t l = 0; l < width / k; ++l) {
      std::vector<int> e;
      for (size_t j = 0; j < k; ++j) e.push_back(static_cast<int>(ids[r * width + l * k + j]));
      out[r].push_back(std::move(e));
    }
  return out;
}

// A nested [row][layer][k] array of integers; false when it is not one (ragged rows included).
bool read_lists(const json& a, RouteRows& out) {
  if (!a.is_array()) return false;
  size_t layers = 0, k = 0;
  for (const auto& row : a) {
    if (!row.is_array()) return false;
    if (out.empty()) layers = row.size();
    if (row.size() != layers) return false;
    std::vector<std::vector<int>> r;
    for (const auto& layer : row) {
      if (!layer.is_array()) return false;
      if (out.empty() && r.empty()) k = layer.size();
      if (layer.size() != k) return false;
      std::vector<int> e;
      for (const auto& v : layer) {
        if (!v.is_number_integer()) return false;
        e.push_back(static_cast<int>(v.get<int64_t>()));
      }
      r.push_back(std::move(e));
    }
    out.push_back(std::move(r));
  }
  return true;
}

// A .npy file (format version 1, 2 or 3) of a 3-D little-endian integer array in C order.
bool read_npy(const std::string& f, RouteRows& out, std::string& why) {
  if (f.size() < 10 || f.compare(0, 6, "\x93NUMPY") != 0) return why = "not a .npy file", false;
  const int major = static_cast<unsigned char>(f[6]);
  size_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(f[8]) | static_cast<size_t>(static_cast<unsigned char>(f[9])) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (f.size() < 12) return why = "truncated .npy header", false;
    for (int i = 3; i >= 0; --i) hlen = hlen << 8 | static_cast<unsigned char>(f[8 + static_cast<size_t>(i)]);
    start = 12;
  } else {
    return why = "unknown .npy version", false;
  }
  if (start + hlen > f.size()) return why = "truncated .npy header", false;
  const std::string h = f.substr(start, hlen);
  auto value_of = [&](const char* key) {
    size_t at = h.find(key);
    if (at == std::string::npos) return std::string();
    at = h.find(':', at);
    if (at == std::string::npos) return std::string();
    size_t b = h.find_first_not_of(" ", at + 1);
    if (b == std::string::npos) return std::string();
    char close = h[b] == '(' ? ')' : h[b] == '\'' ? '\'' : ',';
    size_t e = h.find(close, b + 1);
    return e == std::string::npos ? std::string() : h.substr(b + 1, e - b - 1);
  };
  const std::string descr = value_of("'descr'");
  if (h.find("'fortran_order': True") != std::string::npos) return why = "Fortran-order .npy", false;
  size_t item = 0;
  bool is_signed = true;
  if (descr == "<i4") item = 4;
  else if (descr == "<i2") item = 2;
  else if (descr == "|i1" || descr == "<i1") item = 1;
  else if (descr == "<u4") item = 4, is_signed = false;
  else if (descr == "<u2") item = 2, is_signed = false;
  else if (descr == "|u1" || descr == "<u1") item = 1, is_signed = false;
  else if (descr == "<i8") item = 8;
  else return why = "unsupported .npy dtype '" + descr + "'", false;
  std::vector<size_t> shape;
  std::string s = value_of("'shape'");
  for (size_t p = 0; p < s.size();) {
    size_t q = s.find(',', p);
    std::string t = s.substr(p, q == std::string::npos ? std::string::npos : q - p);
    size_t b = t.find_first_not_of(' ');
    if (b != std::string::npos) shape.push_back(static_cast<size_t>(std::strtoull(t.c_str() + b, nullptr, 10)));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (shape.size() != 3) return why = ".npy array is not 3-D", false;
  const size_t n = shape[0] * shape[1] * shape[2];
  const size_t data = start + hlen;
  if (f.size() - data != n * item) return why = ".npy data size does not match its shape", false;
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t u = 0;
    for (size_t b = item; b-- > 0;) u = u << 8 | static_cast<unsigned char>(f[data + i * item + b]);
    int64_t v = static_cast<int64_t>(u);
    if (is_signed && item < 8 && (u >> (item * 8 - 1)) & 1) v = static_cast<int64_t>(u) - (int64_t{1} << (item * 8));
    ids[i] = v;
  }
  out.assign(shape[0], {});
  for (size_t r = 0; r < shape[0]; ++r)
    for (size_t l = 0; l < shape[1]; ++l) {
      std::vector<int> e;
      for (size_t j = 0; j < shape[2]; ++j) e.push_back(static_cast<int>(ids[(r * shape[1] + l) * shape[2] + j]));
      out[r].push_back(std::move(e));
    }
  return true;
}

}  // namespace

std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < in.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

bool base64_decode(const std::string& in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = b64_value(c);
    if (v < 0) return false;
    acc = acc << 6 | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>(acc >> bits & 0xff);
    }
  }
  return true;
}

std::string encode_routed_experts_sglang(const RouteRows& rows) {
  std::string bytes;
  for (const auto& row : rows)
    for (const auto& layer : row)
      for (int e : layer) {
        const uint32_t u = static_cast<uint32_t>(e);
        for (int b = 0; b < 4; ++b) bytes += static_cast<char>(u >> (8 * b) & 0xff);
      }
  return base64_encode(bytes);
}

RoutedDecode decode_routed_experts(const json& raw, int prompt_tokens, int generated) {
  RoutedDecode d;
  if (!raw.is_object()) return d;
  RouteRows rows;  // one per position from 0
  const json* sgl = raw.contains("sglext") ? &raw["sglext"] : nullptr;
  const json* choice = raw.contains("choice") ? &raw["choice"] : nullptr;
  if (sgl && sgl->is_string()) {
    d.form = "sglang int32";
    std::string bytes;
    if (!base64_decode(sgl->get<std::string>(), bytes) || bytes.size() % 4 != 0)
      return d.error = "sglext.routed_experts is not base64 of int32 ids", d;
    if (prompt_tokens < 1 || generated < 1) return d.error = "the response's usage does not give the token counts", d;
    const size_t n = bytes.size() / 4, want = static_cast<size_t>(prompt_tokens + generated - 1);
    if (n == 0 || n % want != 0)
      return d.error = std::to_string(n) + " ids do not make " + std::to_string(want) + " rows of one width", d;
    std::vector<int64_t> ids(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = 0;
      for (int b = 3; b >= 0; --b) u = u << 8 | static_cast<unsigned char>(bytes[i * 4 + static_cast<size_t>(b)]);
      ids[i] = static_cast<int32_t>(u);
    }
    rows = split_rows(ids, want, n / want);
  } else if (choice && choice->is_string()) {
    d.form = "vllm npy";
    std::string bytes, why;
    if (!base64_decode(choice->get<std::string>(), bytes)) return d.error = "routed_experts is not base64", d;
    if (!read_npy(bytes, rows, why)) return d.error = "routed_experts: " + why, d;
  } else if (choice && choice->is_array()) {
    d.form = "vllm lists";
    const json* prompt = raw.contains("prompt") ? &raw["prompt"] : nullptr;
    RouteRows gen;
    if (!prompt || !read_lists(*prompt, rows) || !read_lists(*choice, gen))
      return d.error = "routed_experts needs prompt_routed_experts and both as [position][layer][k] integers", d;
    if (static_cast<int>(rows.size()) != prompt_tokens)
      return d.error = "prompt_routed_experts has " + std::to_string(rows.size()) + " rows for " +
                       std::to_string(prompt_tokens) + " prompt tokens", d;
    rows.insert(rows.end(), gen.begin(), gen.end());
  } else {
    return d;
  }
  if (prompt_tokens < 1 || generated < 1) return d.error = "the response's usage does not give the token counts", d;
  const size_t first = static_cast<size_t>(prompt_tokens - 1), need = first + static_cast<size_t>(generated);
  if (rows.size() < need)
    return d.error = std::to_string(rows.size()) + " rows for " + std::to_string(prompt_tokens) + " prompt and " +
                     std::to_string(generated) + " generated tokens (want " + std::to_string(need) + ")", d;
  d.steps.assign(rows.begin() + static_cast<long>(first), rows.begin() + static_cast<long>(need));
  return d;
}

}  // namespace repro
