// pingpong: a context-switch-heavy load for the scheduler-hook measurement of bench/run.sh.
// Two threads pass one byte back and forth over two pipes for D seconds, so every round trip is
// two wakeups and at least two switches. With --lib, each thread first makes one
// cudaLaunchKernel through that libcudart, which gives it stallwatch's per-thread state: its
// switches then take the "traced task" path of sched.bpf.c instead of the early return.
//
//   pingpong [--seconds D] [--lib LIBCUDART]   prints {"round_trips":N,"seconds":D}
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct dim3 {
  unsigned int x, y, z;
} dim3;
typedef int (*launch_fn)(const void*, dim3, dim3, void**, size_t, void*);

static launch_fn launch;
static int ping[2], pong[2];

static void kernel_stub(void) {}

static void become_traced(void) {
  const dim3 one = {1, 1, 1};
  if (launch != NULL) launch((const void*)kernel_stub, one, one, NULL, 0, NULL);
}

static void* responder(void* arg) {
  (void)arg;
  become_traced();
  char c;
  while (read(ping[0], &c, 1) == 1) {
    if (c == 'q' || write(pong[1], &c, 1) != 1) break;
  }
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  double seconds = 5;
  const char* lib_path = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--seconds") == 0) {
      seconds = atof(argv[i + 1]);
    } else if (strcmp(argv[i], "--lib") == 0) {
      lib_path = argv[i + 1];
    } else {
      fprintf(stderr, "usage: pingpong [--seconds D] [--lib LIBCUDART]\n");
      return 2;
    }
  }
  if (lib_path != NULL) {
    void* lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL || (*(void**)& launch = dlsym(lib, "cudaLaunchKernel")) == NULL) {
      fprintf(stderr, "pingpong: %s\n", dlerror());
      return 1;
    }
  }
  if (pipe(ping) != 0 || pipe(pong) != 0) {
    perror("pingpong: pipe");
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, responder, NULL) != 0) {
    fprintf(stderr, "pingpong: pthread_create failed\n");
    return 1;
  }
  become_traced();
  long trips = 0;
  double start = now_s(), elapsed = 0;
  char c = 'p';
  while (elapsed < seconds) {
    for (int i = 0; i < 256; ++i, ++trips) {
      if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) {
        perror("pingpong: pipe i/o");
        return 1;
      }
    }
    elapsed = now_s() - start;
  }
  c = 'q';
  if (write(ping[1], &c, 1) != 1) return 1;
  pthread_join(t, NULL);
  printf("{\"round_trips\":%ld,\"seconds\":%.3f}\n", trips, elapsed);
  return 0;
}
