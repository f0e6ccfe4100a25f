#include "metrics/text_format.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <unordered_map>

#include "common/strings.h"
#include "trace/histogram.h"

namespace stallwatch::metrics {
namespace {

// Label values: backslash, double quote and line feed escaped, as the format requires, and
// invalid UTF-8 replaced (Prometheus rejects the whole scrape for one bad label value).
void append_escaped(std::string& out, std::string_view raw) {
  std::string fixed;
  std::string_view v = raw;
  if (!is_valid_utf8(raw)) v = fixed = to_valid_utf8(raw);
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

// HELP text: backslash and line feed escaped (and the double quote, in OpenMetrics).
void append_help(std::string& out, std::string_view v, bool openmetrics = false) {
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"' && openmetrics) {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// A sample value as printf's %.16g (what prometheus-cpp's ostream with precision 16 prints),
// "Nan", "+Inf" or "-Inf".
void append_double(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "Nan";
  } else if (std::isinf(v)) {
    out += v < 0 ? "-Inf" : "+Inf";
  } else {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 16);
    out.append(buf, r.ptr);
  }
}

void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// `name="value",...` of a point: identity labels first, then its own.
class LabelBlocks {
 public:
  // The identity part of a workload, formatted once per render and reused for all its points.
  const std::string& identity(const identity::Identity* id) {
    auto [it, fresh] = cache_.try_emplace(id);
    if (fresh && id) {
      for (const auto& [name, value] : identity_labels(*id)) append(it->second, name, value);
    }
    return it->second;
  }

  static void append(std::string& out, std::string_view name, std::string_view value) {
    if (!out.empty()) out += ',';
    out += name;
    out += "=\"";
    append_escaped(out, value);
    out += '"';
  }

 private:
  std::unordered_map<const identity::Identity*, std::string> cache_;
};

// Appends `name{labels} ` (no braces without labels); `extra` is appended last (le="...").
void head(std::string& out, std::string_view name, std::string_view suffix,
          const std::string& labels, std::string_view extra = {}) {
  out += name;
  out += suffix;
  if (!labels.empty() || !extra.empty()) {
    out += '{';
    out += labels;
    if (!extra.empty()) {
      if (!labels.empty()) out += ',';
      out += extra;
    }
    out += '}';
  }
  out += ' ';
}

const char* type_name(MetricKind k) {
  switch (k) {
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kHistogram:
      return "histogram";
    case MetricKind::kGauge:
      break;
  }
  return "gauge";
}

}  // namespace

namespace {

// le="..." of every exported bound, formatted once.
const std::vector<std::string>& le_labels() {
  static const std::vector<std::string> kLe = [] {
    std::vector<std::string> le;
    for (double b : trace::exported_bounds()) {
      std::string s = "le=\"";
      append_double(s, b);
      le.push_back(s + "\"");
    }
    le.emplace_back("le=\"+Inf\"");
    return le;
  }();
  return kLe;
}

// Writes the exposition into `out`, calling `after_point(out)` after each point (and at the
// end): rendering in pieces empties `out` there.
template <class AfterPoint>
void write_text(std::string& out, const std::vector<Family>& families, int ladder_step,
                bool openmetrics, AfterPoint&& after_point) {
  const size_t step = ladder_step > 1 ? static_cast<size_t>(ladder_step) : 1;
  const std::vector<std::string>& kLe = le_labels();
  LabelBlocks blocks;
  std::string labels;
  for (const Family& f : families) {
    // OpenMetrics names a counter family without its samples' `_total`.
    std::string_view family_name = f.name;
    if (openmetrics && f.kind == MetricKind::kCounter && family_name.ends_with("_total")) {
      family_name.remove_suffix(6);
    }
    out += "# HELP ";
    out += family_name;
    out += ' ';
    append_help(out, f.help, openmetrics);
    out += "\n# TYPE ";
    out += family_name;
    out += ' ';
    out += type_name(f.kind);
    out += '\n';
    for (const Point& p : f.points) {
      labels = blocks.identity(p.workload);
      for (const auto& [name, value] : p.labels) LabelBlocks::append(labels, name, value);
      if (f.kind != MetricKind::kHistogram) {
        head(out, f.name, "", labels);
        append_double(out, p.value);
        out += '\n';
        after_point(out);
        continue;
      }
      const HistogramValue& h = p.histogram;
      auto count_and_sum = [&] {
        head(out, f.name, "_count", labels);
        append_uint(out, h.count);
        out += '\n';
        head(out, f.name, "_sum", labels);
        append_double(out, static_cast<double>(h.sum_ns) / 1e9);
        out += '\n';
      };
      if (!openmetrics) count_and_sum();  // OpenMetrics: buckets first
      const auto counts = trace::fold_to_exported(h.buckets);
      std::uint64_t cumulative = 0;
      for (size_t i = 0; i + 1 < kLe.size(); ++i) {
        cumulative += counts[i];
        if (i % step != 0) continue;
        head(out, f.name, "_bucket", labels, kLe[i]);
        append_uint(out, cumulative);
        out += '\n';
      }
      head(out, f.name, "_bucket", labels, kLe.back());
      append_uint(out, h.count);
      out += '\n';
      if (openmetrics) count_and_sum();
      after_point(out);
    }
  }
  if (openmetrics) out += "# EOF\n";
  after_point(out);
}

}  // namespace

std::string render_text(const std::vector<Family>& families, int ladder_step, bool openmetrics) {
  const size_t lines_per_histogram = le_labels().size() + 2;
  size_t estimate = 0;
  for (const Family& f : families) {
    estimate += 128 + f.points.size() *
                          (f.kind == MetricKind::kHistogram ? lines_per_histogram : 1) *
                          (f.name.size() + 48 + (f.points.empty() || !f.points[0].workload
                                                     ? 0
                                                     : f.points[0].workload->cgroup.size() * 2));
  }
  std::string out;
  out.reserve(estimate);
  write_text(out, families, ladder_step, openmetrics, [](std::string&) {});
  return out;
}

void render_text_in_pieces(const std::vector<Family>& families, int ladder_step,
                           bool openmetrics, size_t piece,
                           const std::function<void(std::string_view)>& sink) {
  std::string out;
  out.reserve(piece + 64 * 1024);
  write_text(out, families, ladder_step, openmetrics, [&](std::string& text) {
    if (text.size() < piece) return;
    sink(text);
    text.clear();
  });
  if (!out.empty()) sink(out);
}

bool accepts_openmetrics(std::string_view accept) {
  size_t start = 0;
  while (start <= accept.size()) {
    size_t end = accept.find(',', start);
    if (end == std::string_view::npos) end = accept.size();
    std::string range;
    for (char c : accept.substr(start, end - start)) {
      if (c != ' ' && c != '\t') range += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (range.rfind("application/openmetrics-text", 0) == 0) {
      const size_t q = range.find(";q=");
      if (q == std::string::npos || std::strtod(range.c_str() + q + 3, nullptr) > 0) return true;
    }
    start = end + 1;
  }
  return false;
}

}  // namespace stallwatch::metrics
