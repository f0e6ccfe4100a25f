// Probe sites on NVIDIA's real binaries (issue #48): Debian non-free's libcuda.so (unpacked by
// scripts/fetch-libcuda.sh into the build tree) and the CUDA toolkit's libcudart.so.13 and
// libnccl.so.2, whose entry points run without a GPU and return errors. Checks which site the
// daemon chooses on each, that a probe at the moved site sees exactly the arguments, stack and
// return value a probe at +0 sees (a BPF object of the test's own, bpf/site_args.bpf.c), that
// the stand-in driver has the real prologue shape, and exact call counts from the daemon on the
// real files. Tests whose library is absent skip and say which file and how to get it.
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "site_args.skel.h"
#include "support/evidence.h"
#include "support/harness.h"
#include "support/process.h"
#include "trace/attach.h"
#include "trace/probe_cost.h"

namespace stallwatch::test {
namespace {

using namespace std::chrono_literals;
using trace::InsnKind;
using trace::SiteClass;

constexpr const char* kRealCudart = "/usr/local/cuda/lib64/libcudart.so.13";
constexpr const char* kRealNccl = "/usr/local/cuda/lib64/libnccl.so.2";

const trace::ProbeCalibration& calibration() {
  static const trace::ProbeCalibration c = trace::calibrate_probes();
  return c;
}

trace::SitePolicy measured_policy(bool moves = true) {
  trace::SitePolicy p;
  p.emulation = calibration().emulation;
  p.moves = moves;
  return p;
}

std::string real_path(const char* path) {
  char buf[PATH_MAX];
  return ::realpath(path, buf) ? std::string(buf) : std::string(path);
}

#define REQUIRE_FILE(path, how)                                          \
  if (::access(path, R_OK) != 0) GTEST_SKIP() << (path) << " absent: " << (how)

constexpr const char* kHowLibcuda = "make deps unpacks it (scripts/fetch-libcuda.sh)";
constexpr const char* kHowToolkit = "the CUDA 13 toolkit's libraries are not on this host";

TEST(ProbeSites, TheKernelIsMeasuredNotAssumed) {
  const trace::ProbeCalibration& c = calibration();
  std::printf("calibration: %s (%lld ms)\n", trace::describe_calibration(c).c_str(),
              static_cast<long long>(c.took.count()));
  ASSERT_TRUE(c.error.empty()) << c.error;
  EXPECT_TRUE(c.emulation.measured);
  EXPECT_TRUE(c.emulated.measured);
  EXPECT_TRUE(c.stepped.measured);
  // Branch emulation predates every kernel stallwatch supports; a RIP-relative compare is
  // single-stepped by all of them.
  EXPECT_TRUE(c.emulation(InsnKind::kJcc));
  EXPECT_TRUE(c.emulation(InsnKind::kJmp));
  EXPECT_FALSE(c.emulation(InsnKind::kCompare));
}

TEST(ProbeSites, NvidiaDriverEntriesAreProbedOnTheStubJump) {
  REQUIRE_FILE(REAL_LIBCUDA, kHowLibcuda);
  auto plan = trace::plan_probes(REAL_LIBCUDA, trace::Api::kDriver, trace::LaunchLayer::kBoth,
                                 measured_policy());
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_GE(plan->sites.size(), 30u);
  EXPECT_TRUE(plan->missing_calls.empty()) << plan->missing_calls.front();
  for (const trace::SymbolSite& s : plan->sites) {
    EXPECT_EQ(s.site.delta, 10u) << s.symbol;
    EXPECT_EQ(s.site.at, InsnKind::kJcc) << s.symbol;
    EXPECT_EQ(s.site.cls, SiteClass::kEmulated) << s.symbol;
  }
  // --probe-sites=entry: every probe on the compare, single-stepped.
  auto entry = trace::plan_probes(REAL_LIBCUDA, trace::Api::kDriver, trace::LaunchLayer::kBoth,
                                  measured_policy(false));
  ASSERT_TRUE(entry);
  for (const trace::SymbolSite& s : entry->sites) {
    EXPECT_EQ(s.site.delta, 0u) << s.symbol;
    EXPECT_EQ(s.site.cls, SiteClass::kStepped) << s.symbol;
  }
}

TEST(ProbeSites, TheStandInDriverHasTheRealShape) {
  auto plan = trace::plan_probes(MOCK_LIBCUDA, trace::Api::kDriver, trace::LaunchLayer::kBoth,
                                 measured_policy());
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->sites.size(), 39u) << "40 cu* stubs, of which cuDriverGetVersion is not traced";
  for (const trace::SymbolSite& s : plan->sites) {
    EXPECT_EQ(s.site.delta, 10u) << s.symbol;
    EXPECT_EQ(s.site.at, InsnKind::kJcc) << s.symbol;
    EXPECT_EQ(s.site.cls, SiteClass::kEmulated) << s.symbol;
  }
}

TEST(ProbeSites, RuntimeAndNcclEntriesAreProbedOnTheirPush) {
  REQUIRE_FILE(kRealCudart, kHowToolkit);
  REQUIRE_FILE(kRealNccl, kHowToolkit);
  const bool push = calibration().emulation(InsnKind::kPush);
  for (const auto& [path, api] : {std::pair{kRealCudart, trace::Api::kRuntime},
                                  std::pair{kRealNccl, trace::Api::kNccl}}) {
    auto plan = trace::plan_probes(path, api, trace::LaunchLayer::kBoth, measured_policy());
    ASSERT_TRUE(plan) << path << ": " << plan.error().message;
    EXPECT_GE(plan->sites.size(), 10u) << path;
    for (const trace::SymbolSite& s : plan->sites) {
      if (s.symbol == "ncclBcast") {  // sub $0x10,%rsp first: nothing to walk over
        EXPECT_EQ(s.site.delta, 0u);
        EXPECT_EQ(s.site.cls, SiteClass::kStepped);
        continue;
      }
      // +0, or +10 past NCCL's init entries' movabs $imm,%rax.
      const bool init = s.symbol == "ncclCommInitAll" || s.symbol == "ncclCommInitRankConfig";
      EXPECT_EQ(s.site.delta, init && push ? 10u : 0u) << path << " " << s.symbol;
      if (push || !init) {
        EXPECT_EQ(s.site.at, InsnKind::kPush) << path << " " << s.symbol;
      }
      EXPECT_EQ(s.site.cls, push ? SiteClass::kEmulated : SiteClass::kStepped) << s.symbol;
    }
  }
}

// cuLaunchKernel's eleven arguments: six in registers, five on the stack above the return address.
using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);

// One call site, so the return address is the same for every site probed.
__attribute__((noinline)) int call_launch(LaunchFn fn) {
  return fn(reinterpret_cast<void*>(0x1111), 2, 3, 4, 5, 6, 7, 8, reinterpret_cast<void*>(0x9999),
            reinterpret_cast<void**>(0xaaaa), reinterpret_cast<void**>(0xbbbb));
}

// struct site_args of bpf/site_args.bpf.c.
struct SiteArgs {
  std::uint64_t args[11];
  std::uint64_t sp;
  std::uint64_t ret_addr;
  std::uint64_t rc;
  std::uint64_t entries;
  std::uint64_t returns;
};

struct SiteSeen {
  SiteArgs args{};
  int rc = 0;
  double ns_per_call = 0;
};

struct SkelDeleter {
  void operator()(site_args_bpf* s) const { site_args_bpf__destroy(s); }
};
struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};

// Probes `path` at `offset` (this process only), makes `calls` launches, returns what the
// programs saw.
SiteSeen probe_launches(const std::string& path, std::uint64_t offset, LaunchFn fn, int calls) {
  SiteSeen seen;
  std::unique_ptr<site_args_bpf, SkelDeleter> skel(site_args_bpf__open_and_load());
  EXPECT_TRUE(skel) << "site_args: " << std::strerror(errno);
  if (!skel) return seen;
  bpf_uprobe_opts o{};
  o.sz = sizeof(o);
  std::unique_ptr<bpf_link, LinkDeleter> in(
      bpf_program__attach_uprobe_opts(skel->progs.site_args_enter, getpid(), path.c_str(), offset, &o));
  o.retprobe = true;
  std::unique_ptr<bpf_link, LinkDeleter> out(
      bpf_program__attach_uprobe_opts(skel->progs.site_args_exit, getpid(), path.c_str(), offset, &o));
  EXPECT_TRUE(in && out) << path << "+" << offset << ": " << std::strerror(errno);
  if (!in || !out) return seen;
  timespec t0{}, t1{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < calls; ++i) seen.rc = call_launch(fn);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  seen.ns_per_call = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / calls;
  const std::uint32_t zero = 0;
  EXPECT_EQ(bpf_map__lookup_elem(skel->maps.site_args, &zero, sizeof(zero), &seen.args,
                                 sizeof(seen.args), 0),
            0);
  return seen;
}

void expect_same_view_at_moved_site(const char* library, int expected_rc) {
  const std::string path = real_path(library);
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto fn = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
  ASSERT_NE(fn, nullptr);
  auto plan = trace::plan_probes(path, trace::Api::kDriver, trace::LaunchLayer::kDriver,
                                 measured_policy());
  ASSERT_TRUE(plan) << plan.error().message;
  const trace::SymbolSite* launch = nullptr;
  for (const trace::SymbolSite& s : plan->sites) {
    if (s.symbol == "cuLaunchKernel") launch = &s;
  }
  ASSERT_NE(launch, nullptr);
  ASSERT_EQ(launch->site.delta, 10u);
  constexpr int kCalls = 200;
  const SiteSeen moved = probe_launches(path, launch->offset + launch->site.delta, fn, kCalls);
  const SiteSeen entry = probe_launches(path, launch->offset, fn, kCalls);
  std::printf("%s cuLaunchKernel: %.0f ns a call probed on the je at +10, %.0f ns on the compare "
              "at +0 (entry and return probe, this process only)\n",
              library, moved.ns_per_call, entry.ns_per_call);
  for (const SiteSeen* s : {&moved, &entry}) {
    EXPECT_EQ(s->args.entries, static_cast<std::uint64_t>(kCalls));
    EXPECT_EQ(s->args.returns, static_cast<std::uint64_t>(kCalls));
    EXPECT_EQ(s->rc, expected_rc);
    EXPECT_EQ(static_cast<int>(s->args.rc), s->rc);
    const std::uint64_t want[11] = {0x1111, 2, 3, 4, 5, 6, 7, 8, 0x9999, 0xaaaa, 0xbbbb};
    for (int i = 0; i < 11; ++i) EXPECT_EQ(s->args.args[i], want[i]) << "argument " << i + 1;
  }
  // The same stack pointer and return address at both sites: a return probe at +10 hijacks
  // the caller's return address as one at +0 does.
  EXPECT_EQ(moved.args.sp, entry.args.sp);
  EXPECT_EQ(moved.args.ret_addr, entry.args.ret_addr);
  EXPECT_NE(moved.args.ret_addr, 0u);
  dlclose(h);
}

TEST(ProbeSites, NvidiaDriverArgumentsStackAndReturnAreTheSameAtTheMovedSite) {
  REQUIRE_FILE(REAL_LIBCUDA, kHowLibcuda);
  expect_same_view_at_moved_site(REAL_LIBCUDA, 3);  // CUDA_ERROR_NOT_INITIALIZED: no cuInit
}

TEST(ProbeSites, StandInDriverArgumentsStackAndReturnAreTheSameAtTheMovedSite) {
  expect_same_view_at_moved_site(MOCK_LIBCUDA, 0);
}

// The daemon on NVIDIA's files, attached before the process maps them: exact counts per call,
// every site emulated.
TEST(ProbeSites, DaemonCountsEveryCallOnNvidiaLibraries) {
  REQUIRE_FILE(REAL_LIBCUDA, kHowLibcuda);
  REQUIRE_FILE(kRealCudart, kHowToolkit);
  const std::string libcuda = real_path(REAL_LIBCUDA);
  const std::string dirs = libcuda.substr(0, libcuda.rfind('/')) + ",/usr/local/cuda/lib64";
  Daemon d({"--library-dirs", dirs});
  ASSERT_TRUE(d.wait_ready()) << "log: " << d.log_path();
  TestCgroup cg("sw-real-libs-" + std::to_string(getpid()));
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kRealCudart, "--cuda", libcuda, "--calls",
            "cuLaunchKernel:50,cuLaunchKernelEx:20,cuStreamSynchronize:30,cuMemAlloc_v2:5,"
            "cudaStreamSynchronize:10,cudaMemcpy:4"};
  s.cgroup_dir = cg.dir();
  const pid_t pid = spawn(s);
  ASSERT_EQ(wait_exit(pid, 60s), 0);
  const std::string count = "stallwatch_cuda_call_duration_seconds_count";
  auto calls = [&](const std::vector<Sample>& x, const char* api, const char* call) {
    return sum_samples(x, count, {{"cgroup", cg.label()}, {"api", api}, {"call", call}});
  };
  std::vector<Sample> x;
  const bool all = poll_until(
      [&] {
        x = parse_exposition(d.metrics());
        return calls(x, "driver", "cuLaunchKernel") >= 50 && calls(x, "runtime", "cudaMemcpy") >= 4;
      },
      30s);
  ASSERT_TRUE(all) << "log: " << d.log_path();
  ASSERT_TRUE(d.wait_windows());
  x = parse_exposition(d.metrics());
  EXPECT_EQ(calls(x, "driver", "cuLaunchKernel"), 50);
  EXPECT_EQ(calls(x, "driver", "cuLaunchKernelEx"), 20);
  EXPECT_EQ(calls(x, "driver", "cuStreamSynchronize"), 30);
  EXPECT_EQ(calls(x, "driver", "cuMemAlloc_v2"), 5);
  EXPECT_EQ(calls(x, "runtime", "cudaStreamSynchronize"), 10);
  EXPECT_EQ(calls(x, "runtime", "cudaMemcpy"), 4);
  // Every probe of the daemon sits on an instruction this kernel emulates here: the driver's on
  // its stub's je, the runtime's and NCCL's on their push (where the kernel emulates a push).
  const double attached = sum_samples(x, "stallwatch_attached_probes", {});
  EXPECT_GT(attached, 0);
  // The single-stepped ones are exactly those the plan of each attached file says: on the
  // toolkit's libnccl.so.2, ncclBcast (it moves the stack first).
  double stepped = 0;
  for (const auto& [path, api] : {std::pair{kRealNccl, trace::Api::kNccl},
                                  std::pair{kRealCudart, trace::Api::kRuntime},
                                  std::pair{REAL_LIBCUDA, trace::Api::kDriver}}) {
    auto plan = trace::plan_probes(path, api, trace::LaunchLayer::kDriver, measured_policy());
    if (!plan) continue;
    for (const trace::SymbolSite& site : plan->sites) {
      stepped += site.site.cls == SiteClass::kStepped ? 2 : 0;
    }
  }
  if (calibration().emulation(InsnKind::kPush)) {
    EXPECT_LE(stepped, 2);
  }
  EXPECT_EQ(sum_samples(x, "stallwatch_probe_sites", {{"class", "stepped"}}), stepped);
  EXPECT_EQ(sum_samples(x, "stallwatch_probe_sites", {{"class", "emulated"}}), attached - stepped);
  EXPECT_GT(sum_samples(x, "stallwatch_probe_trap_seconds", {{"class", "stepped"}, {"probe", "entry"}}),
            0);
  EXPECT_EQ(d.stop(), 0);
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
