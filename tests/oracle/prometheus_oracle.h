// The test oracle of the text writer: the snapshot's model as prometheus-cpp metric families,
// serialised by prometheus-cpp's TextSerializer. exposition_test holds metrics/text_format.h
// byte-identical to it; the daemon does not link prometheus-cpp. Pure; thread-safe.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "metrics/model.h"
#include "trace/snapshot.h"

namespace stallwatch::metrics {

std::vector<prometheus::MetricFamily> to_families(const Snapshot& snap, const BuildInfo& build);

// The text exposition format (version 0.0.4) of the families, through prometheus-cpp's
// serializer.
std::string render_text(const std::vector<prometheus::MetricFamily>& families);

}  // namespace stallwatch::metrics
