// Outlier records from the ring buffer, gathered between two windows for the chain engine
// and the store. add() runs on the ring-buffer thread once per record and only touches a
// small per-process summary and a bounded "worst records" list; names are resolved when the
// window is drained. Thread-safe (one mutex, held for a few hundred nanoseconds).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "chains/sites.h"
#include "trace/records.h"

namespace stallwatch::chains {

struct PidOutliers {
  std::uint64_t count = 0;
  std::uint64_t worst_ns = 0;           // longest outlier call
  std::uint64_t worst_runnable_ns = 0;  // its runnable share
  std::uint32_t worst_call_id = 0;
  std::uint64_t runnable_ns = 0;  // summed over the window's outliers
};

// Outliers of one process and call with one stack, as the kernel gave it.
struct RawSite {
  std::uint64_t cgroup_id = 0;
  std::uint64_t count = 0;
  std::uint64_t stalled_ns = 0;  // summed duration
  std::uint16_t py_status = 0;
};
using RawSiteKey = std::tuple<std::uint32_t, std::uint32_t, std::vector<std::uint64_t>,
                              std::vector<std::pair<std::uint64_t, std::uint32_t>>>;

struct OutlierWindow {
  static constexpr size_t kMaxSites = 4096;  // distinct stacks per window; the rest counted
  std::uint64_t total = 0;                          // records this window
  std::unordered_map<std::uint32_t, PidOutliers> by_pid;
  std::vector<trace::OutlierRecord> worst;                 // longest first, at most `keep`
  std::map<RawSiteKey, RawSite> sites;  // (tgid, call id, native, python)
  std::uint64_t sites_dropped = 0;      // outliers whose stack found no room
  std::vector<ResolvedSite> resolved;   // SiteResolver::resolve fills it
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
