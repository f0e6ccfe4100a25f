// Snapshot → the Prometheus text exposition (DESIGN.md's table), built fresh for every scrape so
// that series of vanished workloads disappear. The families come from the neutral model
// (model.h) that OTLP renders too. prometheus-cpp renders the same families in the tests only
// (tests/oracle/prometheus_oracle.h), as the reference our writer is held to. Pure; thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "metrics/model.h"
#include "trace/snapshot.h"

namespace stallwatch::metrics {

// What /metrics serves: the snapshot's model written by text_format.h, with the deployment's
// choice of identity labels and bucket ladder.
std::string render_exposition(const Snapshot& snap, const BuildInfo& build,
                              const ExpositionOptions& options = {}, bool openmetrics = false);

// The same, gzip'd (`level` 1-9) as it is written, in pieces of kGzipPiece bytes: the whole text
// is never held, only its gzip (at 256 cgroups, 54 MB of text is 1.3 MB gzip'd).
inline constexpr size_t kGzipPiece = 1 << 20;
std::string render_exposition_gzip(const Snapshot& snap, const BuildInfo& build,
                                   const ExpositionOptions& options, bool openmetrics, int level);

}  // namespace stallwatch::metrics
