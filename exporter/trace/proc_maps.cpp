#include "trace/proc_maps.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace stallwatch::trace {
namespace {

template <typename T>
bool parse_hex(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string_view next_field(std::string_view& rest) {
  size_t b = rest.find_first_not_of(' ');
  if (b == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(b);
  size_t e = rest.find(' ');
  std::string_view f = rest.substr(0, e);
  rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e);
  return f;
}

}  // namespace

bool parse_maps_line(std::string_view line, MapsEntry& out) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  std::string_view rest = line;
  std::string_view range = next_field(rest), perms = next_field(rest), off = next_field(rest),
                   dev = next_field(rest), ino = next_field(rest);
  size_t dash = range.find('-'), colon = dev.find(':');
  if (dash == std::string_view::npos || colon == std::string_view::npos || perms.size() != 4)
    return false;
  if (!parse_hex(range.substr(0, dash), out.start) || !parse_hex(range.substr(dash + 1), out.end) ||
      !parse_hex(off, out.offset) || !parse_hex(dev.substr(0, colon), out.dev_major) ||
      !parse_hex(dev.substr(colon + 1), out.dev_minor))
    return false;
  auto [p, ec] = std::from_chars(ino.data(), ino.data() + ino.size(), out.inode);
  if (ec != std::errc() || p != ino.data() + ino.size()) return false;
  out.perms = std::string(perms);
  size_t b = rest.find_first_not_of(' ');
  out.path = b == std::string_view::npos ? std::string() : std::string(rest.substr(b));
  return true;
}

std::vector<MappedLibrary> cuda_libraries_in_maps(std::string_view maps_text) {
  std::vector<MappedLibrary> libs;
  while (!maps_text.empty()) {
    size_t nl = maps_text.find('\n');
    std::string_view line = maps_text.substr(0, nl);
    maps_text = nl == std::string_view::npos ? std::string_view{} : maps_text.substr(nl + 1);
    MapsEntry e;
    if (!parse_maps_line(line, e) || e.inode == 0 || e.path.empty() || e.path[0] != '/') continue;
    if (e.deleted()) continue;  // replaced on disk; the new file is attached
    auto api = api_of_library(e.path);
    if (!api) continue;
    bool seen = false;
    for (const auto& l : libs) seen = seen || l.path == e.path;
    if (!seen) libs.push_back({e.path, *api, e.inode, e.dev_major, e.dev_minor, e.start, e.end});
  }
  return libs;
}

std::vector<MappedLibrary> cuda_libraries_of(const host::Procfs& fs, int pid) {
  return cuda_libraries_in_maps(host::Procfs::read_bounded(fs.pid_path(pid, "maps"), kMaxMapsBytes));
}

std::vector<int> list_pids(const host::Procfs& fs) {
  std::vector<int> pids;
  DIR* d = opendir(fs.proc_root().c_str());
  if (!d) return pids;
  while (dirent* e = readdir(d)) {
    int pid = 0;
    std::string_view name = e->d_name;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec == std::errc() && p == name.data() + name.size() && pid > 0) pids.push_back(pid);
  }
  closedir(d);
  return pids;
}

std::string host_path(const host::Procfs& fs, int pid, const std::string& path) {
  return fs.pid_path(pid, "root") + path;
}

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

constexpr int kOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

// openat2(2) through syscall(2): glibc 2.36 has no wrapper.
int open_in_root(int root, const std::string& path) {
  open_how how{};
  how.flags = kOpenFlags;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how));
}

Error refuse(const MapsEntry& m, const std::string& why, int err) {
  return make_error(std::string(m.file_path()) + ": " + why, err);
}

}  // namespace

Result<ScopedFd> open_mapped_file(const host::Procfs& fs, int pid, const MapsEntry& m) {
  char range[40];
  std::snprintf(range, sizeof range, "%" PRIx64 "-%" PRIx64, m.start, m.end);
  ScopedFd fd(::open(fs.pid_path(pid, std::string("map_files/") + range).c_str(), kOpenFlags));
  bool via_map_files = fd.get() >= 0;
  if (!via_map_files) {
    ScopedFd root(::open(fs.pid_path(pid, "root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (root.get() < 0) {
      const int err = errno;
      return refuse(m, std::string("cannot open the root of pid ") + std::to_string(pid) + ": " +
                           std::strerror(err), err);
    }
    fd = ScopedFd(open_in_root(root.get(), std::string(m.file_path())));
    if (fd.get() < 0) {
      const int err = errno;
      if (err == ENOSYS) {
        return refuse(m, "not opened: neither /proc/PID/map_files (needs CAP_SYS_ADMIN) nor "
                         "openat2 (Linux 5.6+) is available to open it safely", err);
      }
      return refuse(m, std::string("cannot open it in the root of pid ") + std::to_string(pid) +
                           ": " + std::strerror(err), err);
    }
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    return refuse(m, std::string("cannot stat: ") + std::strerror(err), err);
  }
  if (!S_ISREG(st.st_mode)) return refuse(m, "not a regular file", EINVAL);
  const bool same_inode = static_cast<std::uint64_t>(st.st_ino) == m.inode;
  bool same_dev = major(st.st_dev) == m.dev_major && minor(st.st_dev) == m.dev_minor;
  if (!same_dev && same_inode && !via_map_files) {
    // overlayfs reports its own device for a file whose mapping shows the layer's.
    struct statfs sf {};
    same_dev = ::fstatfs(fd.get(), &sf) == 0 && sf.f_type == OVERLAYFS_SUPER_MAGIC;
  }
  if (!same_inode || !same_dev) {
    return refuse(m, "is not the file pid " + std::to_string(pid) + " maps (device " +
                         std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) +
                         " inode " + std::to_string(st.st_ino) + ", the mapping's " +
                         std::to_string(m.dev_major) + ":" + std::to_string(m.dev_minor) +
                         " inode " + std::to_string(m.inode) + "): a symlink or a file swapped "
                         "since; not read", EXDEV);
  }
  return fd;
}

Result<ScopedFd> open_mapped_file(const host::Procfs& fs, int pid, const MappedLibrary& lib) {
  MapsEntry m;
  m.start = lib.start;
  m.end = lib.end;
  m.inode = lib.inode;
  m.dev_major = lib.dev_major;
  m.dev_minor = lib.dev_minor;
  m.path = lib.path;
  return open_mapped_file(fs, pid, m);
}

}  // namespace stallwatch::trace
