#include "trace/nccl_ranks.h"

#include <cstdio>
#include <cstring>

#include "common/strings.h"
#include "trace/calls.h"
#include "trace/snapshot.h"

extern "C" {
#include "bpf/nccl.h"
}

namespace stallwatch::trace {
namespace {

// NCCL's accumulator (bpf/nccl.h): each piece first XORs its size in, then every 8-byte chunk
// (the last zero-padded) mixes the accumulator and is added.
struct Hasher {
  __u64 acc[2] = {1, 1};

  void eat(const void* bytes, size_t size) {
    const auto* p = static_cast<const std::uint8_t*>(bytes);
    acc[0] ^= size;
    while (size != 0) {
      const size_t chunk = size < 8 ? size : 8;
      __u64 x = 0;
      std::memcpy(&x, p, chunk);  // little-endian hosts: NCCL's memcpy reads the same
      p += chunk;
      size -= chunk;
      sw_nccl_hash_chunk(acc, x);
    }
  }
  std::uint64_t digest() const { return sw_nccl_hash_digest(acc); }
};

std::string bounded(std::string_view value) {
  return escape_name(value.substr(0, kMaxJobValue));
}

}  // namespace

std::uint64_t nccl_unique_id_hash(std::span<const std::uint8_t, kNcclUniqueIdBytes> id) {
  Hasher h;
  h.eat(id.data(), id.size());
  return h.digest();
}

std::uint64_t nccl_split_hash(std::uint64_t parent, std::uint32_t splits, std::int32_t color) {
  Hasher h;
  h.eat(&parent, sizeof(parent));
  h.eat(&splits, sizeof(splits));
  h.eat(&color, sizeof(color));
  return h.digest();
}

std::string comm_label(std::uint64_t comm_hash) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(comm_hash));
  return buf;
}

JobKeys job_keys_from_environ(std::string_view environ) {
  environ = environ.substr(0, kMaxEnvironBytes);
  std::string_view run_id, slurm_job, rank, slurm_rank, local, slurm_local, world, slurm_world;
  while (!environ.empty()) {
    const size_t end = environ.find('\0');
    const std::string_view entry = environ.substr(0, end);
    environ.remove_prefix(end == std::string_view::npos ? environ.size() : end + 1);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = entry.substr(0, eq), value = entry.substr(eq + 1);
    for (auto [key, into] : {std::pair{"TORCHELASTIC_RUN_ID", &run_id},
                             std::pair{"SLURM_JOB_ID", &slurm_job}, std::pair{"RANK", &rank},
                             std::pair{"SLURM_PROCID", &slurm_rank},
                             std::pair{"LOCAL_RANK", &local},
                             std::pair{"SLURM_LOCALID", &slurm_local},
                             std::pair{"WORLD_SIZE", &world},
                             std::pair{"SLURM_NTASKS", &slurm_world}}) {
      if (name == key) *into = value;
    }
  }
  auto first = [](std::string_view a, std::string_view b) { return bounded(a.empty() ? b : a); };
  return {first(run_id, slurm_job), first(rank, slurm_rank), first(local, slurm_local),
          first(world, slurm_world)};
}

std::string job_id_of(const JobKeys& keys, const identity::Identity& id) {
  if (!keys.job_id.empty()) return keys.job_id;  // bounded and escaped when it was read
  return bounded(!id.pod_job.empty() ? id.pod_job : id.slurm_job);
}

std::vector<NcclRank> nccl_ranks(const Snapshot& snap) {
  std::vector<NcclRank> out;
  for (const NcclMember& m : snap.nccl_members) {
    if (m.rank < 0 || m.world_size < 1) continue;
    const auto s = snap.series.find(m.cgroup);
    if (s == snap.series.end()) continue;
    NcclRank r{m.cgroup, m.pid, m.comm_hash, m.rank, m.world_size, 0, 0, m.job};
    for (const ProcessCall& c : s->second.processes) {
      if (c.pid != m.pid || c.exited) continue;
      if (is_nccl_op(c.call_id) || call_class(c.call_id) == CallClass::kSync) {
        r.wait_ns += c.totals.sum_ns;
      }
    }
    for (const ProcessNccl& n : s->second.nccl_processes) {
      if (n.pid == m.pid && n.key.rank == m.rank && n.key.world_size == m.world_size) {
        r.collectives += n.totals.count;
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace stallwatch::trace
