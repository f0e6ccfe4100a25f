#include "common/file_trust.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/strings.h"

namespace stallwatch {
namespace {

bool owner_ok(const struct stat& st, uid_t euid) { return st.st_uid == 0 || st.st_uid == euid; }

}  // namespace

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

Result<Ok> check_file_owner(const struct stat& st, const std::string& source, uid_t euid,
                            std::string_view holds) {
  if (!S_ISREG(st.st_mode)) return make_error(source + " is not a regular file");
  if (!owner_ok(st, euid)) {
    return make_error(source + " is owned by uid " + std::to_string(st.st_uid) +
                      ", not by root or this user (uid " + std::to_string(euid) + "); " +
                      std::string(holds) + ": chown it to root (or the user stallwatch runs as)");
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return make_error(source + " is writable by group or others (mode " + octal_mode(st.st_mode) +
                      "); " + std::string(holds) + ": chmod go-w it");
  }
  return Ok{};
}

Result<Ok> check_parent_dirs(const std::string& path, const std::string& source, uid_t euid) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) {
    return make_error(source + ": " + std::strerror(errno), errno);
  }
  std::string dir = real;
  std::free(real);
  while (dir != "/") {
    const auto slash = dir.rfind('/');
    dir = slash == 0 ? std::string("/") : dir.substr(0, slash);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return make_error(source + ": " + std::strerror(errno), errno);
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (!owner_ok(st, euid) || (others_write && (st.st_mode & S_ISVTX) == 0)) {
      return make_error(source + " lies in " + escape_name(dir) +
                        ", which users other than root can change (uid " +
                        std::to_string(st.st_uid) + ", mode " + octal_mode(st.st_mode) +
                        "): anyone there could put another file in its place; move it to a "
                        "directory only root can write (such as /etc/stallwatch)");
    }
  }
  return Ok{};
}

Result<int> open_trusted_file(const std::string& path, const std::string& source,
                              std::string_view holds) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    return make_error(source + ": " + std::strerror(e), e);
  }
  struct stat st {};
  Result<Ok> ok = Ok{};
  if (::fstat(fd, &st) != 0) {
    ok = make_error(source + ": " + std::strerror(errno), errno);
  } else if (ok = check_file_owner(st, source, ::geteuid(), holds); ok) {
    // The directories of the file that was opened (/proc/self/fd names it), not of a path a
    // user could have pointed elsewhere since.
    ok = check_parent_dirs("/proc/self/fd/" + std::to_string(fd), source, ::geteuid());
  }
  if (!ok) {
    ::close(fd);
    return ok.error();
  }
  return fd;
}

}  // namespace stallwatch
