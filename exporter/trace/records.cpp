#include "trace/records.h"

#include <iterator>

extern "C" {
#include <linux/types.h>

#include "bpf/stallwatch.h"
}

namespace stallwatch::trace {

static_assert(kLostSources == SW_LOST_MAX, "a slot of Snapshot::lost for every sw_lost_source");

const char* lost_source_name(unsigned source) {
  static constexpr const char* kNames[] = {"outlier_ringbuf", "discovery_ringbuf", "call_map_full",
                                           "offcpu_map_full", "thread_state",      "call_nesting",
                                           "host_ringbuf",    "host_map_full",
                                           "watched_cgroups_full", "alloc_map_full",
                                           "stack_map_full"};
  static_assert(std::size(kNames) == SW_LOST_MAX, "a name for every enum sw_lost_source");
  return source < std::size(kNames) ? kNames[source] : "unknown";
}

static_assert(kLruMaps == SW_LRU_MAX, "a slot of Snapshot::evicted for every sw_lru_map");

const char* lru_evicted_name(unsigned lru) {
  static constexpr const char* kNames[] = {"preemptors_evicted", "io_inflight_evicted",
                                           "nccl_comms_evicted", "reclaim_starts_evicted"};
  static_assert(std::size(kNames) == SW_LRU_MAX, "a name for every enum sw_lru_map");
  return lru < std::size(kNames) ? kNames[lru] : "unknown";
}

}  // namespace stallwatch::trace
