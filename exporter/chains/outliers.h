// Outlier records from the ring buffer, gathered between two windows for the chain engine
// and the store. add() runs on the ring-buffer thread once per record and only touches a
// small per-process summary and a bounded "worst records" list; names are resolved when the
// window is drained. Thread-safe (one mutex, held for a few hundred nanoseconds).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "trace/records.h"

namespace stallwatch::chains {

struct PidOutliers {
  std::uint64_t count = 0;
  std::uint64_t worst_ns = 0;           // longest outlier call
  std::uint64_t worst_runnable_ns = 0;  // its runnable share
  std::uint32_t worst_call_id = 0;
  std::uint64_t runnable_ns = 0;  // summed over the window's outliers
};

struct OutlierWindow {
  std::uint64_t total = 0;                          // records this window
  std::unordered_map<std::uint32_t, PidOutliers> by_pid;
  std::vector<trace::OutlierRecord> worst;                 // longest first, at most `keep`
};

class OutlierSink {
 public:
  explicit OutlierSink(size_t keep = 256) : keep_(keep) {}
  void add(const trace::OutlierRecord& e);
  OutlierWindow drain();
  std::uint64_t total() const;  // cumulative, all windows

 private:
  mutable std::mutex mu_;
  size_t keep_;
  OutlierWindow cur_;
  std::uint64_t total_ = 0;
};

}  // namespace stallwatch::chains
