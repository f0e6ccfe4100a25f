// Reading BPF hash maps from user space, shared by the evidence sources.
// Thread-safety: any thread (the kernel synchronises map access).
#pragma once

#include <bpf/bpf.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace stallwatch::trace {

// What one walk of a map saw.
struct Walk {
  std::size_t live = 0;     // entries read and left in the map
  std::size_t deleted = 0;  // entries this walk deleted
};

// Iterates a hash map entry by entry (two syscalls each): for_each_entry's fallback.
template <typename K, typename V, typename Fn>
Walk for_each_entry_slow(int fd, Fn&& fn) {
  K key{}, next{};
  V value{};
  std::vector<K> doomed;
  Walk walk;
  const K* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, &value) != 0) continue;  // deleted meanwhile
    if (fn(key, value)) {
      doomed.push_back(key);
    } else {
      ++walk.live;
    }
  }
  for (const auto& k : doomed) walk.deleted += bpf_map_delete_elem(fd, &k) == 0 ? 1 : 0;
  return walk;
}

// Iterates a hash map: fn(key, value) returns true to delete the entry after reading it.
// Reads in batches (bpf_map_lookup_batch, Linux 5.6: one syscall per 256 entries instead of two
// per entry), into buffers kept per thread and type, so a window's read allocates nothing once
// warm; a kernel that refuses batches gets the entry walk. Entries deleted meanwhile are
// skipped; deletions happen after the walk, so it never restarts.
template <typename K, typename V, typename Fn>
Walk for_each_entry(int fd, Fn&& fn) {
  thread_local std::vector<K> keys(256);
  thread_local std::vector<V> values(256);
  thread_local std::vector<K> doomed;
  doomed.clear();
  Walk walk;
  std::uint64_t token = 0;  // the kernel's cursor (a bucket index for hash maps)
  bool first = true;
  for (;;) {
    auto n = static_cast<__u32>(keys.size());
    const int err = bpf_map_lookup_batch(fd, first ? nullptr : &token, &token, keys.data(),
                                         values.data(), &n, nullptr);
    const int e = err ? errno : 0;
    if (err && e == ENOSPC && n == 0) {  // one bucket holds more than the buffer: grow it
      keys.resize(keys.size() * 2);
      values.resize(values.size() * 2);
      continue;
    }
    if (err && e != ENOENT) {
      if (first) return for_each_entry_slow<K, V>(fd, std::forward<Fn>(fn));
      break;  // the map changed under the cursor: the rest is read next window
    }
    for (__u32 i = 0; i < n; i++) {
      if (fn(keys[i], values[i])) {
        doomed.push_back(keys[i]);
      } else {
        ++walk.live;
      }
    }
    if (err) break;  // ENOENT: that was the last batch
    first = false;
  }
  for (const auto& k : doomed) walk.deleted += bpf_map_delete_elem(fd, &k) == 0 ? 1 : 0;
  return walk;
}

// A doomed entry's value as it leaves the map: read and deleted in one step
// (BPF_MAP_LOOKUP_AND_DELETE_ELEM, Linux 5.14 for hash maps), else read, then deleted. Nullopt
// when it was gone already (another reader took it).
template <typename K, typename V>
std::optional<V> take_entry(int fd, const K& key) {
  V v{};
  if (bpf_map_lookup_and_delete_elem(fd, &key, &v) == 0) return v;
  if (errno == ENOENT) return std::nullopt;
  if (bpf_map_lookup_elem(fd, &key, &v) != 0) return std::nullopt;
  if (bpf_map_delete_elem(fd, &key) != 0) return std::nullopt;
  return v;
}

// for_each_entry for maps keyed by process, whose entries of exited processes leave the map:
// `dead(key)` judges each entry after its batch was read; a live one goes to live(key, value)
// and stays; a dead one is taken out of the map only then, and the value it has at that moment
// goes to retire(key, value). So what a process added between the batch read and its exit (its
// last I/O or calls before exit(2)) is counted, not lost with the entry.
template <typename K, typename V, typename Dead, typename Live, typename Retire>
Walk for_each_process_entry(int fd, Dead&& dead, Live&& live, Retire&& retire) {
  std::vector<K> gone;
  Walk walk = for_each_entry<K, V>(fd, [&](const K& k, const V& v) {
    if (dead(k)) {
      gone.push_back(k);
    } else {
      live(k, v);
    }
    return false;
  });
  walk.live -= std::min(walk.live, gone.size());
  for (const auto& k : gone) {
    if (auto v = take_entry<K, V>(fd, k)) {
      retire(k, *v);
      ++walk.deleted;
    }
  }
  return walk;
}

// The number of keys a hash map holds now (keys only: no values are copied).
template <typename K>
std::size_t count_keys(int fd) {
  K key{}, next{};
  std::size_t n = 0;
  const K* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    ++n;
  }
  return n;
}

// The entries an LRU map dropped to make room, from its cumulative inserts and deletes (BPF
// and user space) and the keys it holds: evicted = inserts - deletes - live. The counters and
// the walk are not one atomic snapshot, so one reading can be off by the operations in flight
// (a delete done but not yet counted reads as an eviction); a reading counts only as far as
// the reading before it agrees, and the total never goes down.
class EvictionCount {
 public:
  std::uint64_t update(std::uint64_t inserts, std::uint64_t deletes, std::uint64_t live) {
    const auto now = static_cast<std::int64_t>(inserts) - static_cast<std::int64_t>(deletes) -
                     static_cast<std::int64_t>(live);
    if (last_) {
      const std::int64_t agreed = std::min(now, *last_);
      if (agreed > static_cast<std::int64_t>(total_)) total_ = static_cast<std::uint64_t>(agreed);
    }
    last_ = now;
    return total_;
  }

 private:
  std::optional<std::int64_t> last_;
  std::uint64_t total_ = 0;
};

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
