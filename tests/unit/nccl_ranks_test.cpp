// trace/nccl_ranks.h: NCCL's commHash, job keys from an environment, and each rank's wait.
#include "trace/nccl_ranks.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>

#include "metrics/model.h"
#include "trace/calls.h"
#include "trace/snapshot.h"

namespace stallwatch::trace {
namespace {

std::array<std::uint8_t, kNcclUniqueIdBytes> id_of(std::string_view text) {
  std::array<std::uint8_t, kNcclUniqueIdBytes> id{};
  std::memcpy(id.data(), text.data(), std::min(text.size(), id.size()));
  return id;
}

// Vectors of NCCL's utils.h mixing (eatHash/digestHash), worked by an independent Python
// transcription of it; the kernel's copy (bpf/nccl.bpf.c) gave the same values on the mock
// library in tests/privileged/nccl_test.cpp.
TEST(NcclRanks, CommHashIsNcclsMixingOfTheUniqueIdAndOfASplit) {
  EXPECT_EQ(nccl_unique_id_hash(id_of("abc")), 0xb0c821da6f9bac56ULL);
  const std::uint64_t parent = 12738468768076508246ULL;  // the hash of "abc" again
  EXPECT_EQ(parent, 0xb0c821da6f9bac56ULL);
  EXPECT_EQ(nccl_split_hash(parent, 1, 5), 0x64485f474be237a5ULL);
  // Each input matters: another split of the same parent, another colour.
  EXPECT_NE(nccl_split_hash(parent, 2, 5), nccl_split_hash(parent, 1, 5));
  EXPECT_NE(nccl_split_hash(parent, 1, 6), nccl_split_hash(parent, 1, 5));
  EXPECT_NE(nccl_unique_id_hash(id_of("abd")), nccl_unique_id_hash(id_of("abc")));
  EXPECT_EQ(comm_label(0xb0c821da6f9bac56ULL), "0xb0c821da6f9bac56");
  EXPECT_EQ(comm_label(0), "0x0000000000000000");
}

TEST(NcclRanks, JobKeysComeFromTorchrunThenSlurmEscapedAndBounded) {
  using namespace std::string_literals;
  const std::string torchrun = "PATH=/bin\0TORCHELASTIC_RUN_ID=run-7\0RANK=12\0LOCAL_RANK=4\0"
                               "WORLD_SIZE=16\0SLURM_JOB_ID=999\0SLURM_PROCID=3\0"s;
  EXPECT_EQ(job_keys_from_environ(torchrun), (JobKeys{"run-7", "12", "4", "16"}));
  const std::string slurm = "SLURM_JOB_ID=999\0SLURM_PROCID=3\0SLURM_LOCALID=1\0SLURM_NTASKS=8\0"s;
  EXPECT_EQ(job_keys_from_environ(slurm), (JobKeys{"999", "3", "1", "8"}));
  EXPECT_EQ(job_keys_from_environ(""), JobKeys{});
  EXPECT_EQ(job_keys_from_environ("RANK"), JobKeys{});  // no '=': not an entry
  // A user names the job: control bytes are escaped, the value is cut.
  const std::string hostile = "TORCHELASTIC_RUN_ID=a\nb\x1b[31m" + std::string(200, 'x');
  const JobKeys k = job_keys_from_environ(hostile);
  EXPECT_EQ(k.job_id.substr(0, 12), "a\\nb\\x1b[31m");
  EXPECT_LE(k.job_id.size(), kMaxJobValue * 4);
  EXPECT_EQ(k.job_id.find('\n'), std::string::npos);
}

TEST(NcclRanks, ARanksWaitIsItsNcclOpsAndSynchronizesAndItsOpsAreItsRanks) {
  Snapshot snap;
  Series& s = snap.series["/job"];
  const std::uint32_t reduce = *call_for_symbol("ncclAllReduce", Api::kNccl),
                      sync = *call_for_symbol("cudaStreamSynchronize", Api::kRuntime),
                      launch = *call_for_symbol("cudaLaunchKernel", Api::kRuntime);
  auto call = [&](std::uint32_t id, std::uint64_t count, std::uint64_t ns) {
    ProcessCall c;
    c.pid = 10;
    c.call_id = id;
    c.totals.count = count;
    c.totals.sum_ns = ns;
    s.processes.push_back(c);
  };
  call(reduce, 100, 2'000'000'000);
  call(sync, 50, 500'000'000);
  call(launch, 1000, 900'000'000);  // not a wait: the rank's own work
  ProcessNccl n;
  n.pid = 10;
  n.key = NcclKey{reduce, 3, 8};
  n.totals.count = 100;
  s.nccl_processes.push_back(n);
  n.key = NcclKey{reduce, 0, 2};  // another communicator's ops
  n.totals.count = 7;
  s.nccl_processes.push_back(n);
  snap.nccl_members = {NcclMember{"/job", 10, 3, 8, 0xabc, JobKeys{"j", "3", "3", "8"}},
                       NcclMember{"/job", 10, -1, -1, 0xdef, {}},  // rank not learnt: none
                       NcclMember{"/gone", 11, 0, 2, 0x1, {}}};     // no series: none
  const auto ranks = nccl_ranks(snap);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].comm_hash, 0xabcu);
  EXPECT_EQ(ranks[0].wait_ns, 2'500'000'000u);
  EXPECT_EQ(ranks[0].collectives, 100u);
  EXPECT_EQ(ranks[0].job.job_id, "j");
}

}  // namespace
}  // namespace stallwatch::trace

namespace stallwatch::trace {
namespace {

// The job of a member: its environment's, else its pod's label, else its Slurm cgroup's; what
// comes from the pod or the path is cut and escaped as the environment's is.
TEST(NcclJob, EnvironmentThenPodLabelThenSlurmCgroup) {
  identity::Identity id;
  id.pod_job = "llm-7";
  id.slurm_job = "1234";
  EXPECT_EQ(job_id_of(JobKeys{"run-9", "", "", ""}, id), "run-9");
  EXPECT_EQ(job_id_of(JobKeys{}, id), "llm-7");
  id.pod_job.clear();
  EXPECT_EQ(job_id_of(JobKeys{}, id), "1234");
  id.slurm_job.clear();
  EXPECT_EQ(job_id_of(JobKeys{}, id), "");
  id.pod_job = "a\nb" + std::string(100, 'x');
  const std::string got = job_id_of(JobKeys{}, id);
  EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  EXPECT_LE(got.size(), kMaxJobValue + 4) << got;  // cut to 64 bytes, then escaped
}

// On /metrics: a member whose environment names no job gets its pod's.
TEST(NcclJob, JobInfoTakesThePodsJobWhenTheEnvironmentHasNone) {
  Snapshot snap;
  Series& s = snap.series["/pod-a"];
  s.identity.cgroup = "/pod-a";
  s.identity.pod_job = "llm-7";
  snap.nccl_members = {NcclMember{"/pod-a", 10, 1, 4, 0xabc, JobKeys{"", "1", "1", "4"}}};
  std::vector<std::string> jobs;
  for (const metrics::Family& f : metrics::build_model(snap, {})) {
    if (f.name != "stallwatch_job_info") continue;
    for (const metrics::Point& p : f.points) {
      for (const auto& [k, v] : p.labels) {
        if (k == "job_id") jobs.push_back(v);
      }
    }
  }
  EXPECT_EQ(jobs, std::vector<std::string>{"llm-7"});
}

}  // namespace
}  // namespace stallwatch::trace
