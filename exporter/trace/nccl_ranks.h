// A job's ranks across nodes (issue #52): the key NCCL gives a communicator on every node, the
// job a rank's process belongs to, and what each rank waited for its collectives.
// - NCCL's commHash, computed as NCCL's init.cc computes it (the mixing of utils.h
//   eatHash/digestHash): from the communicator's 128-byte unique id (ncclCommInitRank,
//   InitRankConfig; the first id of InitRankScalable), or for ncclCommSplit from the parent's
//   hash, the parent's split count after this split and the colour. bpf/nccl.bpf.c computes
//   the same in the kernel; these are its reference and the tests hold both to one vector.
// - Job keys from a process's environment (torchrun, Slurm), read once, bounded and escaped.
// - Per rank (one process in one communicator): the time its process spent in NCCL ops and in
//   synchronizes (what a rank waits for its collectives) and its NCCL op count. In a
//   synchronous collective the straggler is the rank that waits least.
// - The job of a member: its environment's, else its pod's or its Slurm cgroup's.
// Pure apart from nothing; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "identity/cgroup_identity.h"

namespace stallwatch {
struct Snapshot;
}  // namespace stallwatch

namespace stallwatch::trace {

inline constexpr size_t kNcclUniqueIdBytes = 128;

std::uint64_t nccl_unique_id_hash(std::span<const std::uint8_t, kNcclUniqueIdBytes> id);
std::uint64_t nccl_split_hash(std::uint64_t parent, std::uint32_t splits, std::int32_t color);
// "0x" and 16 lower-case hex digits: the `comm` label.
std::string comm_label(std::uint64_t comm_hash);

// What a rank's environment says of its job. Values are escaped (common/strings.h
// escape_name) and cut to kMaxJobValue bytes; "" when absent.
struct JobKeys {
  std::string job_id;       // TORCHELASTIC_RUN_ID, else SLURM_JOB_ID
  std::string global_rank;  // RANK, else SLURM_PROCID
  std::string local_rank;   // LOCAL_RANK, else SLURM_LOCALID
  std::string world_size;   // WORLD_SIZE, else SLURM_NTASKS
  bool operator==(const JobKeys&) const = default;
};
inline constexpr size_t kMaxJobValue = 64;

// The job a member belongs to: the environment's job id (torchrun, Slurm), else the job its
// pod's labels name (identity::kPodJobLabels), else the Slurm job of its cgroup path
// (.../job_1234/...); bounded and escaped as the environment's are. "" when none names it.
std::string job_id_of(const JobKeys& keys, const identity::Identity& id);
// Bytes of /proc/PID/environ read at most (the keys torchrun and Slurm set come early).
inline constexpr size_t kMaxEnvironBytes = 256 * 1024;
// `environ`: NUL-separated NAME=value entries, as /proc/PID/environ holds them.
JobKeys job_keys_from_environ(std::string_view environ);

struct NcclRank {
  std::string cgroup;  // the series label
  int pid = 0;
  std::uint64_t comm_hash = 0;
  int rank = -1;
  int world_size = -1;
  std::uint64_t wait_ns = 0;      // cumulative: NCCL ops and synchronizes of its process
  std::uint64_t collectives = 0;  // cumulative: its process's NCCL ops of this rank and size
  JobKeys job;
};
// One per communicator member of a live process whose rank is known, in member order.
std::vector<NcclRank> nccl_ranks(const Snapshot& snap);

}  // namespace stallwatch::trace
