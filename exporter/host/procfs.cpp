#include "host/procfs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <sstream>

#include "common/strings.h"

namespace stallwatch::host {
namespace {

constexpr size_t kSmallFile = 4096;  // stat, uevent: a few hundred bytes in practice

template <typename T>
bool parse_number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Procfs::Procfs(std::string proc_root, std::string sys_root)
    : proc_(std::move(proc_root)), sys_(std::move(sys_root)) {}

std::string Procfs::pid_path(int pid, std::string_view rel) const {
  std::string p = proc_ + "/" + std::to_string(pid);
  if (!rel.empty()) {
    p += "/";
    p += rel;
  }
  return p;
}

bool Procfs::pid_exists(int pid) const {
  struct stat st {};
  return ::stat(pid_path(pid).c_str(), &st) == 0;
}

// Grows the buffer as the file does (4 KiB, doubling): a bound of megabytes (maps, /proc/stat)
// costs what the file holds, not a zeroed buffer of the bound at every read (issue #19: that
// was most of the daemon's CPU at 16 processes).
std::string Procfs::read_bounded(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  size_t have = 0, chunk = 4096;
  while (have < max_bytes) {
    if (out.size() == have) {
      out.resize(std::min(max_bytes, have + chunk));
      chunk = std::min<size_t>(chunk * 2, 1 << 20);
    }
    const ssize_t n = ::read(fd, out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(have);
  return out;
}

// The kernel ends the name with one '\n'; a name may hold more of them (prctl), escaped here.
std::string Procfs::comm(int pid) const {
  std::string s = read_bounded(pid_path(pid, "comm"), 64);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return escape_name(s);
}

std::int64_t Procfs::boot_unix_s() const {
  std::call_once(boot_once_, [this] {
    std::istringstream st(read_bounded(proc_ + "/stat", 1 << 20));
    std::string key;
    std::int64_t value = 0;
    while (st >> key) {
      if (key == "btime" && st >> value) {
        boot_s_ = value;
        return;
      }
    }
  });
  return boot_s_;
}

std::vector<int> Procfs::cpus_allowed(int pid) const {
  std::vector<int> out;
  const std::string status = read_bounded(pid_path(pid, "status"), 16 << 10);
  constexpr std::string_view kKey = "\nCpus_allowed_list:";
  const size_t at = status.find(kKey);
  if (at == std::string::npos) return out;
  const size_t end = status.find('\n', at + kKey.size());
  std::string_view list = trim(std::string_view(status).substr(
      at + kKey.size(), end == std::string::npos ? std::string::npos : end - at - kKey.size()));
  constexpr int kMaxCpu = 1 << 16;  // a bound on what a hostile or broken file can make us store
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view range = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    int lo = -1, hi = -1;
    const size_t dash = range.find('-');
    auto parse = [](std::string_view s, int& v) {
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return ec == std::errc() && p == s.data() + s.size();
    };
    if (!parse(range.substr(0, dash), lo)) return {};
    hi = lo;
    if (dash != std::string_view::npos && !parse(range.substr(dash + 1), hi)) return {};
    if (lo < 0 || hi < lo || hi >= kMaxCpu) return {};
    for (int c = lo; c <= hi; c++) out.push_back(c);
  }
  return out;
}

// Field 22 of stat (starttime, clock ticks after boot), counted after the comm's last ')':
// a comm may hold spaces and parentheses.
std::optional<std::uint64_t> Procfs::start_ticks(int pid) const {
  const std::string text = read_bounded(pid_path(pid, "stat"), kSmallFile);
  const size_t close = text.rfind(')');  // the name may hold ')' and spaces
  if (close == std::string::npos || close + 2 > text.size()) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; i++) {
    if (i != 22) continue;
    std::int64_t start = 0;
    if (!parse_number(f, start) || start < 0) return std::nullopt;
    return static_cast<std::uint64_t>(start);
  }
  return std::nullopt;
}

namespace {
std::int64_t ns_per_tick() {
  const long ticks = sysconf(_SC_CLK_TCK);
  return 1000000000LL / (ticks > 0 ? ticks : 100);
}
}  // namespace

std::int64_t Procfs::start_unix_ns(int pid) const {
  const std::int64_t boot = boot_unix_s();
  const auto start = start_ticks(pid);
  if (!start || boot <= 0 || *start > static_cast<std::uint64_t>(INT64_MAX / ns_per_tick())) {
    return 0;
  }
  return boot * 1000000000LL + static_cast<std::int64_t>(*start) * ns_per_tick();
}

std::uint32_t Procfs::start_tag(int pid) const {
  const auto start = start_ticks(pid);
  if (!start) return 0;
  return static_cast<std::uint32_t>(*start * static_cast<std::uint64_t>(ns_per_tick()) /
                                    kStartTagNs);
}

std::string Procfs::block_device(std::uint32_t major, std::uint32_t minor) const {
  const std::string numbers = std::to_string(major) + ":" + std::to_string(minor);
  std::istringstream uevent(read_bounded(sys_ + "/dev/block/" + numbers + "/uevent", kSmallFile));
  std::string name = numbers;
  for (std::string line; std::getline(uevent, line);) {
    if (line.starts_with("DEVNAME=") && line.size() > 8) name = line.substr(8);
  }
  return name;
}

}  // namespace stallwatch::host
