#include "host/host_sampler.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace stallwatch::host {

HostContext HostSampler::sample() {
  HostContext h;
  h.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  {
    std::istringstream in(Procfs::read_bounded(fs_.proc_root() + "/stat", 1 << 20));
    std::string cpu;
    std::uint64_t v[8] = {};
    if (in >> cpu && cpu == "cpu") {
      for (auto& x : v) in >> x;
      // user nice system idle iowait irq softirq steal
      const std::uint64_t idle = v[3] + v[4];
      std::uint64_t total = 0;
      for (auto x : v) total += x;
      const std::uint64_t busy = total - idle;
      if (total_ > 0 && total > total_) {
        h.cpu_busy = static_cast<double>(busy - busy_) / static_cast<double>(total - total_);
      }
      busy_ = busy;
      total_ = total;
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
