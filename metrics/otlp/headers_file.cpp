#include "metrics/otlp/headers_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/file_trust.h"
#include "common/strings.h"

namespace stallwatch::otlp {
namespace {

// RFC 9110 token characters: what a header name may hold.
bool token_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u <= 0x20 || u >= 0x7f) return false;
  return std::strchr("\"(),/:;<=>?@[\\]{}", c) == nullptr;
}

}  // namespace

Result<Headers> parse_headers_file(std::string_view text, const std::string& source) {
  Headers out;
  size_t number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = source + ": line " + std::to_string(number);
    const size_t eq = line.find('=');
    const std::string_view name = eq == std::string_view::npos ? line : trim(line.substr(0, eq));
    if (eq == std::string_view::npos || name.empty()) {
      return make_error(where +
                        " is not name=value (one header a line, e.g. "
                        "dd-api-key=<key>; # starts a comment)");
    }
    for (const char c : name) {
      if (!token_char(c)) {
        return make_error(where +
                          ": the header name holds a character HTTP does not allow in "
                          "one (letters, digits and !#$%&'*+-.^_`|~ only)");
      }
    }
    const std::string_view value = trim(line.substr(eq + 1));
    for (const char c : value) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) {
        return make_error(where +
                          ": the value holds a control character; write it on one line "
                          "as it should be sent");
      }
    }
    out.emplace_back(std::string(name), std::string(value));
  }
  return out;
}

Result<Ok> check_headers_file_owner(const struct stat& st, const std::string& source, uid_t euid) {
  if (!S_ISREG(st.st_mode)) {
    return make_error(source + " is not a regular file; point it at a file of name=value lines");
  }
  if (st.st_uid != 0 && st.st_uid != euid) {
    return make_error(source + " is owned by uid " + std::to_string(st.st_uid) +
                      ", not by root or this user (uid " + std::to_string(euid) +
                      "); it holds credentials: chown it to root (or the user stallwatch runs as)");
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return make_error(source + " is writable by group or others (mode " + octal_mode(st.st_mode) +
                      "); it holds credentials: chmod 600 it");
  }
  return Ok{};
}

Result<Headers> read_headers_file(const std::string& path, const std::string& flag) {
  const std::string source = flag + " " + escape_name(path);
  // O_NONBLOCK: a FIFO planted at the path must not hang the start; checked to be a regular
  // file on the descriptor we read, so nothing can swap the file between check and read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    return make_error(
        source + ": " + std::strerror(e) + "; write the headers there, one name=value a line", e);
  }
  struct stat st {};
  std::string text;
  Result<Ok> ok = Ok{};
  if (::fstat(fd, &st) != 0) {
    ok = make_error(source + ": " + std::strerror(errno), errno);
  } else if (ok = check_headers_file_owner(st, source, ::geteuid());
             ok && st.st_size > static_cast<off_t>(kMaxHeadersFile)) {
    ok = make_error(source + " is larger than 64 KiB; it should hold a few name=value lines");
  } else if (ok) {
    ok = check_parent_dirs("/proc/self/fd/" + std::to_string(fd), source, ::geteuid());
  }
  if (ok) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ok = make_error(source + ": " + std::strerror(errno), errno);
        break;
      }
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > kMaxHeadersFile) {
        ok = make_error(source + " is larger than 64 KiB; it should hold a few name=value lines");
        break;
      }
    }
  }
  ::close(fd);
  if (!ok) return ok.error();
  return parse_headers_file(text, source);
}

}  // namespace stallwatch::otlp
