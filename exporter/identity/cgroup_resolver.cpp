#include "common/strings.h"
#include "identity/cgroup_resolver.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

namespace stallwatch::identity {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_field(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

int preference(std::string_view mount_point) {
  if (mount_point == "/sys/fs/cgroup") return 2;
  if (mount_point == "/sys/fs/cgroup/unified") return 1;
  return 0;
}

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};

constexpr int kMaxDepth = 256;  // far beyond cgroup.max.depth in practice; guards the recursion

}  // namespace

std::optional<std::string> find_cgroup2_mount(std::string_view mountinfo_text) {
  std::optional<std::string> best;
  int best_preference = -1;
  std::istringstream in{std::string(mountinfo_text)};
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point options [optional...] - fstype source super_options
    const std::vector<std::string_view> fields = split_fields(line);
    if (fields.size() < 7) continue;
    size_t sep = 6;
    while (sep < fields.size() && fields[sep] != "-") ++sep;
    if (sep + 1 >= fields.size() || fields[sep + 1] != "cgroup2") continue;
    std::string mount_point = unescape_mount_field(fields[4]);
    const int p = preference(mount_point);
    if (p > best_preference) {
      best_preference = p;
      best = std::move(mount_point);
    }
  }
  return best;
}

std::optional<std::string> find_cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return find_cgroup2_mount(text.str());
}

// One walk of the mount: the directories found, within the limits.
struct CgroupResolver::Walk {
  const ResolverLimits& limits;
  Nodes found;
  std::size_t bytes = 0;
  std::uint64_t over = 0;

  bool room_for(const Node& n) const {
    return found.size() < limits.max_cgroups && bytes + cost(n) <= limits.max_bytes;
  }

  // Records every directory below `dir_fd` (whose id is `parent`). Directories that vanish or
  // cannot be opened are skipped: cgroups come and go during a walk. Names, not paths, are
  // carried: openat from the parent's descriptor reaches levels a path could not (PATH_MAX).
  void below(int dir_fd, std::uint64_t parent, bool parent_trusted, int depth) {
    std::unique_ptr<DIR, DirCloser> dir(fdopendir(dir_fd));
    if (!dir) {
      close(dir_fd);
      return;
    }
    while (const dirent* e = readdir(dir.get())) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;  // files, symlinks
      struct stat st;
      if (fstatat(dirfd(dir.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (!S_ISDIR(st.st_mode)) continue;
      const auto id = static_cast<std::uint64_t>(st.st_ino);
      Node node{parent, std::string(name), parent_trusted && st.st_uid == limits.trusted_uid};
      if (found.contains(id)) continue;  // a bind mount showing a directory twice
      if (!room_for(node)) {
        ++over;  // and its subtree is not met at all
        continue;
      }
      bytes += cost(node);
      const bool trusted = node.trusted;
      found.emplace(id, std::move(node));
      if (depth < kMaxDepth) {
        const int child_fd =
            openat(dirfd(dir.get()), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child_fd >= 0) below(child_fd, id, trusted, depth + 1);
      }
    }
  }
};

CgroupResolver::CgroupResolver(std::string mount, ResolverLimits limits)
    : mount_(std::move(mount)), limits_(limits) {
  while (mount_.size() > 1 && mount_.back() == '/') mount_.pop_back();
  limits_.max_cgroups = std::max<std::size_t>(limits_.max_cgroups, 1);
}

std::optional<std::string> CgroupResolver::build_path(std::uint64_t id, bool trusted_only) const {
  std::vector<const std::string*> names;  // leaf first
  for (std::size_t level = 0;; ++level) {
    const auto it = nodes_.find(id);
    if (it == nodes_.end() || level > kMaxDepth + 1) return std::nullopt;  // a broken chain
    if (id == root_id_) break;
    if (!trusted_only || it->second.trusted) names.push_back(&it->second.name);
    id = it->second.parent;
  }
  if (names.empty()) return std::string("/");
  std::size_t size = 0;
  for (const std::string* n : names) size += n->size() + 1;
  std::string path;
  path.reserve(size);
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    path += '/';
    path += **it;
  }
  return path;
}

std::optional<std::string> CgroupResolver::path_of(std::uint64_t id) {
  if (nodes_.contains(id)) return build_path(id, false);
  const auto now = std::chrono::steady_clock::now();
  if (const auto it = missing_.find(id); it != missing_.end()) {
    if (now - it->second < kMissingFor) return std::nullopt;
    missing_.erase(it);
  }
  if (next_walk_ && now < *next_walk_) return std::nullopt;
  walk();
  const auto end = std::chrono::steady_clock::now();
  next_walk_ = end + std::max<std::chrono::steady_clock::duration>(
                         kMinWalkInterval, (end - now) * kWalkDutyDivisor);
  if (nodes_.contains(id)) return build_path(id, false);
  if (missing_.size() >= kMaxMissing) {
    std::erase_if(missing_, [&](const auto& m) { return end - m.second >= kMissingFor; });
    if (missing_.size() >= kMaxMissing) missing_.clear();
  }
  missing_.emplace(id, end);
  return std::nullopt;
}

std::optional<std::string> CgroupResolver::trusted_path_of(std::uint64_t id) const {
  // Trust holds for a prefix of the chain (a node is trusted only below trusted ancestors), so
  // the trusted levels are exactly those build_path keeps with trusted_only.
  if (!nodes_.contains(id)) return std::nullopt;
  return build_path(id, true);
}

const std::string& CgroupResolver::mount() const { return mount_; }

std::size_t CgroupResolver::cached() const { return nodes_.size(); }

bool CgroupResolver::still_there(std::uint64_t id, const Node& node) const {
  if (id != root_id_ && !nodes_.contains(node.parent)) return false;  // its parent went first
  const auto rel = build_path(id, false);
  if (!rel) return false;
  // Deeper than one call can name: kept while its parent is (a removed leaf of a chain that
  // deep lingers until the next walk replaces the cache).
  if (rel->size() > kMaxCheckedPath) return true;
  const std::string full = *rel == "/" ? mount_ : mount_ + *rel;
  struct stat st;
  return lstat(full.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         static_cast<std::uint64_t>(st.st_ino) == id;
}

void CgroupResolver::forget_missing() {
  if (nodes_.empty()) return;
  // A slice of the cache per call, resuming where the last one stopped: a stale entry is found
  // within size / check_per_call windows, and a huge tree costs a bounded number of lstat calls.
  const std::size_t n = nodes_.size();
  const std::size_t budget = std::min(n, limits_.check_per_call);
  if (check_cursor_ >= n) check_cursor_ = 0;
  auto it = std::next(nodes_.begin(), static_cast<std::ptrdiff_t>(check_cursor_));
  std::vector<std::uint64_t> gone;
  for (std::size_t i = 0; i < budget; ++i) {
    if (it == nodes_.end()) it = nodes_.begin();
    if (!still_there(it->first, it->second)) gone.push_back(it->first);
    ++it;
  }
  check_cursor_ = (check_cursor_ + budget) % n;
  for (std::uint64_t id : gone) {
    const auto node = nodes_.find(id);
    bytes_ -= cost(node->second);
    nodes_.erase(node);
  }
}

void CgroupResolver::walk() {
  ++walks_;
  const int root_fd = open(mount_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return;
  struct stat st;
  if (fstat(root_fd, &st) != 0) {
    close(root_fd);
    return;
  }
  Walk w{limits_, {}, 0, 0};
  const auto root = static_cast<std::uint64_t>(st.st_ino);
  Node root_node{root, "", st.st_uid == limits_.trusted_uid};
  w.bytes = cost(root_node);
  w.found.emplace(root, std::move(root_node));
  w.below(root_fd, root, w.found[root].trusted, 0);
  // Entries of cgroups removed since the last walk stay (late events of their processes still
  // resolve) while the limits have room after everything that exists now: stale entries never
  // keep a live cgroup out.
  for (auto& [id, node] : nodes_) {
    if (w.found.contains(id) || !w.room_for(node)) continue;
    w.bytes += cost(node);
    w.found.emplace(id, std::move(node));
  }
  nodes_ = std::move(w.found);
  bytes_ = w.bytes;
  root_id_ = root;
  over_limit_ += w.over;
}

}  // namespace stallwatch::identity
