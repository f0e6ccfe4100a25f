// Reads /proc/PID/maps: which CUDA libraries (runtime, driver, NCCL) a process has mapped, and
// opens the file behind a mapping without following the process's symlinks (open_mapped_file).
// The parser is pure; the readers touch /proc only. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

#include "host/procfs.h"

#include "trace/calls.h"

namespace stallwatch::trace {

// One line of /proc/PID/maps: "start-end perms offset major:minor inode   path".
struct MapsEntry {
  static constexpr std::string_view kDeletedSuffix = " (deleted)";

  std::uint64_t start = 0, end = 0, offset = 0, inode = 0;
  std::string perms;  // "r-xp"
  std::uint32_t dev_major = 0, dev_minor = 0;
  std::string path;  // may contain spaces; empty for anonymous mappings; " (deleted)" kept

  // The file was unlinked or replaced on disk after it was mapped.
  bool deleted() const { return path.ends_with(kDeletedSuffix); }
  // The path without the " (deleted)" suffix: the name the file had when it was mapped.
  std::string_view file_path() const {
    std::string_view p = path;
    if (deleted()) p.remove_suffix(kDeletedSuffix.size());
    return p;
  }
};

// Parses one line of /proc/PID/maps (a trailing newline is ignored); false for a malformed line.
bool parse_maps_line(std::string_view line, MapsEntry& out);

struct MappedLibrary {
  std::string path;  // as the process sees it (its mount namespace)
  Api api;
  std::uint64_t inode;
  std::uint32_t dev_major, dev_minor;
  std::uint64_t start = 0, end = 0;  // its first mapping (open_mapped_file)
};

// CUDA libraries in a maps text, one per file (deduplicated by path).
std::vector<MappedLibrary> cuda_libraries_in_maps(std::string_view maps_text);

// Same, read from PROC/PID/maps (at most kMaxMapsBytes); empty when the process is gone or
// unreadable.
inline constexpr size_t kMaxMapsBytes = 64u << 20;
std::vector<MappedLibrary> cuda_libraries_of(const host::Procfs& fs, int pid);

// Numeric entries of PROC that are processes (tgids).
std::vector<int> list_pids(const host::Procfs& fs);

// PROC/PID/root + path: the name of a file in the process's mount namespace, for logs and for
// files the process does not map. Opening it follows the process's symlinks against the host's
// root (a container's /lib/libcudart.so.12 -> /etc/shadow reaches the host's file): files a
// process maps are opened with open_mapped_file instead.
std::string host_path(const host::Procfs& fs, int pid, const std::string& path);

// A file descriptor, closed on destruction; move-only.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();
  int get() const { return fd_; }
  // "/proc/self/fd/N": a path to this very file (attach APIs want a path).
  std::string proc_path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

// The file behind one mapping of process `pid`, opened read-only and non-blocking without
// following any symlink of the process's file system out of it (issue 35, row 4):
//  1. PROC/PID/map_files/START-END, the kernel's own reference to the mapped file (also for a
//     deleted one; needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), else
//  2. openat2(PROC/PID/root, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): symlinks resolve
//     inside the process's root, never the host's, and no /proc magic link is crossed.
// Either way the file must be regular and have the device and inode the maps line names
// (an overlayfs file, whose stat shows the overlay's device, must match the inode); anything
// else is refused: a path swapped or planted since the maps were read is not read.
// Errors name the path as the process sees it; ENOENT/ESRCH when the process or file is gone,
// EXDEV for a file that is not the mapped one.
Result<ScopedFd> open_mapped_file(const host::Procfs& fs, int pid, const MapsEntry& mapping);
Result<ScopedFd> open_mapped_file(const host::Procfs& fs, int pid, const MappedLibrary& lib);

}  // namespace stallwatch::trace
