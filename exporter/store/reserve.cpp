#include "store/reserve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/size.h"

namespace stallwatch::store {
namespace {

constexpr std::uint64_t kMinBytes = 1ull << 20;
constexpr std::uint64_t kMaxBytes = 16ull << 20;

Error not_regular(const std::string& path) {
  return make_error(path +
                        " exists and is not a regular file; left alone, so the store has no "
                        "reserve (remove it, or pass --db with another path)",
                    EEXIST);
}

std::string reason(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

}  // namespace

std::string Reserve::path_for(const std::string& db_path) {
  if (db_path.empty() || db_path == ":memory:" || db_path.rfind("file:", 0) == 0) return "";
  return db_path + ".reserve";
}

std::uint64_t Reserve::size_for(std::uint64_t max_bytes) {
  return std::clamp<std::uint64_t>(max_bytes / 100, kMinBytes, kMaxBytes);
}

Result<Ok> Reserve::create() {
  if (!enabled()) return refused_ ? Result<Ok>(not_regular(path_)) : Result<Ok>(Ok{});
  struct stat st {};
  // A second hard link is another file's name: extending or truncating it would change that.
  if (::lstat(path_.c_str(), &st) == 0 && (!S_ISREG(st.st_mode) || st.st_nlink > 1)) {
    refused_ = true;
    held_ = false;
    return not_regular(path_);
  }
  // O_NOFOLLOW and O_NONBLOCK: a symlink or FIFO put there since the lstat is not followed or
  // waited on; fstat below refuses it.
  const int fd =
      ::open(path_.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0640);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      refused_ = true;
      return not_regular(path_);
    }
    return make_error("cannot create " + path_ + ": " + reason(err), err);
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
    ::close(fd);
    refused_ = true;
    held_ = false;
    return not_regular(path_);
  }
  // Allocated, not sparse: the blocks are the file system's to give back later.
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
  if (err == 0 && static_cast<std::uint64_t>(st.st_size) > bytes_ &&
      ::ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
    err = errno;
  }
  ::close(fd);
  if (err != 0) {
    ::unlink(path_.c_str());  // a partial reserve would only hide how much is left
    held_ = false;
    return make_error(
        "cannot allocate " + format_size(bytes_) + " for " + path_ + ": " + reason(err), err);
  }
  held_ = true;
  return Ok{};
}

bool Reserve::release() {
  if (!held_) return false;
  held_ = false;
  return ::unlink(path_.c_str()) == 0;
}

std::optional<std::uint64_t> free_bytes(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return std::nullopt;
  const std::uint64_t blocks = ::geteuid() == 0 ? vfs.f_bfree : vfs.f_bavail;
  return blocks * static_cast<std::uint64_t>(vfs.f_frsize);
}

}  // namespace stallwatch::store
