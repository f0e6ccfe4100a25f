// call_loop: the traced workload of bench/run.sh. dlopen()s a libcudart by path and makes a
// realistic mix of runtime calls: per iteration cudaLaunchKernel x8, cudaMemcpyAsync x2 and
// cudaStreamSynchronize x1, plus cudaMalloc + cudaFree every 16th iteration (178 calls a period).
// Run it with MOCK_CUDA_SYNC_CPU_US=0 so the mock's synchronize returns at once.
//
//   call_loop LIB [--calls N] [--warmup N]   tight loop; prints {"calls":N,"ns_per_call":X}
//   call_loop LIB --rate R --seconds D [--threads T] [--tick-ms MS]
//                                            R calls/s in all for D s; prints calls, seconds, rate
//   call_loop LIB --progress FILE --seconds D
//                                            tight loop for D s; after every period of the mix
//                                            the periods done so far, a little-endian uint64 at
//                                            the start of FILE (bench/job_cost.sh reads it)
//
// --tick-ms: how often a rate-mode thread wakes (default 1 ms); many processes at a low rate
// (bench/rss_cgroups.sh) wake every 100 ms so that waking does not load the machine.
//
// Tight mode times N calls (after N/10 untimed warm-up calls, which page in the library and
// the probes' first hits) with CLOCK_MONOTONIC. Rate mode splits R over T threads, each of which
// wakes every millisecond and makes the calls due by then (its share x elapsed), so the rate
// holds on average without a busy wait. More than one thread is needed where one traced call
// costs more than 1/R seconds (a bare uprobe pair costs over 10 us on some VMs).
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct dim3 {
  unsigned int x, y, z;
} dim3;
enum { cudaMemcpyHostToDevice = 1 };

struct cudart {
  cudaError_t (*launch)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
  cudaError_t (*memcpy_async)(void*, const void*, size_t, int, cudaStream_t);
  cudaError_t (*stream_sync)(cudaStream_t);
  cudaError_t (*malloc)(void**, size_t);
  cudaError_t (*free)(void*);
};

enum kind { kLaunch, kMemcpyAsync, kStreamSync, kMalloc, kFree };
#define MIX_LEN (16 * 11 + 2)
enum { kMaxThreads = 64 };
static enum kind mix[MIX_LEN];

static void build_mix(void) {
  int n = 0;
  for (int iter = 0; iter < 16; ++iter) {
    for (int i = 0; i < 8; ++i) mix[n++] = kLaunch;
    mix[n++] = kMemcpyAsync;
    mix[n++] = kMemcpyAsync;
    mix[n++] = kStreamSync;
  }
  mix[n++] = kMalloc;
  mix[n++] = kFree;
}

struct state {
  const struct cudart* rt;
  unsigned pos;  // index into mix
  void* dev;     // the block cudaMalloc handed out, freed by the next cudaFree
  char src[64];  // operands of the (no-op, host-to-device) copies
  char dst[64];
  cudaError_t err;  // first non-zero return, reported at the end
};

static void kernel_stub(void) {}

// Makes the next call of the mix; the pattern is the same in both modes.
static void next_call(struct state* s) {
  static const dim3 grid = {128, 1, 1}, block = {256, 1, 1};
  const struct cudart* rt = s->rt;
  cudaStream_t stream = NULL;
  cudaError_t rc = 0;
  switch (mix[s->pos]) {
    case kLaunch:
      rc = rt->launch((const void*)kernel_stub, grid, block, NULL, 0, stream);
      break;
    case kMemcpyAsync:
      rc = rt->memcpy_async(s->dst, s->src, sizeof(s->src), cudaMemcpyHostToDevice, stream);
      break;
    case kStreamSync:
      rc = rt->stream_sync(stream);
      break;
    case kMalloc:
      rc = rt->malloc(&s->dev, 256);
      break;
    case kFree:
      rc = rt->free(s->dev);
      s->dev = NULL;
      break;
  }
  if (rc != 0 && s->err == 0) s->err = rc;
  if (++s->pos == MIX_LEN) s->pos = 0;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void* need(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "call_loop: %s: %s\n", name, dlerror());
    exit(1);
  }
  return f;
}

static int usage(void) {
  fprintf(stderr,
          "usage: call_loop LIB [--calls N] [--warmup N]\n"
          "       call_loop LIB --rate CALLS_PER_S --seconds D [--threads T] [--tick-ms MS]\n"
          "       call_loop LIB --progress FILE --seconds D\n");
  return 2;
}

static int tight(struct state* s, long calls, long warmup) {
  for (long i = 0; i < warmup; ++i) next_call(s);
  long long start = now_ns();
  for (long i = 0; i < calls; ++i) next_call(s);
  long long elapsed = now_ns() - start;
  printf("{\"calls\":%ld,\"ns_per_call\":%.1f}\n", calls, (double)elapsed / (double)calls);
  return 0;
}

// A job that runs continuously and tells how far it got: the periods of the mix done, stored in
// FILE's first 8 bytes (a shared mapping: readers see it without the job writing syscalls).
static int progress(struct state* s, const char* path, double seconds) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ftruncate(fd, 4096) != 0) {
    perror("call_loop: --progress");
    return 1;
  }
  uint64_t* done = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (done == MAP_FAILED) {
    perror("call_loop: --progress mmap");
    return 1;
  }
  const long long until = now_ns() + (long long)(seconds * 1e9);
  uint64_t periods = 0;
  while (now_ns() < until) {
    for (int i = 0; i < MIX_LEN; ++i) next_call(s);
    __atomic_store_n(done, ++periods, __ATOMIC_RELAXED);
  }
  printf("{\"periods\":%llu,\"calls\":%llu}\n", (unsigned long long)periods,
         (unsigned long long)periods * MIX_LEN);
  return 0;
}

struct pacer {
  struct state s;
  long long tick_ns;
  double rate;  // this thread's share
  double seconds;
  long made;
};

// One thread's share of the rate: wakes every tick and makes the calls due by then.
static void* pace(void* arg) {
  struct pacer* p = arg;
  const long long tick = p->tick_ns;
  long long start = now_ns(), end = start + (long long)(p->seconds * 1e9), next = start;
  for (;;) {
    long long t = now_ns();
    if (t >= end) break;
    long due = (long)((double)(t - start) * p->rate / 1e9);
    while (p->made < due) {
      next_call(&p->s);
      ++p->made;
    }
    next += tick;
    if (next > t) {
      struct timespec ts = {next / 1000000000LL, next % 1000000000LL};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    } else {
      next = t;  // behind: the calls took longer than a tick, no sleep
    }
  }
  return NULL;
}

static int paced(const struct cudart* rt, double rate, double seconds, int threads,
                 double tick_ms, cudaError_t* err) {
  struct pacer p[kMaxThreads];
  pthread_t tid[kMaxThreads];
  long long start = now_ns();
  for (int i = 0; i < threads; ++i) {
    memset(&p[i], 0, sizeof(p[i]));
    p[i].s.rt = rt;
    p[i].rate = rate / threads;
    p[i].seconds = seconds;
    p[i].tick_ns = (long long)(tick_ms * 1e6);
    if (pthread_create(&tid[i], NULL, pace, &p[i]) != 0) {
      fprintf(stderr, "call_loop: pthread_create failed\n");
      exit(1);
    }
  }
  long made = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(tid[i], NULL);
    made += p[i].made;
    if (p[i].s.err != 0 && *err == 0) *err = p[i].s.err;
  }
  double elapsed = (double)(now_ns() - start) / 1e9;
  printf("{\"calls\":%ld,\"seconds\":%.3f,\"rate\":%.0f,\"target_rate\":%.0f,\"threads\":%d}\n",
         made, elapsed, (double)made / elapsed, rate, threads);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  long calls = 200000, warmup = -1;
  double rate = 0, seconds = 10;
  int threads = 1;
  double tick_ms = 1;
  const char* progress_file = NULL;
  for (int i = 2; i < argc; ++i) {
    if (i + 1 >= argc) return usage();
    const char* flag = argv[i];
    const char* value = argv[++i];
    if (strcmp(flag, "--progress") == 0) {
      progress_file = value;
      continue;
    }
    char* end = NULL;
    double v = strtod(value, &end);
    if (*end != '\0' || v < 0) return usage();
    if (strcmp(flag, "--calls") == 0 && v >= 1) {
      calls = (long)v;
    } else if (strcmp(flag, "--warmup") == 0) {
      warmup = (long)v;
    } else if (strcmp(flag, "--rate") == 0 && v > 0) {
      rate = v;
    } else if (strcmp(flag, "--seconds") == 0 && v > 0) {
      seconds = v;
    } else if (strcmp(flag, "--threads") == 0 && v >= 1 && v <= kMaxThreads) {
      threads = (int)v;
    } else if (strcmp(flag, "--tick-ms") == 0 && v >= 0.01 && v <= 10000) {
      tick_ms = v;
    } else {
      return usage();
    }
  }
  if (warmup < 0) warmup = calls / 10;

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "call_loop: %s\n", dlerror());
    return 1;
  }
  struct cudart rt;
  *(void**)&rt.launch = need(lib, "cudaLaunchKernel");
  *(void**)&rt.memcpy_async = need(lib, "cudaMemcpyAsync");
  *(void**)&rt.stream_sync = need(lib, "cudaStreamSynchronize");
  *(void**)&rt.malloc = need(lib, "cudaMalloc");
  *(void**)&rt.free = need(lib, "cudaFree");
  build_mix();

  struct state s;
  memset(&s, 0, sizeof(s));
  s.rt = &rt;
  int rc = progress_file ? progress(&s, progress_file, seconds)
           : rate > 0    ? paced(&rt, rate, seconds, threads, tick_ms, &s.err)
                         : tight(&s, calls, warmup);
  if (s.err != 0) {
    fprintf(stderr, "call_loop: a call returned cudaError %d\n", s.err);
    return 1;
  }
  return rc;
}
