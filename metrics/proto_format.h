// The Prometheus protobuf exposition (io.prometheus.client.MetricFamily, varint-length-delimited)
// written straight from the model (model.h), for scrapers that ask for it: a Prometheus with
// native histograms on. Every duration histogram goes out as a native histogram of schema 0
// built from the kernel's buckets without re-binning: kernel bucket k (2^(k-31) s, 2^(k-30) s]
// is native bucket k-30, bucket 0 (at most 2^-30 s, in practice 0) is the zero bucket of
// threshold 2^-30 s, and the overflow bucket (above 256 s, the classic +Inf) is native bucket 9,
// (256 s, 512 s]. With `classic` the classic buckets (the text exposition's `le` bounds) ride
// along in the same message, for a Prometheus that keeps both (≥ 2.45 with
// scrape_classic_histograms). Field numbers: prometheus/prometheus
// prompb/io/prometheus/client/metrics.proto (the same in prometheus/client_model).
// Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "metrics/model.h"

namespace stallwatch::metrics {

inline constexpr const char* kProtobufContentType =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
    "encoding=delimited";

// `ladder_step` thins the classic buckets as render_text's does.
std::string render_protobuf(const std::vector<Family>& families, bool classic,
                            int ladder_step = 1);

// Whether an Accept header asks for the delimited protobuf exposition (Prometheus with
// --enable-feature=native-histograms puts it first); a q of 0 refuses it.
bool accepts_protobuf(std::string_view accept);

}  // namespace stallwatch::metrics
