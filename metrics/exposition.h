// Snapshot → Prometheus metric families (DESIGN.md's table), built fresh for every scrape so
// that series of vanished workloads disappear. The families come from the neutral model
// (model.h) that OTLP renders too. Pure; thread-safe.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "common/snapshot.h"
#include "metrics/model.h"

namespace stallwatch::metrics {

std::vector<prometheus::MetricFamily> to_families(const Snapshot& snap, const BuildInfo& build);

// The text exposition format (version 0.0.4) of the families, through prometheus-cpp's
// serializer: the reference the tests hold text_format.h's writer against.
std::string render_text(const std::vector<prometheus::MetricFamily>& families);

// What /metrics serves: the snapshot's model written by text_format.h.
std::string render_exposition(const Snapshot& snap, const BuildInfo& build);

// The `source` label of stallwatch_events_lost_total for each enum sw_lost_source.
const char* lost_source_name(unsigned source);

}  // namespace stallwatch::metrics
