#include "host/gpu_monitor.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/strings.h"

namespace stallwatch::host {
namespace {

std::int64_t mono_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

std::int64_t wall_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

constexpr std::size_t kRecordBytes = 8192;  // a kmsg record is at most ~1 KiB of text

}  // namespace

struct GpuMonitor::Shared {
  std::mutex mu;
  GpuSnapshot state;  // without process_gpus
  std::int64_t pass_started_ns = 0;  // of the sampler's pass in progress; 0: none in progress
  std::atomic<bool> stop{false};
  std::unique_ptr<Nvml> nvml;
  int kmsg_fd = -1;
  std::thread sampler;
  std::thread follower;
  bool sampler_done = false;  // under mu: the sampler left its loop

  ~Shared() {
    if (kmsg_fd >= 0) ::close(kmsg_fd);
  }
};

GpuMonitor::GpuMonitor(GpuMonitorOptions options, const Procfs& fs)
    : options_(std::move(options)), fs_(fs), shared_(std::make_shared<Shared>()) {}

GpuMonitor::~GpuMonitor() {
  shared_->stop = true;
  if (shared_->follower.joinable()) shared_->follower.join();
  if (shared_->sampler.joinable()) {
    // A sampler inside an NVML call that never returns keeps `shared_` alive by its own copy.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    bool done = false;
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard<std::mutex> l(shared_->mu);
        done = shared_->sampler_done;
      }
      if (done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (done) {
      shared_->sampler.join();
    } else {
      SW_LOG(kWarn) << "NVML: the GPU sampler is stuck in a driver call; leaving it behind";
      shared_->sampler.detach();
    }
  }
}

namespace {

// A GPU NVML calls lost (NVML_ERROR_GPU_IS_LOST: off the bus, Xid 79) answers nothing more: its
// identity stays the last good one, so its info series, the job's mapping to it and the Xid's
// GPU remain; its clocks, power and temperature become unknown. One line when it goes.
void keep_identity(GpuTotals& t, GpuReading& r) {
  const GpuReading& was = t.last;
  if (r.uuid.empty()) r.uuid = was.uuid;
  if (r.name.empty()) r.name = was.name;
  if (r.bus_id.empty()) r.bus_id = was.bus_id;
  if (!r.minor_known) {
    r.minor = was.minor;
    r.minor_known = was.minor_known;
  }
  if (!r.pids_known) {
    r.pids = was.pids;  // its processes are still there, hung in their calls
    r.pids_known = was.pids_known;
  }
  r.clocks_known = r.reasons_known = r.power_known = false;
  r.temperature_c = 0;
  if (t.lost) return;
  t.lost = true;
  t.lost_since_ns = wall_ns();
  ++t.lost_count;
  SW_LOG(kWarn) << "GPU " << r.index << " (" << (r.uuid.empty() ? "uuid unknown" : r.uuid)
                << ", PCI " << (r.bus_id.empty() ? "unknown" : r.bus_id)
                << ") is lost: NVML answers \"GPU is lost\" (it fell off the bus; the kernel log "
                   "has an Xid 79). Drain the node and reset the GPU (nvidia-smi -r -i "
                << r.index << ", or a reboot); its last identity is kept";
}

void sample_pass(GpuMonitor::Shared& s, std::int64_t& last_ns) {
  {
    std::lock_guard<std::mutex> l(s.mu);
    s.pass_started_ns = mono_ns();
  }
  std::vector<GpuReading> readings = s.nvml->read();
  const std::int64_t now = mono_ns();
  std::lock_guard<std::mutex> l(s.mu);
  s.pass_started_ns = 0;
  const std::uint64_t dt =
      last_ns > 0 ? static_cast<std::uint64_t>(std::max<std::int64_t>(0, now - last_ns)) : 0;
  last_ns = now;
  auto& gpus = s.state.gpus;
  if (gpus.size() < readings.size()) gpus.resize(readings.size());
  for (size_t i = 0; i < readings.size(); ++i) {
    GpuTotals& t = gpus[i];
    GpuReading& r = readings[i];
    if (!r.error.empty()) ++s.state.sample_failures;
    ++t.samples;
    // The interval since the previous pass is judged by this reading (capped: a pass that
    // took long is not a long throttle).
    const std::uint64_t span = std::min<std::uint64_t>(dt, 2'000'000'000ULL);
    if (r.reasons_known && r.clocks_known && span > 0) {
      t.sampled_ns += span;
      const std::uint64_t held = held_reasons(r.reasons);
      if (held) {
        t.held_ns += span;
        t.held_clock_mhz_ns += static_cast<double>(r.sm_clock_mhz) * static_cast<double>(span);
      }
      for (size_t k = 0; k < kClockReasons.size(); ++k) {
        if (r.reasons & kClockReasons[k].bit) t.reason_ns[k] += span;
      }
    }
    if (r.lost) {
      keep_identity(t, r);
    } else if (t.lost && r.error.empty()) {
      SW_LOG(kInfo) << "GPU " << r.index << " (" << r.uuid << ", PCI " << r.bus_id
                    << ") answers NVML again after it was lost";
      t.lost = false;
      t.lost_since_ns = 0;
    }
    t.last = std::move(r);
  }
}

// One /dev/kmsg record: an Xid is counted and kept, anything else ignored.
void handle_record(GpuMonitor::Shared& s, const GpuMonitorOptions& o, std::string_view record,
                   std::int64_t& second_start, std::size_t& in_second) {
  const auto rec = parse_kmsg_record(record);
  if (!rec) return;
  auto xid = parse_xid(rec->message);
  if (!xid) return;
  const std::int64_t now = mono_ns();
  if (now - second_start >= 1'000'000'000) {
    second_start = now;
    in_second = 0;
  }
  std::lock_guard<std::mutex> l(s.mu);
  if (++in_second > o.max_xid_per_second) {
    ++s.state.xid_dropped;
    return;
  }
  const std::int64_t ts_ns = static_cast<std::int64_t>(rec->ts_us) * 1000;
  xid->unix_ns = wall_ns() - std::max<std::int64_t>(0, now - ts_ns);
  int gpu = -1;
  for (const auto& g : s.state.gpus) {
    PciAddress a;
    if (xid->address_known && parse_pci_address(g.last.bus_id, a) && a == xid->address) {
      gpu = static_cast<int>(g.last.index);
    }
  }
  auto& counts = s.state.xid_counts;
  auto it = std::find_if(counts.begin(), counts.end(), [&](const XidCount& c) {
    return c.pci == xid->pci && c.code == xid->code;
  });
  if (it == counts.end()) {
    if (counts.size() >= 256) {  // bounded: a flood of invented addresses
      ++s.state.xid_dropped;
      return;
    }
    counts.push_back(XidCount{gpu, xid->pci, xid->code, 0});
    it = counts.end() - 1;
  }
  it->gpu = gpu;
  ++it->count;
  xid->gpu = gpu;
  xid->seq = s.state.xids.empty() ? 1 : s.state.xids.back().seq + 1;
  SW_LOG(kWarn) << "Xid " << xid->code << " on GPU "
                << (gpu >= 0 ? std::to_string(gpu) : std::string("?")) << " (PCI " << xid->pci
                << "): " << xid->text;
  s.state.xids.push_back(std::move(*xid));
  if (s.state.xids.size() > kMaxXidKept) s.state.xids.erase(s.state.xids.begin());
}

// Reads every record the kernel has for us now; false when the device failed for good.
bool drain_kmsg(GpuMonitor::Shared& s, const GpuMonitorOptions& o, std::int64_t& second_start,
                std::size_t& in_second) {
  char buf[kRecordBytes];
  for (int records = 0; records < 4096; ++records) {
    const ssize_t n = ::read(s.kmsg_fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return true;
      if (errno == EPIPE) {  // the ring overwrote records we had not read
        std::lock_guard<std::mutex> l(s.mu);
        ++s.state.kmsg_overrun;
        continue;
      }
      return false;
    }
    if (n == 0) return true;
    // /dev/kmsg hands one record per read; a pipe standing in for it (tests) may hand several.
    // A record is its header line and continuation lines, which start with a space.
    std::string_view rest(buf, static_cast<size_t>(n));
    while (!rest.empty()) {
      size_t end = 0;
      while (true) {
        const size_t nl = rest.find('\n', end);
        end = nl == std::string_view::npos ? rest.size() : nl + 1;
        if (end >= rest.size() || rest[end] != ' ') break;
      }
      handle_record(s, o, rest.substr(0, end), second_start, in_second);
      rest.remove_prefix(end);
    }
  }
  return true;
}


}  // namespace

void GpuMonitor::start() {
  Shared& s = *shared_;
  if (options_.nvml) {
    auto n = Nvml::open(options_.nvml_library);
    if (!n) {
      s.state.nvml_status = n.error().message;
      SW_LOG(kInfo) << n.error().message;
      SW_LOG(kHint) << "on a GPU host: install the NVIDIA driver, or --nvml-library PATH of its "
                       "libnvidia-ml.so.1";
    } else {
      s.nvml = std::move(*n);
      std::vector<GpuReading> first = s.nvml->read();
      s.state.nvml = true;
      s.state.nvml_status = "NVML " + s.nvml->path() + " (driver " +
                            (s.nvml->driver().empty() ? "unknown" : s.nvml->driver()) + "): " +
                            std::to_string(first.size()) + " GPU" +
                            (first.size() == 1 ? "" : "s");
      if (!s.nvml->missing().empty()) {
        std::string names;
        for (const auto& m : s.nvml->missing()) names += (names.empty() ? "" : ", ") + m;
        s.state.nvml_status += "; lacks " + names + " (those readings stay unknown)";
      }
      SW_LOG(kInfo) << s.state.nvml_status;
      for (auto& r : first) {
        GpuTotals t;
        t.last = std::move(r);
        s.state.gpus.push_back(std::move(t));
      }
      auto shared = shared_;
      const auto interval = options_.interval;
      s.sampler = std::thread([shared, interval] {
        std::int64_t last = mono_ns();
        while (!shared->stop) {
          std::this_thread::sleep_for(interval);
          if (shared->stop) break;
          try {
            sample_pass(*shared, last);
          } catch (const std::exception& e) {
            SW_LOG(kWarn) << "NVML sample: " << e.what();
          }
        }
        std::lock_guard<std::mutex> l(shared->mu);
        shared->sampler_done = true;
      });
    }
  } else {
    s.state.nvml_status = "NVML off (--gpu-monitor=off)";
  }
  {
    std::lock_guard<std::mutex> l(s.mu);
    s.sampler_done = !s.sampler.joinable();
  }
  if (!options_.xid) {
    s.state.kmsg_status = "Xid errors not followed (--gpu-monitor=off)";
    return;
  }
  s.kmsg_fd = options_.kmsg_fd >= 0 ? options_.kmsg_fd : open_kmsg(options_.kmsg);
  if (s.kmsg_fd < 0) {
    s.state.kmsg_status = "cannot read " + options_.kmsg + " (" + std::strerror(errno) +
                          "): Xid errors are not seen; fix: run as root (CAP_SYSLOG)";
    SW_LOG(kInfo) << s.state.kmsg_status;
    return;
  }
  s.state.kmsg = true;
  s.state.kmsg_status = "following " + options_.kmsg + " for Xid errors";
  auto shared = shared_;
  const GpuMonitorOptions o = options_;
  s.follower = std::thread([shared, o] {
    std::int64_t second = mono_ns();
    std::size_t in_second = 0;
    while (!shared->stop) {
      pollfd p{shared->kmsg_fd, POLLIN, 0};
      const int r = ::poll(&p, 1, 200);
      if (r < 0 && errno != EINTR) break;
      if (r <= 0) continue;
      bool ok = true;
      try {
        ok = drain_kmsg(*shared, o, second, in_second);
      } catch (const std::exception& e) {
        SW_LOG(kWarn) << "kernel log: " << e.what();
      }
      if (!ok) {
        std::lock_guard<std::mutex> l(shared->mu);
        shared->state.kmsg = false;
        shared->state.kmsg_status = "reading " + o.kmsg + " failed (" + std::strerror(errno) +
                                    "): Xid errors are no longer seen";
        SW_LOG(kWarn) << shared->state.kmsg_status;
        break;
      }
    }
  });
}

GpuSnapshot GpuMonitor::snapshot() {
  Shared& s = *shared_;
  std::lock_guard<std::mutex> l(s.mu);
  const bool stale = s.pass_started_ns > 0 &&
                     mono_ns() - s.pass_started_ns >
                         std::chrono::duration_cast<std::chrono::nanoseconds>(options_.stale_after)
                             .count();
  if (stale && !s.state.stale) {
    SW_LOG(kWarn) << "NVML: a GPU reading has not returned for over "
                  << options_.stale_after.count()
                  << " ms (a GPU or driver that no longer answers?); GPU readings are stale";
  }
  s.state.stale = stale;
  if (stale) ++s.state.stale_windows;
  return s.state;
}

void GpuMonitor::map_processes(GpuSnapshot& snap, const std::vector<int>& pids) const {
  std::map<unsigned, unsigned> by_minor;  // minor → index
  for (const auto& g : snap.gpus) {
    if (g.last.minor_known) by_minor[g.last.minor] = g.last.index;
  }
  for (int pid : pids) {
    std::vector<unsigned> gpus;
    for (const auto& g : snap.gpus) {
      if (!g.last.pids_known) continue;
      if (std::find(g.last.pids.begin(), g.last.pids.end(), pid) != g.last.pids.end()) {
        gpus.push_back(g.last.index);
      }
    }
    if (gpus.empty() && !by_minor.empty()) {
      // NVML may not see the process (another PID namespace, or no context yet): its files.
      for (unsigned minor : nvidia_minors_of(fs_, pid)) {
        if (auto it = by_minor.find(minor); it != by_minor.end()) gpus.push_back(it->second);
      }
    }
    if (!gpus.empty()) snap.process_gpus[pid] = std::move(gpus);
  }
}

int open_kmsg(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  // Only what is logged from now on: a restart must not count old Xids again.
  if (fd >= 0) ::lseek(fd, 0, SEEK_END);
  return fd;
}

std::vector<unsigned> nvidia_minors_of(const Procfs& fs, int pid) {
  std::vector<unsigned> out;
  const std::string dir = fs.pid_path(pid, "fd");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  int seen = 0;
  while (const dirent* e = ::readdir(d)) {
    if (++seen > kMaxScannedFds) break;
    if (e->d_name[0] == '.') continue;
    // The file the descriptor holds, not the name it was opened by: in its own user and mount
    // namespace anyone can make a plain file called /dev/nvidia1 (issue #49). A GPU is a
    // character device of NVIDIA's major; its minor is the GPU's (below nvidia-modeset's 254
    // and nvidiactl's 255).
    struct stat st {};
    if (::stat((dir + "/" + e->d_name).c_str(), &st) != 0 || !S_ISCHR(st.st_mode) ||
        major(st.st_rdev) != kNvidiaMajor || minor(st.st_rdev) >= kNvidiaModesetMinor) {
      continue;
    }
    const auto m = static_cast<unsigned>(minor(st.st_rdev));
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace stallwatch::host
