#include "host/cpu_limit.h"

#include <charconv>
#include <limits>
#include <vector>

#include "host/procfs.h"

namespace stallwatch::host {
namespace {

// cpu.stat has a dozen short lines; cpu.max and the v1 quota files one number each.
constexpr std::size_t kMaxFileBytes = 4096;
// Deeper than any real hierarchy (kubepods: 4 or 5 levels): the walk stops there.
constexpr int kMaxDepth = 32;

std::optional<std::uint64_t> number(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || s.empty() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    out.push_back(text.substr(0, eol));
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
  }
  return out;
}

bool plain_path(std::string_view p) {
  if (p.empty() || p[0] != '/') return false;
  if (p == "/") return true;
  std::string_view rest = p.substr(1);
  while (true) {
    const std::size_t slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    rest = rest.substr(slash + 1);
  }
}

std::string parent_of(const std::string& p) {
  const std::size_t slash = p.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
}

// The level's quota, or nullopt when its files cannot be read.
std::optional<CpuQuota> read_quota(const std::string& dir, bool v1) {
  if (!v1) return parse_cpu_max(Procfs::read_bounded(dir + "/cpu.max", kMaxFileBytes));
  const std::string q = Procfs::read_bounded(dir + "/cpu.cfs_quota_us", kMaxFileBytes);
  const auto period = number(Procfs::read_bounded(dir + "/cpu.cfs_period_us", kMaxFileBytes));
  if (q.empty() || !period) return std::nullopt;
  CpuQuota out;
  out.period_us = *period;
  if (q.starts_with("-")) return out;  // -1: no limit
  const auto quota = number(q);
  if (!quota) return std::nullopt;
  out.quota_us = *quota;
  return out;
}

}  // namespace

std::optional<CpuStat> parse_cpu_stat(std::string_view text) {
  CpuStat out;
  bool periods = false, throttled = false;
  for (std::string_view line : lines_of(text)) {
    if (line.empty()) continue;
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos) return std::nullopt;
    const std::string_view key = line.substr(0, sp);
    const auto v = number(line.substr(sp + 1));
    if (!v) return std::nullopt;
    if (key == "nr_periods") {
      out.periods = *v;
      periods = true;
    } else if (key == "nr_throttled") {
      out.throttled_periods = *v;
      throttled = true;
    } else if (key == "throttled_time") {  // v1, nanoseconds
      out.throttled_ns = *v;
    } else if (key == "throttled_usec") {  // v2
      if (*v > std::numeric_limits<std::uint64_t>::max() / 1000) return std::nullopt;
      out.throttled_ns = *v * 1000;
    }
  }
  if (!periods || !throttled) return std::nullopt;
  return out;
}

std::optional<CpuQuota> parse_cpu_max(std::string_view text) {
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  const std::size_t sp = text.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  const auto period = number(text.substr(sp + 1));
  if (!period || *period == 0) return std::nullopt;
  CpuQuota out;
  out.period_us = *period;
  const std::string_view quota = text.substr(0, sp);
  if (quota == "max") return out;
  const auto q = number(quota);
  if (!q) return std::nullopt;
  out.quota_us = *q;
  return out;
}

std::optional<std::string> cpu_cgroup_path(std::string_view proc_cgroup, bool v1) {
  for (std::string_view line : lines_of(proc_cgroup)) {
    // hierarchy-id:controller-list:path
    const std::size_t a = line.find(':');
    if (a == std::string_view::npos) continue;
    const std::size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a);
    std::string_view controllers = line.substr(a + 1, b - a - 1);
    const std::string_view path = line.substr(b + 1);
    bool match = false;
    if (v1) {
      while (!controllers.empty() && !match) {
        const std::size_t comma = controllers.find(',');
        match = controllers.substr(0, comma) == "cpu";
        controllers = comma == std::string_view::npos ? std::string_view{}
                                                      : controllers.substr(comma + 1);
      }
    } else {
      match = id == "0" && controllers.empty();
    }
    if (!match) continue;
    if (!plain_path(path)) return std::nullopt;
    return std::string(path);
  }
  return std::nullopt;
}

std::optional<std::string> find_cgroup1_cpu_mount(std::string_view mountinfo_text) {
  for (std::string_view line : lines_of(mountinfo_text)) {
    // ... mount-point ... - fstype source super-options
    const std::size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    std::vector<std::string_view> head, tail;
    for (auto* v : {&head, &tail}) {
      std::string_view rest = v == &head ? line.substr(0, dash) : line.substr(dash + 3);
      while (!rest.empty()) {
        const std::size_t sp = rest.find(' ');
        v->push_back(rest.substr(0, sp));
        rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
      }
    }
    if (head.size() < 5 || tail.size() < 3 || tail[0] != "cgroup") continue;
    std::string_view opts = tail[2];
    while (!opts.empty()) {
      const std::size_t comma = opts.find(',');
      if (opts.substr(0, comma) == "cpu") {
        // mountinfo escapes space, tab, newline and backslash as octal: a mount point that
        // needs them is not one we read.
        if (head[4].find('\\') != std::string_view::npos) return std::nullopt;
        return std::string(head[4]);
      }
      opts = comma == std::string_view::npos ? std::string_view{} : opts.substr(comma + 1);
    }
  }
  return std::nullopt;
}

CpuLimitTotals read_cpu_limit(const std::string& mount, const std::string& path, bool v1) {
  CpuLimitTotals out;
  out.v1 = v1;
  if (!plain_path(path)) return out;
  std::string level = path;
  for (int depth = 0; depth < kMaxDepth; depth++) {
    const std::string dir = mount + (level == "/" ? "" : level);
    const auto quota = read_quota(dir, v1);
    if (depth == 0) {
      if (!quota) return out;  // no cpu controller here (v2 without it enabled), or gone
      out.known = true;
    }
    if (quota && quota->quota_us > 0 && quota->period_us > 0) {
      const auto stat = parse_cpu_stat(Procfs::read_bounded(dir + "/cpu.stat", kMaxFileBytes));
      if (stat) {
        out.periods += stat->periods;
        out.throttled_periods += stat->throttled_periods;
        out.throttled_ns += stat->throttled_ns;
      }
      const double cores =
          static_cast<double>(quota->quota_us) / static_cast<double>(quota->period_us);
      if (!out.limited() || cores < out.limit_cores) {
        out.limit_cores = cores;
        out.quota_us = quota->quota_us;
        out.period_us = quota->period_us;
        out.limited_at = level;
        out.limited_dir = dir;
      }
    }
    if (level == "/") break;
    level = parent_of(level);
  }
  return out;
}

}  // namespace stallwatch::host
