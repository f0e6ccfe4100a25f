// Reads /proc/PID/maps: which CUDA libraries (runtime, driver, NCCL) a process has mapped.
// The parser is pure; the readers touch /proc only. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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
};

// CUDA libraries in a maps text, one per file (deduplicated by path).
std::vector<MappedLibrary> cuda_libraries_in_maps(std::string_view maps_text);

// Same, read from PROC/PID/maps (at most kMaxMapsBytes); empty when the process is gone or
// unreadable.
inline constexpr size_t kMaxMapsBytes = 64u << 20;
std::vector<MappedLibrary> cuda_libraries_of(const host::Procfs& fs, int pid);

// Numeric entries of PROC that are processes (tgids).
std::vector<int> list_pids(const host::Procfs& fs);

// The file a process maps, opened from the host: PROC/PID/root + path, so libraries inside
// containers resolve through the container's mount namespace.
std::string host_path(const host::Procfs& fs, int pid, const std::string& path);

}  // namespace stallwatch::trace
