// CUDA library files on disk (libcudart, libcuda, libnccl): the directories common hosts and
// images keep them in — distribution and CUDA toolkit prefixes, conda, and the nvidia/ and
// torch/ wheels under site-packages — globbed, never recursed, plus directories the caller
// names. Used by `check` to list them and by discovery to attach to them before any process
// maps them (issue #19: no first calls lost between a dlopen and its attach).
// Files are opened from the descriptor of the directory that was read, never by a path
// resolved again later (issue #49: a user swapping a file for a symlink between the two would
// have root open a file of its choice). Touches only the filesystem; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "trace/calls.h"

namespace stallwatch::trace {

// An open descriptor, closed with the object; move-only.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.release()) {}
  OwnedFd& operator=(OwnedFd&& o) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // "/proc/self/fd/N": the open file, for APIs that take a path.
  std::string proc_path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

struct LibraryFile {
  std::string path;  // the directory's canonical path + the name: one entry per file
  Api api;
  // The directory and each of its ancestors belong to root and no one else may write them: no
  // user can put a file there. Only such files are opened (`file`); the others are listed.
  bool trusted_dir = false;
  OwnedFd file;  // opened O_NOFOLLOW from the directory's descriptor; -1 unless trusted_dir
};

// The standard directories that exist here, then `extra` as given (missing ones skipped).
std::vector<std::string> library_dirs(const std::vector<std::string>& extra = {});

// Whether no user but root can change what `dir` holds: it and every ancestor of its canonical
// path are owned by root; no one else may write it, nor an ancestor unless that one is sticky
// (as /tmp: others cannot rename a root-owned directory out of it).
bool root_only_dir(const std::string& dir);

// Regular files (not symlinks) named like a CUDA library in `dirs`, one per file (device and
// inode: a directory reached twice counts once), sorted by path.
std::vector<LibraryFile> cuda_library_files(const std::vector<std::string>& dirs);

}  // namespace stallwatch::trace
