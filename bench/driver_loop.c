// driver_loop: the cost of one driver entry point per call, on NVIDIA's real libcuda (issue #48).
// dlopen()s the libcuda named, then calls cuLaunchKernel CALLS times in a tight loop (after
// CALLS/10 untimed warm-up calls) and prints {"calls":N,"ns_per_call":X,"rc":R}. Without a GPU
// (or before cuInit) NVIDIA's cuLaunchKernel returns CUDA_ERROR_NOT_INITIALIZED (3) at once, so
// what is timed is the call, its entry stub and whatever a probe adds. bench/probe_sites.sh runs
// it untraced and under the daemon with its probes on the stub's compare and on its je.
//
//   driver_loop LIBCUDA [--calls N] [--symbol cuLaunchKernel|cuStreamSynchronize]
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);
typedef int (*sync_fn)(void*);

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: driver_loop LIBCUDA [--calls N] [--symbol NAME]\n");
    return 2;
  }
  long calls = 100000;
  const char* symbol = "cuLaunchKernel";
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--calls") == 0) {
      calls = strtol(argv[i + 1], NULL, 10);
    } else if (strcmp(argv[i], "--symbol") == 0) {
      symbol = argv[i + 1];
    } else {
      fprintf(stderr, "driver_loop: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (calls < 1) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "driver_loop: %s\n", dlerror());
    return 1;
  }
  void* sym = dlsym(lib, symbol);
  if (sym == NULL) {
    fprintf(stderr, "driver_loop: %s: %s\n", symbol, dlerror());
    return 1;
  }
  const int launch = strcmp(symbol, "cuLaunchKernel") == 0;
  int rc = 0;
  for (long pass = 0; pass < 2; ++pass) {
    const long n = pass == 0 ? calls / 10 + 1 : calls;
    const long long start = now_ns();
    for (long i = 0; i < n; ++i) {
      rc = launch ? ((launch_fn)sym)(NULL, 128, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL)
                  : ((sync_fn)sym)(NULL);
    }
    if (pass == 1) {
      printf("{\"calls\":%ld,\"ns_per_call\":%.1f,\"rc\":%d}\n", calls,
             (double)(now_ns() - start) / (double)calls, rc);
    }
  }
  return 0;
}
