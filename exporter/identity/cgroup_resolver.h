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

namespace stallwatch::identity {

// The cgroup2 mount point in a /proc/<pid>/mountinfo text: /sys/fs/cgroup on pure v2 hosts,
// /sys/fs/cgroup/unified on hybrid (v1 controllers + unified) hosts, else the first cgroup2
// mount. nullopt when there is none (v1-only host).
std::optional<std::string> find_cgroup2_mount(std::string_view mountinfo_text);
// Same, reading /proc/self/mountinfo; nullopt also when it cannot be read.
std::optional<std::string> find_cgroup2_mount();

// Bounds on what any local user with a delegated cgroup subtree can make the resolver do
// (issues #35, #49): a walk records at most `max_cgroups` directories and `max_bytes` of their
// names (a path is kept as parent + name, so 250 nested levels of 255-byte names cost 255 bytes
// a level, not 64 KB a leaf); the rest are found again on a later walk once others go.
// forget_missing checks at most `check_per_call` cached entries per call, round robin.
// `trusted_uid`: the owner of the directories the runtime made (root; a test may pass its own).
struct ResolverLimits {
  std::size_t max_cgroups = 65536;
  std::size_t max_bytes = 16u << 20;
  std::size_t check_per_call = 1024;
  unsigned trusted_uid = 0;
};

class CgroupResolver {
 public:
  // Full walks happen at most once per kMinWalkInterval, and at most 1/kWalkDutyDivisor of the
  // time (a walk that took 50 ms waits a second before the next).
  static constexpr std::chrono::milliseconds kMinWalkInterval{200};
  static constexpr int kWalkDutyDivisor = 20;
  // An id a walk did not find is not looked for again for this long (cgroup ids are inode
  // numbers of a 64-bit counter, never reused: a missing id is a removed cgroup, unless the
  // walk that missed it was cut short by the limits).
  static constexpr std::chrono::seconds kMissingFor{60};
  static constexpr std::size_t kMaxMissing = 65536;
  // A cgroup path a directory walk can open in one call; deeper ones are checked through their
  // parents by forget_missing.
  static constexpr std::size_t kMaxCheckedPath = 4000;

  // `mount`: e.g. "/sys/fs/cgroup/unified".
  explicit CgroupResolver(std::string mount, ResolverLimits limits = {});

  // Path of cgroup `id` ("/" for the mount's root). A cache miss triggers one walk of the whole
  // mount unless one ran recently (above); an id the walk does not find is remembered as
  // missing (nullopt without walking) for kMissingFor.
  std::optional<std::string> path_of(std::uint64_t id);
  // The part of `id`'s path the runtime owns: its leading levels whose directories, and every
  // ancestor's, belong to trusted_uid. A delegated subtree (a systemd user manager's, a rootless
  // container's) is chowned to its user; names below it are the user's choice and must not
  // decide a pod, container or Slurm job. nullopt when the id is unknown (no walk).
  std::optional<std::string> trusted_path_of(std::uint64_t id) const;

  const std::string& mount() const;
  std::size_t cached() const;
  std::size_t bytes() const { return bytes_; }  // held by the cached names
  std::uint64_t walks() const { return walks_; }

  // Drops cache entries whose directory is gone (or was recreated with another id). Entries of
  // removed cgroups are otherwise kept so late events still resolve; call once per window.
  void forget_missing();

  // Directories a walk met past max_cgroups or max_bytes and did not record, since start.
  std::uint64_t over_limit() const { return over_limit_; }

 private:
  struct Node {
    std::uint64_t parent = 0;  // the root's parent is itself
    std::string name;          // "" for the root
    bool trusted = false;      // this directory and every ancestor owned by trusted_uid
  };
  using Nodes = std::unordered_map<std::uint64_t, Node>;
  struct Walk;

  void walk();
  std::optional<std::string> build_path(std::uint64_t id, bool trusted_only) const;
  bool still_there(std::uint64_t id, const Node& node) const;
  static std::size_t cost(const Node& n) { return n.name.size() + sizeof(Node) + 32; }

  std::string mount_;
  ResolverLimits limits_;
  std::size_t check_cursor_ = 0;
  std::uint64_t over_limit_ = 0;
  std::uint64_t walks_ = 0;
  std::size_t bytes_ = 0;
  std::uint64_t root_id_ = 0;
  Nodes nodes_;
  std::unordered_map<std::uint64_t, std::chrono::steady_clock::time_point> missing_;
  std::optional<std::chrono::steady_clock::time_point> next_walk_;
};

}  // namespace stallwatch::identity
