// Reading BPF hash maps from user space, shared by the evidence sources.
// Thread-safety: any thread (the kernel synchronises map access).
#pragma once

#include <bpf/bpf.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace stallwatch::trace {

// Iterates a hash map: fn(key, value) returns true to delete the entry after reading it.
// Entries deleted meanwhile are skipped; deletions happen after the walk, so it never restarts.
template <typename K, typename V, typename Fn>
void for_each_entry(int fd, Fn&& fn) {
  K key{}, next{};
  V value{};
  std::vector<K> doomed;
  const K* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, &value) != 0) continue;  // deleted meanwhile
    if (fn(key, value)) doomed.push_back(key);
  }
  for (const auto& k : doomed) bpf_map_delete_elem(fd, &k);
}

// A histogram value of the kernel (count, bytes, sum, max, log2 buckets: io_stats, nccl_stats)
// as its totals type (IoTotals, NcclTotals).
template <typename T, typename S>
T bytes_histogram_of(const S& s) {
  T t;
  t.count = s.count;
  t.bytes = s.bytes;
  t.sum_ns = s.sum_ns;
  t.max_ns = s.max_ns;
  std::copy(std::begin(s.buckets), std::end(s.buckets), t.buckets.begin());
  return t;
}

}  // namespace stallwatch::trace
