// Mock NVML, built as libnvidia-ml.so.1: the real exported names with the real C signatures
// (nvml.h of the R535+ drivers), so the daemon's run-time loader (host/nvml.h) meets what it
// meets on a GPU host. No GPU and no driver: the GPUs are lines of a text file a test rewrites
// while the daemon runs (write a new file and rename it over the old one).
//
// MOCK_NVML_STATE names the file; unset or unreadable, nvmlInit_v2 fails with
// NVML_ERROR_DRIVER_NOT_LOADED, as on a host without the driver. The file, one GPU per line:
//   gpu minor=0 uuid=GPU-… bus=00000000:3B:00.0 clock=1980 max=1980 reasons=0x4 temp=84
//       power_mw=350000 limit_mw=700000 pids=4242,4243 delay_ms=0 fail=0
// (one line; every key optional). `reasons` is the clocks event reasons bit set
// (nvmlClocksEventReason*); `pids` the compute processes; `fail` an nvmlReturn_t every call
// about that GPU returns (15: NVML_ERROR_GPU_IS_LOST); `delay_ms` how long its clock reading
// takes (a GPU whose driver no longer answers). A line `init=N` makes nvmlInit_v2 return N.
// The file is read again at every call: what a test writes is what the next sample sees.
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOCK_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

enum {
  kSuccess = 0,
  kUninitialized = 1,
  kInvalidArgument = 2,
  kNotSupported = 3,
  kInsufficientSize = 7,
  kDriverNotLoaded = 9,
  kGpuIsLost = 15,
};

#define MAX_GPUS 16
#define MAX_PIDS 64

struct gpu {
  unsigned minor;
  char uuid[96];
  char bus[32];
  unsigned clock, max, temp, power_mw, limit_mw;
  unsigned long long reasons;
  unsigned pids[MAX_PIDS];
  unsigned npids;
  unsigned delay_ms;
  int fail;
};

struct state {
  int init;
  unsigned count;
  struct gpu gpus[MAX_GPUS];
};

static int initialized = 0;

static void parse_gpu(char* line, struct gpu* g, unsigned index) {
  memset(g, 0, sizeof(*g));
  g->minor = index;
  snprintf(g->uuid, sizeof(g->uuid), "GPU-00000000-0000-0000-0000-%012u", index);
  snprintf(g->bus, sizeof(g->bus), "00000000:%02X:00.0", 0x10 + index);
  g->clock = g->max = 1980;
  g->temp = 40;
  g->power_mw = 100000;
  g->limit_mw = 700000;
  for (char* save = NULL, *tok = strtok_r(line, " \t\n", &save); tok != NULL;
       tok = strtok_r(NULL, " \t\n", &save)) {
    char* eq = strchr(tok, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    const char* k = tok;
    const char* v = eq + 1;
    if (strcmp(k, "minor") == 0) g->minor = (unsigned)strtoul(v, NULL, 10);
    else if (strcmp(k, "uuid") == 0) snprintf(g->uuid, sizeof(g->uuid), "%s", v);
    else if (strcmp(k, "bus") == 0) snprintf(g->bus, sizeof(g->bus), "%s", v);
    else if (strcmp(k, "clock") == 0) g->clock = (unsigned)strtoul(v, NULL, 10);
    else if (strcmp(k, "max") == 0) g->max = (unsigned)strtoul(v, NULL, 10);
    else if (strcmp(k, "reasons") == 0) g->reasons = strtoull(v, NULL, 0);
    else if (strcmp(k, "temp") == 0) g->temp = (unsigned)strtoul(v, NULL, 10);
    else if (strcmp(k, "power_mw") == 0) g->power_mw = (unsigned)strtoul(v, NULL, 10);
    else if (strcmp(k, "limit_mw") == 0) g->limit_mw = (unsigned)strtoul(v, NULL, 10);
    else if (strcmp(k, "delay_ms") == 0) g->delay_ms = (unsigned)strtoul(v, NULL, 10);
    else if (strcmp(k, "fail") == 0) g->fail = (int)strtol(v, NULL, 10);
    else if (strcmp(k, "pids") == 0) {
      char* end = NULL;
      for (const char* p = v; *p != '\0' && g->npids < MAX_PIDS; p = end) {
        unsigned long pid = strtoul(p, &end, 10);
        if (end == p) break;
        g->pids[g->npids++] = (unsigned)pid;
        if (*end == ',') ++end;
      }
    }
  }
}

// 0 when the file cannot be read.
static int load(struct state* s) {
  memset(s, 0, sizeof(*s));
  const char* path = getenv("MOCK_NVML_STATE");
  if (path == NULL || *path == '\0') return 0;
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[1024];
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "init=", 5) == 0) s->init = (int)strtol(line + 5, NULL, 10);
    else if (strncmp(line, "gpu", 3) == 0 && s->count < MAX_GPUS) {
      parse_gpu(line + 3, &s->gpus[s->count], s->count);
      ++s->count;
    }
  }
  fclose(f);
  return 1;
}

// Handles are 1 + the index, never dereferenced.
static nvmlReturn_t get(nvmlDevice_t device, struct state* s, struct gpu** out) {
  if (!initialized) return kUninitialized;
  if (!load(s)) return kGpuIsLost;
  unsigned long index = (unsigned long)(size_t)device;
  if (index == 0 || index > s->count) return kInvalidArgument;
  *out = &s->gpus[index - 1];
  return (*out)->fail;
}

static void copy_string(char* dst, unsigned length, const char* src) {
  if (length == 0) return;
  snprintf(dst, length, "%s", src);
}

MOCK_API nvmlReturn_t nvmlInit_v2(void) {
  struct state s;
  if (!load(&s)) return kDriverNotLoaded;
  if (s.init != 0) return s.init;
  initialized = 1;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlShutdown(void) {
  initialized = 0;
  return kSuccess;
}

MOCK_API const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kInsufficientSize: return "Insufficient Size";
    case kDriverNotLoaded: return "Driver Not Loaded";
    case kGpuIsLost: return "GPU is lost";
    default: return "Unknown Error";
  }
}

MOCK_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!initialized) return kUninitialized;
  if (version == NULL) return kInvalidArgument;
  copy_string(version, length, "580.00.00 (stand-in)");
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  struct state s;
  if (!initialized) return kUninitialized;
  if (count == NULL) return kInvalidArgument;
  load(&s);
  *count = s.count;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  struct state s;
  if (!initialized) return kUninitialized;
  if (device == NULL) return kInvalidArgument;
  load(&s);
  if (index >= s.count) return kInvalidArgument;
  *device = (nvmlDevice_t)(size_t)(index + 1);
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (name == NULL) return kInvalidArgument;
  copy_string(name, length, "NVIDIA H100 80GB HBM3 (stand-in)");
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (uuid == NULL) return kInvalidArgument;
  copy_string(uuid, length, g->uuid);
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (minor == NULL) return kInvalidArgument;
  *minor = g->minor;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (pci == NULL) return kInvalidArgument;
  memset(pci, 0, sizeof(*pci));
  copy_string(pci->busId, sizeof(pci->busId), g->bus);
  unsigned domain = 0, bus = 0, dev = 0;
  if (sscanf(g->bus, "%x:%x:%x", &domain, &bus, &dev) == 3) {
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
  }
  snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", domain & 0xffff, bus,
           dev);
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int* clock) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (clock == NULL) return kInvalidArgument;
  if (g->delay_ms > 0) {
    struct timespec t = {g->delay_ms / 1000, (long)(g->delay_ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
  }
  if (type != 1) return kNotSupported;  // NVML_CLOCK_SM only
  *clock = g->clock;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type,
                                                unsigned int* clock) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (clock == NULL) return kInvalidArgument;
  if (type != 1) return kNotSupported;
  *clock = g->max;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                              unsigned long long* reasons) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (reasons == NULL) return kInvalidArgument;
  *reasons = g->reasons;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor,
                                               unsigned int* temp) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (temp == NULL || sensor != 0) return kInvalidArgument;  // NVML_TEMPERATURE_GPU
  *temp = g->temp;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (power == NULL) return kInvalidArgument;
  *power = g->power_mw;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (limit == NULL) return kInvalidArgument;
  *limit = g->limit_mw;
  return kSuccess;
}

MOCK_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                               unsigned int* count,
                                                               nvmlProcessInfo_t* infos) {
  struct state s;
  struct gpu* g = NULL;
  nvmlReturn_t r = get(device, &s, &g);
  if (r != kSuccess) return r;
  if (count == NULL) return kInvalidArgument;
  if (*count < g->npids || (infos == NULL && g->npids > 0)) {
    *count = g->npids;
    return kInsufficientSize;
  }
  for (unsigned i = 0; i < g->npids; ++i) {
    memset(&infos[i], 0, sizeof(infos[i]));
    infos[i].pid = g->pids[i];
    infos[i].usedGpuMemory = 1ULL << 30;
    infos[i].gpuInstanceId = 0xFFFFFFFFu;
    infos[i].computeInstanceId = 0xFFFFFFFFu;
  }
  *count = g->npids;
  return kSuccess;
}
