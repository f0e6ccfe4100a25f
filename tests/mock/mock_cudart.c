// Mock CUDA runtime, built as libcudart.so.12: the real exported names with the real C
// signatures (CUDA 12 cuda_runtime_api.h), so uprobes, discovery and the workload see what they
// would see on a GPU host. No GPU and no driver.
//
// Behaviour, for tests:
//  - every call succeeds (returns 0) unless an output pointer is NULL;
//  - "device" memory is host memory from malloc, freed by cudaFree / cudaFreeAsync;
//  - cudaMemcpy* copy only for cudaMemcpyHostToHost / cudaMemcpyDefault with both pointers
//    non-NULL; other copies and cudaMemset* are no-ops (safe with fake device pointers);
//  - the synchronize calls spin until the calling thread has used MOCK_CUDA_SYNC_CPU_US
//    microseconds of CPU (default 50), so CPU contention inflates their wall time the way it
//    inflates a real spin-wait; with MOCK_CUDA_SYNC_SLEEP_US (default 0) they first sleep that
//    long, a blocking wait for a GPU that is busy (a GPU-bound job); while the file named by
//    MOCK_CUDA_HOLD_FILE exists they do not return (polling it every 10 ms, asleep): a hung
//    GPU, released by removing the file; while MOCK_CUDA_SYNC_SCALE_FILE names a file holding a
//    number, the sleep is that many times longer (read at every call): the GPU's kernels run
//    slower, as under a clock held down by power or heat (the test writes max clock / clock);
//  - after mock_cuda_set_escape(buf) (not a CUDA symbol: for the test workload), the calling
//    thread's next cudaStreamSynchronize leaves by siglongjmp(buf) instead of returning, as a
//    call unwound by an exception does: its uretprobe never fires;
//  - cudaMalloc sleeps MOCK_CUDA_MALLOC_US microseconds of wall time (default 0): allocator stall;
//    every MOCK_CUDA_MALLOC_SLOW_EVERY-th cudaMalloc of the process (default 0: none) also takes
//    its slow path, a caching allocator growing its pool: MOCK_CUDA_MALLOC_SLOW_US microseconds
//    asleep, or of this thread's CPU time when MOCK_CUDA_MALLOC_SLOW_SPIN=1 (on-CPU work);
//    MOCK_CUDA_MALLOC_CPU_US (default 0) microseconds of CPU in every cudaMalloc.
//  - cudaLaunchKernel uses MOCK_CUDA_LAUNCH_CPU_US microseconds of CPU (default 0): a launch's host
//    cost, for launch-bound loops (bench/job_cost.sh); then, as the real runtime does, it launches
//    through the driver: cuLaunchKernel (cuLaunchKernel_ptsz for cudaLaunchKernel_ptsz) of the
//    libcuda.so.1 the loader finds for this library (its RUNPATH is $ORIGIN: the mock driver
//    beside it), or of MOCK_CUDART_DRIVER; MOCK_CUDART_DRIVER=none, or no libcuda.so.1 to be
//    found, keeps launches in the runtime;
//  - an allocation asking for more than MOCK_CUDA_OOM_ABOVE bytes (unset: no limit) returns
//    cudaErrorMemoryAllocation, as a GPU out of memory does;
//  - with MOCK_CUDART_DRIVER=PATH, cudaMalloc and cudaFree go through cuMemAlloc_v2 and
//    cuMemFree_v2 of that libcuda (dlopen'd at the first call), as the real runtime reaches the
//    driver underneath;
//  - pitched allocations round the row up to a pitch of 512 bytes; the graph calls hand out
//    dummy handles, and cudaGraphInstantiate* and cudaGraphExecUpdate spin for
//    MOCK_CUDA_INSTANTIATE_CPU_US microseconds of CPU (default 0): building a graph is host work.
// Every entry point is noinline and marks its own index, so each keeps a distinct address
// (no identical-code folding) and a uprobe on one never fires for another.
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOCK_API __attribute__((noinline, used, visibility("default")))

typedef int cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct cudaGraphInstantiateParams_st cudaGraphInstantiateParams;  // through a pointer
typedef struct cudaGraphExecUpdateResultInfo_st cudaGraphExecUpdateResultInfo;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0 };

struct cudaPitchedPtr {
  void* ptr;
  size_t pitch;
  size_t xsize;
  size_t ysize;
};
struct cudaExtent {
  size_t width;
  size_t height;
  size_t depth;
};

struct dim3 {
  unsigned int x, y, z;
};
typedef struct dim3 dim3;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
};

// Each entry point stores its own index here, so no two bodies are identical and none can be
// folded onto another's address. A plain relaxed store, not a counter: an atomic increment
// would put a lock-prefixed instruction first, and x86 uprobes refuse to probe those.
enum {
  kCudaMalloc,
  kCudaFree,
  kCudaMallocManaged,
  kCudaMallocAsync,
  kCudaMallocAsyncPtsz,
  kCudaFreeAsync,
  kCudaFreeAsyncPtsz,
  kCudaLaunchKernel,
  kCudaLaunchKernelPtsz,
  kCudaMemcpy,
  kCudaMemcpyPtds,
  kCudaMemcpyAsync,
  kCudaMemcpyAsyncPtsz,
  kCudaMemset,
  kCudaMemsetPtds,
  kCudaStreamSynchronize,
  kCudaStreamSynchronizePtsz,
  kCudaDeviceSynchronize,
  kCudaEventSynchronize,
  kCudaGraphLaunch,
  kCudaGraphLaunchPtsz,
  kCudaRuntimeGetVersion,
  kMockCudaVersion,
  kCudaMallocHost,
  kCudaHostAlloc,
  kCudaFreeHost,
  kCudaMallocPitch,
  kCudaMalloc3D,
  kCudaStreamBeginCapture,
  kCudaStreamBeginCapturePtsz,
  kCudaStreamEndCapture,
  kCudaStreamEndCapturePtsz,
  kCudaGraphInstantiate,
  kCudaGraphInstantiateWithFlags,
  kCudaGraphInstantiateWithParams,
  kCudaGraphInstantiateWithParamsPtsz,
  kCudaGraphExecUpdate,
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

// Reads a non-negative microsecond count from the environment once; racing first readers
// compute the same value, so a relaxed atomic is enough.
static long env_us(const char* name, long fallback, long* cache) {
  long v = __atomic_load_n(cache, __ATOMIC_RELAXED);
  if (v >= 0) return v;
  v = fallback;
  const char* text = getenv(name);
  if (text != NULL && *text != '\0') {
    char* end = NULL;
    errno = 0;
    long parsed = strtol(text, &end, 10);
    if (errno == 0 && *end == '\0' && parsed >= 0) v = parsed;
  }
  __atomic_store_n(cache, v, __ATOMIC_RELAXED);
  return v;
}

static long sync_cpu_us_cache = -1;
static long malloc_us_cache = -1;
static long slow_every_cache = -1, slow_us_cache = -1, slow_spin_cache = -1, malloc_cpu_cache = -1;
static unsigned long mallocs = 0;

static long long thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Busy-waits until this thread has consumed MOCK_CUDA_SYNC_CPU_US of CPU time, like the
// driver's spin-wait on a stream: preempted time does not count, so contention stretches it.
static long sync_sleep_us_cache = -1;
static void sleep_us(long us);

// A hung synchronize: asleep while MOCK_CUDA_HOLD_FILE exists.
static void hold(void) {
  const char* path = getenv("MOCK_CUDA_HOLD_FILE");
  if (path == NULL || *path == '\0') return;
  while (access(path, F_OK) == 0) sleep_us(10000);
}

// MOCK_CUDA_SYNC_SCALE_FILE's number, else 1.
static double sync_scale(void) {
  const char* path = getenv("MOCK_CUDA_SYNC_SCALE_FILE");
  if (path == NULL || *path == '\0') return 1;
  FILE* f = fopen(path, "r");
  if (f == NULL) return 1;
  double v = 1;
  if (fscanf(f, "%lf", &v) != 1 || v < 0.01 || v > 1000) v = 1;
  fclose(f);
  return v;
}

static void spin_wait(void) {
  hold();
  long sleep = env_us("MOCK_CUDA_SYNC_SLEEP_US", 0, &sync_sleep_us_cache);
  if (sleep > 0) sleep = (long)((double)sleep * sync_scale());
  if (sleep > 0) sleep_us(sleep);
  long us = env_us("MOCK_CUDA_SYNC_CPU_US", 50, &sync_cpu_us_cache);
  if (us == 0) return;
  long long until = thread_cpu_ns() + (long long)us * 1000LL;
  while (thread_cpu_ns() < until) {
  }
}

static void spin_cpu_us(long us) {
  long long until = thread_cpu_ns() + (long long)us * 1000LL;
  while (thread_cpu_ns() < until) {
  }
}

static void sleep_us(long us) {
  struct timespec left = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
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

static cudaError_t allocate(void** ptr, size_t size) {
  if (ptr == NULL) return cudaErrorInvalidValue;
  long limit = oom_above();
  if (limit >= 0 && size > (size_t)limit) return cudaErrorMemoryAllocation;
  *ptr = malloc(size != 0 ? size : 1);
  return *ptr != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

// MOCK_CUDART_DRIVER's cuMemAlloc_v2 and cuMemFree_v2, or NULL without it.
typedef int (*cu_mem_alloc_fn)(unsigned long long*, size_t);
typedef int (*cu_mem_free_fn)(unsigned long long);
static void* driver_symbol(const char* name) {
  static void* handle;
  const char* path = getenv("MOCK_CUDART_DRIVER");
  if (path == NULL || *path == '\0') return NULL;
  void* h = __atomic_load_n(&handle, __ATOMIC_ACQUIRE);
  if (h == NULL) {
    h = dlopen(path, RTLD_NOW);
    if (h == NULL) return NULL;
    __atomic_store_n(&handle, h, __ATOMIC_RELEASE);
  }
  return dlsym(h, name);
}

// The driver kernel launches go through (cudaLaunchKernel), or NULL: MOCK_CUDART_DRIVER, else
// "libcuda.so.1" as the loader finds it for this library; "none" or a failed dlopen: NULL
// (remembered: one dlopen per process).
static void* launch_symbol(const char* name) {
  static void* handle;  // (void*)-1: none
  void* h = __atomic_load_n(&handle, __ATOMIC_ACQUIRE);
  if (h == NULL) {
    const char* path = getenv("MOCK_CUDART_DRIVER");
    if (path == NULL || *path == '\0') path = "libcuda.so.1";
    h = strcmp(path, "none") == 0 ? NULL : dlopen(path, RTLD_NOW);
    if (h == NULL) h = (void*)-1;
    __atomic_store_n(&handle, h, __ATOMIC_RELEASE);
  }
  return h == (void*)-1 ? NULL : dlsym(h, name);
}

typedef int (*cu_launch_fn)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                            void** extra);

static cudaError_t launch_through_driver(const char* symbol, const void* func, dim3 grid,
                                         dim3 block, void** args, size_t shared,
                                         cudaStream_t stream) {
  cu_launch_fn launch = (cu_launch_fn)launch_symbol(symbol);
  if (launch == NULL) return cudaSuccess;
  return launch((void*)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                (unsigned)shared, stream, args, NULL);
}

static long instantiate_cache = -1;
static void graph_build_work(void);

static cudaError_t copy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  if ((kind == cudaMemcpyHostToHost || kind == cudaMemcpyDefault) && dst != NULL && src != NULL &&
      count != 0) {
    memmove(dst, src, count);
  }
  return cudaSuccess;
}

MOCK_API cudaError_t cudaMalloc(void** devPtr, size_t size) {
  mark(kCudaMalloc);
  long us = env_us("MOCK_CUDA_MALLOC_US", 0, &malloc_us_cache);
  if (us > 0) sleep_us(us);
  long cpu = env_us("MOCK_CUDA_MALLOC_CPU_US", 0, &malloc_cpu_cache);
  if (cpu > 0) spin_cpu_us(cpu);
  long every = env_us("MOCK_CUDA_MALLOC_SLOW_EVERY", 0, &slow_every_cache);
  unsigned long n = __atomic_add_fetch(&mallocs, 1, __ATOMIC_RELAXED);
  if (every > 0 && n % (unsigned long)every == 0) {
    long slow = env_us("MOCK_CUDA_MALLOC_SLOW_US", 20000, &slow_us_cache);
    if (env_us("MOCK_CUDA_MALLOC_SLOW_SPIN", 0, &slow_spin_cache) == 1) {
      spin_cpu_us(slow);
    } else {
      sleep_us(slow);
    }
  }
  cu_mem_alloc_fn via = (cu_mem_alloc_fn)driver_symbol("cuMemAlloc_v2");
  if (via != NULL && devPtr != NULL) {
    unsigned long long p = 0;
    int rc = via(&p, size);
    *devPtr = (void*)(size_t)p;
    return rc;
  }
  return allocate(devPtr, size);
}

MOCK_API cudaError_t cudaFree(void* devPtr) {
  mark(kCudaFree);
  cu_mem_free_fn via = (cu_mem_free_fn)driver_symbol("cuMemFree_v2");
  if (via != NULL) return via((unsigned long long)(size_t)devPtr);
  free(devPtr);
  return cudaSuccess;
}

MOCK_API cudaError_t cudaMallocHost(void** ptr, size_t size) {
  mark(kCudaMallocHost);
  return allocate(ptr, size);
}

MOCK_API cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  mark(kCudaHostAlloc);
  (void)flags;
  return allocate(pHost, size);
}

MOCK_API cudaError_t cudaFreeHost(void* ptr) {
  mark(kCudaFreeHost);
  free(ptr);
  return cudaSuccess;
}

static size_t pitch_of(size_t width) { return (width + 511) / 512 * 512; }

MOCK_API cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  mark(kCudaMallocPitch);
  if (pitch == NULL) return cudaErrorInvalidValue;
  long limit = oom_above();
  if (limit >= 0 && width * height > (size_t)limit) return cudaErrorMemoryAllocation;
  cudaError_t rc = allocate(devPtr, pitch_of(width) * height);
  if (rc == cudaSuccess) *pitch = pitch_of(width);
  return rc;
}

MOCK_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent) {
  mark(kCudaMalloc3D);
  if (pitchedDevPtr == NULL) return cudaErrorInvalidValue;
  long limit = oom_above();
  if (limit >= 0 && extent.width * extent.height * extent.depth > (size_t)limit) {
    return cudaErrorMemoryAllocation;
  }
  size_t pitch = pitch_of(extent.width);
  void* p = NULL;
  cudaError_t rc = allocate(&p, pitch * extent.height * extent.depth);
  if (rc != cudaSuccess) return rc;
  pitchedDevPtr->ptr = p;
  pitchedDevPtr->pitch = pitch;
  pitchedDevPtr->xsize = extent.width;
  pitchedDevPtr->ysize = extent.height;
  return cudaSuccess;
}

static void graph_build_work(void) {
  long us = env_us("MOCK_CUDA_INSTANTIATE_CPU_US", 0, &instantiate_cache);
  if (us > 0) spin_cpu_us(us);
}

MOCK_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  mark(kCudaStreamBeginCapture);
  (void)stream, (void)mode;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                 enum cudaStreamCaptureMode mode) {
  mark(kCudaStreamBeginCapturePtsz);
  (void)stream, (void)mode;
  return cudaSuccess;
}

static char dummy_graph, dummy_exec;

MOCK_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  mark(kCudaStreamEndCapture);
  (void)stream;
  if (pGraph == NULL) return cudaErrorInvalidValue;
  *pGraph = (cudaGraph_t)(void*)&dummy_graph;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* pGraph) {
  mark(kCudaStreamEndCapturePtsz);
  (void)stream;
  if (pGraph == NULL) return cudaErrorInvalidValue;
  *pGraph = (cudaGraph_t)(void*)&dummy_graph;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) {
  mark(kCudaGraphInstantiate);
  (void)graph, (void)flags;
  if (pGraphExec == NULL) return cudaErrorInvalidValue;
  graph_build_work();
  *pGraphExec = (cudaGraphExec_t)(void*)&dummy_exec;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                   unsigned long long flags) {
  mark(kCudaGraphInstantiateWithFlags);
  (void)graph, (void)flags;
  if (pGraphExec == NULL) return cudaErrorInvalidValue;
  graph_build_work();
  *pGraphExec = (cudaGraphExec_t)(void*)&dummy_exec;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                    cudaGraphInstantiateParams* params) {
  mark(kCudaGraphInstantiateWithParams);
  (void)graph, (void)params;
  if (pGraphExec == NULL) return cudaErrorInvalidValue;
  graph_build_work();
  *pGraphExec = (cudaGraphExec_t)(void*)&dummy_exec;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* pGraphExec,
                                                         cudaGraph_t graph,
                                                         cudaGraphInstantiateParams* params) {
  mark(kCudaGraphInstantiateWithParamsPtsz);
  (void)graph, (void)params;
  if (pGraphExec == NULL) return cudaErrorInvalidValue;
  graph_build_work();
  *pGraphExec = (cudaGraphExec_t)(void*)&dummy_exec;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                         cudaGraphExecUpdateResultInfo* resultInfo) {
  mark(kCudaGraphExecUpdate);
  (void)hGraphExec, (void)hGraph, (void)resultInfo;
  graph_build_work();
  return cudaSuccess;
}

MOCK_API cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  mark(kCudaMallocManaged);
  (void)flags;
  return allocate(devPtr, size);
}

MOCK_API cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  mark(kCudaMallocAsync);
  (void)hStream;
  return allocate(devPtr, size);
}

MOCK_API cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  mark(kCudaMallocAsyncPtsz);
  (void)hStream;
  return allocate(devPtr, size);
}

MOCK_API cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  mark(kCudaFreeAsync);
  (void)hStream;
  free(devPtr);
  return cudaSuccess;
}

MOCK_API cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  mark(kCudaFreeAsyncPtsz);
  (void)hStream;
  free(devPtr);
  return cudaSuccess;
}

// MOCK_CUDA_LAUNCH_CPU_US (default 0): microseconds of this thread's CPU in every
// cudaLaunchKernel, what a real launch costs the host (~5 us): a launch-bound loop for
// bench/job_cost.sh.
static long launch_cpu_us_cache = -1;

MOCK_API cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                      size_t sharedMem, cudaStream_t stream) {
  mark(kCudaLaunchKernel);
  const long cpu = env_us("MOCK_CUDA_LAUNCH_CPU_US", 0, &launch_cpu_us_cache);
  if (cpu > 0) spin_cpu_us(cpu);
  return launch_through_driver("cuLaunchKernel", func, gridDim, blockDim, args, sharedMem, stream);
}

MOCK_API cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim,
                                           void** args, size_t sharedMem, cudaStream_t stream) {
  mark(kCudaLaunchKernelPtsz);
  return launch_through_driver("cuLaunchKernel_ptsz", func, gridDim, blockDim, args, sharedMem,
                               stream);
}

MOCK_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t count,
                                enum cudaMemcpyKind kind) {
  mark(kCudaMemcpy);
  return copy(dst, src, count, kind);
}

MOCK_API cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count,
                                     enum cudaMemcpyKind kind) {
  mark(kCudaMemcpyPtds);
  return copy(dst, src, count, kind);
}

MOCK_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                     enum cudaMemcpyKind kind, cudaStream_t stream) {
  mark(kCudaMemcpyAsync);
  (void)stream;
  return copy(dst, src, count, kind);
}

MOCK_API cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count,
                                          enum cudaMemcpyKind kind, cudaStream_t stream) {
  mark(kCudaMemcpyAsyncPtsz);
  (void)stream;
  return copy(dst, src, count, kind);
}

MOCK_API cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  mark(kCudaMemset);
  (void)devPtr, (void)value, (void)count;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  mark(kCudaMemsetPtds);
  (void)devPtr, (void)value, (void)count;
  return cudaSuccess;
}

static __thread sigjmp_buf* escape_buf;

MOCK_API void mock_cuda_set_escape(void* buf) { escape_buf = buf; }

MOCK_API cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  mark(kCudaStreamSynchronize);
  (void)stream;
  if (escape_buf != NULL) {
    sigjmp_buf* to = escape_buf;
    escape_buf = NULL;
    siglongjmp(*to, 1);
  }
  spin_wait();
  return cudaSuccess;
}

MOCK_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  mark(kCudaStreamSynchronizePtsz);
  (void)stream;
  spin_wait();
  return cudaSuccess;
}

MOCK_API cudaError_t cudaDeviceSynchronize(void) {
  mark(kCudaDeviceSynchronize);
  spin_wait();
  return cudaSuccess;
}

MOCK_API cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  mark(kCudaEventSynchronize);
  (void)event;
  spin_wait();
  return cudaSuccess;
}

MOCK_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  mark(kCudaGraphLaunch);
  (void)graphExec, (void)stream;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  mark(kCudaGraphLaunchPtsz);
  (void)graphExec, (void)stream;
  return cudaSuccess;
}

MOCK_API cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  mark(kCudaRuntimeGetVersion);
  if (runtimeVersion == NULL) return cudaErrorInvalidValue;
  *runtimeVersion = 12040;
  return cudaSuccess;
}

// Not a CUDA symbol: lets a test tell the mock from a real libcudart (12.4 → 12040).
MOCK_API int mock_cuda_version(void) {
  mark(kMockCudaVersion);
  return 12040;
}
