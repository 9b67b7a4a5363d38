// The Prometheus text exposition reader (repro/remote/prometheus.hpp): one pass over the lines, a
// hand-written scanner per line (name, label set, value, timestamp), families looked up by name.
// The grammar is the text format 0.0.4 (prometheus.io/docs/instrumenting/exposition_formats), read
// the way the Prometheus server's own parser reads it: blanks are spaces and tabs, label values
// escape only \\, \" and \n, a family's samples may carry the suffixes of its type.
#include "repro/remote/prometheus.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace repro::prom {

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::untyped: return "untyped";
    case MetricType::counter: return "counter";
    case MetricType::gauge: return "gauge";
    case MetricType::histogram: return "histogram";
    case MetricType::summary: return "summary";
    case MetricType::info: return "info";
    case MetricType::stateset: return "stateset";
    case MetricType::gaugehistogram: return "gaugehistogram";
  }
  return "untyped";
}

const std::string* Sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels)
    if (k == key) return &v;
  return nullptr;
}

const Family* Exposition::find(std::string_view name) const {
  for (const auto& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

std::optional<double> Exposition::sum(std::string_view sample_name) const {
  std::optional<double> total;
  for (const auto& f : families)
    for (const auto& s : f.samples)
      if (s.name == sample_name) total = total.value_or(0.0) + s.value;
  return total;
}

size_t Exposition::sample_count() const {
  size_t n = 0;
  for (const auto& f : families) n += f.samples.size();
  return n;
}

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool name_start(char c) { return is_alpha(c) || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || is_digit(c); }
bool label_start(char c) { return is_alpha(c) || c == '_'; }
bool label_char(char c) { return label_start(c) || is_digit(c); }

// Up to 32 bytes of `s` from `at`, printable, for an error message.
std::string excerpt(std::string_view s, size_t at) {
  if (at >= s.size()) return "end of line";
  std::string out = "'";
  const size_t end = std::min(s.size(), at + 32);
  for (size_t i = at; i < end; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (end < s.size()) out += "...";
  return out + "'";
}

bool ieq(std::string_view a, const char* b) {
  if (a.size() != std::strlen(b)) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != b[i]) return false;
  }
  return true;
}

// A float as the Prometheus server reads one: decimal with optional fraction and exponent, or NaN,
// Inf, +Inf, -Inf (any case, "Infinity" too). Out-of-range magnitudes are refused.
bool parse_float(std::string_view t, double& v) {
  if (t.empty()) return false;
  std::string_view body = t;
  bool neg = false;
  if (body.front() == '+' || body.front() == '-') {
    neg = body.front() == '-';
    body.remove_prefix(1);
  }
  if (ieq(body, "inf") || ieq(body, "infinity")) {
    v = neg ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  if (ieq(body, "nan")) {
    if (body.size() != t.size()) return false;  // no sign on NaN
    v = std::nan("");
    return true;
  }
  // [digits][.digits][(e|E)[+-]digits], at least one mantissa digit.
  size_t i = 0, digits = 0;
  while (i < body.size() && is_digit(body[i])) ++i, ++digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && is_digit(body[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < body.size() && is_digit(body[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (i != body.size()) return false;
  // strtod on a bounded copy: it handles every length (from_chars does too, but reports underflow
  // as an error where the Prometheus server reads 0).
  const std::string copy(body);
  char* end = nullptr;
  double x = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size()) return false;
  if (std::isinf(x)) return false;  // 1e999: out of range
  v = neg ? -x : x;
  return true;
}

bool parse_int64(std::string_view t, int64_t& v) {
  if (t.empty()) return false;
  std::string_view body = t;
  if (body.front() == '+') body.remove_prefix(1);
  if (body.empty() || (body.front() == '-' && body.size() == 1)) return false;
  for (size_t i = body.front() == '-' ? 1 : 0; i < body.size(); ++i)
    if (!is_digit(body[i])) return false;
  auto r = std::from_chars(body.data(), body.data() + body.size(), v);
  return r.ec == std::errc() && r.ptr == body.data() + body.size();
}

bool parse_type(std::string_view w, MetricType& t) {
  static const std::pair<const char*, MetricType> table[] = {
      {"counter", MetricType::counter},     {"gauge", MetricType::gauge},
      {"histogram", MetricType::histogram}, {"summary", MetricType::summary},
      {"untyped", MetricType::untyped},     {"unknown", MetricType::untyped},
      {"info", MetricType::info},           {"stateset", MetricType::stateset},
      {"gaugehistogram", MetricType::gaugehistogram}};
  for (const auto& [n, v] : table)
    if (w == n) {
      t = v;
      return true;
    }
  return false;
}

// A family of type `t` may hold samples named base + one of these suffixes.
bool suffix_fits(MetricType t, std::string_view suffix) {
  if (suffix == "_bucket") return t == MetricType::histogram || t == MetricType::gaugehistogram;
  if (suffix == "_sum" || suffix == "_count") return t == MetricType::histogram || t == MetricType::summary;
  if (suffix == "_gsum" || suffix == "_gcount") return t == MetricType::gaugehistogram;
  if (suffix == "_total") return t == MetricType::counter;
  if (suffix == "_created") return t == MetricType::counter || t == MetricType::histogram || t == MetricType::summary;
  if (suffix == "_info") return t == MetricType::info;
  return false;
}

class Parser {
 public:
  Parser(Exposition& out, const ParseLimits& lim) : out_(out), lim_(lim) {}

  bool run(std::string_view text, std::string* error) {
    if (text.size() > lim_.max_bytes)
      return fail(error, "the body has " + std::to_string(text.size()) + " bytes, more than the limit of " +
                             std::to_string(lim_.max_bytes));
    if (!check_bytes(text, error)) return false;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      std::string_view line = text.substr(pos, nl - pos);
      pos = nl + 1;
      ++line_no_;
      while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      bool eof = false;
      if (!this->line(line, eof)) return fail(error, "line " + std::to_string(line_no_) + ": " + why_);
      if (eof) break;
    }
    return true;
  }

 private:
  Exposition& out_;
  const ParseLimits& lim_;
  std::unordered_map<std::string, size_t> index_;  // family name -> position in out_.families
  std::vector<bool> typed_, has_samples_, helped_;
  size_t line_no_ = 0, samples_ = 0;
  std::string why_;

  bool fail(std::string* error, std::string what) {
    out_.families.clear();
    if (error) *error = std::move(what);
    return false;
  }
  bool bad(std::string what) {
    why_ = std::move(what);
    return false;
  }

  // No NUL bytes and valid UTF-8 throughout (label values and help text are UTF-8).
  bool check_bytes(std::string_view s, std::string* error) {
    size_t line = 1;
    for (size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c == 0) return fail(error, "line " + std::to_string(line) + ": a NUL byte; this is not Prometheus text");
      if (c == '\n') ++line;
      if (c < 0x80) {
        ++i;
        continue;
      }
      size_t need = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
      bool ok = need != 0 && i + need <= s.size();
      for (size_t k = 1; ok && k < need; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (ok) {  // no overlong forms, surrogates or code points past U+10FFFF
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        if (need == 2) ok = c >= 0xC2;
        else if (need == 3) ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
        else ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90) && c <= 0xF4;
      }
      if (!ok) return fail(error, "line " + std::to_string(line) + ": bytes that are not UTF-8; this is not Prometheus text");
      i += need;
    }
    return true;
  }

  static constexpr size_t kNone = static_cast<size_t>(-1);

  // The family named `name`, made when new; kNone when a new one would pass max_families.
  size_t family(const std::string& name) {
    auto it = index_.find(name);
    if (it != index_.end()) return it->second;
    if (out_.families.size() >= lim_.max_families) return kNone;
    helped_.push_back(false);
    out_.families.push_back(Family{name, {}, MetricType::untyped, {}});
    typed_.push_back(false);
    has_samples_.push_back(false);
    index_.emplace(name, out_.families.size() - 1);
    return out_.families.size() - 1;
  }

  static size_t skip_blanks(std::string_view s, size_t i) {
    while (i < s.size() && is_blank(s[i])) ++i;
    return i;
  }

  static size_t scan_name(std::string_view s, size_t i) {
    if (i >= s.size() || !name_start(s[i])) return i;
    ++i;
    while (i < s.size() && name_char(s[i])) ++i;
    return i;
  }

  bool line(std::string_view s, bool& eof) {
    size_t i = skip_blanks(s, 0);
    if (i == s.size()) return true;
    if (s[i] == '#') return comment(s, i + 1, eof);
    return sample(s, i);
  }

  bool comment(std::string_view s, size_t i, bool& eof) {
    i = skip_blanks(s, i);
    size_t w = i;
    while (w < s.size() && !is_blank(s[w])) ++w;
    const std::string_view word = s.substr(i, w - i);
    if (word == "EOF" && skip_blanks(s, w) == s.size()) {  // OpenMetrics' end marker
      eof = true;
      return true;
    }
    const bool help = word == "HELP", type = word == "TYPE";
    if (!help && !type) return true;  // any other comment
    size_t n0 = skip_blanks(s, w);
    if (n0 == w && w < s.size()) return bad("expected a blank after # " + std::string(word));
    size_t n1 = scan_name(s, n0);
    if (n1 == n0) return bad("expected a metric name after # " + std::string(word) + ", found " + excerpt(s, n0));
    if (n1 < s.size() && !is_blank(s[n1]))
      return bad("a metric name holds only letters, digits, '_' and ':', found " + excerpt(s, n1));
    const std::string name(s.substr(n0, n1 - n0));
    const size_t f = family(name);
    if (f == kNone) return bad("more than " + std::to_string(lim_.max_families) + " metric families");
    Family& fam = out_.families[f];
    size_t r = skip_blanks(s, n1);
    if (help) {
      if (helped_[f]) return bad("a second HELP line for " + name);
      helped_[f] = true;
      std::string text;
      for (; r < s.size(); ++r) {
        if (s[r] == '\\' && r + 1 < s.size() && (s[r + 1] == '\\' || s[r + 1] == 'n')) {
          text += s[r + 1] == 'n' ? '\n' : '\\';
          ++r;
        } else {
          text += s[r];
        }
      }
      fam.help = std::move(text);
      return true;
    }
    size_t t1 = r;
    while (t1 < s.size() && !is_blank(s[t1])) ++t1;
    MetricType t;
    if (!parse_type(s.substr(r, t1 - r), t))
      return bad("unknown metric type " + excerpt(s, r) +
                 " (counter, gauge, histogram, summary, untyped, info, stateset, gaugehistogram)");
    if (skip_blanks(s, t1) != s.size()) return bad("unexpected text after the TYPE line's type: " + excerpt(s, skip_blanks(s, t1)));
    if (typed_[f]) return bad("a second TYPE line for " + name);
    if (has_samples_[f]) return bad("the TYPE line for " + name + " comes after its samples");
    typed_[f] = true;
    fam.type = t;
    return true;
  }

  // The family a sample named `name` belongs to: the family of that name, else the one whose name
  // plus a suffix of its type is `name`, else a new untyped family.
  size_t family_of(const std::string& name) {
    if (auto it = index_.find(name); it != index_.end()) return it->second;
    static const char* suffixes[] = {"_bucket", "_sum", "_count", "_total", "_created", "_info", "_gsum", "_gcount"};
    for (const char* suf : suffixes) {
      const size_t n = std::strlen(suf);
      if (name.size() > n && name.compare(name.size() - n, n, suf) == 0) {
        auto it = index_.find(name.substr(0, name.size() - n));
        if (it != index_.end() && suffix_fits(out_.families[it->second].type, suf)) return it->second;
      }
    }
    return family(name);
  }

  bool sample(std::string_view s, size_t i) {
    size_t n1 = scan_name(s, i);
    if (n1 == i) return bad("expected a metric name or a comment, found " + excerpt(s, i));
    Sample smp;
    smp.name = std::string(s.substr(i, n1 - i));
    size_t p = n1;
    if (p < s.size() && s[p] == '{') {
      if (!labels(s, p + 1, smp, p)) return false;
    } else if (p < s.size() && !is_blank(s[p])) {
      return bad("a metric name holds only letters, digits, '_' and ':', found " + excerpt(s, p));
    }
    p = skip_blanks(s, p);
    size_t v1 = p;
    while (v1 < s.size() && !is_blank(s[v1])) ++v1;
    if (v1 == p) return bad("expected a value after " + smp.name);
    if (!parse_float(s.substr(p, v1 - p), smp.value))
      return bad("expected a number, NaN, +Inf or -Inf as the value of " + smp.name + ", found " +
                 excerpt(s.substr(0, v1), p));
    p = skip_blanks(s, v1);
    if (p < s.size()) {
      size_t t1 = p;
      while (t1 < s.size() && !is_blank(s[t1])) ++t1;
      int64_t ts = 0;
      if (!parse_int64(s.substr(p, t1 - p), ts))
        return bad("expected an integer timestamp (milliseconds) or the end of the line after the value of " +
                   smp.name + ", found " + excerpt(s, p));
      smp.timestamp_ms = ts;
      p = skip_blanks(s, t1);
      if (p < s.size()) return bad("unexpected text after the timestamp: " + excerpt(s, p));
    }
    if (++samples_ > lim_.max_samples) return bad("more than " + std::to_string(lim_.max_samples) + " samples");
    const size_t f = family_of(smp.name);
    if (f == kNone) return bad("more than " + std::to_string(lim_.max_families) + " metric families");
    return add(f, std::move(smp));
  }

  bool add(size_t f, Sample smp) {
    Family& fam = out_.families[f];
    const bool bucket = smp.name.size() > 7 && smp.name.compare(smp.name.size() - 7, 7, "_bucket") == 0 &&
                        (fam.type == MetricType::histogram || fam.type == MetricType::gaugehistogram) &&
                        smp.name != fam.name;
    double x = 0;
    if (bucket) {
      const std::string* le = smp.label("le");
      if (!le) return bad("the histogram bucket " + smp.name + " has no 'le' label");
      if (!parse_float(*le, x)) return bad("the 'le' label of " + smp.name + " is not a number: " + excerpt(*le, 0));
    }
    if (fam.type == MetricType::summary && smp.name == fam.name) {
      const std::string* q = smp.label("quantile");
      if (q && !parse_float(*q, x))
        return bad("the 'quantile' label of " + smp.name + " is not a number: " + excerpt(*q, 0));
    }
    has_samples_[f] = true;
    fam.samples.push_back(std::move(smp));
    return true;
  }

  // Labels after '{' at i: name="value" pairs separated by ',' (a trailing ',' allowed) up to '}';
  // `end` is the position after '}'.
  bool labels(std::string_view s, size_t i, Sample& smp, size_t& end) {
    for (;;) {
      i = skip_blanks(s, i);
      if (i < s.size() && s[i] == '}') {
        end = i + 1;
        return true;
      }
      if (i >= s.size() || !label_start(s[i]))
        return bad("expected a label name or '}' in the labels of " + smp.name + ", found " + excerpt(s, i));
      size_t n1 = i + 1;
      while (n1 < s.size() && label_char(s[n1])) ++n1;
      std::string key(s.substr(i, n1 - i));
      i = skip_blanks(s, n1);
      if (i >= s.size() || s[i] != '=')
        return bad("expected '=' after the label name " + key + ", found " + excerpt(s, i));
      i = skip_blanks(s, i + 1);
      if (i >= s.size() || s[i] != '"')
        return bad("expected '\"' to open the value of label " + key + ", found " + excerpt(s, i));
      ++i;
      std::string value;
      bool closed = false;
      for (; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '"') {
          closed = true;
          ++i;
          break;
        }
        if (c == '\\') {
          if (i + 1 >= s.size()) break;
          const char e = s[++i];
          if (e == '\\' || e == '"') value += e;
          else if (e == 'n') value += '\n';
          else return bad("the value of label " + key + " has an escape other than \\\\, \\\" and \\n: " +
                          excerpt(s, i - 1));
        } else {
          value += c;
        }
      }
      if (!closed) return bad("the value of label " + key + " is not closed with '\"'");
      if (smp.label(key)) return bad("the label " + key + " appears twice in a sample of " + smp.name);
      if (smp.labels.size() >= lim_.max_labels)
        return bad("more than " + std::to_string(lim_.max_labels) + " labels in a sample of " + smp.name);
      smp.labels.emplace_back(std::move(key), std::move(value));
      i = skip_blanks(s, i);
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == '}') {
        end = i + 1;
        return true;
      }
      return bad("expected ',' or '}' after the value of a label of " + smp.name + ", found " + excerpt(s, i));
    }
  }
};

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string escape(const std::string& s, bool quote) {
  std::string o;
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '"' && quote) o += "\\\"";
    else o += c;
  }
  return o;
}

}  // namespace

bool parse_prometheus_text(std::string_view text, Exposition& out, std::string* error, const ParseLimits& limits) {
  out.families.clear();
  Parser p(out, limits);
  return p.run(text, error);
}

std::string write_prometheus_text(const Exposition& e) {
  std::string o;
  for (const auto& f : e.families) {
    o += "# HELP " + f.name + (f.help.empty() ? "" : " " + escape(f.help, false)) + "\n";
    if (f.type != MetricType::untyped) o += "# TYPE " + f.name + " " + type_name(f.type) + "\n";
    for (const auto& s : f.samples) {
      o += s.name;
      if (!s.labels.empty()) {
        o += '{';
        for (size_t i = 0; i < s.labels.size(); ++i)
          o += (i ? "," : "") + s.labels[i].first + "=\"" + escape(s.labels[i].second, true) + "\"";
        o += '}';
      }
      o += " " + format_value(s.value);
      if (s.timestamp_ms) o += " " + std::to_string(*s.timestamp_ms);
      o += '\n';
    }
  }
  return o;
}

// ---- fuzz entry (fuzz/fuzz_prometheus.cpp; replayed by tests/unit-prometheus.cpp) ----

int fuzz_prometheus_one(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ParseLimits lim;
  lim.max_bytes = 1 << 20;
  lim.max_samples = 1 << 14;
  Exposition e;
  std::string err;
  if (!parse_prometheus_text(text, e, &err, lim)) {
    if (err.empty() || !e.families.empty() || err.find('\n') != std::string::npos) __builtin_trap();
    return 0;
  }
  for (const auto& f : e.families) {
    if (f.name.empty() || !name_start(f.name[0])) __builtin_trap();
    for (const auto& s : f.samples) {
      for (char c : s.name)
        if (!name_char(c)) __builtin_trap();
      for (const auto& [k, v] : s.labels)
        if (k.empty() || !label_start(k[0])) __builtin_trap();
    }
  }
  // Written back and read again: the same families, samples, labels and values (NaN as NaN).
  Exposition again;
  std::string err2;
  ParseLimits big;
  big.max_bytes = 64u << 20;
  big.max_samples = lim.max_samples;
  if (!parse_prometheus_text(write_prometheus_text(e), again, &err2, big)) __builtin_trap();
  if (again.families.size() != e.families.size()) __builtin_trap();
  for (size_t i = 0; i < e.families.size(); ++i) {
    const Family &a = e.families[i], &b = again.families[i];
    if (a.name != b.name || a.help != b.help || a.type != b.type || a.samples.size() != b.samples.size())
      __builtin_trap();
    for (size_t k = 0; k < a.samples.size(); ++k) {
      const Sample &x = a.samples[k], &y = b.samples[k];
      const bool same_value = (std::isnan(x.value) && std::isnan(y.value)) ||
                              std::memcmp(&x.value, &y.value, sizeof(double)) == 0;
      if (x.name != y.name || x.labels != y.labels || x.timestamp_ms != y.timestamp_ms || !same_value)
        __builtin_trap();
    }
  }
  (void)e.sum("x");
  return 0;
}

}  // namespace repro::prom
