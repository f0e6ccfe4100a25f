// The NCCL half of cuda_workload: calls into a dlopen()ed libnccl.so.2 through dlsym'd pointers
// cast to the real nccl.h signatures (types declared locally, no NCCL headers).
#pragma once

struct thread_ctx;
// Calls `sym` (a dlsym'd entry point) with typed arguments; returns the library's status.
typedef int (*caller_fn)(void* sym, struct thread_ctx* c);

// The caller for an NCCL name this tool knows (ops, groups, UserRank/Count, GetVersion); NULL
// for any other name. Sets *needs_comm when the call takes the communicator.
caller_fn nccl_find_caller(const char* name, int* needs_comm);

// ncclGetUniqueId, then ncclCommInitRank(&comm, nranks, id, rank) once: the communicator every
// op then uses. CUDA_WORKLOAD_NCCL_INIT=scalable uses ncclCommInitRankScalable with that one id
// instead; CUDA_WORKLOAD_NCCL_SPLIT=COLOR then splits it (ncclCommSplit, key = rank), learns
// the child's rank and size (ncclCommUserRank, ncclCommCount) and gives every op the child.
// Returns 0, or 1 after printing why to stderr.
int nccl_init_rank(void* nccl, int rank, int nranks);
// ncclCommInitRank `count` more times, each communicator left without ncclCommDestroy (as a
// process that leaks them): fills the daemon's communicator map. Returns 0, or 1 as above.
int nccl_leak_comms(void* nccl, unsigned long count, int rank, int nranks);
// ncclCommDestroy of that communicator, when there is one.
int nccl_destroy(void* nccl);
