#include "trace/library_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace stallwatch::trace {

std::vector<std::string> library_dirs(const std::vector<std::string>& extra) {
  static constexpr const char* kDirs[] = {
      "/usr/lib/x86_64-linux-gnu",
      "/usr/lib/aarch64-linux-gnu",
      "/usr/lib64",
      "/usr/local/cuda*/lib64",
      "/usr/local/cuda*/lib",
      "/usr/local/cuda*/targets/*/lib",
      "/usr/local/lib",
      "/opt/conda/lib",
      "/opt/conda/envs/*/lib",
  };
  static constexpr const char* kSitePackages[] = {
      "/usr/lib/python3*/site-packages",         "/usr/lib/python3*/dist-packages",
      "/usr/local/lib/python3*/site-packages",   "/usr/local/lib/python3*/dist-packages",
      "/opt/conda/lib/python3*/site-packages",   "/opt/conda/envs/*/lib/python3*/site-packages",
      "/root/.local/lib/python3*/site-packages", "/home/*/.local/lib/python3*/site-packages",
  };
  std::vector<std::string> patterns(std::begin(kDirs), std::end(kDirs));
  for (const char* sp : kSitePackages) {
    patterns.push_back(std::string(sp) + "/nvidia/*/lib");
    patterns.push_back(std::string(sp) + "/torch/lib");
  }
  std::vector<std::string> dirs;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    if (glob(pattern.c_str(), GLOB_ONLYDIR | GLOB_NOSORT, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) dirs.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  for (const auto& d : extra) {
    struct stat st {};
    if (stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) dirs.push_back(d);
  }
  return dirs;
}

OwnedFd& OwnedFd::operator=(OwnedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

bool root_only_dir(const std::string& dir) {
  char* real = realpath(dir.c_str(), nullptr);
  if (real == nullptr) return false;
  std::string path = real;
  std::free(real);
  for (bool first = true;; first = false) {
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0) return false;
    // Others may write an ancestor only when it is sticky (as /tmp is): then they cannot rename
    // or remove the root-owned directory below it. The directory itself: nobody else writes.
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (others_write && (first || (st.st_mode & S_ISVTX) == 0)) return false;
    if (path == "/") return true;
    const auto slash = path.rfind('/');
    path = slash == 0 ? std::string("/") : path.substr(0, slash);
  }
}

std::vector<LibraryFile> cuda_library_files(const std::vector<std::string>& dirs) {
  std::map<std::string, LibraryFile> found;
  std::set<std::pair<dev_t, ino_t>> files;
  for (const std::string& dir : dirs) {
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) continue;
    char* real = realpath(dir.c_str(), nullptr);
    const std::string canonical = real != nullptr ? real : dir;
    std::free(real);
    // Trusted only when the descriptor is the directory the check looked at.
    struct stat opened {}, checked {};
    const bool trusted = root_only_dir(canonical) && ::fstat(dir_fd, &opened) == 0 &&
                         ::stat(canonical.c_str(), &checked) == 0 &&
                         opened.st_dev == checked.st_dev && opened.st_ino == checked.st_ino;
    DIR* d = fdopendir(dir_fd);
    if (d == nullptr) {
      ::close(dir_fd);
      continue;
    }
    while (const dirent* e = readdir(d)) {
      const std::optional<Api> api = api_of_library(e->d_name);
      if (!api) continue;
      LibraryFile f{canonical + "/" + e->d_name, *api, trusted, OwnedFd()};
      struct stat st {};
      if (trusted) {
        // O_NONBLOCK: a FIFO cannot block the open; O_NOFOLLOW: a symlink is refused.
        f.file = OwnedFd(::openat(dirfd(d), e->d_name,
                                  O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
        if (f.file.get() < 0 || ::fstat(f.file.get(), &st) != 0) continue;
      } else if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        continue;
      }
      if (!S_ISREG(st.st_mode) || !files.emplace(st.st_dev, st.st_ino).second) continue;
      found.emplace(f.path, std::move(f));
    }
    closedir(d);
  }
  std::vector<LibraryFile> out;
  for (auto& [path, f] : found) out.push_back(std::move(f));
  return out;
}

}  // namespace stallwatch::trace
