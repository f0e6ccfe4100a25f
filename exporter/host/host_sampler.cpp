#include "host/host_sampler.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

#include "common/strings.h"

namespace stallwatch::host {

std::map<int, std::map<std::string, std::uint64_t>> parse_softirqs(const std::string& text) {
  std::map<int, std::map<std::string, std::uint64_t>> out;
  std::istringstream in(text);
  std::string header;
  if (!std::getline(in, header)) return out;
  std::vector<int> cpus;  // the header's CPUn columns, in order
  {
    std::istringstream hs(header);
    for (std::string col; hs >> col && cpus.size() < 8192;) {
      int n = -1;
      if (!col.starts_with("CPU")) return {};
      auto [p, ec] = std::from_chars(col.data() + 3, col.data() + col.size(), n);
      if (ec != std::errc() || p != col.data() + col.size() || n < 0) return {};
      cpus.push_back(n);
    }
  }
  size_t vectors = 0;
  for (std::string line; std::getline(in, line) && vectors < 64; ++vectors) {
    std::istringstream ls(line);
    std::string name;
    if (!(ls >> name) || name.size() < 2 || name.back() != ':') continue;
    name.pop_back();
    name = escape_line(name.substr(0, 32));
    for (int cpu : cpus) {
      std::uint64_t n = 0;
      if (!(ls >> n)) break;
      out[cpu][name] = n;
    }
  }
  return out;
}

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
    auto softirqs = parse_softirqs(Procfs::read_bounded(fs_.proc_root() + "/softirqs", 1 << 20));
    for (auto& c : h.cpu_stolen) {
      const auto now = softirqs.find(c.cpu);
      const auto before = softirqs_.find(c.cpu);
      if (now == softirqs.end() || before == softirqs_.end()) continue;
      std::uint64_t all = 0, top = 0;
      for (const auto& [name, n] : now->second) {
        const auto b = before->second.find(name);
        if (b == before->second.end() || n < b->second) continue;
        const std::uint64_t d = n - b->second;
        all += d;
        if (d > top) {
          top = d;
          c.top_softirq = name;
        }
      }
      if (all > 0) c.top_softirq_share = static_cast<double>(top) / static_cast<double>(all);
    }
    softirqs_ = std::move(softirqs);
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
