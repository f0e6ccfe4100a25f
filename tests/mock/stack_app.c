// A native CUDA caller with known, non-inlined functions for stacks_test: main → epoch_native →
// settle_native → cudaStreamSynchronize (through dlopen, like PyTorch's loader). Built with
// frame pointers, so the kernel's user stack walk names every frame.
// Usage: stack_app LIBCUDART CALLS: prints "done" when the calls are made, then stays alive
// (so its last window is read while it lives) until killed or 60 s pass.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*sync_fn)(void*);
static sync_fn sync_call;

__attribute__((noinline)) int settle_native(void) {
  int rc = sync_call(NULL);
  __asm__ volatile("" ::: "memory");  // keep the call from becoming a tail call
  return rc;
}

__attribute__((noinline)) int epoch_native(long calls) {
  int rc = 0;
  for (long i = 0; i < calls; i++) rc |= settle_native();
  __asm__ volatile("" ::: "memory");
  return rc;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: stack_app LIBCUDART CALLS\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "stack_app: %s\n", dlerror());
    return 1;
  }
  sync_call = (sync_fn)dlsym(lib, "cudaStreamSynchronize");
  if (!sync_call) return 1;
  int rc = epoch_native(atol(argv[2])) == 0 ? 0 : 1;
  printf("done\n");
  fflush(stdout);
  for (int i = 0; i < 600; i++) usleep(100000);
  return rc;
}
