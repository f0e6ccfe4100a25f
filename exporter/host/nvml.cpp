#include "host/nvml.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/file_trust.h"
#include "common/strings.h"

namespace stallwatch::host {
namespace {

// nvml.h's types, declared with their real layouts.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};
struct nvmlProcessInfo_t {  // nvmlProcessInfo_v2_t: what _v2 and _v3 fill
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kGpuIsLost = 15;  // NVML_ERROR_GPU_IS_LOST
constexpr int kClockSm = 1;         // NVML_CLOCK_SM
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr unsigned kMaxGpus = 64;
constexpr unsigned kMaxProcesses = 1024;

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*minor)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;

  std::string text(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return (s ? escape_line(std::string_view(s, strnlen(s, 128))) : std::string("error")) +
           " (" + std::to_string(r) + ")";
  }
};

namespace {

// The first of `names` the library exports; null (and the first name noted) when none.
template <typename F>
void resolve(void* h, F& out, std::initializer_list<const char*> names,
             std::vector<std::string>* missing) {
  for (const char* n : names) {
    if (void* p = dlsym(h, n)) {
      out = reinterpret_cast<F>(p);
      return;
    }
  }
  if (missing) missing->push_back(*names.begin());
}

std::string bounded(const char* buf, size_t size) {
  return escape_line(std::string_view(buf, strnlen(buf, size)));
}

}  // namespace

std::uint64_t held_reasons(std::uint64_t bits) {
  std::uint64_t out = 0;
  for (const auto& r : kClockReasons) {
    if (r.held) out |= bits & r.bit;
  }
  return out;
}

std::string reason_names(std::uint64_t bits) {
  std::string out;
  std::uint64_t known = 0;
  for (const auto& r : kClockReasons) {
    known |= r.bit;
    if (!(bits & r.bit)) continue;
    if (!out.empty()) out += ", ";
    out += r.name;
  }
  if (const std::uint64_t rest = bits & ~known) {
    char hex[24];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(rest));
    if (!out.empty()) out += ", ";
    out += hex;
  }
  return out;
}

Result<std::unique_ptr<Nvml>> Nvml::open(const std::string& library) {
  const std::string file = library.empty() ? "libnvidia-ml.so.1" : library;
  // A library named by path runs its constructors as root: loaded only when no user but root
  // could have changed it, and loaded from the descriptor that was checked. By name, the
  // loader's own search (ld.so.cache, root-owned directories) finds it.
  void* h = nullptr;
  if (file.find('/') == std::string::npos) {
    h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  } else {
    auto fd = open_trusted_file(library, "--nvml-library " + escape_name(library),
                                "stallwatch runs its code as root");
    if (!fd && fd.error().err != 0) {  // could not open it: as a failed dlopen says it
      return make_error("NVML: cannot load " + escape_name(file) + " (" +
                        std::strerror(fd.error().err) +
                        "): no GPU clocks, throttle reasons or gpu_throttle chains");
    }
    if (!fd) {
      return make_error("NVML: " + fd.error().message +
                        "; no GPU clocks, throttle reasons or gpu_throttle chains");
    }
    h = dlopen(("/proc/self/fd/" + std::to_string(*fd)).c_str(), RTLD_NOW | RTLD_LOCAL);
    ::close(*fd);
  }
  if (!h) {
    const char* why = dlerror();
    return make_error(
        "NVML: cannot load " + file + " (" + escape_line(why ? why : "not found") +
        "): no GPU clocks, throttle reasons or gpu_throttle chains");
  }
  std::unique_ptr<Nvml> n(new Nvml());
  n->handle_ = h;
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  std::vector<std::string> required;
  resolve(h, a.init, {"nvmlInit_v2", "nvmlInit"}, &required);
  resolve(h, a.count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, &required);
  resolve(h, a.handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"},
          &required);
  resolve(h, a.shutdown, {"nvmlShutdown"}, nullptr);
  resolve(h, a.error_string, {"nvmlErrorString"}, nullptr);
  if (!required.empty()) {
    std::string names;
    for (const auto& r : required) names += (names.empty() ? "" : ", ") + r;
    return make_error("NVML: " + file + " does not export " + names +
                      " (not NVIDIA's NVML?): no GPU readings");
  }
  auto& m = n->missing_;
  resolve(h, a.driver_version, {"nvmlSystemGetDriverVersion"}, &m);
  resolve(h, a.name, {"nvmlDeviceGetName"}, &m);
  resolve(h, a.uuid, {"nvmlDeviceGetUUID"}, &m);
  resolve(h, a.minor, {"nvmlDeviceGetMinorNumber"}, &m);
  resolve(h, a.pci, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}, &m);
  resolve(h, a.clock, {"nvmlDeviceGetClockInfo"}, &m);
  resolve(h, a.max_clock, {"nvmlDeviceGetMaxClockInfo"}, &m);
  resolve(h, a.reasons,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
          &m);
  resolve(h, a.temperature, {"nvmlDeviceGetTemperature"}, &m);
  resolve(h, a.power, {"nvmlDeviceGetPowerUsage"}, &m);
  resolve(h, a.power_limit, {"nvmlDeviceGetEnforcedPowerLimit"}, &m);
  resolve(h, a.processes,
          {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"},
          &m);
  if (const nvmlReturn_t r = a.init(); r != kSuccess) {
    return make_error("NVML: nvmlInit_v2 failed: " + a.text(r) +
                      " (no driver loaded, or no access to /dev/nvidia*): no GPU readings");
  }
  char path[4096] = {};
  if (dlinfo(h, RTLD_DI_ORIGIN, path) == 0) {
    n->path_ = bounded(path, sizeof(path)) + "/" +
               file.substr(file.find_last_of('/') == std::string::npos ? 0
                                                                       : file.find_last_of('/') + 1);
  } else {
    n->path_ = file;
  }
  if (a.driver_version) {
    char v[96] = {};
    if (a.driver_version(v, sizeof(v)) == kSuccess) n->driver_ = bounded(v, sizeof(v));
  }
  return n;
}

Nvml::~Nvml() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (handle_) dlclose(handle_);
}

std::vector<GpuReading> Nvml::read() {
  const Api& a = *api_;
  std::vector<GpuReading> out;
  unsigned count = 0;
  if (a.count(&count) != kSuccess) return out;
  count = std::min(count, kMaxGpus);
  for (unsigned i = 0; i < count; ++i) {
    GpuReading g;
    g.index = i;
    nvmlDevice_t d = nullptr;
    if (const nvmlReturn_t r = a.handle(i, &d); r != kSuccess) {
      g.error = "handle: " + a.text(r);
      g.lost = r == kGpuIsLost;
      out.push_back(std::move(g));
      continue;
    }
    auto note = [&](const char* what, nvmlReturn_t r) {
      if (r == kGpuIsLost) g.lost = true;
      if (r == kSuccess || !g.error.empty()) return;
      g.error = std::string(what) + ": " + a.text(r);
    };
    if (a.name) {
      char buf[96] = {};
      nvmlReturn_t r = a.name(d, buf, sizeof(buf));
      if (r == kSuccess) g.name = bounded(buf, sizeof(buf));
    }
    if (a.uuid) {
      char buf[96] = {};
      nvmlReturn_t r = a.uuid(d, buf, sizeof(buf));
      if (r == kSuccess) g.uuid = bounded(buf, sizeof(buf));
      note("uuid", r);
    }
    if (a.minor) g.minor_known = a.minor(d, &g.minor) == kSuccess;
    if (a.pci) {
      nvmlPciInfo_t p{};
      if (a.pci(d, &p) == kSuccess) {
        g.bus_id = bounded(p.busId, sizeof(p.busId));
        if (PciAddress addr; parse_pci_address(g.bus_id, addr)) g.bus_id = pci_text(addr);
      }
    }
    if (a.clock && a.max_clock) {
      const nvmlReturn_t r1 = a.clock(d, kClockSm, &g.sm_clock_mhz);
      const nvmlReturn_t r2 = a.max_clock(d, kClockSm, &g.sm_clock_max_mhz);
      g.clocks_known = r1 == kSuccess && r2 == kSuccess;
      note("clock", r1 != kSuccess ? r1 : r2);
    }
    if (a.reasons) {
      unsigned long long bits = 0;
      const nvmlReturn_t r = a.reasons(d, &bits);
      g.reasons_known = r == kSuccess;
      if (g.reasons_known) g.reasons = bits;
      note("clocks event reasons", r);
    }
    if (a.temperature) a.temperature(d, kTemperatureGpu, &g.temperature_c);
    if (a.power && a.power_limit) {
      unsigned mw = 0, limit_mw = 0;
      if (a.power(d, &mw) == kSuccess && a.power_limit(d, &limit_mw) == kSuccess) {
        g.power_w = mw / 1000.0;
        g.power_limit_w = limit_mw / 1000.0;
        g.power_known = true;
      }
    }
    if (a.processes) {
      std::vector<nvmlProcessInfo_t> infos(16);
      for (int tries = 0; tries < 3; ++tries) {
        unsigned n = static_cast<unsigned>(infos.size());
        const nvmlReturn_t r = a.processes(d, &n, infos.data());
        if (r == kInsufficientSize && n > infos.size() && n <= kMaxProcesses) {
          infos.resize(n + 8);  // processes may start between the two calls
          continue;
        }
        if (r == kSuccess) {
          g.pids_known = true;
          for (unsigned k = 0; k < n && k < infos.size(); ++k) {
            g.pids.push_back(static_cast<int>(infos[k].pid));
          }
        }
        break;
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::string pci_text(const PciAddress& a) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%08X:%02X:%02X.0", a.domain, a.bus, a.device);
  return buf;
}

bool parse_pci_address(std::string_view text, PciAddress& out) {
  // domain:bus:device[.function], hexadecimal, the domain 4 or 8 digits.
  unsigned long parts[3] = {};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    size_t digits = 0;
    unsigned long v = 0;
    while (pos < text.size() && std::isxdigit(static_cast<unsigned char>(text[pos])) &&
           digits < 8) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text[pos])));
      v = v * 16 + static_cast<unsigned long>(c <= '9' ? c - '0' : c - 'a' + 10);
      ++pos;
      ++digits;
    }
    if (digits == 0) return false;
    parts[i] = v;
    if (i < 2) {
      if (pos >= text.size() || text[pos] != ':') return false;
      ++pos;
    }
  }
  if (pos < text.size() && text[pos] != '.') return false;
  if (parts[1] > 0xff || parts[2] > 0x1f) return false;
  out = PciAddress{static_cast<std::uint32_t>(parts[0]), static_cast<std::uint32_t>(parts[1]),
                   static_cast<std::uint32_t>(parts[2])};
  return true;
}

}  // namespace stallwatch::host
