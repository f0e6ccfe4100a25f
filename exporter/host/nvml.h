// NVML (the NVIDIA Management Library) loaded at run time: no build dependency, no link to the
// driver. `Nvml::open` dlopens libnvidia-ml.so.1 as the dynamic loader finds it (or the path of
// --nvml-library), resolves the functions it needs by their real names and C signatures (nvml.h
// of the R535+ drivers), and reads each GPU's state: SM clock and its maximum, the clocks event
// (throttle) reasons, temperature, power and its limit, and its compute processes. A missing
// optional function is a note (that reading stays unknown), never a failure. Nothing here keeps
// time: the GPU monitor (host/gpu_monitor.h) samples on its own thread. Not thread-safe: one
// caller at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace stallwatch::host {

// The clocks event reasons NVML reports as a bit set (nvmlClocksEventReason*, formerly
// nvmlClocksThrottleReason*), each with the `reason` label value stallwatch gives it. `held`:
// the reason holds the SM clock below what the GPU could run at while it has work (idle is
// not; neither is the display clock setting).
struct ClockReason {
  std::uint64_t bit;
  std::string_view name;
  bool held;
  std::string_view meaning;
};
inline constexpr std::array<ClockReason, 9> kClockReasons{{
    {0x1, "gpu_idle", false, "nothing runs on the GPU"},
    {0x2, "applications_clocks", true, "the applications clocks setting (nvidia-smi -ac)"},
    {0x4, "sw_power_cap", true, "the software power cap (nvidia-smi -pl, power limit)"},
    {0x8, "hw_slowdown", true, "hardware slowdown (temperature or power brake; external)"},
    {0x10, "sync_boost", true, "sync boost with other GPUs"},
    {0x20, "sw_thermal", true, "software thermal slowdown (GPU or memory too hot)"},
    {0x40, "hw_thermal", true, "hardware thermal slowdown (GPU too hot)"},
    {0x80, "hw_power_brake", true, "hardware power brake (the power supply asserted it)"},
    {0x100, "display_clocks", false, "the display clock setting"},
}};
// The bits of kClockReasons that hold the clock down.
std::uint64_t held_reasons(std::uint64_t bits);
// "sw_power_cap, hw_thermal" (in table order; unknown bits as "0x…"); "" for none.
std::string reason_names(std::uint64_t bits);

// One GPU as read once. Readings NVML refused stay 0 (their `*_known` false).
struct GpuReading {
  unsigned index = 0;
  unsigned minor = 0;        // /dev/nvidiaN
  bool minor_known = false;
  std::string uuid;          // escaped: it comes from the driver
  std::string name;
  std::string bus_id;        // "00000000:3B:00.0" as NVML writes it
  unsigned sm_clock_mhz = 0;
  unsigned sm_clock_max_mhz = 0;
  bool clocks_known = false;
  std::uint64_t reasons = 0;
  bool reasons_known = false;
  unsigned temperature_c = 0;
  double power_w = 0;
  double power_limit_w = 0;
  bool power_known = false;
  std::vector<int> pids;     // compute processes (the PID namespace NVML sees: the host's)
  bool pids_known = false;
  std::string error;         // what failed for this GPU; "" when every reading came
  // NVML answered NVML_ERROR_GPU_IS_LOST (fallen off the bus, Xid 79): nothing read is current.
  bool lost = false;
};

class Nvml {
 public:
  // `library`: a path, or "" for libnvidia-ml.so.1 as the dynamic loader finds it. Fails
  // with one line (not found; nvmlInit_v2 refused, with NVML's words) and what to do.
  static Result<std::unique_ptr<Nvml>> open(const std::string& library);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::string& path() const { return path_; }         // the file loaded
  const std::string& driver() const { return driver_; }     // "550.54.15"; "" unknown
  // Functions this library lacks (each reading it gives stays unknown).
  const std::vector<std::string>& missing() const { return missing_; }
  // Every GPU, in NVML's index order; empty when the count cannot be read.
  std::vector<GpuReading> read();

  struct Api;  // the resolved functions (nvml.cpp)

 private:
  Nvml() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::string path_;
  std::string driver_;
  std::vector<std::string> missing_;
};

// A PCI address in any of the spellings the driver uses ("00000000:3B:00.0" from NVML,
// "0000:3b:00" in an Xid line, "0000:3b:00.0" in sysfs) as domain, bus and device; false when
// it is none of them. Two spellings name the same GPU when the three agree.
struct PciAddress {
  std::uint32_t domain = 0;
  std::uint32_t bus = 0;
  std::uint32_t device = 0;
  bool operator==(const PciAddress&) const = default;
};
bool parse_pci_address(std::string_view text, PciAddress& out);
// The one way a GPU's address is written everywhere (labels, chains, explain): NVML's and
// DCGM's `pci_bus_id`, "00000000:3B:00.0" (8 hex digits of domain, upper case, function 0).
std::string pci_text(const PciAddress& a);

}  // namespace stallwatch::host
