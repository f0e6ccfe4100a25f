// Mock NCCL, built as libnccl.so.2: the real exported names with the real C signatures (nccl.h
// of NCCL 2.2x), so uprobes, discovery and the workload see what they would see on a GPU host.
// No GPU, no network. Without MOCK_NCCL_BARRIER_DIR every rank completes its collectives on
// its own; with it, the ranks of one job really wait for each other (below).
//
// Behaviour, for tests:
//  - every call succeeds (ncclSuccess) unless a required pointer is NULL or an argument is out
//    of range (ncclInvalidArgument), as the real library checks;
//  - a communicator (ncclComm_t) is a malloc'd struct holding rank and nranks; ncclCommSplit
//    makes a new one with rank = key and nranks = the parent's (one colour per process);
//  - collectives and send/recv sleep MOCK_NCCL_OP_US microseconds of wall time (default 0),
//    so a test can make one rank a straggler; their buffers are never touched; while the file
//    named by MOCK_NCCL_HOLD_FILE exists they do not return (asleep, polling every 10 ms): a
//    collective waiting for a rank that never joins, released by removing the file;
//  - with MOCK_NCCL_BARRIER_DIR set, a communicator made by ncclCommInitRank(Config) or
//    ncclCommInitRankScalable is a barrier shared by every process that joined it with the same
//    unique id: a file in that folder named after the id, mapped shared; each collective and
//    send/recv returns only when all nranks ranks have entered their n-th one (a futex wait,
//    off-CPU as a rank blocked on its peers is), so the rank that arrives last waits least.
//    A peer missing for MOCK_NCCL_BARRIER_TIMEOUT_MS (default 30000) fails the op with
//    ncclRemoteError, as a peer that died does;
//  - ncclGetVersion reports 22703 (2.27.3); ncclGetUniqueId writes MOCK_NCCL_UNIQUE_ID's bytes
//    when set (the id every rank of one job gets from its rank 0), else "mock-nccl-id".
// Every entry point is noinline and marks its own index, so each keeps a distinct address
// (no identical-code folding) and a uprobe on one never fires for another.
#define _GNU_SOURCE  // syscall(SYS_futex) for the barrier

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#define MOCK_API __attribute__((noinline, used, visibility("default")))

// ---- types with the layouts of nccl.h ----
typedef struct CUstream_st* cudaStream_t;
typedef struct ncclComm* ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

// The shared page of one job's barrier (MOCK_NCCL_BARRIER_DIR): how many ranks entered the
// current round, and the round number, which the last one to enter advances.
struct barrier_page {
  uint32_t arrived;
  uint32_t round;
};

// What ncclComm_t points to in this mock.
struct ncclComm {
  int rank;
  int nranks;
  struct barrier_page* barrier;  // NULL: no peers to wait for
};

enum {
  kGetVersion,
  kGetUniqueId,
  kCommInitRank,
  kCommInitRankConfig,
  kCommInitAll,
  kCommSplit,
  kCommUserRank,
  kCommCount,
  kCommDestroy,
  kCommAbort,
  kGetErrorString,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kSend,
  kRecv,
  kAlltoAll,
  kGroupStart,
  kGroupEnd,
  kCommInitRankScalable,
};
// A plain relaxed store per entry point, not a counter: x86 uprobes refuse to probe a
// lock-prefixed first instruction.
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

static long op_us_cache = -1;

// MOCK_NCCL_OP_US, read once; racing first readers compute the same value.
static long op_us(void) {
  long v = __atomic_load_n(&op_us_cache, __ATOMIC_RELAXED);
  if (v >= 0) return v;
  v = 0;
  const char* text = getenv("MOCK_NCCL_OP_US");
  if (text != NULL && *text != '\0') {
    char* end = NULL;
    errno = 0;
    long parsed = strtol(text, &end, 10);
    if (errno == 0 && *end == '\0' && parsed >= 0) v = parsed;
  }
  __atomic_store_n(&op_us_cache, v, __ATOMIC_RELAXED);
  return v;
}

static long barrier_timeout_ms(void) {
  const char* text = getenv("MOCK_NCCL_BARRIER_TIMEOUT_MS");
  if (text == NULL || *text == '\0') return 30000;
  char* end = NULL;
  long v = strtol(text, &end, 10);
  return (*end == '\0' && v > 0) ? v : 30000;
}

// The job's barrier page for this unique id, or NULL without MOCK_NCCL_BARRIER_DIR. Every rank
// maps the same file: its name is the id's first 32 bytes in hex (the mock's ids are text).
static struct barrier_page* open_barrier(const ncclUniqueId* id) {
  const char* dir = getenv("MOCK_NCCL_BARRIER_DIR");
  if (dir == NULL || *dir == '\0') return NULL;
  char path[512];
  int n = snprintf(path, sizeof(path), "%s/", dir);
  for (int i = 0; i < 32 && n > 0 && n < (int)sizeof(path) - 3; ++i) {
    n += snprintf(path + n, sizeof(path) - (size_t)n, "%02x", (unsigned char)id->internal[i]);
  }
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return NULL;
  // Every rank sizes it; the first one's zeroes are what all see (a larger size never shrinks).
  void* page = MAP_FAILED;
  if (ftruncate(fd, 4096) == 0) {
    page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  return page == MAP_FAILED ? NULL : (struct barrier_page*)page;
}

// Enters the next round and returns when all nranks ranks have: 0, or -1 after the timeout.
static int barrier_wait(struct barrier_page* b, int nranks) {
  const uint32_t round = __atomic_load_n(&b->round, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&b->arrived, 1, __ATOMIC_ACQ_REL) == (uint32_t)nranks) {
    __atomic_store_n(&b->arrived, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&b->round, round + 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &b->round, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    return 0;
  }
  long left_ms = barrier_timeout_ms();
  while (__atomic_load_n(&b->round, __ATOMIC_ACQUIRE) == round) {
    if (left_ms <= 0) return -1;
    struct timespec tick = {0, 100000000};  // re-check the time every 100 ms
    syscall(SYS_futex, &b->round, FUTEX_WAIT, round, &tick, NULL, 0);
    left_ms -= 100;
  }
  return 0;
}

// The wall time a collective takes on this rank: a sleep, so the thread is off-CPU (blocked)
// the way a rank waiting on the network or its peers is.
static ncclResult_t run_op(ncclComm_t comm, ncclDataType_t datatype) {
  if (comm == NULL) return ncclInvalidArgument;
  if ((int)datatype < 0 || datatype >= ncclNumTypes) return ncclInvalidArgument;
  const char* hold = getenv("MOCK_NCCL_HOLD_FILE");
  if (hold != NULL && *hold != '\0') {
    struct timespec tick = {0, 10000000};
    while (access(hold, F_OK) == 0) nanosleep(&tick, NULL);
  }
  long us = op_us();
  if (us > 0) {
    struct timespec left = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
  }
  if (comm->barrier != NULL && barrier_wait(comm->barrier, comm->nranks) != 0) {
    return ncclRemoteError;
  }
  return ncclSuccess;
}

static ncclResult_t new_comm(ncclComm_t* out, int nranks, int rank) {
  if (out == NULL || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  struct ncclComm* c = malloc(sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->rank = rank;
  c->nranks = nranks;
  c->barrier = NULL;
  *out = c;
  return ncclSuccess;
}

// A communicator of a job's ranks: new_comm, with the job's barrier when there is one.
static ncclResult_t join_comm(ncclComm_t* out, int nranks, int rank, const ncclUniqueId* id) {
  ncclResult_t rc = new_comm(out, nranks, rank);
  if (rc == ncclSuccess) (*out)->barrier = open_barrier(id);
  return rc;
}

static void free_comm(ncclComm_t comm) {
  if (comm != NULL && comm->barrier != NULL) munmap(comm->barrier, 4096);
  free(comm);
}

MOCK_API ncclResult_t ncclGetVersion(int* version) {
  mark(kGetVersion);
  if (version == NULL) return ncclInvalidArgument;
  *version = 22703;
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  mark(kGetUniqueId);
  if (uniqueId == NULL) return ncclInvalidArgument;
  memset(uniqueId->internal, 0, sizeof(uniqueId->internal));
  // The ranks of one job share the id its rank 0 made; MOCK_NCCL_UNIQUE_ID stands for that
  // broadcast (its bytes, at most 128, zero-padded).
  const char* shared = getenv("MOCK_NCCL_UNIQUE_ID");
  if (shared != NULL) {
    size_t n = strlen(shared);
    memcpy(uniqueId->internal, shared, n < sizeof(uniqueId->internal) ? n : sizeof(uniqueId->internal));
  } else {
    memcpy(uniqueId->internal, "mock-nccl-id", 12);
  }
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                       int rank) {
  mark(kCommInitRank);
  return join_comm(comm, nranks, rank, &commId);
}

MOCK_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                             int rank, ncclConfig_t* config) {
  mark(kCommInitRankConfig);
  (void)config;
  return join_comm(comm, nranks, rank, &commId);
}

// nId unique ids, one per bootstrap root (NCCL 2.23): the same communicator as InitRank.
MOCK_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                               int nId, ncclUniqueId* commIds,
                                               ncclConfig_t* config) {
  mark(kCommInitRankScalable);
  (void)config;
  if (nId < 1 || commIds == NULL) return ncclInvalidArgument;
  return join_comm(newcomm, nranks, myrank, &commIds[0]);
}

// One communicator per device of this process: ranks 0..ndev-1.
MOCK_API ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  mark(kCommInitAll);
  (void)devlist;
  if (comm == NULL || ndev < 1) return ncclInvalidArgument;
  for (int i = 0; i < ndev; ++i) {
    ncclResult_t rc = new_comm(&comm[i], ndev, i);
    if (rc != ncclSuccess) {
      for (int j = 0; j < i; ++j) free(comm[j]);
      return rc;
    }
  }
  return ncclSuccess;
}

// Without peers there is one member per colour: rank = key clamped to the parent's size.
MOCK_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                    ncclConfig_t* config) {
  mark(kCommSplit);
  (void)config;
  if (comm == NULL || newcomm == NULL) return ncclInvalidArgument;
  if (color < 0) {  // NCCL_SPLIT_NOCOLOR: this rank is in no new communicator
    *newcomm = NULL;
    return ncclSuccess;
  }
  int rank = key < 0 ? 0 : (key >= comm->nranks ? comm->nranks - 1 : key);
  return new_comm(newcomm, comm->nranks, rank);
}

MOCK_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  mark(kCommUserRank);
  if (comm == NULL || rank == NULL) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  mark(kCommCount);
  if (comm == NULL || count == NULL) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  mark(kCommDestroy);
  free_comm(comm);  // NULL is allowed, as in NCCL
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  mark(kCommAbort);
  free_comm(comm);
  return ncclSuccess;
}

MOCK_API const char* ncclGetErrorString(ncclResult_t result) {
  mark(kGetErrorString);
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

MOCK_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream) {
  mark(kAllReduce);
  (void)sendbuff, (void)recvbuff, (void)count, (void)op, (void)stream;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  mark(kAllGather);
  (void)sendbuff, (void)recvbuff, (void)sendcount, (void)stream;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  mark(kReduceScatter);
  (void)sendbuff, (void)recvbuff, (void)recvcount, (void)op, (void)stream;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  mark(kBroadcast);
  (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
  if (comm != NULL && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  mark(kReduce);
  (void)sendbuff, (void)recvbuff, (void)count, (void)op, (void)stream;
  if (comm != NULL && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                               int peer, ncclComm_t comm, cudaStream_t stream) {
  mark(kSend);
  (void)sendbuff, (void)count, (void)stream;
  if (comm != NULL && (peer < 0 || peer >= comm->nranks)) return ncclInvalidArgument;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream) {
  mark(kRecv);
  (void)recvbuff, (void)count, (void)stream;
  if (comm != NULL && (peer < 0 || peer >= comm->nranks)) return ncclInvalidArgument;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  mark(kAlltoAll);
  (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
  return run_op(comm, datatype);
}

MOCK_API ncclResult_t ncclGroupStart(void) {
  mark(kGroupStart);
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclGroupEnd(void) {
  mark(kGroupEnd);
  return ncclSuccess;
}
