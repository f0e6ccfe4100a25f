// Mock CUDA driver API, built as libcuda.so.1: the real exported names with the real C
// signatures (CUDA 12 cuda.h, including the _v2 names the header macros map to and the
// per-thread-default-stream _ptsz/_ptds variants). No GPU; independent of the mock libcudart.
//
// Behaviour, for tests:
//  - every call succeeds (returns CUDA_SUCCESS = 0) unless an output pointer is NULL;
//  - cuMemAlloc_v2 hands out host memory from malloc, cuMemFree_v2 frees it; so do the other
//    allocating calls (managed, async, host, pitched: row pitch 512), and cuMemCreate hands
//    out a handle that cuMemRelease takes back; a request above MOCK_CUDA_OOM_ABOVE bytes
//    (unset: no limit) returns CUDA_ERROR_OUT_OF_MEMORY;
//  - the capture and graph calls hand out dummy handles;
//  - copies are no-ops (CUdeviceptr values in tests may be fake, so nothing is dereferenced);
//  - the synchronize calls spin until the calling thread has used MOCK_CUDA_SYNC_CPU_US
//    microseconds of CPU (default 50), so CPU contention inflates their wall time.
// Every C body is noinline and marks its own index, so each keeps a distinct address.
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

// On x86-64 every exported cu* name is a stub of the shape NVIDIA's driver gives each of its
// entries (Debian's libcuda1 535.261.03: `cmpl $0x321cba00,X(%rip)` · `je` · `jmp *Y(%rip)`),
// so a probe placed on the stand-in pays what NVIDIA's driver makes the kernel do (issue #48):
// the compare at +0 is single-stepped, the je at +10 emulated. The stub jumps to the C body,
// impl_<name>, hidden. Elsewhere the C bodies are the exported names.
#if defined(__x86_64__)
#define MOCK_API __attribute__((noinline, used, visibility("hidden")))
#define ENTRY(name) impl_##name
#else
#define MOCK_API __attribute__((noinline, used, visibility("default")))
#define ENTRY(name) name
#endif

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUfunc_st* CUfunction;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUgraph_st* CUgraph;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUmemAllocationProp_st CUmemAllocationProp;  // only used through a pointer
typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st CUDA_GRAPH_INSTANTIATE_PARAMS;
typedef struct CUgraphExecUpdateResultInfo_st CUgraphExecUpdateResultInfo;
typedef int CUstreamCaptureMode;
typedef struct CUlaunchAttribute_st CUlaunchAttribute;  // only used through a pointer

typedef struct CUlaunchConfig_st {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
};

// Each entry point stores its own index here, so no two bodies are identical and none can be
// folded onto another's address. A plain relaxed store, not a counter: an atomic increment
// would put a lock-prefixed instruction first, and x86 uprobes refuse to probe those.
enum {
  kCuLaunchKernel,
  kCuLaunchKernelPtsz,
  kCuLaunchKernelEx,
  kCuLaunchKernelExPtsz,
  kCuMemAlloc,
  kCuMemFree,
  kCuMemcpy,
  kCuMemcpyPtds,
  kCuMemcpyAsync,
  kCuMemcpyAsyncPtsz,
  kCuMemcpyHtoD,
  kCuMemcpyHtoDPtds,
  kCuMemcpyDtoH,
  kCuMemcpyDtoHPtds,
  kCuCtxSynchronize,
  kCuStreamSynchronize,
  kCuStreamSynchronizePtsz,
  kCuEventSynchronize,
  kCuGraphLaunch,
  kCuGraphLaunchPtsz,
  kCuDriverGetVersion,
  kCuMemAllocManaged,
  kCuMemAllocAsync,
  kCuMemAllocAsyncPtsz,
  kCuMemFreeAsync,
  kCuMemFreeAsyncPtsz,
  kCuMemAllocHost,
  kCuMemHostAlloc,
  kCuMemFreeHost,
  kCuMemAllocPitch,
  kCuMemCreate,
  kCuMemRelease,
  kCuStreamBeginCapture,
  kCuStreamBeginCapturePtsz,
  kCuStreamEndCapture,
  kCuStreamEndCapturePtsz,
  kCuGraphInstantiateWithFlags,
  kCuGraphInstantiateWithParams,
  kCuGraphInstantiateWithParamsPtsz,
  kCuGraphExecUpdate,
};
static volatile int last_call = -1;

// Every entry point's first statement. NVIDIA's runtime, driver and NCCL functions begin with a
// push, which the kernel emulates at a uprobe; a leaf entry point here would begin with this
// RIP-relative store, which the kernel single-steps out of line instead: ~10 us a probe pair on
// the development VM against ~1.3 (issue #40). So it begins with a push too (the mocks are built
// without a red zone, tests/CMakeLists.txt).
static void mark(int kind) {
#if defined(__x86_64__)
  __asm__ volatile("push %%rbp\n\tpop %%rbp" ::: "memory");
#endif
  __atomic_store_n(&last_call, kind, __ATOMIC_RELAXED);
}

static long sync_cpu_us_cache = -1;

// MOCK_CUDA_SYNC_CPU_US, read once (racing first readers compute the same value).
static long sync_cpu_us(void) {
  long v = __atomic_load_n(&sync_cpu_us_cache, __ATOMIC_RELAXED);
  if (v >= 0) return v;
  v = 50;
  const char* text = getenv("MOCK_CUDA_SYNC_CPU_US");
  if (text != NULL && *text != '\0') {
    char* end = NULL;
    errno = 0;
    long parsed = strtol(text, &end, 10);
    if (errno == 0 && *end == '\0' && parsed >= 0) v = parsed;
  }
  __atomic_store_n(&sync_cpu_us_cache, v, __ATOMIC_RELAXED);
  return v;
}

static long long thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Busy-waits until this thread has consumed MOCK_CUDA_SYNC_CPU_US of CPU time: preempted time
// does not count, so under contention the wall time of the call grows.
static void spin_wait(void) {
  long us = sync_cpu_us();
  if (us == 0) return;
  long long until = thread_cpu_ns() + (long long)us * 1000LL;
  while (thread_cpu_ns() < until) {
  }
}

MOCK_API CUresult ENTRY(cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                 unsigned int gridDimZ, unsigned int blockDimX,
                                 unsigned int blockDimY, unsigned int blockDimZ,
                                 unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                 void** extra) {
  mark(kCuLaunchKernel);
  (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
  (void)blockDimZ, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuLaunchKernel_ptsz)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                      unsigned int gridDimZ, unsigned int blockDimX,
                                      unsigned int blockDimY, unsigned int blockDimZ,
                                      unsigned int sharedMemBytes, CUstream hStream,
                                      void** kernelParams, void** extra) {
  mark(kCuLaunchKernelPtsz);
  (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
  (void)blockDimZ, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuLaunchKernelEx)(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                   void** extra) {
  mark(kCuLaunchKernelEx);
  (void)f, (void)kernelParams, (void)extra;
  return config != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

MOCK_API CUresult ENTRY(cuLaunchKernelEx_ptsz)(const CUlaunchConfig* config, CUfunction f,
                                        void** kernelParams, void** extra) {
  mark(kCuLaunchKernelExPtsz);
  (void)f, (void)kernelParams, (void)extra;
  return config != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static long oom_above_cache = -1;

// MOCK_CUDA_OOM_ABOVE: the largest allocation that succeeds; -2 when unset (no limit).
static long oom_above(void) {
  long v = __atomic_load_n(&oom_above_cache, __ATOMIC_RELAXED);
  if (v != -1) return v;
  v = -2;
  const char* text = getenv("MOCK_CUDA_OOM_ABOVE");
  if (text != NULL && *text != '\0') {
    char* end = NULL;
    errno = 0;
    long parsed = strtol(text, &end, 10);
    if (errno == 0 && *end == '\0' && parsed >= 0) v = parsed;
  }
  __atomic_store_n(&oom_above_cache, v, __ATOMIC_RELAXED);
  return v;
}

static CUresult allocate(unsigned long long* out, size_t bytesize) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  long limit = oom_above();
  if (limit >= 0 && bytesize > (size_t)limit) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = malloc(bytesize != 0 ? bytesize : 1);
  *out = (unsigned long long)(uintptr_t)p;
  return p != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult allocate_host(void** out, size_t bytesize) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long p = 0;
  CUresult rc = allocate(&p, bytesize);
  if (rc == CUDA_SUCCESS) *out = (void*)(uintptr_t)p;
  return rc;
}

MOCK_API CUresult ENTRY(cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize) {
  mark(kCuMemAlloc);
  return allocate(dptr, bytesize);
}

MOCK_API CUresult ENTRY(cuMemFree_v2)(CUdeviceptr dptr) {
  mark(kCuMemFree);
  free((void*)(uintptr_t)dptr);
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemAllocManaged)(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  mark(kCuMemAllocManaged);
  (void)flags;
  return allocate(dptr, bytesize);
}

MOCK_API CUresult ENTRY(cuMemAllocAsync)(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  mark(kCuMemAllocAsync);
  (void)hStream;
  return allocate(dptr, bytesize);
}

MOCK_API CUresult ENTRY(cuMemAllocAsync_ptsz)(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  mark(kCuMemAllocAsyncPtsz);
  (void)hStream;
  return allocate(dptr, bytesize);
}

MOCK_API CUresult ENTRY(cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream) {
  mark(kCuMemFreeAsync);
  (void)hStream;
  free((void*)(uintptr_t)dptr);
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemFreeAsync_ptsz)(CUdeviceptr dptr, CUstream hStream) {
  mark(kCuMemFreeAsyncPtsz);
  (void)hStream;
  free((void*)(uintptr_t)dptr);
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemAllocHost_v2)(void** pp, size_t bytesize) {
  mark(kCuMemAllocHost);
  return allocate_host(pp, bytesize);
}

MOCK_API CUresult ENTRY(cuMemHostAlloc)(void** pp, size_t bytesize, unsigned int Flags) {
  mark(kCuMemHostAlloc);
  (void)Flags;
  return allocate_host(pp, bytesize);
}

MOCK_API CUresult ENTRY(cuMemFreeHost)(void* p) {
  mark(kCuMemFreeHost);
  free(p);
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemAllocPitch_v2)(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                     size_t Height, unsigned int ElementSizeBytes) {
  mark(kCuMemAllocPitch);
  (void)ElementSizeBytes;
  if (pPitch == NULL) return CUDA_ERROR_INVALID_VALUE;
  long limit = oom_above();
  if (limit >= 0 && WidthInBytes * Height > (size_t)limit) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t pitch = (WidthInBytes + 511) / 512 * 512;
  CUresult rc = allocate(dptr, pitch * Height);
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

// A handle is the address of a malloc'd block of the size (never dereferenced by callers).
MOCK_API CUresult ENTRY(cuMemCreate)(CUmemGenericAllocationHandle* handle, size_t size,
                              const CUmemAllocationProp* prop, unsigned long long flags) {
  mark(kCuMemCreate);
  (void)prop, (void)flags;
  return allocate(handle, size);
}

MOCK_API CUresult ENTRY(cuMemRelease)(CUmemGenericAllocationHandle handle) {
  mark(kCuMemRelease);
  free((void*)(uintptr_t)handle);
  return CUDA_SUCCESS;
}

static char dummy_graph, dummy_exec;

MOCK_API CUresult ENTRY(cuStreamBeginCapture_v2)(CUstream hStream, CUstreamCaptureMode mode) {
  mark(kCuStreamBeginCapture);
  (void)hStream, (void)mode;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuStreamBeginCapture_v2_ptsz)(CUstream hStream, CUstreamCaptureMode mode) {
  mark(kCuStreamBeginCapturePtsz);
  (void)hStream, (void)mode;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuStreamEndCapture)(CUstream hStream, CUgraph* phGraph) {
  mark(kCuStreamEndCapture);
  (void)hStream;
  if (phGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
  *phGraph = (CUgraph)(void*)&dummy_graph;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuStreamEndCapture_ptsz)(CUstream hStream, CUgraph* phGraph) {
  mark(kCuStreamEndCapturePtsz);
  (void)hStream;
  if (phGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
  *phGraph = (CUgraph)(void*)&dummy_graph;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuGraphInstantiateWithFlags)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              unsigned long long flags) {
  mark(kCuGraphInstantiateWithFlags);
  (void)hGraph, (void)flags;
  if (phGraphExec == NULL) return CUDA_ERROR_INVALID_VALUE;
  *phGraphExec = (CUgraphExec)(void*)&dummy_exec;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuGraphInstantiateWithParams)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                               CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  mark(kCuGraphInstantiateWithParams);
  (void)hGraph, (void)params;
  if (phGraphExec == NULL) return CUDA_ERROR_INVALID_VALUE;
  *phGraphExec = (CUgraphExec)(void*)&dummy_exec;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuGraphInstantiateWithParams_ptsz)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                    CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  mark(kCuGraphInstantiateWithParamsPtsz);
  (void)hGraph, (void)params;
  if (phGraphExec == NULL) return CUDA_ERROR_INVALID_VALUE;
  *phGraphExec = (CUgraphExec)(void*)&dummy_exec;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuGraphExecUpdate_v2)(CUgraphExec hGraphExec, CUgraph hGraph,
                                       CUgraphExecUpdateResultInfo* resultInfo) {
  mark(kCuGraphExecUpdate);
  (void)hGraphExec, (void)hGraph, (void)resultInfo;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpy)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  mark(kCuMemcpy);
  (void)dst, (void)src, (void)ByteCount;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpy_ptds)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  mark(kCuMemcpyPtds);
  (void)dst, (void)src, (void)ByteCount;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                CUstream hStream) {
  mark(kCuMemcpyAsync);
  (void)dst, (void)src, (void)ByteCount, (void)hStream;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpyAsync_ptsz)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                     CUstream hStream) {
  mark(kCuMemcpyAsyncPtsz);
  (void)dst, (void)src, (void)ByteCount, (void)hStream;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpyHtoD_v2)(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  mark(kCuMemcpyHtoD);
  (void)dstDevice, (void)srcHost, (void)ByteCount;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpyHtoD_v2_ptds)(CUdeviceptr dstDevice, const void* srcHost,
                                       size_t ByteCount) {
  mark(kCuMemcpyHtoDPtds);
  (void)dstDevice, (void)srcHost, (void)ByteCount;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpyDtoH_v2)(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  mark(kCuMemcpyDtoH);
  (void)dstHost, (void)srcDevice, (void)ByteCount;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuMemcpyDtoH_v2_ptds)(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  mark(kCuMemcpyDtoHPtds);
  (void)dstHost, (void)srcDevice, (void)ByteCount;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuCtxSynchronize)(void) {
  mark(kCuCtxSynchronize);
  spin_wait();
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuStreamSynchronize)(CUstream hStream) {
  mark(kCuStreamSynchronize);
  (void)hStream;
  spin_wait();
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuStreamSynchronize_ptsz)(CUstream hStream) {
  mark(kCuStreamSynchronizePtsz);
  (void)hStream;
  spin_wait();
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuEventSynchronize)(CUevent hEvent) {
  mark(kCuEventSynchronize);
  (void)hEvent;
  spin_wait();
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream) {
  mark(kCuGraphLaunch);
  (void)hGraphExec, (void)hStream;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuGraphLaunch_ptsz)(CUgraphExec hGraphExec, CUstream hStream) {
  mark(kCuGraphLaunchPtsz);
  (void)hGraphExec, (void)hStream;
  return CUDA_SUCCESS;
}

MOCK_API CUresult ENTRY(cuDriverGetVersion)(int* driverVersion) {
  mark(kCuDriverGetVersion);
  if (driverVersion == NULL) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = 12040;
  return CUDA_SUCCESS;
}

#if defined(__x86_64__)
// Never equal to the compare's immediate: the je is not taken, as in a process without a
// CUDA debugger or profiler attached.
__attribute__((used, visibility("hidden"))) volatile int mock_stub_flag = 0;

#define DRIVER_ENTRIES(X) \
  X(cuLaunchKernel) \
  X(cuLaunchKernel_ptsz) \
  X(cuLaunchKernelEx) \
  X(cuLaunchKernelEx_ptsz) \
  X(cuMemAlloc_v2) \
  X(cuMemFree_v2) \
  X(cuMemAllocManaged) \
  X(cuMemAllocAsync) \
  X(cuMemAllocAsync_ptsz) \
  X(cuMemFreeAsync) \
  X(cuMemFreeAsync_ptsz) \
  X(cuMemAllocHost_v2) \
  X(cuMemHostAlloc) \
  X(cuMemFreeHost) \
  X(cuMemAllocPitch_v2) \
  X(cuMemCreate) \
  X(cuMemRelease) \
  X(cuStreamBeginCapture_v2) \
  X(cuStreamBeginCapture_v2_ptsz) \
  X(cuStreamEndCapture) \
  X(cuStreamEndCapture_ptsz) \
  X(cuGraphInstantiateWithFlags) \
  X(cuGraphInstantiateWithParams) \
  X(cuGraphInstantiateWithParams_ptsz) \
  X(cuGraphExecUpdate_v2) \
  X(cuMemcpy) \
  X(cuMemcpy_ptds) \
  X(cuMemcpyAsync) \
  X(cuMemcpyAsync_ptsz) \
  X(cuMemcpyHtoD_v2) \
  X(cuMemcpyHtoD_v2_ptds) \
  X(cuMemcpyDtoH_v2) \
  X(cuMemcpyDtoH_v2_ptds) \
  X(cuCtxSynchronize) \
  X(cuStreamSynchronize) \
  X(cuStreamSynchronize_ptsz) \
  X(cuEventSynchronize) \
  X(cuGraphLaunch) \
  X(cuGraphLaunch_ptsz) \
  X(cuDriverGetVersion)

#define DRIVER_STUB(name)                                         \
  __asm__(".text\n"                                                \
          ".globl " #name "\n"                                     \
          ".type " #name ",@function\n"                            \
          ".p2align 4\n" #name ":\n"                               \
          "  cmpl $0x321cba00, mock_stub_flag(%rip)\n"             \
          "  je 1f\n"                                               \
          "  jmp impl_" #name "\n"                                  \
          "1:\n"                                                    \
          "  jmp impl_" #name "\n"                                  \
          ".size " #name ", .-" #name "\n");
DRIVER_ENTRIES(DRIVER_STUB)
#endif
