// The text rendering of the incident report (store/report.h) for `stallwatch explain`: what an
// SRE reads at 3 a.m. (the JSON rendering is in cli/explain.h). Also the number formats both
// use (durations like 7.2ms, counts like 14,504, UTC times). Pure functions of the report;
// thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "chains/format.h"
#include "store/report.h"

namespace stallwatch::cli {

// Text report: header, system context, causal chains (or what was traced when none formed),
// then the process breakdown when the report has one. Ends with a newline.
std::string render_explain_text(const store::Report& report);

// Number formats (chains/format.h), also under this namespace for the renderers.
using chains::human_ns;
using chains::human_seconds;
using chains::short_number;
using chains::thousands;
std::string utc_datetime(std::int64_t unix_ns);  // "2026-11-20 14:02:11"
std::string rfc3339(std::int64_t unix_ns);       // "2026-11-20T14:02:11Z"

}  // namespace stallwatch::cli
