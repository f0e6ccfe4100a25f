// What a uprobe costs on this host, measured by the daemon itself at start (issue #48).
// Targets of known shapes live in the daemon's own binary (probe_cost.cpp, x86-64): the driver
// stub's `cmpl $imm,X(%rip)` · `je`, a push, the one-byte and multi-byte nops, a direct jump and
// endbr64. For each, a child process of the daemon calls the target with an entry probe on it
// (bpf/probe_cost.bpf.c, pid-filtered), then reports whether the kernel gave it a
// single-step page ("[uprobes]" in its maps appears only when an instruction is stepped out of
// line) and what the calls cost. That answers "which instructions does this kernel emulate" by
// what the kernel did, not by its version, and prices each class (emulated, stepped) per entry
// and per return probe: the compare at +0 is the stepped class, the je after it the emulated
// one. A hit count per phase proves the probe fired on every call.
// Takes ~0.15 s where the kernel has multi-uprobe links (one link over every site, one over the
// timed ones: two detaches) and about a second elsewhere (a perf-event probe per child, each
// detach an RCU grace period); the daemon calls it once, before the first library is attached. Needs CAP_BPF/CAP_PERFMON (or root); without them, or
// on another architecture, the result says why and carries default_emulation().
// Thread-safety: forks; call it from one thread at a time. The child only makes
// async-signal-safe calls.
#pragma once

#include <chrono>
#include <string>

#include "trace/probe_sites.h"

namespace stallwatch::trace {

// Seconds one probe adds to a call, by class: median over batches, the native call subtracted.
struct TrapCost {
  double entry_seconds = 0;   // the entry probe alone
  double return_seconds = 0;  // what its return probe adds
  bool measured = false;
};

struct ProbeCalibration {
  Emulation emulation = default_emulation();
  TrapCost emulated;  // a probe on the je of the driver stub
  TrapCost stepped;   // a probe on its RIP-relative compare
  std::string error;  // why nothing (or part) was measured; empty when all was
  std::chrono::milliseconds took{0};
};

struct CalibrationOptions {
  int timed_calls = 1000;   // calls per batch of the two timed sites
  int batches = 5;          // the median of these
  int detect_calls = 20;    // calls at each other site (emulated or not)
  std::chrono::milliseconds child_timeout{std::chrono::seconds(10)};
};

ProbeCalibration calibrate_probes(const CalibrationOptions& options = {});

// One line for the log and `check`: "this kernel emulates push, nop, nopl, jcc, jmp at a uprobe;
// a probe costs 0.93 µs entry + 0.31 µs return emulated, 9.8 + 0.35 µs stepped".
std::string describe_calibration(const ProbeCalibration& c);

}  // namespace stallwatch::trace
