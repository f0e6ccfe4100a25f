// The Prometheus text exposition format (0.0.4) written straight from the model (model.h): one
// preallocated string, each workload's identity label block formatted once per render, numbers
// through std::to_chars. The same bytes prometheus-cpp's TextSerializer writes for the same
// families (a unit test holds the two against each other), at a fraction of the cost: that path
// builds an object per sample and writes label values through an ostream one character at a
// time, which made /metrics of 256 busy cgroups take 1.5 s (bench/README.md, part 5).
// Pure; thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/model.h"

namespace stallwatch::metrics {

// `ladder_step`: write every `le` bound (1) or every n-th of them (4: 2^-20, 2^-16, ... 2^4 s).
// `openmetrics`: the OpenMetrics text 1.0.0 form instead (counter families named without
// `_total`, histogram buckets before their count and sum, `# EOF` at the end).
std::string render_text(const std::vector<Family>& families, int ladder_step = 1,
                        bool openmetrics = false);

// The same bytes in pieces of about `piece` bytes (at sample boundaries; the last one shorter),
// so that the whole text is never held at once: /metrics gzips them as they come.
void render_text_in_pieces(const std::vector<Family>& families, int ladder_step,
                           bool openmetrics, size_t piece,
                           const std::function<void(std::string_view)>& sink);

inline constexpr const char* kOpenMetricsContentType =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
// Whether an Accept header asks for OpenMetrics text (any version; a q of 0 refuses it).
bool accepts_openmetrics(std::string_view accept);

}  // namespace stallwatch::metrics
