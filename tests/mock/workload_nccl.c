// The NCCL half of cuda_workload (see workload_nccl.h). Ops move count = 1048576 elements of
// ncclFloat32 (4 MiB) with ncclSum; buffers are allocated once and never touched (the mock does
// not read them; on a real GPU they would be device buffers).
#define _GNU_SOURCE

#include "workload_nccl.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct CUstream_st* cudaStream_t;
typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;  // an enum in nccl.h: int-sized
typedef enum { ncclFloat32 = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;

enum { kOpCount = 1048576 };

static ncclComm_t comm;  // set once before the calling threads start
static ncclComm_t parent;  // the communicator `comm` was split from, if it was
static int my_rank, world;
static void* sendbuf;
static void* recvbuf;

static int call_all_reduce(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((ncclResult_t(*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           cudaStream_t))sym)(sendbuf, recvbuf, kOpCount, ncclFloat32, ncclSum,
                                              comm, NULL);
}
static int call_reduce_scatter(void* sym, struct thread_ctx* c) {  // same signature
  return call_all_reduce(sym, c);
}
static int call_all_gather(void* sym, struct thread_ctx* c) {  // ncclAllGather, ncclAlltoAll
  (void)c;
  return ((ncclResult_t(*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                           cudaStream_t))sym)(sendbuf, recvbuf, kOpCount, ncclFloat32, comm, NULL);
}
static int call_broadcast(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((ncclResult_t(*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                           cudaStream_t))sym)(sendbuf, recvbuf, kOpCount, ncclFloat32, 0, comm,
                                              NULL);
}
static int call_reduce(void* sym, struct thread_ctx* c) {
  (void)c;
  return ((ncclResult_t(*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                           cudaStream_t))sym)(sendbuf, recvbuf, kOpCount, ncclFloat32, ncclSum, 0,
                                              comm, NULL);
}
static int call_send(void* sym, struct thread_ctx* c) {  // to the next rank
  (void)c;
  return ((ncclResult_t(*)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))sym)(
      sendbuf, kOpCount, ncclFloat32, (my_rank + 1) % world, comm, NULL);
}
static int call_recv(void* sym, struct thread_ctx* c) {  // from the previous rank
  (void)c;
  return ((ncclResult_t(*)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))sym)(
      recvbuf, kOpCount, ncclFloat32, (my_rank + world - 1) % world, comm, NULL);
}
static int call_group(void* sym, struct thread_ctx* c) {  // ncclGroupStart, ncclGroupEnd
  (void)c;
  return ((ncclResult_t(*)(void))sym)();
}
static int call_comm_int(void* sym, struct thread_ctx* c) {  // ncclCommUserRank, ncclCommCount
  (void)c;
  int out = -1;
  return ((ncclResult_t(*)(const ncclComm_t, int*))sym)(comm, &out);
}
static int call_get_version(void* sym, struct thread_ctx* c) {
  (void)c;
  int version = 0;
  return ((ncclResult_t(*)(int*))sym)(&version);
}

static const struct {
  const char* name;
  caller_fn call;
  int needs_comm;
} kNcclCalls[] = {
    {"ncclAllReduce", call_all_reduce, 1},
    {"ncclReduceScatter", call_reduce_scatter, 1},
    {"ncclAllGather", call_all_gather, 1},
    {"ncclAlltoAll", call_all_gather, 1},
    {"ncclBroadcast", call_broadcast, 1},
    {"ncclReduce", call_reduce, 1},
    {"ncclSend", call_send, 1},
    {"ncclRecv", call_recv, 1},
    {"ncclGroupStart", call_group, 0},
    {"ncclGroupEnd", call_group, 0},
    {"ncclCommUserRank", call_comm_int, 1},
    {"ncclCommCount", call_comm_int, 1},
    {"ncclGetVersion", call_get_version, 0},
};

caller_fn nccl_find_caller(const char* name, int* needs_comm) {
  for (size_t i = 0; i < sizeof(kNcclCalls) / sizeof(kNcclCalls[0]); ++i) {
    if (strcmp(kNcclCalls[i].name, name) == 0) {
      *needs_comm = kNcclCalls[i].needs_comm;
      return kNcclCalls[i].call;
    }
  }
  return NULL;
}

static void* must_sym(void* nccl, const char* name) {
  void* sym = dlsym(nccl, name);
  if (sym == NULL) fprintf(stderr, "cuda_workload: --nccl library does not export %s\n", name);
  return sym;
}

int nccl_init_rank(void* nccl, int rank, int nranks) {
  void* get_id = must_sym(nccl, "ncclGetUniqueId");
  void* init = must_sym(nccl, "ncclCommInitRank");
  if (get_id == NULL || init == NULL) return 1;
  sendbuf = malloc((size_t)kOpCount * 4);
  recvbuf = malloc((size_t)kOpCount * 4);
  if (sendbuf == NULL || recvbuf == NULL) {
    perror("cuda_workload: malloc");
    return 1;
  }
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  int rc = ((ncclResult_t(*)(ncclUniqueId*))get_id)(&id);
  const char* how = getenv("CUDA_WORKLOAD_NCCL_INIT");
  if (rc == 0 && how != NULL && strcmp(how, "scalable") == 0) {
    void* scalable = must_sym(nccl, "ncclCommInitRankScalable");
    if (scalable == NULL) return 1;
    rc = ((ncclResult_t(*)(ncclComm_t*, int, int, int, ncclUniqueId*, void*))scalable)(
        &comm, nranks, rank, 1, &id, NULL);
  } else if (rc == 0) {
    rc = ((ncclResult_t(*)(ncclComm_t*, int, ncclUniqueId, int))init)(&comm, nranks, id, rank);
  }
  if (rc != 0) {
    fprintf(stderr, "cuda_workload: ncclCommInitRank(nranks=%d, rank=%d) failed: %d\n", nranks,
            rank, rc);
    return 1;
  }
  const char* color = getenv("CUDA_WORKLOAD_NCCL_SPLIT");
  if (color != NULL) {  // ops go to the child; its rank and size come from UserRank/Count
    void* split = must_sym(nccl, "ncclCommSplit");
    void* user_rank = must_sym(nccl, "ncclCommUserRank");
    void* count = must_sym(nccl, "ncclCommCount");
    if (split == NULL || user_rank == NULL || count == NULL) return 1;
    ncclComm_t child = NULL;
    int out = -1;
    rc = ((ncclResult_t(*)(ncclComm_t, int, int, ncclComm_t*, void*))split)(comm, atoi(color),
                                                                           rank, &child, NULL);
    if (rc == 0) rc = ((ncclResult_t(*)(const ncclComm_t, int*))user_rank)(child, &out);
    if (rc == 0) rc = ((ncclResult_t(*)(const ncclComm_t, int*))count)(child, &out);
    if (rc != 0 || child == NULL) {
      fprintf(stderr, "cuda_workload: ncclCommSplit(color=%s) failed: %d\n", color, rc);
      return 1;
    }
    parent = comm;
    comm = child;
  }
  my_rank = rank;
  world = nranks;
  return 0;
}

int nccl_leak_comms(void* nccl, unsigned long count, int rank, int nranks) {
  void* init = must_sym(nccl, "ncclCommInitRank");
  if (init == NULL) return 1;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  for (unsigned long i = 0; i < count; ++i) {
    ncclComm_t leaked = NULL;
    int rc = ((ncclResult_t(*)(ncclComm_t*, int, ncclUniqueId, int))init)(&leaked, nranks, id, rank);
    if (rc != 0) {
      fprintf(stderr, "cuda_workload: extra ncclCommInitRank %lu failed: %d\n", i, rc);
      return 1;
    }
  }
  return 0;
}

int nccl_destroy(void* nccl) {
  if (comm == NULL) return 0;
  void* destroy = must_sym(nccl, "ncclCommDestroy");
  if (destroy == NULL) return 1;
  int rc = ((ncclResult_t(*)(ncclComm_t))destroy)(comm);
  comm = NULL;
  if (parent != NULL && rc == 0) rc = ((ncclResult_t(*)(ncclComm_t))destroy)(parent);
  parent = NULL;
  return rc != 0;
}
