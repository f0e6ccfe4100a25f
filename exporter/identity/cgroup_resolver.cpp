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

// Records every directory below `dir_fd` (whose relative path is `rel`, "" for the root).
// Directories that vanish or cannot be opened are skipped: cgroups come and go during a walk.
// At most `room` entries are added to `out`; directories past that are counted in *over.
void walk_dir(int dir_fd, const std::string& rel, int depth,
              std::unordered_map<std::uint64_t, std::string>& out, std::size_t room,
              std::uint64_t* over) {
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
    if (out.size() >= room && !out.contains(static_cast<std::uint64_t>(st.st_ino))) {
      ++*over;
      continue;
    }
    std::string child = rel + "/" + e->d_name;
    out.insert_or_assign(static_cast<std::uint64_t>(st.st_ino), child);
    if (depth < kMaxDepth) {
      const int child_fd =
          openat(dirfd(dir.get()), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child_fd >= 0) walk_dir(child_fd, child, depth + 1, out, room, over);
    }
  }
}

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

CgroupResolver::CgroupResolver(std::string mount, ResolverLimits limits)
    : mount_(std::move(mount)), limits_(limits) {
  while (mount_.size() > 1 && mount_.back() == '/') mount_.pop_back();
}

std::optional<std::string> CgroupResolver::path_of(std::uint64_t id) {
  if (auto it = paths_.find(id); it != paths_.end()) return it->second;
  if (missing_.contains(id)) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  if (last_walk_ && now - *last_walk_ < kMinWalkInterval) return std::nullopt;
  last_walk_ = now;
  walk();
  if (auto it = paths_.find(id); it != paths_.end()) return it->second;
  missing_.insert(id);
  return std::nullopt;
}

const std::string& CgroupResolver::mount() const { return mount_; }

std::size_t CgroupResolver::cached() const { return paths_.size(); }

void CgroupResolver::forget_missing() {
  if (paths_.empty()) return;
  // A slice of the cache per call, resuming where the last one stopped: a stale entry is found
  // within size / check_per_call windows, and a huge tree costs a bounded number of lstat calls.
  const std::size_t n = paths_.size();
  const std::size_t budget = std::min(n, limits_.check_per_call);
  if (check_cursor_ >= n) check_cursor_ = 0;
  auto it = std::next(paths_.begin(), static_cast<std::ptrdiff_t>(check_cursor_));
  std::vector<std::uint64_t> gone;
  for (std::size_t i = 0; i < budget; ++i) {
    if (it == paths_.end()) it = paths_.begin();
    const auto& [id, rel] = *it;
    const std::string full = rel == "/" ? mount_ : mount_ + rel;
    struct stat st;
    if (lstat(full.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        static_cast<std::uint64_t>(st.st_ino) != id) {
      gone.push_back(id);
    }
    ++it;
  }
  check_cursor_ = (check_cursor_ + budget) % n;
  for (std::uint64_t id : gone) paths_.erase(id);
}

void CgroupResolver::walk() {
  missing_.clear();
  const int root_fd = open(mount_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return;
  struct stat st;
  if (fstat(root_fd, &st) == 0) paths_.insert_or_assign(static_cast<std::uint64_t>(st.st_ino), "/");
  walk_dir(root_fd, "", 0, paths_, std::max<std::size_t>(limits_.max_cgroups, 1), &over_limit_);
}

}  // namespace stallwatch::identity
