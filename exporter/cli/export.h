// `stallwatch export --format perfetto|chrome-json [--db PATH] [--since 10m] [--cgroup C]
// [--pid P] -o FILE`: the store's evidence of a period as a timeline to open in Perfetto
// (ui.perfetto.dev) or chrome://tracing. One process track per process, one thread track per
// CUDA-issuing thread with its outlier calls as slices (off-CPU time inside each call as
// arguments), one track per causal chain (chains overlap, so never nested in one another),
// and per-window counters: the off-CPU runnable and blocked shares and the p99 of each
// synchronize call. Reads the database only; needs no root.
//
// The Perfetto form is the protobuf trace format (perfetto.protos.Trace), written here with
// the OTLP encoder's wire writer; the chrome-json form is the Trace Event Format (JSON object
// form). Field numbers: google/perfetto protos/perfetto/trace/{trace,trace_packet}.proto and
// track_event/{track_event,track_descriptor,process_descriptor,thread_descriptor,
// counter_descriptor,debug_annotation}.proto at revision ec5d16b14b743ba6063d720956d6d6af6610fd72.
// Thread-safety: reentrant.
#pragma once

#include <string>
#include <vector>

#include "store/timeline.h"

namespace stallwatch::cli {

// The timeline as a Perfetto trace (binary protobuf). Timestamps are unix nanoseconds.
std::string perfetto_trace(const store::Timeline& t);
// The timeline in the Trace Event Format: {"traceEvents":[...],"displayTimeUnit":"ns",
// "otherData":{...}}. Timestamps are microseconds since the period's start (otherData names
// that instant in unix nanoseconds): unix microseconds in a double would lose the nanoseconds.
std::string chrome_trace_json(const store::Timeline& t);

// Exit codes: 0 written; 1 the database cannot be read or the file cannot be written; 2 usage.
int export_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
