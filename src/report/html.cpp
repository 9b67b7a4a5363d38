// Self-contained HTML report: one file, inline CSS and SVG, no scripts, no network.
// Verdict up top; headline table per mode; drift sizes; charts (unique completions per batch size,
// first-divergence positions, share differing from the reference per factor value, throughput per batch
// size; one colour per mode everywhere, omitted when empty); throughput with its statistics; environment;
// per case the clusters with the first divergent tokens as text and the divergent text highlighted.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "repro/audit/analysis.hpp"
#include "repro/audit/provenance.hpp"
#include "repro/report/report.hpp"

namespace repro {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      case '\n': case '\t': o += c; break;
      case '\r': break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
          o += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));  // shown, never sent raw
        else
          o += c;
    }
  }
  return o;
}

// Mode colours: red and green are kept for meaning (divergent, reproducible), never a mode's colour.
const char* kPalette[] = {"#2471a3", "#7d3c98", "#d68910", "#566573", "#5dade2", "#af7ac5", "#b9770e", "#34495e"};
const char* kBad = "#c0392b";
const char* kGood = "#1e8449";

// Every mode / endpoint label of the report, in one order: its index picks its colour in every chart.
std::vector<std::string> modes_of(const AuditReport& r) {
  std::vector<std::string> m;
  auto add = [&](const std::string& label) {
    if (std::find(m.begin(), m.end(), label) == m.end()) m.push_back(label);
  };
  for (const auto& s : r.summary.modes) add(mode_label(s.mode, s.precision));
  for (const auto& c : r.cases) add(mode_label(c.mode, c.precision));
  for (const auto& t : r.throughput) add(mode_label(t.mode, t.precision));
  return m;
}

// Every mode of the report is an endpoint: contexts are concurrency levels, not batch sizes.
bool remote_only(const AuditReport& r) {
  const auto& env = r.environment;
  return env.is_object() && env.contains("endpoints") && env["endpoints"].is_array() && !env["endpoints"].empty();
}
std::string context_word(const AuditReport& r) { return remote_only(r) ? "concurrency level" : "batch size"; }
std::string context_axis(const AuditReport& r) { return remote_only(r) ? "concurrency" : "batch size"; }

const char* colour_of(const AuditReport& r, const std::string& label) {
  auto m = modes_of(r);
  size_t i = static_cast<size_t>(std::find(m.begin(), m.end(), label) - m.begin());
  return kPalette[i % std::size(kPalette)];
}

// Grouped bar chart: categories on x, one bar per series. NaN values are not drawn. A series may carry
// `inner` values drawn solid inside a light bar of `values` (e.g. token-level inside bitwise shares).
struct Series {
  std::string name;
  std::vector<double> values;  // one per category
  const char* colour = "#566573";
  std::vector<double> inner;   // optional, one per category
  std::vector<double> err;     // optional, one per category: an error bar of ± this around the value
};

// Labels of the ticks 0, top/4, ..., top: the fewest digits that write each tick exactly (so no two
// read the same: a 1e-6 axis never shows "0, 0, 0", a 0..1 axis shows 0.25, not 0.2); fixed notation
// from 0.001 to 1e6, scientific outside.
std::vector<std::string> tick_labels(const std::vector<double>& ticks, bool percent) {
  double top = 0;
  for (double v : ticks) top = std::max(top, std::fabs(percent ? v * 100 : v));
  const bool fixed = top == 0 || (top >= 1e-3 && top < 1e6);
  auto trim = [](std::string t) {
    if (t.find('.') != std::string::npos && t.find('e') == std::string::npos) {
      while (!t.empty() && t.back() == '0') t.pop_back();
      if (!t.empty() && t.back() == '.') t.pop_back();
    }
    return t;
  };
  std::vector<std::string> out;
  for (int digits = fixed ? 0 : 1; digits <= 15; ++digits) {
    out.clear();
    bool exact = true;
    for (double v : ticks) {
      double x = percent ? v * 100 : v;
      std::string t = x == 0 ? "0" : fixed ? trim(fmt::format("{:.{}f}", x, digits)) : fmt::format("{:.{}g}", x, digits);
      exact = exact && std::fabs(std::strtod(t.c_str(), nullptr) - x) <= 1e-9 * std::max(top, 1e-300);
      out.push_back(t + (percent ? "%" : ""));
    }
    if (exact) break;
  }
  return out;
}

std::string value_text(double v, bool percent) {
  return percent ? fmt::format("{:.3g}%", v * 100) : fmt::format("{:.4g}", v);
}

// Whether a chart has anything to draw: some category and some finite value above zero.
bool has_data(const std::vector<std::string>& cats, const std::vector<Series>& series) {
  if (cats.empty()) return false;
  for (const auto& s : series)
    for (double v : s.values)
      if (std::isfinite(v) && v > 0) return true;
  return false;
}

// `counts`: the axis counts things (cases, completions): integer ticks only.
std::string bar_chart(const std::string& id, const std::string& title, const std::string& xlabel,
                      const std::string& ylabel, const std::vector<std::string>& cats, const std::vector<Series>& series,
                      bool percent = false, const std::string& note = "", bool counts = false) {
  // the legend: one entry per series, wrapped onto as many lines as it needs above the plot
  const double W = 620, L = 64, R = 16, B = 48;
  std::vector<std::pair<double, double>> legend_at;  // x, y of each entry
  double lx = L, ly = 26;
  for (const auto& sr : series) {
    double w = 24 + 7.0 * static_cast<double>(sr.name.size());
    if (lx > L && lx + w > W - R) lx = L, ly += 16;
    legend_at.emplace_back(lx, ly);
    lx += w;
  }
  const double T = ly + 18, H = T + 188 + B;
  double maxv = 0;
  for (const auto& s : series)
    for (size_t i = 0; i < s.values.size(); ++i)
      if (std::isfinite(s.values[i]))
        maxv = std::max(maxv, s.values[i] + (i < s.err.size() && std::isfinite(s.err[i]) ? s.err[i] : 0.0));
  if (maxv <= 0) maxv = 1;
  // a "nice" axis maximum: 1, 2 or 5 times a power of ten
  double p = std::pow(10.0, std::floor(std::log10(maxv)));
  double top = maxv <= p ? p : maxv <= 2 * p ? 2 * p : maxv <= 5 * p ? 5 * p : 10 * p;
  if (percent) top = std::min(top, 1.0);
  if (counts) top = 4 * std::ceil(std::max(maxv, 1.0) / 4);  // four equal steps of whole numbers
  std::string o = fmt::format(
      "<figure class=\"chart\" id=\"{4}\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" "
      "height=\"{1}\" role=\"img\" aria-label=\"{2}\">\n<text x=\"{3}\" y=\"18\" class=\"ct\">{2}</text>\n",
      W, H, esc(title), L, esc(id));
  double pw = W - L - R, ph = H - T - B;
  std::vector<double> ticks;
  for (int i = 0; i <= 4; ++i) ticks.push_back(top * i / 4);
  auto labels = tick_labels(ticks, percent);
  for (int i = 0; i <= 4; ++i) {
    double y = T + ph - ph * i / 4;
    o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" class=\"grid\"/>", L, y, W - R, y);
    o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"yl\">{}</text>\n", L - 6, y + 4, esc(labels[i]));
  }
  o += fmt::format("<text x=\"14\" y=\"{:.1f}\" class=\"al\" transform=\"rotate(-90 14 {:.1f})\">{}</text>\n",
                   T + ph / 2, T + ph / 2, esc(ylabel));
  o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"al\">{}</text>\n", L + pw / 2, H - 6, esc(xlabel));
  size_t nc = std::max<size_t>(cats.size(), 1), ns = std::max<size_t>(series.size(), 1);
  double gw = pw / static_cast<double>(nc), bw = std::min(40.0, gw * 0.8 / static_cast<double>(ns));
  for (size_t c = 0; c < cats.size(); ++c) {
    double gx = L + gw * static_cast<double>(c) + (gw - bw * static_cast<double>(ns)) / 2;
    for (size_t s = 0; s < series.size(); ++s) {
      double v = c < series[s].values.size() ? series[s].values[c] : NAN;
      if (!std::isfinite(v)) continue;
      double h = ph * std::min(v, top) / top, x = gx + bw * static_cast<double>(s);
      bool two = !series[s].inner.empty();
      double in = two && c < series[s].inner.size() ? series[s].inner[c] : NAN;
      std::string tip = fmt::format("{} @ {}: {}", series[s].name, cats[c], value_text(v, percent));
      if (two && std::isfinite(in)) tip += fmt::format(" (solid: {})", value_text(in, percent));
      o += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"{}><title>{}</title></rect>", x,
          T + ph - h, std::max(bw - 1, 1.0), std::max(h, 0.5), series[s].colour, two ? " fill-opacity=\"0.35\"" : "",
          esc(tip));
      if (c < series[s].err.size() && std::isfinite(series[s].err[c]) && series[s].err[c] > 0) {
        const double e = series[s].err[c], cx = x + std::max(bw - 1, 1.0) / 2;
        const double y1 = T + ph - ph * std::min(v + e, top) / top, y2 = T + ph - ph * std::max(v - e, 0.0) / top;
        o += fmt::format("<path class=\"err\" d=\"M{0:.1f} {1:.1f}V{2:.1f}M{3:.1f} {1:.1f}H{4:.1f}M{3:.1f} {2:.1f}H{4:.1f}\">"
                         "<title>{5}: ± {6}</title></path>",
                         cx, y1, y2, cx - 3, cx + 3, esc(series[s].name + " @ " + cats[c]), value_text(e, percent));
      }
      if (two && std::isfinite(in) && in > 0) {
        double hi = ph * std::min(in, top) / top;
        o += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}</title></rect>",
                         x, T + ph - hi, std::max(bw - 1, 1.0), std::max(hi, 0.5), series[s].colour, esc(tip));
      }
    }
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xl\">{}</text>\n", L + gw * (static_cast<double>(c) + 0.5),
                     T + ph + 16, esc(cats[c]));
  }
  o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" class=\"axis\"/>\n", L, T + ph, W - R, T + ph);
  for (size_t s = 0; s < series.size(); ++s)
    o += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" "
                     "y=\"{:.1f}\" class=\"lg\">{}</text>",
                     legend_at[s].first, legend_at[s].second, series[s].colour, legend_at[s].first + 14,
                     legend_at[s].second + 9, esc(series[s].name));
  o += "\n</svg>";
  if (!note.empty()) o += "<figcaption>" + esc(note) + "</figcaption>";
  o += "</figure>\n";
  return o;
}

// A chart with nothing to draw is not drawn: one line says so instead of an empty panel.
std::string omitted(const std::string& what) { return "<p class=\"meta nochart\">" + esc(what) + "</p>\n"; }

// The first chart: per mode (endpoint), its divergent cases (red) beside its reproducible ones (green),
// so a mode that diverged shows at a glance, whatever the gate covers.
std::string chart_divergent_cases(const AuditReport& r) {
  std::vector<std::string> cats;
  Series div{"divergent cases", {}, kBad, {}, {}}, ok{"reproducible cases", {}, kGood, {}, {}};
  for (const auto& m : r.summary.modes) {
    if (m.cases == 0) continue;
    cats.push_back(mode_label(m.mode, m.precision) + (m.gated ? "" : " (not gated)"));
    div.values.push_back(m.divergent_cases);
    int good = 0;
    for (const auto& c : r.cases)
      if (c.mode == m.mode && c.precision == m.precision && c.n > 0 && !c.divergent) ++good;
    ok.values.push_back(good);
  }
  if (!has_data(cats, {div, ok})) return omitted("Divergent cases per mode: no case ran.");
  return bar_chart("chart-divergent-cases", "Divergent cases per mode", remote_only(r) ? "endpoint" : "mode (precision)",
                   "cases", cats, {div, ok}, false,
                   "Red: cases whose completions differ (more than one unique output); green: cases whose N "
                   "completions are identical.",
                   true);
}

std::string chart_unique(const AuditReport& r) {
  auto pts = unique_by_batch(r);
  std::vector<int> bs;
  for (const auto& p : pts)
    if (std::find(bs.begin(), bs.end(), p.batch_size) == bs.end()) bs.push_back(p.batch_size);
  std::sort(bs.begin(), bs.end());
  std::vector<std::string> cats;
  for (int b : bs) cats.push_back(std::to_string(b));
  std::vector<Series> ser;
  for (const auto& m : modes_of(r)) {
    Series s{m, std::vector<double>(bs.size(), NAN), colour_of(r, m), {}, {}};
    bool any = false;
    for (const auto& p : pts)
      if (p.mode == m) s.values[std::find(bs.begin(), bs.end(), p.batch_size) - bs.begin()] = p.mean_unique, any = true;
    if (any) ser.push_back(s);
  }
  if (!has_data(cats, ser)) return omitted("Unique completions per batch size: no completions to chart.");
  return bar_chart("chart-unique", "Unique completions within each " + context_word(r) + " (mean over cases)",
                   context_axis(r), "unique completions", cats, ser);
}

std::string chart_divergence(const AuditReport& r) {
  int maxpos = -1;
  for (const auto& c : r.cases)
    for (const auto& k : c.clusters)
      if (!k.majority) maxpos = std::max(maxpos, k.first_divergence_token >= 0 ? k.first_divergence_token : k.first_divergence_char);
  if (maxpos < 0)
    return omitted("Where completions first diverge: no completion differs from its case's majority in tokens, so "
                   "there is no first divergence to chart.");
  std::vector<std::string> cats;
  int width = maxpos < 16 ? 1 : (maxpos + 16) / 16;
  int nb = maxpos / width + 1;
  for (int b = 0; b < nb; ++b)
    cats.push_back(width == 1 ? std::to_string(b) : fmt::format("{}-{}", b * width, b * width + width - 1));
  std::vector<Series> ser;
  bool any_text = false;
  for (const auto& m : modes_of(r)) {
    Series s{m, std::vector<double>(nb, 0.0), colour_of(r, m), {}, {}};
    bool any = false;
    for (const auto& c : r.cases) {
      if (mode_label(c.mode, c.precision) != m) continue;
      for (const auto& k : c.clusters) {
        if (k.majority) continue;
        int pos = k.first_divergence_token;
        if (pos < 0) pos = k.first_divergence_char, any_text = true;
        if (pos >= 0) s.values[pos / width] += k.count, any = true;
      }
    }
    if (any) ser.push_back(s);
  }
  return bar_chart("chart-divergence", "Where completions first diverge from the majority",
                   any_text ? "first divergence (token index; char offset where ids are unknown)"
                            : "first divergence (token index)",
                   "divergent completions", cats, ser, false, "", true);
}

// Per factor (batch size, position, ...): the share of completions differing from the case's reference
// context, per mode; light bars bitwise, solid bars in tokens.
std::string chart_drift_factors(const AuditReport& r) {
  std::vector<std::string> factors;
  for (const auto& m : r.summary.modes)
    for (const auto& f : m.drift_size.factors)
      if (std::find(factors.begin(), factors.end(), f.factor) == factors.end()) factors.push_back(f.factor);
  std::string o;
  for (const auto& factor : factors) {
    std::vector<std::string> cats;
    for (const auto& m : r.summary.modes)
      for (const auto& f : m.drift_size.factors)
        if (f.factor == factor)
          for (const auto& v : f.values)
            if (std::find(cats.begin(), cats.end(), v) == cats.end()) cats.push_back(v);
    bool numeric = std::all_of(cats.begin(), cats.end(), [](const std::string& v) {
      return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
    });
    if (numeric)
      std::sort(cats.begin(), cats.end(), [](const std::string& a, const std::string& b) { return std::stol(a) < std::stol(b); });
    std::vector<Series> ser;
    for (const auto& m : r.summary.modes)
      for (const auto& f : m.drift_size.factors) {
        if (f.factor != factor) continue;
        std::string label = mode_label(m.mode, m.precision);
        Series s{label, std::vector<double>(cats.size(), NAN), colour_of(r, label), std::vector<double>(cats.size(), NAN), {}};
        for (size_t i = 0; i < f.values.size(); ++i) {
          if (f.n[i] <= 0) continue;
          size_t c = static_cast<size_t>(std::find(cats.begin(), cats.end(), f.values[i]) - cats.begin());
          s.values[c] = static_cast<double>(f.bit_differ[i]) / f.n[i];
          s.inner[c] = static_cast<double>(f.token_differ[i]) / f.n[i];
        }
        ser.push_back(std::move(s));
      }
    for (auto& c : cats)
      if (c.empty()) c = "(none)";
    std::string title = "Completions differing from the reference, by " + factor;
    if (!has_data(cats, ser)) {
      o += omitted(title + ": none differ, in any mode (bitwise or in tokens).");
      continue;
    }
    o += bar_chart("chart-drift-" + factor, title, factor, "share of completions", cats, ser, true,
                   "Light bar: share differing bitwise (tokens, logits or logprob bits); solid bar inside: share "
                   "differing in tokens.");
  }
  return o;
}

std::string chart_throughput(const AuditReport& r) {
  std::vector<int> bs;
  for (const auto& t : r.throughput)
    if (std::find(bs.begin(), bs.end(), t.batch_size) == bs.end()) bs.push_back(t.batch_size);
  std::sort(bs.begin(), bs.end());
  std::vector<std::string> cats;
  for (int b : bs) cats.push_back(std::to_string(b));
  std::vector<Series> ser;
  for (const auto& m : modes_of(r)) {  // the order of every chart's legend
    bool any = false;
    for (const auto& t : r.throughput) any = any || mode_label(t.mode, t.precision) == m;
    if (!any) continue;
    Series s{m, std::vector<double>(bs.size(), NAN), colour_of(r, m), {}, {}};
    for (const auto& t : r.throughput)
      if (mode_label(t.mode, t.precision) == m)
        s.values[std::find(bs.begin(), bs.end(), t.batch_size) - bs.begin()] = t.tokens_per_s;
    s.err.assign(bs.size(), NAN);
    for (const auto& t : r.throughput)
      if (mode_label(t.mode, t.precision) == m && t.runs > 1)
        s.err[std::find(bs.begin(), bs.end(), t.batch_size) - bs.begin()] = t.stddev_tokens_per_s;
    ser.push_back(s);
  }
  if (!has_data(cats, ser)) return omitted("Throughput per " + context_word(r) + ": nothing was measured.");
  return bar_chart("chart-throughput", "Throughput per " + context_word(r), context_axis(r), "generated tokens/s", cats,
                   ser, false, "Error bars: ± one standard deviation of the cell's runs (where it ran more than once).");
}

// The cluster's text with everything from the first divergence on highlighted.
std::string highlighted(const Cluster& k) {
  if (k.majority || k.first_divergence_char < 0) return esc(k.text);
  size_t at = std::min(static_cast<size_t>(k.first_divergence_char), k.text.size());
  while (at > 0 && at < k.text.size() && (static_cast<unsigned char>(k.text[at]) & 0xC0) == 0x80) --at;
  std::string rest = k.text.substr(at);
  return esc(k.text.substr(0, at)) + "<mark>" + (rest.empty() ? "&#8718; (ends here)" : esc(rest)) + "</mark>";
}


const char* kCss = R"(body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;color:#1c2833;background:#fff}
h1{font-size:22px;margin:4px 0 12px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d5d8dc;padding-bottom:4px}
.verdict{padding:14px 18px;border-radius:8px;font-size:20px;font-weight:700;color:#fff}
.verdict small{display:block;font-size:14px;font-weight:400;margin-top:4px}
.v-reproducible{background:#1e8449}.v-mixed{background:#9a7d0a}.v-divergent{background:#c0392b}.v-errors{background:#a04000}.v-drift{background:#7d3c98}.v-unverified{background:#b7950b}.v-interrupted,.v-unknown{background:#566573}
.meta{color:#566573;font-size:13px;margin:8px 0}
table{border-collapse:collapse;margin:6px 0 12px;font-size:14px}th,td{border:1px solid #d5d8dc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#c0392b;font-weight:600}.good{color:#1e8449;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:8px}.chart{margin:0;border:1px solid #e5e8e8;border-radius:6px;padding:4px}
.ct{font-size:14px;font-weight:600;fill:#1c2833}.yl{font-size:11px;text-anchor:end;fill:#566573}.xl{font-size:11px;text-anchor:middle;fill:#566573}
.al{font-size:12px;text-anchor:middle;fill:#566573}.lg{font-size:12px;fill:#1c2833}.grid{stroke:#eaeded}.axis{stroke:#566573}
details{border:1px solid #d5d8dc;border-radius:6px;margin:6px 0;padding:4px 10px}summary{cursor:pointer;font-weight:600}
.txt{white-space:pre-wrap;word-break:break-word;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;max-height:12em;overflow:auto}
mark{background:#f9d0c4;color:#78281f}code{font-size:12px}figcaption{font-size:12px;color:#566573;max-width:600px}
.first{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start;margin-top:10px}.firstcol{flex:1 1 420px;min-width:0}
.firstchart{flex:0 1 640px;min-width:0}.firstchart svg{max-width:100%;height:auto}
#mode-verdicts{margin:0;padding-left:18px}#advice{padding-left:22px;margin:4px 0}#advice li{margin:4px 0}
#what-to-do{margin-top:12px}#toc{font-size:14px;margin:10px 0;padding:6px 10px;background:#f2f4f4;border-radius:6px}
table{display:block;max-width:100%;overflow-x:auto}pre{max-width:100%;overflow-x:auto}.err{stroke:#1c2833;stroke-width:1.2;fill:none}
#only-divergent:checked+label+#cases details.case-ok{display:none}
)";


std::string html_table(const TextTable& t, const std::string& id = "") {
  std::string o = id.empty() ? "<table><tr>" : "<table id=\"" + esc(id) + "\"><tr>";
  for (const auto& h : t.head) o += "<th>" + esc(h) + "</th>";
  o += "</tr>\n";
  for (const auto& row : t.rows) {
    o += "<tr>";
    for (size_t i = 0; i < row.size(); ++i) o += (i == 0 ? "<td>" : "<td class=\"n\">") + esc(row[i]) + "</td>";
    o += "</tr>\n";
  }
  return o + "</table>\n";
}

std::string html_drift_sections(const AuditReport& r) {
  std::string o = "<ul id=\"findings\">\n";
  for (const auto& m : r.summary.modes)
    if (!m.drift_size.finding.empty()) o += "<li><b>Finding:</b> " + esc(m.drift_size.finding) + "</li>\n";
  o += "</ul>\n<h2 id=\"drift-h\">Size of the drift against the reference context</h2>\n";
  o += html_table(drift_mode_table(r), "drift");
  auto factors = drift_factor_tables(r);
  if (!factors.empty()) {
    o += "<h3>Attribution to factors</h3>\n";
    for (const auto& [title, t] : factors) o += "<p><b>" + esc(title) + "</b></p>\n" + html_table(t);
  }
  return o;
}

std::string html_environment(const AuditReport& r) {
  std::string o = "<h2 id=\"environment-h\">Environment</h2>\n<table id=\"environment\">\n";
  auto rows = environment_rows(r);
  for (const auto& [what, value] : rows) o += "<tr><th>" + esc(what) + "</th><td>" + esc(value) + "</td></tr>\n";
  if (rows.empty()) o += "<tr><td>not recorded</td></tr>\n";
  o += "</table>\n";
  TextTable ep = endpoint_table(r);
  if (!ep.rows.empty()) o += "<h3>Endpoint responses</h3>\n" + html_table(ep, "endpoints");
  return o;
}

std::string html_structured_sections(const AuditReport& r) {
  if (!has_structured(r)) return "";
  std::string o = "<h2>Structured output</h2>\n" + html_table(structured_mode_table(r), "structured");
  if (TextTable t = retry_table(r); !t.rows.empty())
    o += "<h3>Validation with retry (--retry-invalid), reported separately</h3>\n" + html_table(t, "retry");
  if (TextTable t = field_agreement_table(r); !t.rows.empty())
    o += "<h3>Per-field agreement</h3>\n" + html_table(t, "fields");
  return o;
}

// Prompt variants per task, and the response-cache signs of endpoints (src/report/variants_text.cpp).
std::string html_variant_sections(const AuditReport& r) {
  std::string o;
  if (!r.variants.empty()) {
    o += "<h2>Prompt variants</h2>\n<p>" + esc(variants_intro()) + "</p>\n" + html_table(variants_table(r), "variants");
    o += "<ul id=\"variant-findings\">\n";
    for (const auto& f : variant_findings(r)) o += "<li><b>Finding:</b> " + esc(f) + "</li>\n";
    o += "</ul>\n";
  }
  if (!r.evidence.empty()) {
    o += "<h2>Endpoints: posture and co-batching</h2>\n<p>" + esc(evidence_intro()) + "</p>\n" +
         html_table(posture_table(r), "posture") + html_table(cobatch_table(r), "cobatching");
    if (auto seeds = seed_table(r); !seeds.rows.empty()) o += html_table(seeds, "seed-probe");
  }
  if (auto panel = panel_table(r); !panel.rows.empty())
    o += "<h2>Replica panel</h2>\n" + html_table(panel, "panel");
  if (auto dist = distribution_table(r); !dist.rows.empty())
    o += "<h2>Sampled outputs as distributions</h2>\n" + html_table(dist, "distribution");
  if (auto tp = tp_table(r); !tp.rows.empty()) o += "<h2>Tensor parallelism against TP 1</h2>\n" + html_table(tp, "tp");
  if (auto dv = device_table(r); !dv.rows.empty())
    o += "<h2>Cross-device: each device against the first</h2>\n" + html_table(dv, "devices");
  if (auto sp = speculative_table(r); !sp.rows.empty())
    o += "<h2>Speculative decoding: each setting against off</h2>\n" + html_table(sp, "speculative");
  if (auto rt = routing_table(r); !rt.rows.empty())
    o += "<h2>Expert routing against the reference</h2>\n" + html_table(rt, "routing");
  if (auto ef = evidence_findings(r); !ef.empty()) {
    o += "<ul id=\"evidence-findings\">\n";
    for (const auto& f : ef) o += "<li><b>Finding:</b> " + esc(f) + "</li>\n";
    o += "</ul>\n";
  }
  auto cache = response_cache_table(r);
  if (!cache.rows.empty()) {
    o += "<h2>Response cache</h2>\n<p>" + esc(response_cache_intro()) + "</p>\n" + html_table(cache, "response-cache");
    o += "<ul id=\"cache-findings\">\n";
    for (const auto& f : response_cache_findings(r)) o += "<li><b>Finding:</b> " + esc(f) + "</li>\n";
    o += "</ul>\n";
  }
  return o;
}

std::string html_glossary(const AuditReport& r) {
  std::string o = "<h2 id=\"glossary-h\">Glossary</h2>\n<dl id=\"glossary\">\n";
  for (const auto& [term, def] : glossary(r)) o += "<dt>" + esc(term) + "</dt><dd>" + esc(def) + "</dd>\n";
  return o + "</dl>\n";
}

}  // namespace

std::string to_html(const AuditReport& r) {
  const Summary& s = r.summary;
  std::string verdict = s.verdict.empty() ? "unknown" : s.verdict;
  std::string vu = verdict;
  for (auto& ch : vu) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::string o;
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  o += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n";
  o += fmt::format("<title>repro-audit report: {}</title>\n<style>\n{}</style>\n</head>\n<body>\n", esc(vu), kCss);
  o += "<h1>repro-audit determinism report</h1>\n";
  // ---- the first screen: the verdict per mode, the gate, what to do, and the chart that shows divergence
  const VerdictBanner banner = verdict_banner(r);
  o += fmt::format("<div class=\"verdict v-{}{}\" id=\"verdict\">{}<small>{} of {} cases divergent &middot; at "
                   "most {} unique completions per case &middot; {} completions &middot; {} errors &middot; exit {}</small></div>\n",
                   esc(verdict), banner.mixed ? " v-mixed" : "", esc(banner.title), s.divergent_cases, s.cases,
                   s.max_unique, s.completions, s.errors, exit_code_for(r));
  if (std::string why = verdict_cause(r); !why.empty()) o += "<p class=\"bad\" id=\"why\">" + esc(why) + "</p>\n";
  if (s.interrupted) o += "<p class=\"bad\">The run was interrupted: this report covers what finished.</p>\n";
  if (std::string note = model_switch_note(r.environment); !note.empty())
    o += "<p class=\"bad\" id=\"model-switch\">Note: " + esc(note) + "</p>\n";
  o += "<div class=\"first\">\n<section class=\"firstcol\">\n<ul id=\"mode-verdicts\">\n";
  for (const auto& m : banner.modes)
    o += fmt::format("<li class=\"{}\"><b>{}</b>: {} &middot; {}</li>\n", m.good ? "good" : "bad", esc(m.label),
                     esc(m.verdict), esc(m.detail));
  o += "</ul>\n<p id=\"gate\">" + esc(banner.gate) + "</p>\n";
  o += "<h2 id=\"what-to-do\">What to do</h2>\n<ol id=\"advice\">\n";
  for (const auto& a : r.advice) {
    auto lines = advice_lines(a);
    o += "<li><b>" + esc(lines[0]) + "</b>";
    for (size_t i = 1; i < lines.size(); ++i) o += "<br><span class=\"meta\">" + esc(lines[i]) + "</span>";
    o += "</li>\n";
  }
  if (r.advice.empty()) o += "<li>not computed (a report written before advice was recorded)</li>\n";
  o += "</ol>\n</section>\n<section class=\"firstchart\">\n" + chart_divergent_cases(r) + "</section>\n</div>\n";
  o += "<nav id=\"toc\"><b>Contents:</b> <a href=\"#what-to-do\">What to do</a> &middot; <a href=\"#per-mode\">Per "
       "mode</a> &middot; <a href=\"#charts\">Charts</a> &middot; <a href=\"#tradeoff-h\">Trade-off</a> &middot; <a "
       "href=\"#drift-h\">Drift and its factors</a>";
  if (!r.throughput.empty()) o += " &middot; <a href=\"#throughput-h\">Throughput</a>";
  o += " &middot; <a href=\"#environment-h\">Environment</a> &middot; <a href=\"#cases-h\">Cases</a> &middot; <a "
       "href=\"#glossary-h\">Glossary</a></nav>\n";
  o += fmt::format("<p class=\"meta\">schema {}", esc(kReportSchema));
  if (!r.profile.empty()) o += " &middot; profile " + esc(r.profile);
  if (!r.created.empty()) o += " &middot; created " + esc(r.created);
  if (!r.answer_regex.empty()) o += " &middot; answer regex <code>" + esc(r.answer_regex) + "</code>";
  if (!r.answer_json_path.empty()) o += " &middot; answer JSON path <code>" + esc(r.answer_json_path) + "</code>";
  o += "</p>\n";

  // ---- headline
  o += "<h2 id=\"per-mode\">Reproducibility and its cost, per mode</h2>\n<table id=\"headline\"><tr><th>mode</th><th>cases</th>"
       "<th>TARr@N</th><th>mean unique</th><th>bit-divergent</th><th>divergent cases</th><th>max |dlogprob|</th>"
       "<th>tokens &ne; reference</th><th>throughput vs default (mean &plusmn;sd, n cells)</th><th>errors</th><th>failed requests</th>"
       "<th>verdict</th><th>gate</th></tr>\n";
  for (const auto& m : s.modes) {
    o += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n {}\">{}</td><td class=\"n\">{:.2f}</td>"
                     "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                     "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} of {} ({})</td>"
                     "<td class=\"{}\">{}</td><td class=\"{}\">{}</td></tr>\n",
                     esc(mode_label(m.mode, m.precision)), m.cases, m.tarr_rate >= 1.0 ? "good" : "bad", fmt_percent(m.tarr_rate), m.mean_unique,
                     fmt_percent(m.bit_divergent_share), m.divergent_cases, esc(fmt_dlogprob(m.drift_size.max_dlogprob)),
                     fmt::format("{} of {}", m.drift_size.token_differ.k, m.drift_size.token_differ.n),
                     esc(mode_speed_text(m)), m.errors, m.failed_requests,
                     m.requests, fmt_percent(m.error_rate), m.verdict == "reproducible" ? "good" : "bad",
                     esc(m.verdict), m.gate == "pass" ? "good" : m.gate == "fail" ? "bad" : "", esc(m.gate));
  }
  o += "</table>\n";
  // ---- charts, above every attribution table
  o += "<h2 id=\"charts\">Charts</h2>\n<div class=\"charts\">\n";
  o += chart_unique(r);
  o += chart_divergence(r);
  o += chart_drift_factors(r);
  o += chart_throughput(r);
  o += "</div>\n";
  o += "<h2 id=\"tradeoff-h\">Trade-off: approaches to reproducibility, measured in this run</h2>\n<p class=\"meta\">" +
       esc(tradeoff_intro()) + "</p>\n";
  o += html_table(tradeoff_table(r), "tradeoff");
  o += html_drift_sections(r);
  o += html_structured_sections(r);
  o += html_variant_sections(r);
  if (auto kinds = error_kinds(r); !kinds.empty()) {
    o += "<h2>Errors (first of each kind)</h2>\n<table id=\"errors\"><tr><th>mode</th><th>kind</th><th>count</th>"
         "<th>first message</th></tr>\n";
    for (const auto& e : kinds)
      o += fmt::format("<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n", esc(e.mode),
                       esc(e.kind), e.count, esc(e.first));
    o += "</table>\n";
  }
  if (r.shard || r.merge) {
    o += "<h2>Shards</h2>\n<p id=\"shards\">" + esc(shard_intro(r)) + "</p>\n";
    if (TextTable t = shard_table(r); !t.rows.empty()) o += html_table(t, "shard-reports");
    if (TextTable t = host_table(r); !t.rows.empty()) o += html_table(t, "hosts");
  }
  if (r.baseline) {
    const BaselineResult& b = *r.baseline;
    o += fmt::format("<h2>Baseline</h2>\n<p id=\"baseline\">Compared with <code>{}</code> (report digest <code>{}</code>{}): "
                     "<span class=\"{}\">{}</span></p>\n",
                     esc(b.file), esc(short_hash(b.report_sha256)),
                     b.digest_ok ? ", digest OK" : ", <span class=\"bad\">does not match its content</span>",
                     b.drifted ? "bad" : "good", b.drifted ? "drift" : "no drift");
    if (!b.config_changes.empty() || !b.changes.empty()) {
      o += "<ul>\n";
      for (const auto& c : b.config_changes) o += "<li>configuration: " + esc(c) + "</li>\n";
      for (const auto& c : b.changes) o += "<li>" + esc(c) + "</li>\n";
      o += "</ul>\n";
    }
  }


  if (!r.throughput.empty()) {
    o += "<h2 id=\"throughput-h\">Throughput</h2>\n<ul id=\"cost\">\n";
    for (const auto& line : throughput_cost_lines(r)) o += "<li>" + esc(line) + "</li>\n";
    o += "</ul>\n" + html_table(throughput_table(r), "throughput");
    o += fmt::format("<p class=\"meta\">tokens/s = tokens / seconds over the cell; &ldquo;per run&rdquo; = the statistics "
                     "of its measurements (local: each batched run; endpoints: each concurrency level&rsquo;s probe "
                     "stream); * noisy: standard deviation above {:.0f}% of the mean.</p>\n",
                     kNoisyCv * 100);
  }

  o += html_environment(r);

  if (!r.cross_mode.empty()) {
    o += "<h2>Outputs across modes</h2>\n<table><tr><th>prompt</th><th>decoding</th><th>outputs per mode</th>"
         "<th>modes disagree</th></tr>\n";
    for (const auto& x : r.cross_mode) {
      std::string per;
      for (size_t v = 0; v < x.table.values.size(); ++v) {
        per += (v ? "<br>" : "") + esc(x.table.values[v]) + ":";
        for (size_t c = 0; c < x.hashes.size(); ++c)
          if (x.table.counts[v][c] > 0) per += fmt::format(" <code>{}</code>&times;{}", short_hash(x.hashes[c]), x.table.counts[v][c]);
      }
      o += fmt::format("<tr><td title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", esc(x.prompt_id),
                       esc(prompt_snippet(r, x.prompt_id)),
                       esc(x.decoding_id), per,
                       x.hashes.size() > 1 ? (x.table.explains ? "yes (each mode consistent)" : "yes") : "no");
    }
    o += "</table>\n";
  }

  // ---- cases: reproducible ones collapsed; a checkbox (CSS only, the page runs no script) hides them
  o += "<h2 id=\"cases-h\">Cases</h2>\n<input type=\"checkbox\" id=\"only-divergent\"><label for=\"only-divergent\"> "
       "show only divergent cases (and cases without completions)</label>\n<div id=\"cases\">\n";
  for (const auto& c : r.cases) {
    std::string state = case_verdict(c);
    o += fmt::format("<details class=\"case {}\"{}><summary><span class=\"{}\">{}</span> &middot; {} &middot; {} &middot; {} &middot; "
                     "{} unique of {}</summary>\n",
                     c.divergent || c.n == 0 ? "case-flagged" : "case-ok", c.divergent || c.n == 0 ? " open" : "",
                     c.divergent || c.n == 0 ? "bad" : "good", esc(state),
                     esc(prompt_snippet(r, c.prompt_id)), esc(c.decoding_id), esc(mode_label(c.mode, c.precision)),
                     c.unique, c.n);
    if (!c.prompt_text.empty())
      o += "<p>Prompt <code>" + esc(c.prompt_id) + "</code>:</p><div class=\"txt\">" + esc(c.prompt_text) + "</div>\n";
    o += fmt::format("<p>TARr@N {}", c.tarr ? "yes" : "no");
    if (c.tara) o += " &middot; <span class=\"" + std::string(*c.tara ? "good" : "bad") + "\">" + esc(answer_status(c)) + "</span>";
    o += fmt::format(" &middot; bit-level variants {}{}", c.bit_unique, c.bit_divergent ? " (bit-divergent)" : "");
    if (c.errors) o += fmt::format(" &middot; <span class=\"bad\">{} errors</span>", c.errors);
    o += "</p>\n";
    if (c.drift_size.reference >= 0) o += "<p>Drift: " + esc(drift_summary(c.drift_size, &r)) + "</p>\n";
    if (std::string st = structured_case_text(c); !st.empty()) o += "<p>Structured output: " + esc(st) + "</p>\n";
    if (!c.clusters.empty()) {
      o += "<table class=\"clusters\"><tr><th>#</th><th>count</th><th>hash</th><th>first divergence: majority vs this "
           "cluster</th><th>family</th><th>distance</th><th>bit variants</th><th>text</th></tr>\n";
      for (size_t i = 0; i < c.clusters.size(); ++i) {
        const Cluster& k = c.clusters[i];
        std::string text = "<div class=\"txt\">" + highlighted(k) + "</div>";
        if (k.answer) text += "answer: <code>" + esc(display_text(*k.answer)) + "</code>";
        else if (c.tara) text += "<span class=\"bad\">answer missing</span>";
        o += fmt::format(
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td><code title=\"{}\">{}</code></td><td class=\"div\">{}</td>"
            "<td class=\"n\">{}</td><td class=\"n\">{:.3f}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
            i + 1, k.count, esc(k.hash), short_hash(k.hash), k.majority ? "majority" : esc(divergence_label(r, c, k)),
            k.family, k.distance_to_majority, k.bit_variants, text);
      }
      o += "</table>\n";
    }
    std::string cmds;
    for (size_t i = 0; i < c.clusters.size(); ++i)
      if (!c.clusters[i].repro_command.empty())
        cmds += fmt::format("# c{}{}\n{}\n", i + 1, c.clusters[i].majority ? " (majority)" : "",
                            esc(c.clusters[i].repro_command));
    if (!cmds.empty())
      o += "<p>" + esc(repro_intro(c)) + "</p><pre class=\"repro\">" + cmds + "</pre>\n";
    for (const auto& f : c.factors) {
      o += fmt::format("<table><tr><th>{}{}</th>", esc(f.factor), f.explains ? " (explains)" : "");
      for (size_t i = 0; i < c.clusters.size(); ++i) o += fmt::format("<th>c{}</th>", i + 1);
      o += "</tr>\n";
      for (size_t v = 0; v < f.values.size(); ++v) {
        o += "<tr><td>" + (f.values[v].empty() ? std::string("(none)") : esc(f.values[v])) + "</td>";
        for (int n : f.counts[v]) o += fmt::format("<td class=\"n\">{}</td>", n);
        o += "</tr>\n";
      }
      o += "</table>\n";
    }
    o += "</details>\n";
  }
  o += "</div>\n";
  o += html_glossary(r);
  o += "</body>\n</html>\n";
  return o;
}

}  // namespace repro
