// What `stallwatch export` draws (cli/export.h): the store's evidence of a period as a timeline.
// Outlier calls (each call at or above --outlier-threshold, one row each) become slices on
// their thread; chains become slices of their own; per-window off-CPU shares and the p99 of
// each synchronize call become counters. Reads the database only.
// Thread-safety: reentrant (one connection per call).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/report.h"

namespace stallwatch::store {

struct TimelineQuery {
  ReportQuery period;  // now_ns, since_ns, cgroup (per_process is not used)
  int pid = 0;         // 0: every process
  size_t max_calls = 1000000;  // slices past this are left out (Timeline::calls_left_out)
};

struct TimelineProcess {
  int pid = 0;
  std::string comm;    // as stored: raw bytes from the host
  std::string cgroup;
};

struct TimelineCall {
  int pid = 0;
  int tid = 0;
  std::string thread;  // the thread's name when the call was made
  std::string call;
  std::string api;
  std::int64_t start_ns = 0;  // unix time
  std::int64_t end_ns = 0;
  std::uint64_t runnable_ns = 0;  // off-CPU inside the call, waiting for a CPU
  std::uint64_t blocked_ns = 0;   // off-CPU inside the call, sleeping
  std::uint64_t preemptions = 0;
};

enum class CounterUnit { kRatio, kNanoseconds, kMegahertz, kWatts };

// One sample of a per-process counter: the value over the window that starts at `ts_ns`.
struct TimelineSample {
  int pid = 0;
  std::string counter;  // "off-CPU runnable", "off-CPU blocked", "p99 cudaStreamSynchronize"
  CounterUnit unit = CounterUnit::kRatio;
  std::int64_t ts_ns = 0;
  double value = 0;
};

// One sample of a GPU's counter (gpu_windows, schema 10): host-wide context, drawn whatever
// --pid or --cgroup says, over the window that starts at `ts_ns`.
struct TimelineGpuSample {
  unsigned gpu = 0;
  std::string counter;  // "SM clock", "clock held", "power"
  CounterUnit unit = CounterUnit::kRatio;
  std::int64_t ts_ns = 0;
  double value = 0;
};

struct Timeline {
  std::int64_t from_ns = 0;  // the period
  std::int64_t to_ns = 0;
  std::vector<TimelineProcess> processes;  // by pid
  std::vector<TimelineCall> calls;         // by start time
  std::vector<ReportChain> chains;         // as the report orders them
  std::vector<TimelineSample> samples;     // by time
  std::map<unsigned, std::string> gpu_names;      // by NVML index, as stored (escaped)
  std::vector<TimelineGpuSample> gpu_samples;     // by time, then GPU
  std::uint64_t calls_left_out = 0;        // past max_calls
};

Result<Timeline> load_timeline(sqlite3* db, const TimelineQuery& query);

}  // namespace stallwatch::store
