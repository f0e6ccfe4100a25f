// Maps the kernel's cgroup id (what bpf_get_current_cgroup_id() returns: the inode number of the
// cgroup's directory in the cgroup2 filesystem) to its path relative to the cgroup2 mount.
// Owns a cache of id -> path filled by walking the cgroup2 mount; reads /proc/self/mountinfo and
// the cgroup2 directory tree, never writes.
// Thread-safety: find_cgroup2_mount is safe from any thread; CgroupResolver is NOT thread-safe
// (path_of mutates the cache): use it from one thread or guard it with a mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace stallwatch::identity {

// The cgroup2 mount point in a /proc/<pid>/mountinfo text: /sys/fs/cgroup on pure v2 hosts,
// /sys/fs/cgroup/unified on hybrid (v1 controllers + unified) hosts, else the first cgroup2
// mount. nullopt when there is none (v1-only host).
std::optional<std::string> find_cgroup2_mount(std::string_view mountinfo_text);
// Same, reading /proc/self/mountinfo; nullopt also when it cannot be read.
std::optional<std::string> find_cgroup2_mount();

// Bounds on what any local user with a delegated cgroup subtree can make the resolver do
// (issue #35): a walk records at most `max_cgroups` directories (a node runs a few thousand; the
// rest are found again on a later walk once others go), and forget_missing checks at most
// `check_per_call` cached paths per call, round robin, instead of every one every window.
struct ResolverLimits {
  std::size_t max_cgroups = 65536;
  std::size_t check_per_call = 1024;
};

class CgroupResolver {
 public:
  // Full walks happen at most once per kMinWalkInterval.
  static constexpr std::chrono::milliseconds kMinWalkInterval{200};

  // `mount`: e.g. "/sys/fs/cgroup/unified".
  explicit CgroupResolver(std::string mount, ResolverLimits limits = {});

  // Path of cgroup `id` ("/" for the mount's root). A cache miss triggers one walk of the whole
  // mount unless one ran less than kMinWalkInterval ago; an id the walk does not find is
  // remembered as missing (nullopt without walking) until the next walk.
  std::optional<std::string> path_of(std::uint64_t id);

  const std::string& mount() const;
  std::size_t cached() const;

  // Drops cache entries whose directory is gone (or was recreated with another id). Entries of
  // removed cgroups are otherwise kept so late events still resolve; call once per window.
  void forget_missing();

  // Directories a walk met past max_cgroups and did not record, since start.
  std::uint64_t over_limit() const { return over_limit_; }

 private:
  void walk();

  std::string mount_;
  ResolverLimits limits_;
  std::size_t check_cursor_ = 0;
  std::uint64_t over_limit_ = 0;
  std::unordered_map<std::uint64_t, std::string> paths_;
  std::unordered_set<std::uint64_t> missing_;
  std::optional<std::chrono::steady_clock::time_point> last_walk_;
};

}  // namespace stallwatch::identity
