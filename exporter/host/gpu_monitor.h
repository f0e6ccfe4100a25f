// The GPUs' own state, for the chains that blame the GPU (gpu_throttle, gpu_xid) and for
// /metrics: NVML sampled on one thread (host/nvml.h), the kernel log followed on another for
// Xid errors (host/xid.h). Each thread's work is bounded: a GPU whose driver stops answering
// stalls its sampler, never the daemon — the readings go stale (and are said to be), the
// windows go on. Without NVML or /dev/kmsg the monitor says why once and reports nothing.
// Cumulative totals, read by `snapshot()` from any thread (a copy under a lock).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/nvml.h"
#include "host/procfs.h"
#include "host/xid.h"

namespace stallwatch::host {

struct GpuMonitorOptions {
  bool nvml = true;              // --gpu-monitor: sample NVML
  std::string nvml_library;      // --nvml-library; "" as the dynamic loader finds it
  std::chrono::milliseconds interval{250};    // between two samples of every GPU
  std::chrono::milliseconds stale_after{3000};  // a sample pass longer than this: stale
  bool xid = true;               // follow the kernel log for Xid errors
  std::string kmsg = "/dev/kmsg";
  // Already open (the monitor owns it): reading the kernel log needs CAP_SYSLOG where
  // kernel.dmesg_restrict is 1, which `run` gives up before the monitor starts.
  int kmsg_fd = -1;
  std::size_t max_xid_per_second = 64;  // more are counted, not kept
};

// One GPU, cumulative since the monitor started.
struct GpuTotals {
  // The latest reading; while the GPU is lost, its identity (uuid, name, bus id, minor,
  // compute processes) is the last good one and nothing else is known.
  GpuReading last;
  bool lost = false;             // NVML answers NVML_ERROR_GPU_IS_LOST for it now
  std::int64_t lost_since_ns = 0;  // wall clock, when it was first seen lost (0: not lost)
  std::uint64_t lost_count = 0;    // times it was seen going lost, cumulative
  std::uint64_t sampled_ns = 0;  // time the samples cover
  std::uint64_t held_ns = 0;     // of which with a reason holding the SM clock down
  std::array<std::uint64_t, kClockReasons.size()> reason_ns{};  // per reason, kClockReasons order
  double held_clock_mhz_ns = 0;  // SM clock × time while held: the mean clock while held
  std::uint64_t samples = 0;
};

struct XidCount {
  int gpu = -1;     // NVML's index; -1 when the address matches no GPU NVML knows
  std::string pci;  // as the lines wrote it, escaped
  int code = 0;
  std::uint64_t count = 0;
};

struct GpuSnapshot {
  bool nvml = false;           // NVML loaded and answered
  std::string nvml_status;     // one line: the driver and GPUs, or why not
  bool stale = false;          // the sampler has not finished a pass for stale_after
  std::vector<GpuTotals> gpus;  // by NVML index
  std::uint64_t sample_failures = 0;  // readings NVML refused, cumulative
  std::uint64_t stale_windows = 0;    // snapshots taken while stale, cumulative
  bool kmsg = false;           // the kernel log is followed
  std::string kmsg_status;
  std::vector<XidEvent> xids;  // the latest kMaxXidKept, oldest first
  std::vector<XidCount> xid_counts;
  std::uint64_t xid_dropped = 0;   // Xid lines over the rate bound, cumulative
  std::uint64_t kmsg_overrun = 0;  // records the kernel overwrote before they were read
  // CUDA-issuing processes → the NVML indexes of the GPUs they use (NVML's compute processes,
  // else the /dev/nvidiaN they hold open); filled by `map_processes`.
  std::map<int, std::vector<unsigned>> process_gpus;
};
inline constexpr std::size_t kMaxXidKept = 64;

class GpuMonitor {
 public:
  GpuMonitor(GpuMonitorOptions options, const Procfs& fs);
  ~GpuMonitor();  // stops the threads (a thread stuck in NVML is left to the process's exit)
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Opens NVML and /dev/kmsg and starts the threads; logs one line for each that is absent.
  void start();
  GpuSnapshot snapshot();
  // Fills `snap.process_gpus` for `pids`: NVML's compute processes, else a bounded scan of each
  // process's open files for /dev/nvidiaN.
  void map_processes(GpuSnapshot& snap, const std::vector<int>& pids) const;

  struct Shared;

 private:
  GpuMonitorOptions options_;
  const Procfs& fs_;
  std::shared_ptr<Shared> shared_;
};

// Opens `path` for reading records from now on; -1 with errno set when it cannot.
int open_kmsg(const std::string& path);

// NVIDIA's character devices: /dev/nvidiaN is (195, N); nvidia-modeset 254, nvidiactl 255.
inline constexpr unsigned kNvidiaMajor = 195;
inline constexpr unsigned kNvidiaModesetMinor = 254;
// The GPU minors a process holds open: descriptors whose file is a character device of NVIDIA's
// major (at most kMaxScannedFds descriptors read), whatever its name.
std::vector<unsigned> nvidia_minors_of(const Procfs& fs, int pid);
inline constexpr int kMaxScannedFds = 4096;

}  // namespace stallwatch::host
