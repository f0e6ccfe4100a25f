#include "host/pressure.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <limits>

namespace stallwatch::host {
namespace {

constexpr std::uint64_t kNsPerUs = 1000;
// A pressure file is two lines of about 70 characters; anything far longer is not one.
constexpr std::size_t kMaxFileBytes = 4096;

// The value of the `total=` field of one line, in nanoseconds.
std::optional<std::uint64_t> total_ns(std::string_view line) {
  constexpr std::string_view kKey = "total=";
  std::size_t pos = 0;
  // The field must start a token: " total=", not some "xtotal=".
  while ((pos = line.find(kKey, pos)) != std::string_view::npos) {
    if (pos > 0 && line[pos - 1] == ' ') break;
    pos += kKey.size();
  }
  if (pos == std::string_view::npos) return std::nullopt;
  const char* first = line.data() + pos + kKey.size();
  const char* last = line.data() + line.size();
  std::uint64_t us = 0;
  auto [end, ec] = std::from_chars(first, last, us);
  if (ec != std::errc{} || end == first || (end != last && *end != ' ')) return std::nullopt;
  if (us > std::numeric_limits<std::uint64_t>::max() / kNsPerUs) return std::nullopt;
  return us * kNsPerUs;
}

// The whole file, or nullopt when it cannot be opened or read (missing, EOPNOTSUPP with psi=0).
std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) break;
    if (n < 0 || text.size() + static_cast<std::size_t>(n) > kMaxFileBytes) {
      ::close(fd);
      return std::nullopt;
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_pressure(std::string_view text) {
  std::optional<std::uint64_t> some, full;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (line.empty()) continue;
    std::optional<std::uint64_t>* slot = nullptr;
    if (line.starts_with("some ")) {
      slot = &some;
    } else if (line.starts_with("full ")) {
      slot = &full;
    } else {
      return std::nullopt;
    }
    if (slot->has_value()) return std::nullopt;
    *slot = total_ns(line);
    if (!slot->has_value()) return std::nullopt;
  }
  if (!some) return std::nullopt;
  return std::pair{*some, full.value_or(0)};
}

PressureTotals read_pressure(const std::string& cgroup_dir) {
  PressureTotals p;
  if (cgroup_dir.empty()) return p;  // never the working directory by accident
  const std::string dir = cgroup_dir.back() == '/' ? cgroup_dir : cgroup_dir + "/";
  const auto read_one = [&](const char* file, std::uint64_t& some_ns, std::uint64_t& full_ns) {
    const auto text = read_small_file(dir + file);
    if (!text) return;
    const auto totals = parse_pressure(*text);
    if (!totals) return;
    some_ns = totals->first;
    full_ns = totals->second;
    p.known = true;
  };
  read_one("cpu.pressure", p.cpu_some_ns, p.cpu_full_ns);
  read_one("memory.pressure", p.memory_some_ns, p.memory_full_ns);
  read_one("io.pressure", p.io_some_ns, p.io_full_ns);
  return p;
}

}  // namespace stallwatch::host
