#include "host/self_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace stallwatch::host {
namespace {

std::string slurp(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s, '\0');
  return s.substr(0, 65536);
}

}  // namespace

std::optional<SelfStats> read_self_stats() {
  const std::string stat = slurp("/proc/self/stat");
  const size_t paren = stat.rfind(')');  // the comm may hold spaces and parentheses
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(paren + 2));
  std::string field;
  // Fields from 3 (state) on: utime is 14, stime 15, starttime 22.
  unsigned long long utime = 0, stime = 0, starttime = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 22) starttime = std::strtoull(field.c_str(), nullptr, 10);
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  if (ticks <= 0 || page <= 0) return std::nullopt;
  SelfStats s;
  s.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(ticks);
  std::istringstream statm(slurp("/proc/self/statm"));
  unsigned long long size = 0, resident = 0;
  statm >> size >> resident;
  s.virtual_bytes = size * static_cast<unsigned long long>(page);
  s.resident_bytes = resident * static_cast<unsigned long long>(page);
  if (DIR* d = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++s.open_fds;
    }
    closedir(d);
    if (s.open_fds > 0) --s.open_fds;  // the directory stream's own descriptor
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) s.max_fds = lim.rlim_cur;
  const std::string proc_stat = slurp("/proc/stat");
  const size_t btime = proc_stat.find("\nbtime ");
  if (btime != std::string::npos) {
    const double boot = std::strtod(proc_stat.c_str() + btime + 7, nullptr);
    s.start_time_seconds = boot + static_cast<double>(starttime) / static_cast<double>(ticks);
  }
  return s;
}

}  // namespace stallwatch::host
