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
                                           "watched_cgroups_full"};
  static_assert(std::size(kNames) == SW_LOST_MAX, "a name for every enum sw_lost_source");
  return source < std::size(kNames) ? kNames[source] : "unknown";
}

}  // namespace stallwatch::trace
