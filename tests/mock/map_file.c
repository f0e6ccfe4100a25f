// map_file: maps files read-only and waits, as a process that loaded them would (privileged
// tests: a hostile "libcudart.so.12" mapped by an unprivileged user before the daemon starts).
// Each PATH is mapped at offset 0 for one page; "mapped\n" on stdout once all are, then it
// sleeps until killed. Plain C, links with nothing.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: map_file PATH...\n");
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      fprintf(stderr, "map_file: %s: %s\n", argv[i], strerror(errno));
      return 1;
    }
    if (mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
      fprintf(stderr, "map_file: mmap %s: %s\n", argv[i], strerror(errno));
      return 1;
    }
    close(fd);
  }
  printf("mapped\n");
  fflush(stdout);
  for (;;) pause();
}
