// cuda_workload: a CUDA-calling process for privileged tests. It dlopen()s libcudart (and
// optionally libcuda and libnccl) by path, the way frameworks load them, and makes an exact,
// known number of calls through the real entry points with correctly typed arguments, so a test
// can compare the daemon's histogram counts with what was done. Links only with -ldl -lpthread;
// no CUDA or NCCL headers. Works against the mocks in this folder; arguments are plausible but
// not valid on a real GPU. The NCCL calls live in workload_nccl.c.
#define _GNU_SOURCE

#include <dlfcn.h>
#include <setjmp.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workload_nccl.h"

static const char kUsage[] =
    "usage: cuda_workload --cudart PATH [--cuda PATH] [--nccl PATH [--rank R --nranks N]]\n"
    "                     [--calls SPEC] [--iterations N] [--threads T] [--start-delay-ms D]\n"
    "                     [--ready-fd FD] [--go-fd FD] [--spacing-us U] [--wait-fd FD]\n"
    "                     [--touch-kb K] [--leak-kb K] [--leak-comms C]\n"
    "                     [--alloc-bytes B] [--warmup-calls SPEC] [--exit-fd FD] [--workers W]\n"
    "Loads CUDA libraries with dlopen and calls them through dlsym'd pointers.\n"
    "  --cudart PATH        libcudart to load (required)\n"
    "  --cuda PATH          libcuda to load as well (needed for cu* names)\n"
    "  --nccl PATH          libnccl.so.2 to load as well (needed for nccl* names)\n"
    "  --rank R --nranks N  after the go byte, ncclGetUniqueId and ncclCommInitRank(&comm, N,\n"
    "                       id, R) once; every NCCL op in SPEC uses that communicator, and\n"
    "                       ncclCommDestroy ends it before exit (needs --nccl; both or neither)\n"
    "  --calls SPEC         comma list of name:count, done in order by every thread on every\n"
    "                       iteration; a name is looked up in the cudart handle first, then\n"
    "                       the cuda one, then the nccl one (default "
    "cudaMalloc:1,cudaLaunchKernel:10,cudaStreamSynchronize:10,cudaFree:1).\n"
    "                       NCCL ops (ncclAllReduce, ncclAllGather, ncclReduceScatter,\n"
    "                       ncclBroadcast, ncclReduce, ncclAlltoAll, ncclSend, ncclRecv) move\n"
    "                       count=1048576 ncclFloat32 (4 MiB) with ncclSum, root 0, peer\n"
    "                       rank+-1; also ncclGroupStart/End, ncclCommUserRank/Count,\n"
    "                       ncclGetVersion\n"
    "  --iterations N       times each thread runs SPEC (default 1)\n"
    "  --dlopen-loop-ms MS  only load and unload --cudart in a loop for MS ms, then exit\n"
    "  --threads T          calling threads (default 1)\n"
    "  --start-delay-ms D   sleep after loading, before the first call (default 0)\n"
    "  --ready-fd FD        then write one byte 'r' to FD\n"
    "  --go-fd FD           then block until one byte is read from FD\n"
    "  --spacing-us U       sleep between two calls of the same thread (default 0)\n"
    "  --wait-fd FD         each thread reads one byte from FD before each iteration (a\n"
    "                       trainer waiting for its data loader); end of file is an error\n"
    "  --touch-kb K         after each iteration, each thread maps K KiB of anonymous memory,\n"
    "                       writes every page and unmaps it (host staging buffers)\n"
    "  --leak-kb K          the same, but keeps the memory: resident size grows by K KiB per\n"
    "                       iteration and thread (drives a memory-limited cgroup to OOM)\n"
    "  --escape-first-sync  before its loop each thread makes the first call of SPEC (it must\n"
    "                       be cudaStreamSynchronize) once more, and the mock leaves it by\n"
    "                       longjmp (mock_cuda_set_escape), as an exception unwinds a call\n"
    "  --leak-comms C       after the communicator, C more ncclCommInitRank calls whose\n"
    "                       communicators are never destroyed (needs --rank)\n"
    "  --alloc-bytes B      size of each cudaMalloc, cudaMallocManaged, cudaMallocAsync,\n"
    "                       cudaMallocHost, cudaHostAlloc and of their driver twins and\n"
    "                       cuMemCreate (default 1024); the pitched and 3D calls always ask\n"
    "                       for rows of 1000 bytes, 8 rows (a 512-byte pitch: 8192 bytes)\n"
    "  --warmup-calls SPEC  each thread makes these calls once before its loop\n"
    "  --workers W          before the first call, fork W children named pt_data_worker that\n"
    "                       spin on the CPU until the calls are done (a DataLoader's\n"
    "                       workers: children of the CUDA process, on its CPUs)\n"
    "  --exit-fd FD         after the last call, block until one byte (or end of file) is\n"
    "                       read from FD, then exit without freeing what is still live\n"
    "                       (the NCCL communicator is destroyed after that byte)\n"
    "A free releases the thread's newest live allocation of its family (runtime device,\n"
    "driver device, pinned host, cuMemCreate handle), or passes NULL/0 when there is none.\n"
    "Makes exactly (sum(count) * N + sum(warmup counts)) * T calls (plus ncclGetUniqueId,\n"
    "ncclCommInitRank and ncclCommDestroy with --rank), prints\n"
    "'calls=<total> failed=<F> threads=<T> pid=<pid>' and exits 0.\n"
    "Exit 2: bad usage or a call name that is unknown or not exported; exit 1: a library\n"
    "cannot be loaded, a thread cannot start, ncclCommInitRank fails, or the ready/go/wait\n"
    "pipe fails.\n";
static const char kProgram[] = "cuda_workload";

#include "tool_cli.h"

static const char kDefaultSpec[] =
    "cudaMalloc:1,cudaLaunchKernel:10,cudaStreamSynchronize:10,cudaFree:1";

// ---- CUDA types, declared locally with the real layouts (cuda_runtime_api.h, cuda.h) ----
typedef int cudaError_t;
typedef int CUresult;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUfunc_st* CUfunction;
typedef unsigned long long CUdeviceptr;
typedef struct dim3 {
  unsigned int x, y, z;
} dim3;
enum cudaMemcpyKind { cudaMemcpyDefault = 4 };
enum { cudaMemAttachGlobal = 1 };
typedef struct CUlaunchConfig_st {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  struct CUlaunchAttribute_st* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

enum { kCopyBytes = 4096, kMaxLive = 4096, kPitchWidth = 1000, kPitchRows = 8 };
static size_t alloc_bytes = 1024;  // --alloc-bytes

// What one calling thread owns: buffers to copy between and the allocations not yet freed, per
// family (a free releases the newest one of its family, or passes NULL/0 when there is none).
struct thread_ctx {
  unsigned char src[kCopyBytes];
  unsigned char dst[kCopyBytes];
  void* live[kMaxLive];  // runtime device memory (cudaFree)
  int nlive;
  CUdeviceptr dlive[kMaxLive];  // driver device memory (cuMemFree_v2, cuMemFreeAsync)
  int ndlive;
  void* hlive[kMaxLive];  // pinned host memory (cudaFreeHost, cuMemFreeHost)
  int nhlive;
  unsigned long long handles[kMaxLive];  // cuMemCreate (cuMemRelease)
  int nhandles;
};

static void keep(struct thread_ctx* c, void* p) {
  if (p != NULL && c->nlive < kMaxLive) c->live[c->nlive++] = p;  // beyond that: leaked
}
static void* take(struct thread_ctx* c) { return c->nlive > 0 ? c->live[--c->nlive] : NULL; }
static void dkeep(struct thread_ctx* c, CUdeviceptr p) {
  if (p != 0 && c->ndlive < kMaxLive) c->dlive[c->ndlive++] = p;
}
static CUdeviceptr dtake(struct thread_ctx* c) { return c->ndlive > 0 ? c->dlive[--c->ndlive] : 0; }
static void hkeep(struct thread_ctx* c, void* p) {
  if (p != NULL && c->nhlive < kMaxLive) c->hlive[c->nhlive++] = p;
}
static void* htake(struct thread_ctx* c) { return c->nhlive > 0 ? c->hlive[--c->nhlive] : NULL; }
static CUdeviceptr dev(const void* p) { return (CUdeviceptr)(uintptr_t)p; }

// Stands in for a kernel's host stub / a CUfunction handle; only its address is used.
static const char kernel_stub[16];
static int kernel_arg = 42;
static void* kernel_args[] = {&kernel_arg};

// ---- one caller per signature: cast the symbol to its real type and call it ----
// Each returns the CUDA status (0 on success). caller_fn is in workload_nccl.h.

static int call_malloc(void* sym, struct thread_ctx* c) {
  void* p = NULL;
  int rc = ((cudaError_t(*)(void**, size_t))sym)(&p, alloc_bytes);
  if (rc == 0) keep(c, p);
  return rc;
}
static int call_malloc_managed(void* sym, struct thread_ctx* c) {
  void* p = NULL;
  int rc =
      ((cudaError_t(*)(void**, size_t, unsigned int))sym)(&p, alloc_bytes, cudaMemAttachGlobal);
  if (rc == 0) keep(c, p);
  return rc;
}
static int call_malloc_async(void* sym, struct thread_ctx* c) {
  void* p = NULL;
  int rc = ((cudaError_t(*)(void**, size_t, cudaStream_t))sym)(&p, alloc_bytes, NULL);
  if (rc == 0) keep(c, p);
  return rc;
}
static int call_free(void* sym, struct thread_ctx* c) {
  return ((cudaError_t(*)(void*))sym)(take(c));
}
static int call_free_async(void* sym, struct thread_ctx* c) {
  return ((cudaError_t(*)(void*, cudaStream_t))sym)(take(c), NULL);
}
static int call_launch_kernel(void* sym, struct thread_ctx* c) {
  (void)c;
  dim3 grid = {64, 1, 1}, block = {256, 1, 1};
  return ((cudaError_t(*)(const void*, dim3, dim3, void**, size_t, cudaStream_t))sym)(
      kernel_stub, grid, block, kernel_args, 0, NULL);
}
static int call_memcpy(void* sym, struct thread_ctx* c) {
  return ((cudaError_t(*)(void*, const void*, size_t, enum cudaMemcpyKind))sym)(
      c->dst, c->src, kCopyBytes, cudaMemcpyDefault);
}
static int call_memcpy_async(void* sym, struct thread_ctx* c) {
  return ((cudaError_t(*)(void*, const void*, size_t, enum cudaMemcpyKind, cudaStream_t))sym)(
      c->dst, c->src, kCopyBytes, cudaMemcpyDefault, NULL);
}
static int call_memset(void* sym, struct thread_ctx* c) {
  return ((cudaError_t(*)(void*, int, size_t))sym)(c->dst, 0, kCopyBytes);
}
static int call_stream_sync(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((cudaError_t(*)(cudaStream_t))sym)(NULL);
}
static int call_device_sync(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((cudaError_t(*)(void))sym)();
}
static int call_event_sync(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((cudaError_t(*)(cudaEvent_t))sym)(NULL);
}
static int call_graph_launch(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((cudaError_t(*)(cudaGraphExec_t, cudaStream_t))sym)(NULL, NULL);
}
static int call_get_version(void* sym, struct thread_ctx* c) {  // cuda{Runtime,Driver}GetVersion
  (void)c;
  int version = 0;
  return ((int (*)(int*))sym)(&version);
}
static int call_mock_version(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((int (*)(void))sym)() > 0 ? 0 : 1;
}
static int call_cu_launch_kernel(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((CUresult(*)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                       unsigned int, unsigned int, unsigned int, CUstream, void**, void**))sym)(
      (CUfunction)kernel_stub, 64, 1, 1, 256, 1, 1, 0, NULL, kernel_args, NULL);
}
static int call_cu_launch_kernel_ex(void* sym, struct thread_ctx* c) {
  (void)c;
  CUlaunchConfig config = {64, 1, 1, 256, 1, 1, 0, NULL, NULL, 0};
  return ((CUresult(*)(const CUlaunchConfig*, CUfunction, void**, void**))sym)(
      &config, (CUfunction)kernel_stub, kernel_args, NULL);
}
static int call_cu_mem_alloc(void* sym, struct thread_ctx* c) {
  CUdeviceptr p = 0;
  int rc = ((CUresult(*)(CUdeviceptr*, size_t))sym)(&p, alloc_bytes);
  if (rc == 0) dkeep(c, p);
  return rc;
}
static int call_cu_mem_free(void* sym, struct thread_ctx* c) {
  return ((CUresult(*)(CUdeviceptr))sym)(dtake(c));
}
static int call_cu_memcpy(void* sym, struct thread_ctx* c) {
  return ((CUresult(*)(CUdeviceptr, CUdeviceptr, size_t))sym)(dev(c->dst), dev(c->src), kCopyBytes);
}
static int call_cu_memcpy_async(void* sym, struct thread_ctx* c) {
  return ((CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))sym)(dev(c->dst), dev(c->src),
                                                                        kCopyBytes, NULL);
}
static int call_cu_memcpy_htod(void* sym, struct thread_ctx* c) {
  return ((CUresult(*)(CUdeviceptr, const void*, size_t))sym)(dev(c->dst), c->src, kCopyBytes);
}
static int call_cu_memcpy_dtoh(void* sym, struct thread_ctx* c) {
  return ((CUresult(*)(void*, CUdeviceptr, size_t))sym)(c->dst, dev(c->src), kCopyBytes);
}
static int call_cu_ctx_sync(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((CUresult(*)(void))sym)();
}
static int call_cu_stream_sync(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((CUresult(*)(CUstream))sym)(NULL);
}
static int call_cu_event_sync(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((CUresult(*)(CUevent))sym)(NULL);
}
static int call_cu_graph_launch(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((CUresult(*)(CUgraphExec, CUstream))sym)(NULL, NULL);
}

// Memory (issue #20): host, pitched, 3D, managed/async driver, cuMemCreate.
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraph_st* CUgraph;
struct cudaPitchedPtr {
  void* ptr;
  size_t pitch;
  size_t xsize;
  size_t ysize;
};
struct cudaExtent {
  size_t width, height, depth;
};
static int call_malloc_host(void* sym, struct thread_ctx* c) {  // cudaMallocHost, cuMemAllocHost_v2
  void* p = NULL;
  int rc = ((int (*)(void**, size_t))sym)(&p, alloc_bytes);
  if (rc == 0) hkeep(c, p);
  return rc;
}
static int call_host_alloc(void* sym, struct thread_ctx* c) {  // cudaHostAlloc, cuMemHostAlloc
  void* p = NULL;
  int rc = ((int (*)(void**, size_t, unsigned int))sym)(&p, alloc_bytes, 0);
  if (rc == 0) hkeep(c, p);
  return rc;
}
static int call_free_host(void* sym, struct thread_ctx* c) {  // cudaFreeHost, cuMemFreeHost
  return ((int (*)(void*))sym)(htake(c));
}
static int call_malloc_pitch(void* sym, struct thread_ctx* c) {
  void* p = NULL;
  size_t pitch = 0;
  int rc = ((cudaError_t(*)(void**, size_t*, size_t, size_t))sym)(&p, &pitch, kPitchWidth,
                                                                   kPitchRows);
  if (rc == 0) keep(c, p);
  return rc;
}
static int call_malloc_3d(void* sym, struct thread_ctx* c) {
  struct cudaPitchedPtr out = {0};
  struct cudaExtent extent = {kPitchWidth, kPitchRows / 2, 2};
  int rc = ((cudaError_t(*)(struct cudaPitchedPtr*, struct cudaExtent))sym)(&out, extent);
  if (rc == 0) keep(c, out.ptr);
  return rc;
}
static int call_cu_mem_alloc_managed(void* sym, struct thread_ctx* c) {
  CUdeviceptr p = 0;
  int rc = ((CUresult(*)(CUdeviceptr*, size_t, unsigned int))sym)(&p, alloc_bytes, 1);
  if (rc == 0) dkeep(c, p);
  return rc;
}
static int call_cu_mem_alloc_async(void* sym, struct thread_ctx* c) {
  CUdeviceptr p = 0;
  int rc = ((CUresult(*)(CUdeviceptr*, size_t, CUstream))sym)(&p, alloc_bytes, NULL);
  if (rc == 0) dkeep(c, p);
  return rc;
}
static int call_cu_mem_free_async(void* sym, struct thread_ctx* c) {
  return ((CUresult(*)(CUdeviceptr, CUstream))sym)(dtake(c), NULL);
}
static int call_cu_mem_alloc_pitch(void* sym, struct thread_ctx* c) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  int rc = ((CUresult(*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int))sym)(
      &p, &pitch, kPitchWidth, kPitchRows, 4);
  if (rc == 0) dkeep(c, p);
  return rc;
}
static int call_cu_mem_create(void* sym, struct thread_ctx* c) {
  unsigned long long h = 0;
  int rc = ((CUresult(*)(unsigned long long*, size_t, const void*, unsigned long long))sym)(
      &h, alloc_bytes, NULL, 0);
  if (rc == 0 && h != 0 && c->nhandles < kMaxLive) c->handles[c->nhandles++] = h;
  return rc;
}
static int call_cu_mem_release(void* sym, struct thread_ctx* c) {
  unsigned long long h = c->nhandles > 0 ? c->handles[--c->nhandles] : 0;
  return ((CUresult(*)(unsigned long long))sym)(h);
}
// CUDA Graphs: capture on the default stream, instantiate, update.
static int call_begin_capture(void* sym, struct thread_ctx* c) {  // both apis: (stream, mode)
  (void)c;
  return ((int (*)(cudaStream_t, int))sym)(NULL, 0);
}
static int call_end_capture(void* sym, struct thread_ctx* c) {  // (stream, graph *)
  (void)c;
  cudaGraph_t g = NULL;
  return ((int (*)(cudaStream_t, cudaGraph_t*))sym)(NULL, &g);
}
static int call_graph_instantiate(void* sym, struct thread_ctx* c) {  // (exec *, graph, flags)
  (void)c;
  cudaGraphExec_t e = NULL;
  return ((int (*)(cudaGraphExec_t*, cudaGraph_t, unsigned long long))sym)(&e, NULL, 0);
}
static int call_graph_instantiate_params(void* sym, struct thread_ctx* c) {  // (exec *, graph, p *)
  (void)c;
  cudaGraphExec_t e = NULL;
  return ((int (*)(cudaGraphExec_t*, cudaGraph_t, void*))sym)(&e, NULL, NULL);
}
static int call_graph_exec_update(void* sym, struct thread_ctx* c) {  // (exec, graph, info *)
  (void)c;
  return ((int (*)(cudaGraphExec_t, cudaGraph_t, void*))sym)(NULL, NULL, NULL);
}

struct call_kind {
  const char* name;
  caller_fn call;
};

// Every name the workload knows how to call; per-thread-stream variants share the signature.
static const struct call_kind kCalls[] = {
    {"cudaMalloc", call_malloc},
    {"cudaMallocManaged", call_malloc_managed},
    {"cudaMallocAsync", call_malloc_async},
    {"cudaMallocAsync_ptsz", call_malloc_async},
    {"cudaFree", call_free},
    {"cudaFreeAsync", call_free_async},
    {"cudaFreeAsync_ptsz", call_free_async},
    {"cudaLaunchKernel", call_launch_kernel},
    {"cudaLaunchKernel_ptsz", call_launch_kernel},
    {"cudaMemcpy", call_memcpy},
    {"cudaMemcpy_ptds", call_memcpy},
    {"cudaMemcpyAsync", call_memcpy_async},
    {"cudaMemcpyAsync_ptsz", call_memcpy_async},
    {"cudaMemset", call_memset},
    {"cudaMemset_ptds", call_memset},
    {"cudaStreamSynchronize", call_stream_sync},
    {"cudaStreamSynchronize_ptsz", call_stream_sync},
    {"cudaDeviceSynchronize", call_device_sync},
    {"cudaEventSynchronize", call_event_sync},
    {"cudaGraphLaunch", call_graph_launch},
    {"cudaGraphLaunch_ptsz", call_graph_launch},
    {"cudaRuntimeGetVersion", call_get_version},
    {"mock_cuda_version", call_mock_version},
    {"cuLaunchKernel", call_cu_launch_kernel},
    {"cuLaunchKernel_ptsz", call_cu_launch_kernel},
    {"cuLaunchKernelEx", call_cu_launch_kernel_ex},
    {"cuLaunchKernelEx_ptsz", call_cu_launch_kernel_ex},
    {"cuMemAlloc_v2", call_cu_mem_alloc},
    {"cuMemFree_v2", call_cu_mem_free},
    {"cuMemcpy", call_cu_memcpy},
    {"cuMemcpy_ptds", call_cu_memcpy},
    {"cuMemcpyAsync", call_cu_memcpy_async},
    {"cuMemcpyAsync_ptsz", call_cu_memcpy_async},
    {"cuMemcpyHtoD_v2", call_cu_memcpy_htod},
    {"cuMemcpyHtoD_v2_ptds", call_cu_memcpy_htod},
    {"cuMemcpyDtoH_v2", call_cu_memcpy_dtoh},
    {"cuMemcpyDtoH_v2_ptds", call_cu_memcpy_dtoh},
    {"cuCtxSynchronize", call_cu_ctx_sync},
    {"cuStreamSynchronize", call_cu_stream_sync},
    {"cuStreamSynchronize_ptsz", call_cu_stream_sync},
    {"cuEventSynchronize", call_cu_event_sync},
    {"cuGraphLaunch", call_cu_graph_launch},
    {"cuGraphLaunch_ptsz", call_cu_graph_launch},
    {"cuDriverGetVersion", call_get_version},
    {"cudaMallocHost", call_malloc_host},
    {"cudaHostAlloc", call_host_alloc},
    {"cudaFreeHost", call_free_host},
    {"cudaMallocPitch", call_malloc_pitch},
    {"cudaMalloc3D", call_malloc_3d},
    {"cuMemAllocManaged", call_cu_mem_alloc_managed},
    {"cuMemAllocAsync", call_cu_mem_alloc_async},
    {"cuMemAllocAsync_ptsz", call_cu_mem_alloc_async},
    {"cuMemFreeAsync", call_cu_mem_free_async},
    {"cuMemFreeAsync_ptsz", call_cu_mem_free_async},
    {"cuMemAllocHost_v2", call_malloc_host},
    {"cuMemHostAlloc", call_host_alloc},
    {"cuMemFreeHost", call_free_host},
    {"cuMemAllocPitch_v2", call_cu_mem_alloc_pitch},
    {"cuMemCreate", call_cu_mem_create},
    {"cuMemRelease", call_cu_mem_release},
    {"cudaStreamBeginCapture", call_begin_capture},
    {"cudaStreamBeginCapture_ptsz", call_begin_capture},
    {"cudaStreamEndCapture", call_end_capture},
    {"cudaStreamEndCapture_ptsz", call_end_capture},
    {"cudaGraphInstantiate", call_graph_instantiate},
    {"cudaGraphInstantiateWithFlags", call_graph_instantiate},
    {"cudaGraphInstantiateWithParams", call_graph_instantiate_params},
    {"cudaGraphInstantiateWithParams_ptsz", call_graph_instantiate_params},
    {"cudaGraphExecUpdate", call_graph_exec_update},
    {"cuStreamBeginCapture_v2", call_begin_capture},
    {"cuStreamBeginCapture_v2_ptsz", call_begin_capture},
    {"cuStreamEndCapture", call_end_capture},
    {"cuStreamEndCapture_ptsz", call_end_capture},
    {"cuGraphInstantiateWithFlags", call_graph_instantiate},
    {"cuGraphInstantiateWithParams", call_graph_instantiate_params},
    {"cuGraphInstantiateWithParams_ptsz", call_graph_instantiate_params},
    {"cuGraphExecUpdate_v2", call_graph_exec_update},
};

// One resolved entry of SPEC.
struct step {
  const char* name;
  caller_fn call;
  void* sym;
  unsigned long count;
};

struct plan {
  struct step* steps;
  size_t nsteps;
  unsigned long iterations;
  unsigned long spacing_us;
  int needs_comm;          // an NCCL call in SPEC takes the communicator
  long wait_fd;            // -1: none
  unsigned long touch_kb;  // transient anonymous memory per iteration
  unsigned long leak_kb;   // kept anonymous memory per iteration
  void* cudart;            // for --escape-first-sync
  int escape_first_sync;   // each thread's first cudaStreamSynchronize leaves by longjmp
  struct plan* warmup;     // --warmup-calls: once per thread before the loop; NULL: none
};

static unsigned long long calls_made;  // updated with __atomic builtins
static unsigned long long calls_failed;



static void sleep_us(unsigned long us) { sleep_ns(us * 1000ULL); }

static caller_fn find_caller(const char* name) {
  for (size_t i = 0; i < sizeof(kCalls) / sizeof(kCalls[0]); ++i) {
    if (strcmp(kCalls[i].name, name) == 0) return kCalls[i].call;
  }
  return NULL;
}

// Parses SPEC ("name:count,...") and resolves every name, cudart first, then cuda, then nccl.
static void build_plan(char* spec, void* cudart, void* cuda, void* nccl, struct plan* p) {
  size_t max_steps = 1;
  for (const char* s = spec; *s != '\0'; ++s) max_steps += (*s == ',');
  p->steps = calloc(max_steps, sizeof(*p->steps));
  if (p->steps == NULL) {
    perror("cuda_workload: calloc");
    exit(1);
  }
  p->nsteps = 0;
  char* save = NULL;
  for (char* item = strtok_r(spec, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
    char* colon = strchr(item, ':');
    if (colon == NULL) usage_error("--calls entry '%s' is not name:count", item);
    *colon = '\0';
    struct step* st = &p->steps[p->nsteps];
    st->name = item;
    st->count = parse_number(colon + 1, 1000000000UL, "--calls count");
    st->call = find_caller(item);
    int needs_comm = 0;
    if (st->call == NULL) st->call = nccl_find_caller(item, &needs_comm);
    if (st->call == NULL)
      usage_error("unknown call '%s' (not a CUDA or NCCL function this tool knows)", item);
    p->needs_comm |= needs_comm;
    st->sym = dlsym(cudart, item);
    if (st->sym == NULL && cuda != NULL) st->sym = dlsym(cuda, item);
    if (st->sym == NULL && nccl != NULL) st->sym = dlsym(nccl, item);
    if (st->sym == NULL) {
      usage_error(strncmp(item, "nccl", 4) == 0
                      ? "'%s' is not exported by --nccl (NCCL calls need --nccl)"
                  : cuda != NULL ? "'%s' is exported by neither --cudart nor --cuda"
                                 : "'%s' is not exported by --cudart (driver calls need --cuda)",
                  item);
    }
    p->nsteps++;
  }
  if (p->nsteps == 0) usage_error("--calls names no call");
}

// Maps `kb` KiB of anonymous memory and writes every page, so each page is charged to the
// cgroup now (and may wait in its reclaim); unmaps it again unless `keep`.
static void touch_memory(unsigned long kb, int keep) {
  size_t len = (size_t)kb * 1024;
  unsigned char* m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("cuda_workload: mmap");
    exit(1);
  }
  long page = sysconf(_SC_PAGESIZE);
  for (size_t off = 0; off < len; off += (size_t)page) m[off] = (unsigned char)(off | 1);
  if (!keep) munmap(m, len);
}

static void wait_byte(long fd) {
  char b;
  ssize_t n;
  while ((n = read((int)fd, &b, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) {
    fprintf(stderr, "cuda_workload: read --wait-fd %ld: %s\n", fd,
            n == 0 ? "closed before the next byte" : strerror(errno));
    exit(1);
  }
}

static void* run_thread(void* arg) {
  const struct plan* p = arg;
  struct thread_ctx* ctx = calloc(1, sizeof(*ctx));
  if (ctx == NULL) {
    perror("cuda_workload: calloc");
    exit(1);
  }
  memset(ctx->src, 0xab, sizeof(ctx->src));
  if (p->escape_first_sync) {
    // A call that never returns through its uretprobe: the mock longjmps out of it.
    // Made through the same caller as the loop's calls (the first step, which must be
    // cudaStreamSynchronize), so it enters at the same stack depth as the calls after it.
    void (*set_escape)(void*) = (void (*)(void*))dlsym(p->cudart, "mock_cuda_set_escape");
    if (set_escape == NULL || p->nsteps == 0) {
      fprintf(stderr, "cuda_workload: --escape-first-sync needs the mock libcudart\n");
      exit(1);
    }
    sigjmp_buf jb;
    if (sigsetjmp(jb, 0) == 0) {
      set_escape(&jb);
      p->steps[0].call(p->steps[0].sym, ctx);
    }
  }
  if (p->warmup != NULL) {
    for (size_t s = 0; s < p->warmup->nsteps; ++s) {
      const struct step* st = &p->warmup->steps[s];
      for (unsigned long n = 0; n < st->count; ++n) {
        int rc = st->call(st->sym, ctx);
        __atomic_fetch_add(&calls_made, 1, __ATOMIC_RELAXED);
        if (rc != 0) __atomic_fetch_add(&calls_failed, 1, __ATOMIC_RELAXED);
      }
    }
  }
  int first = 1;
  for (unsigned long it = 0; it < p->iterations; ++it) {
    if (p->wait_fd >= 0) wait_byte(p->wait_fd);
    for (size_t s = 0; s < p->nsteps; ++s) {
      const struct step* st = &p->steps[s];
      for (unsigned long n = 0; n < st->count; ++n) {
        if (!first && p->spacing_us > 0) sleep_us(p->spacing_us);
        first = 0;
        int rc = st->call(st->sym, ctx);
        __atomic_fetch_add(&calls_made, 1, __ATOMIC_RELAXED);
        if (rc != 0) __atomic_fetch_add(&calls_failed, 1, __ATOMIC_RELAXED);
      }
    }
    if (p->touch_kb > 0) touch_memory(p->touch_kb, 0);
    if (p->leak_kb > 0) touch_memory(p->leak_kb, 1);
  }
  // Allocations still live are left to process exit: freeing them would take extra calls.
  free(ctx);
  return NULL;
}

static void* load(const char* path, const char* flag) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "cuda_workload: %s %s: %s\n", flag, path, dlerror());
    exit(1);
  }
  return h;
}

int main(int argc, char** argv) {
  const char* cudart_path = NULL;
  const char* cuda_path = NULL;
  const char* nccl_path = NULL;
  const char* spec_arg = kDefaultSpec;
  unsigned long iterations = 1, threads = 1, start_delay_ms = 0, spacing_us = 0;
  unsigned long touch_kb = 0, leak_kb = 0, leak_comms = 0, escape_first_sync = 0;
  long ready_fd = -1, go_fd = -1, wait_fd = -1, rank = -1, nranks = -1, exit_fd = -1;
  unsigned long workers = 0, dlopen_loop_ms = 0;
  const char* warmup_arg = NULL;

  static const struct option kOptions[] = {
      {"cudart", required_argument, NULL, 'r'},
      {"cuda", required_argument, NULL, 'c'},
      {"calls", required_argument, NULL, 's'},
      {"iterations", required_argument, NULL, 'i'},
      {"threads", required_argument, NULL, 't'},
      {"start-delay-ms", required_argument, NULL, 'd'},
      {"ready-fd", required_argument, NULL, 'R'},
      {"go-fd", required_argument, NULL, 'G'},
      {"spacing-us", required_argument, NULL, 'u'},
      {"nccl", required_argument, NULL, 'n'},
      {"rank", required_argument, NULL, 'k'},
      {"nranks", required_argument, NULL, 'N'},
      {"wait-fd", required_argument, NULL, 'W'},
      {"touch-kb", required_argument, NULL, 'T'},
      {"leak-kb", required_argument, NULL, 'L'},
      {"leak-comms", required_argument, NULL, 'C'},
      {"escape-first-sync", no_argument, NULL, 'E'},
      {"alloc-bytes", required_argument, NULL, 'B'},
      {"warmup-calls", required_argument, NULL, 'w'},
      {"exit-fd", required_argument, NULL, 'X'},
      {"workers", required_argument, NULL, 'K'},
      {"dlopen-loop-ms", required_argument, NULL, 'O'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int opt;
  while ((opt = getopt_long(argc, argv, "h", kOptions, NULL)) != -1) {
    switch (opt) {
      case 'r':
        cudart_path = optarg;
        break;
      case 'c':
        cuda_path = optarg;
        break;
      case 's':
        spec_arg = optarg;
        break;
      case 'i':
        iterations = parse_number(optarg, 1000000000UL, "--iterations");
        break;
      case 't':
        threads = parse_number(optarg, 4096, "--threads");
        break;
      case 'd':
        start_delay_ms = parse_number(optarg, 3600000UL, "--start-delay-ms");
        break;
      case 'R':
        ready_fd = (long)parse_number(optarg, 1 << 20, "--ready-fd");
        break;
      case 'G':
        go_fd = (long)parse_number(optarg, 1 << 20, "--go-fd");
        break;
      case 'u':
        spacing_us = parse_number(optarg, 60000000UL, "--spacing-us");
        break;
      case 'n':
        nccl_path = optarg;
        break;
      case 'k':
        rank = (long)parse_number(optarg, 1 << 20, "--rank");
        break;
      case 'N':
        nranks = (long)parse_number(optarg, 1 << 20, "--nranks");
        break;
      case 'W':
        wait_fd = (long)parse_number(optarg, 1 << 20, "--wait-fd");
        break;
      case 'T':
        touch_kb = parse_number(optarg, 16UL << 20, "--touch-kb");
        break;
      case 'L':
        leak_kb = parse_number(optarg, 16UL << 20, "--leak-kb");
        break;
      case 'E':
        escape_first_sync = 1;
        break;
      case 'C':
        leak_comms = parse_number(optarg, 1UL << 20, "--leak-comms");
        break;
      case 'B':
        alloc_bytes = parse_number(optarg, 1UL << 40, "--alloc-bytes");
        break;
      case 'w':
        warmup_arg = optarg;
        break;
      case 'X':
        exit_fd = (long)parse_number(optarg, 1 << 20, "--exit-fd");
        break;
      case 'K':
        workers = parse_number(optarg, 64, "--workers");
        break;
      case 'O':
        dlopen_loop_ms = parse_number(optarg, 600000UL, "--dlopen-loop-ms");
        break;
      case 'h':
        fputs(kUsage, stdout);
        return 0;
      default:
        fputs(kUsage, stderr);
        return 2;
    }
  }
  if (optind != argc) usage_error("unexpected argument '%s'", argv[optind]);
  if (cudart_path == NULL) usage_error("--cudart PATH is required");
  if (threads == 0) usage_error("--threads must be at least 1");
  if ((rank >= 0) != (nranks >= 0)) usage_error("--rank and --nranks go together");
  if (rank >= 0 && nccl_path == NULL) usage_error("--rank needs --nccl PATH");
  if (nranks >= 0 && rank >= nranks) usage_error("--rank must be below --nranks");
  if (leak_comms > 0 && rank < 0) usage_error("--leak-comms needs --rank and --nranks");
  if (dlopen_loop_ms > 0) {
    // Loads and unloads the runtime as fast as it can (each load maps it anew), then exits:
    // what discovery is asked to look at by a process in a dlopen/dlclose loop.
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long loads = 0;
    do {
      void* h = load(cudart_path, "--cudart");
      dlclose(h);
      ++loads;
      clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 <
             (long)dlopen_loop_ms);
    printf("loads=%lu pid=%d\n", loads, (int)getpid());
    return 0;
  }

  void* cudart = load(cudart_path, "--cudart");
  void* cuda = cuda_path != NULL ? load(cuda_path, "--cuda") : NULL;
  void* nccl = nccl_path != NULL ? load(nccl_path, "--nccl") : NULL;
  char* spec = strdup(spec_arg);
  if (spec == NULL) {
    perror("cuda_workload: strdup");
    return 1;
  }
  struct plan plan = {NULL,   0,      iterations, spacing_us, 0, wait_fd, touch_kb, leak_kb,
                      cudart, (int)escape_first_sync, NULL};
  build_plan(spec, cudart, cuda, nccl, &plan);
  struct plan warmup = {0};
  char* warmup_spec = NULL;
  if (warmup_arg != NULL) {
    warmup_spec = strdup(warmup_arg);
    if (warmup_spec == NULL) {
      perror("cuda_workload: strdup");
      return 1;
    }
    build_plan(warmup_spec, cudart, cuda, nccl, &warmup);
    if (warmup.needs_comm) usage_error("--warmup-calls takes no NCCL op");
    plan.warmup = &warmup;
  }
  if (plan.needs_comm && rank < 0) usage_error("NCCL calls in --calls need --rank and --nranks");

  if (start_delay_ms > 0) sleep_us(start_delay_ms * 1000);  // stands in for context creation
  signal(SIGPIPE, SIG_IGN);  // a vanished test then shows as EPIPE, not a silent death
  if (ready_fd >= 0) {
    ssize_t n;
    while ((n = write((int)ready_fd, "r", 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) {
      fprintf(stderr, "cuda_workload: write --ready-fd %ld: %s\n", ready_fd, strerror(errno));
      return 1;
    }
  }
  if (go_fd >= 0) {
    char go;
    ssize_t n;
    while ((n = read((int)go_fd, &go, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) {
      fprintf(stderr, "cuda_workload: read --go-fd %ld: %s\n", go_fd,
              n == 0 ? "closed before the go byte" : strerror(errno));
      return 1;
    }
  }

  if (rank >= 0 && nccl_init_rank(nccl, (int)rank, (int)nranks) != 0) return 1;
  if (leak_comms > 0 && nccl_leak_comms(nccl, leak_comms, (int)rank, (int)nranks) != 0) return 1;

  pid_t worker_pids[64];
  for (unsigned long w = 0; w < workers; ++w) {
    worker_pids[w] = fork();
    if (worker_pids[w] < 0) {
      perror("cuda_workload: fork");
      return 1;
    }
    if (worker_pids[w] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      prctl(PR_SET_NAME, "pt_data_worker");
      for (volatile unsigned long spin = 0;; spin++) {
      }
    }
  }

  pthread_t* tids = calloc(threads, sizeof(*tids));
  if (tids == NULL) {
    perror("cuda_workload: calloc");
    return 1;
  }
  for (unsigned long i = 0; i < threads; ++i) {
    int err = pthread_create(&tids[i], NULL, run_thread, &plan);
    if (err != 0) {
      fprintf(stderr, "cuda_workload: pthread_create: %s\n", strerror(err));
      for (unsigned long j = 0; j < i; ++j) pthread_join(tids[j], NULL);
      return 1;
    }
  }
  for (unsigned long i = 0; i < threads; ++i) pthread_join(tids[i], NULL);
  for (unsigned long w = 0; w < workers; ++w) {
    kill(worker_pids[w], SIGKILL);
    waitpid(worker_pids[w], NULL, 0);
  }
  // With --exit-fd the communicator lives until the exit byte (a job's ranks are seen whole).
  if (nccl != NULL && exit_fd < 0 && nccl_destroy(nccl) != 0) ++calls_failed;

  if (calls_failed != 0) {
    fprintf(stderr, "cuda_workload: warning: %llu of %llu calls returned an error\n", calls_failed,
            calls_made);
  }
  printf("calls=%llu failed=%llu threads=%lu pid=%ld\n", calls_made, calls_failed, threads,
         (long)getpid());
  fflush(stdout);
  if (exit_fd >= 0) {
    char b;
    while (read((int)exit_fd, &b, 1) < 0 && errno == EINTR) {
    }
    if (nccl != NULL) nccl_destroy(nccl);
  }
  free(warmup.steps);
  free(warmup_spec);
  free(tids);
  free(plan.steps);
  free(spec);
  // The libraries stay loaded until exit, like a CUDA process (no dlclose at teardown).
  return 0;
}
