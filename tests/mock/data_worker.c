// data_worker: the host side of a training job for privileged tests: a DataLoader-like process
// that does real block I/O (O_DIRECT, so every read and write is a block request, never the
// page cache), reads files through the page cache (to push a memory-limited cgroup into
// reclaim), or allocates memory (to be OOM-killed). No CUDA: it shares the cgroup of a
// cuda_workload. Plain C, links with nothing.
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

static const char kUsage[] =
    "usage: data_worker --file PATH [--create-mb S] [--ready-fd FD] [--go-fd FD]\n"
    "                   [--direct-reads N] [--direct-writes M] [--buffered-passes P]\n"
    "                   [--stream-fd FD --batch-mb B [--block-kb K] [--prefetch P]\n"
    "                   [--seconds T]]\n"
    "       data_worker --stream-fd FD --batch-mb B --from-memory [--prefetch P] [--seconds T]\n"
    "       data_worker --alloc-mb N [--step-ms D]\n"
    "       data_worker --tick-us P --tick-run-us R [--seconds T]\n"
    "Steps run in this order, each only when asked for:\n"
    "  --create-mb S        create PATH with S MiB of non-zero data (buffered writes), fsync it\n"
    "                       and drop it from the page cache (POSIX_FADV_DONTNEED)\n"
    "  --ready-fd FD        write one byte 'r' to FD\n"
    "  --go-fd FD           block until one byte is read from FD\n"
    "  --direct-reads N     N O_DIRECT reads of 4 KiB at the distinct aligned offsets\n"
    "                       0, 4096, ..., (N-1)*4096: N block read requests, none merged (each\n"
    "                       read waits for its completion before the next is issued)\n"
    "  --direct-writes M    M O_DIRECT writes of 4 KiB at distinct aligned offsets from the end\n"
    "                       of the file backwards, each followed by fdatasync\n"
    "  --buffered-passes P  P times: drop PATH from the page cache, then read it all with\n"
    "                       1 MiB read() calls through the page cache\n"
    "  --stream-fd FD       until T seconds pass (default 60) or FD's reader goes away:\n"
    "                       read B MiB from PATH with O_DIRECT reads of K KiB (default 1024),\n"
    "                       sequentially, wrapping at the end, then write one byte to FD\n"
    "  --prefetch P         before each batch, wait while P bytes (batches) are still unread\n"
    "                       in FD (default 0: never wait), like a DataLoader's prefetch depth\n"
    "  --from-memory        the same batches copied from memory instead: no I/O at all\n"
    "  --alloc-mb N         allocate and touch N MiB, 1 MiB every D ms (default 0), then exit\n"
    "  --tick-us P          a periodic agent: every P microseconds wake and spin R microseconds\n"
    "                       of CPU, for T seconds (default 60); it preempts often, takes little\n"
    "The direct steps refuse a file on tmpfs (no block device behind it). Prints one summary\n"
    "line and exits 0; exit 2: bad usage; exit 1: a system call failed.\n";
static const char kProgram[] = "data_worker";

#include "tool_cli.h"

static const long kBlock = 4096;


__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char* fmt, ...) {
  int err = errno;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "data_worker: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, ": %s\n", strerror(err));
  exit(1);
}


static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(unsigned long ms) { sleep_ns(ms * 1000000ULL); }

static void* aligned(size_t len) {
  void* p = NULL;
  if (posix_memalign(&p, (size_t)kBlock, len) != 0) {
    errno = ENOMEM;
    fail("posix_memalign(%zu)", len);
  }
  memset(p, 0x5a, len);
  return p;
}

static void full_write(int fd, const void* buf, size_t len, off_t off, const char* what) {
  const char* p = buf;
  while (len > 0) {
    ssize_t n = pwrite(fd, p, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("%s", what);
    p += n, len -= (size_t)n, off += n;
  }
}

static void write_byte(int fd, char b, const char* what) {
  ssize_t n;
  while ((n = write(fd, &b, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) fail("%s", what);
}

static void drop_cache(int fd, const char* path) {
  int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (rc != 0) {
    errno = rc;
    fail("posix_fadvise(%s, DONTNEED)", path);
  }
}

// Real data (never a hole: O_DIRECT reads of a hole are answered without any I/O).
static void create_file(const char* path, unsigned long mb) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("create %s", path);
  size_t chunk = 1 << 20;
  unsigned char* buf = aligned(chunk);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (unsigned long i = 0; i < mb; ++i) {
    for (size_t j = 0; j < chunk; j += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      memcpy(buf + j, &x, 8);
    }
    full_write(fd, buf, chunk, (off_t)(i * chunk), "write");
  }
  if (fsync(fd) != 0) fail("fsync %s", path);
  drop_cache(fd, path);
  close(fd);
  free(buf);
}

static int open_direct(const char* path, int flags) {
  struct statfs fs;
  if (statfs(path, &fs) != 0) fail("statfs %s", path);
  if (fs.f_type == TMPFS_MAGIC) {
    fprintf(stderr, "data_worker: %s is on tmpfs: no block device to do I/O on\n", path);
    exit(1);
  }
  int fd = open(path, flags | O_DIRECT | O_CLOEXEC);
  if (fd < 0) fail("open %s with O_DIRECT", path);
  return fd;
}

static off_t file_size(const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) fail("stat %s", path);
  return st.st_size;
}

struct io_stats {
  unsigned long n;
  double sum_s, max_s;
};

static void note(struct io_stats* s, double t0) {
  double d = now_s() - t0;
  s->n++;
  s->sum_s += d;
  if (d > s->max_s) s->max_s = d;
}

static void direct_reads(const char* path, unsigned long n, struct io_stats* st) {
  if ((off_t)(n * (unsigned long)kBlock) > file_size(path))
    usage_error("--direct-reads %lu needs a file of at least %lu bytes", n, n * kBlock);
  int fd = open_direct(path, O_RDONLY);
  void* buf = aligned((size_t)kBlock);
  for (unsigned long i = 0; i < n; ++i) {
    double t0 = now_s();
    ssize_t got;
    while ((got = pread(fd, buf, (size_t)kBlock, (off_t)(i * kBlock))) < 0 && errno == EINTR) {
    }
    if (got != kBlock) fail("O_DIRECT read %lu of %s (got %zd)", i, path, got);
    note(st, t0);
  }
  close(fd);
  free(buf);
}

static void direct_writes(const char* path, unsigned long m, struct io_stats* st) {
  off_t size = file_size(path);
  if ((off_t)(m * (unsigned long)kBlock) > size)
    usage_error("--direct-writes %lu needs a file of at least %lu bytes", m, m * kBlock);
  int fd = open_direct(path, O_WRONLY);
  void* buf = aligned((size_t)kBlock);
  for (unsigned long j = 0; j < m; ++j) {
    double t0 = now_s();
    full_write(fd, buf, (size_t)kBlock, size - (off_t)((j + 1) * kBlock), "O_DIRECT write");
    if (fdatasync(fd) != 0) fail("fdatasync %s", path);
    note(st, t0);
  }
  close(fd);
  free(buf);
}

static unsigned long long buffered_passes(const char* path, unsigned long passes) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open %s", path);
  // Only the pages each read asks for: the device's readahead (8 MiB on some VMs, twice that
  // in flight) would otherwise fill a small memory cgroup with pages under I/O, which cannot
  // be reclaimed, and the OOM killer ends the reader instead of reclaim keeping up with it.
  int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  if (rc != 0) {
    errno = rc;
    fail("posix_fadvise(%s, RANDOM)", path);
  }
  size_t chunk = 1 << 20;
  char* buf = aligned(chunk);
  unsigned long long total = 0;
  for (unsigned long p = 0; p < passes; ++p) {
    drop_cache(fd, path);
    off_t off = 0;
    for (;;) {
      ssize_t n = pread(fd, buf, chunk, off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("read %s", path);
      if (n == 0) break;
      off += n;
      total += (unsigned long long)n;
    }
  }
  close(fd);
  free(buf);
  return total;
}

// One byte per batch to `out`; stops when `seconds` pass or the reader is gone (EPIPE).
static unsigned long stream(const char* path, int out, unsigned long batch_mb,
                            unsigned long block_kb, int from_memory, unsigned long prefetch,
                            unsigned long seconds, struct io_stats* st) {
  size_t block = (size_t)block_kb * 1024;
  size_t batch = (size_t)batch_mb << 20;
  int fd = -1;
  off_t size = 0, off = 0;
  char* buf = aligned(block);
  char* memory = NULL;
  if (from_memory) {
    memory = aligned(batch);
  } else {
    size = file_size(path) / (off_t)block * (off_t)block;
    if (size == 0) usage_error("%s is smaller than one --block-kb block", path);
    fd = open_direct(path, O_RDONLY);
  }
  signal(SIGPIPE, SIG_IGN);
  double end = now_s() + (double)seconds;
  unsigned long batches = 0;
  while (now_s() < end) {
    // FIONREAD works on either end of a pipe: the batches the trainer has not taken yet.
    int queued = 0;
    while (prefetch > 0 && ioctl(out, FIONREAD, &queued) == 0 &&
           (unsigned long)queued >= prefetch && now_s() < end) {
      struct timespec nap = {0, 200000};
      nanosleep(&nap, NULL);
    }
    for (size_t done = 0; done < batch; done += block) {
      if (from_memory) {
        memcpy(buf, memory + done, block);
        continue;
      }
      double t0 = now_s();
      ssize_t got;
      while ((got = pread(fd, buf, block, off)) < 0 && errno == EINTR) {
      }
      if (got != (ssize_t)block) fail("O_DIRECT read at %lld of %s", (long long)off, path);
      note(st, t0);
      off = (off + (off_t)block) % size;
    }
    ssize_t n;
    while ((n = write(out, "b", 1)) < 0 && errno == EINTR) {
    }
    if (n < 0 && errno == EPIPE) break;  // the trainer finished
    if (n != 1) fail("write --stream-fd");
    ++batches;
  }
  if (fd >= 0) close(fd);
  free(buf);
  free(memory);
  return batches;
}

static void alloc(unsigned long mb, unsigned long step_ms) {
  long page = sysconf(_SC_PAGESIZE);
  for (unsigned long i = 0; i < mb; ++i) {
    unsigned char* m =
        mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("mmap");
    for (long off = 0; off < (1 << 20); off += page) m[off] = 1;
    if (step_ms > 0) sleep_ms(step_ms);
  }
}

// A periodic agent (a metrics scraper's tick): wakes every `period_us` on an absolute schedule
// and spins `run_us` of its own CPU time (CLOCK_THREAD_CPUTIME_ID: being preempted meanwhile
// does not shorten the work), until `seconds` pass. Returns the ticks run.
static unsigned long tick(unsigned long period_us, unsigned long run_us, unsigned long seconds) {
  struct timespec next, cpu0, cpu;
  clock_gettime(CLOCK_MONOTONIC, &next);
  const double end = now_s() + (double)seconds;
  unsigned long ticks = 0;
  while (now_s() < end) {
    next.tv_nsec += (long)(period_us * 1000);
    while (next.tv_nsec >= 1000000000L) {
      next.tv_nsec -= 1000000000L;
      next.tv_sec++;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
    do {
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    } while ((cpu.tv_sec - cpu0.tv_sec) * 1000000000L + (cpu.tv_nsec - cpu0.tv_nsec) <
             (long)(run_us * 1000));
    ticks++;
  }
  return ticks;
}

int main(int argc, char** argv) {
  const char* path = NULL;
  unsigned long create_mb = 0, reads = 0, writes = 0, passes = 0, batch_mb = 0, block_kb = 1024,
                seconds = 60, alloc_mb = 0, step_ms = 0, prefetch = 0, tick_us = 0,
                tick_run_us = 0;
  long ready_fd = -1, go_fd = -1, stream_fd = -1;
  int from_memory = 0, do_alloc = 0;
  static const struct option kOptions[] = {
      {"file", required_argument, NULL, 'f'},
      {"create-mb", required_argument, NULL, 'c'},
      {"ready-fd", required_argument, NULL, 'R'},
      {"go-fd", required_argument, NULL, 'G'},
      {"direct-reads", required_argument, NULL, 'r'},
      {"direct-writes", required_argument, NULL, 'w'},
      {"buffered-passes", required_argument, NULL, 'p'},
      {"stream-fd", required_argument, NULL, 's'},
      {"batch-mb", required_argument, NULL, 'b'},
      {"block-kb", required_argument, NULL, 'k'},
      {"seconds", required_argument, NULL, 't'},
      {"from-memory", no_argument, NULL, 'm'},
      {"alloc-mb", required_argument, NULL, 'a'},
      {"step-ms", required_argument, NULL, 'S'},
      {"prefetch", required_argument, NULL, 'P'},
      {"tick-us", required_argument, NULL, 'T'},
      {"tick-run-us", required_argument, NULL, 'U'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int opt;
  while ((opt = getopt_long(argc, argv, "h", kOptions, NULL)) != -1) {
    switch (opt) {
      case 'f':
        path = optarg;
        break;
      case 'c':
        create_mb = parse_number(optarg, 1UL << 20, "--create-mb");
        break;
      case 'R':
        ready_fd = (long)parse_number(optarg, 1 << 20, "--ready-fd");
        break;
      case 'G':
        go_fd = (long)parse_number(optarg, 1 << 20, "--go-fd");
        break;
      case 'r':
        reads = parse_number(optarg, 1UL << 30, "--direct-reads");
        break;
      case 'w':
        writes = parse_number(optarg, 1UL << 30, "--direct-writes");
        break;
      case 'p':
        passes = parse_number(optarg, 1000, "--buffered-passes");
        break;
      case 's':
        stream_fd = (long)parse_number(optarg, 1 << 20, "--stream-fd");
        break;
      case 'b':
        batch_mb = parse_number(optarg, 1UL << 20, "--batch-mb");
        break;
      case 'k':
        block_kb = parse_number(optarg, 1UL << 20, "--block-kb");
        break;
      case 't':
        seconds = parse_number(optarg, 86400, "--seconds");
        break;
      case 'm':
        from_memory = 1;
        break;
      case 'a':
        alloc_mb = parse_number(optarg, 1UL << 30, "--alloc-mb");
        do_alloc = 1;
        break;
      case 'S':
        step_ms = parse_number(optarg, 60000, "--step-ms");
        break;
      case 'P':
        prefetch = parse_number(optarg, 1 << 16, "--prefetch");
        break;
      case 'T':
        tick_us = parse_number(optarg, 10UL * 1000 * 1000, "--tick-us");
        break;
      case 'U':
        tick_run_us = parse_number(optarg, 10UL * 1000 * 1000, "--tick-run-us");
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
  int needs_file = create_mb || reads || writes || passes || (stream_fd >= 0 && !from_memory);
  if (needs_file && path == NULL) usage_error("--file PATH is required for this");
  if (stream_fd >= 0 && batch_mb == 0) usage_error("--stream-fd needs --batch-mb");
  if (block_kb == 0 || block_kb % 4 != 0) usage_error("--block-kb must be a multiple of 4");
  if (from_memory && stream_fd < 0) usage_error("--from-memory goes with --stream-fd");
  if (tick_us > 0 && (tick_run_us == 0 || tick_run_us >= tick_us)) {
    usage_error("--tick-us needs --tick-run-us R with 0 < R < P");
  }
  if (!needs_file && stream_fd < 0 && !do_alloc && tick_us == 0) usage_error("nothing to do");

  if (create_mb > 0) create_file(path, create_mb);
  if (ready_fd >= 0) write_byte((int)ready_fd, 'r', "write --ready-fd");
  if (go_fd >= 0) {
    char go;
    ssize_t n;
    while ((n = read((int)go_fd, &go, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) {
      if (n == 0) errno = EPIPE;
      fail("read --go-fd");
    }
  }
  struct io_stats rd = {0, 0, 0}, wr = {0, 0, 0}, sr = {0, 0, 0};
  if (reads > 0) direct_reads(path, reads, &rd);
  if (writes > 0) direct_writes(path, writes, &wr);
  unsigned long long buffered = passes > 0 ? buffered_passes(path, passes) : 0;
  unsigned long batches = 0;
  if (stream_fd >= 0)
    batches = stream(path, (int)stream_fd, batch_mb, block_kb, from_memory, prefetch, seconds, &sr);
  if (do_alloc) alloc(alloc_mb, step_ms);
  unsigned long ticks = tick_us > 0 ? tick(tick_us, tick_run_us, seconds) : 0;

  printf(
      "direct_reads=%lu read_avg_us=%.0f read_max_us=%.0f direct_writes=%lu "
      "write_sync_avg_us=%.0f buffered_bytes=%llu batches=%lu stream_reads=%lu "
      "stream_read_avg_us=%.0f alloc_mb=%lu ticks=%lu pid=%ld\n",
      rd.n, rd.n ? rd.sum_s / (double)rd.n * 1e6 : 0, rd.max_s * 1e6, wr.n,
      wr.n ? wr.sum_s / (double)wr.n * 1e6 : 0, buffered, batches, sr.n,
      sr.n ? sr.sum_s / (double)sr.n * 1e6 : 0, alloc_mb, ticks, (long)getpid());
  return 0;
}
