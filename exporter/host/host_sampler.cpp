#include "host/host_sampler.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace stallwatch::host {

HostContext HostSampler::sample() {
  HostContext h;
  h.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  {
    // cpu and cpuN lines: user nice system idle iowait irq softirq steal [guest guest_nice]
    // (guest time is already inside user). Other lines are skipped.
    std::istringstream in(Procfs::read_bounded(fs_.proc_root() + "/stat", 1 << 20));
    std::vector<std::pair<int, CpuTicks>> cpus;
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with("cpu")) continue;
      std::istringstream ls(line);
      std::string name;
      std::uint64_t v[8] = {};
      ls >> name;
      for (auto& x : v) ls >> x;
      if (!ls) continue;
      std::uint64_t total = 0;
      for (auto x : v) total += x;
      if (name == "cpu") {
        const std::uint64_t busy = total - (v[3] + v[4]);
        if (total_ > 0 && total > total_ && busy >= busy_) {
          h.cpu_busy = static_cast<double>(busy - busy_) / static_cast<double>(total - total_);
        }
        busy_ = busy;
        total_ = total;
        continue;
      }
      int n = -1;
      auto [p, ec] = std::from_chars(name.data() + 3, name.data() + name.size(), n);
      if (ec != std::errc() || p != name.data() + name.size() || n < 0) continue;
      cpus.emplace_back(n, CpuTicks{total, v[7], v[5] + v[6]});
    }
    for (const auto& [n, now] : cpus) {
      auto before = std::find_if(cpus_.begin(), cpus_.end(),
                                 [n = n](const auto& c) { return c.first == n; });
      if (before == cpus_.end()) continue;
      const CpuTicks& b = before->second;
      if (now.total <= b.total || now.steal < b.steal || now.irq < b.irq) continue;
      const double dt = static_cast<double>(now.total - b.total);
      h.cpu_stolen.push_back(CpuStolen{n, static_cast<double>(now.steal - b.steal) / dt,
                                       static_cast<double>(now.irq - b.irq) / dt});
    }
    cpus_ = std::move(cpus);
    if (!h.cpu_stolen.empty()) {
      h.cpu_steal = h.cpu_irq = 0;
      for (const auto& c : h.cpu_stolen) {
        h.cpu_steal += c.steal;
        h.cpu_irq += c.irq;
      }
      h.cpu_steal /= static_cast<double>(h.cpu_stolen.size());
      h.cpu_irq /= static_cast<double>(h.cpu_stolen.size());
    }
  }
  {
    std::istringstream in(Procfs::read_bounded(fs_.proc_root() + "/meminfo", 1 << 16));
    std::string key;
    std::uint64_t value = 0, mem_total = 0, mem_avail = 0, swap_total = 0, swap_free = 0;
    std::string unit;
    bool have_avail = false, have_swap = false;
    while (in >> key >> value) {
      std::getline(in, unit);
      if (key == "MemTotal:") mem_total = value;
      if (key == "MemAvailable:") {
        mem_avail = value;
        have_avail = true;
      }
      if (key == "SwapTotal:") swap_total = value;
      if (key == "SwapFree:") {
        swap_free = value;
        have_swap = true;
      }
    }
    if (mem_total > 0 && have_avail) {
      h.mem_used = 1.0 - static_cast<double>(mem_avail) / static_cast<double>(mem_total);
    }
    if (have_swap) h.swap_used_bytes = static_cast<std::int64_t>((swap_total - swap_free) * 1024);
  }
  {
    std::istringstream in(Procfs::read_bounded(fs_.proc_root() + "/loadavg", 256));
    double load = 0;
    if (in >> load) h.load1 = load;
  }
  return h;
}

}  // namespace stallwatch::host
