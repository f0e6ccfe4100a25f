// A causal chain: one host-side condition that made a workload's CUDA calls slow, from the
// moment the engine opens it to the moment it closes. The engine (engine.h) creates and updates
// chains; the store persists them; explain, the metrics and OTLP read them.
// Plain values; thread-safety is the holder's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chains/advice.h"
#include "chains/kinds.h"
#include "chains/sites.h"
#include "identity/cgroup_identity.h"

namespace stallwatch::chains {

// Someone or something that made the condition worse: a preemptor, another CUDA process, ...
struct Contributor {
  std::string comm;
  int pid = 0;
  std::string cgroup;
  // "preemptor, other workload", "preemptor, kernel thread", "preemptor, same process",
  // "preemptor, worker of the job", "preemptor, same workload" (same cgroup), "preemptor, same
  // pod" (another container of the pod), "preemptor, another pod", "preemptor, system service",
  // "I/O submitter", ...
  std::string role;
  std::uint64_t cpu_ns = 0;   // time taken from the victim (preemptors) or spent in CUDA calls
  std::uint64_t count = 0;    // preemptions, calls, ...
  std::string thread;         // its thread that did it, when named apart from comm

  bool operator==(const Contributor&) const = default;
};

struct Chain {
  std::string id;  // 16 hex digits, unique per chain; the store's primary key
  Kind kind = Kind::kCpuContention;
  Severity severity = Severity::kLow;  // now
  Severity peak = Severity::kLow;      // the worst it has been
  bool open = true;
  identity::Identity identity;  // identity.cgroup is the `cgroup` label of the workload
  int pid = 0;                  // the affected process (0 when the chain is about a cgroup)
  std::string comm;
  std::string call;  // the affected CUDA call, e.g. cudaStreamSynchronize
  std::string api;   // runtime, driver, nccl
  double p50_s = 0;  // the call's latency in the latest window the condition held
  double p99_s = 0;
  double baseline_p50_s = 0;  // 0 when no baseline is known yet
  double baseline_p99_s = 0;
  double ratio = 0;  // p99_s / baseline_p99_s; 0 when the baseline is unknown
  std::int64_t opened_ns = 0;   // unix time
  std::int64_t updated_ns = 0;  // end of the latest window the condition held
  std::int64_t closed_ns = 0;   // 0 while open
  std::uint64_t windows = 0;    // windows in which the condition held
  std::string summary;          // one line: "[HIGH] cpu_contention: cudaStreamSynchronize ..."
  std::string root_cause;       // the cause with its numbers
  std::string effect;           // what it did to the CUDA calls
  std::string recommendation;   // commands a person can paste, one per line (Advice::text)
  std::vector<Command> commands;  // the shell commands among them, typed (not stored)
  std::vector<Contributor> contributors;                  // worst first
  std::vector<std::pair<std::string, double>> evidence;  // named numbers, e.g. runnable_share
  std::vector<CallSite> sites;  // where the stalled calls were made, by stalled time (sites.h)

  double evidence_value(std::string_view name, double fallback = 0) const;
};

}  // namespace stallwatch::chains
