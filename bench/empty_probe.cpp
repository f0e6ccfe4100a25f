// empty_probe LIBRARY... : the baseline of bench/run.sh and bench/job_cost.sh. Attaches the
// empty uprobe + uretprobe pair of empty_probe.bpf.c where the daemon's LibraryProbes::attach
// would attach cuda_enter/cuda_exit: one pair per distinct file offset of every exported symbol
// call_for_symbol() knows, pid -1 (all processes), on each library named. --launch-layer L
// (driver, runtime, both; default both) leaves out the launches the daemon's --launch-layer L
// leaves out. Each pair sits where the daemon's would (trace/probe_sites.h: the first instruction
// this kernel emulates); --probe-sites entry puts every pair at its symbol. --entry-only attaches the entry program alone (the cost of a uprobe without its
// uretprobe). With --sched, also an empty tp_btf program on sched_switch and on sched_wakeup
// (the floor of the scheduler hooks). With --timer, the timer pair instead of the empty pair (two
// clock reads and two task-storage lookups per call: the floor of any per-thread call timer).
// Prints "ready" once every probe is attached, then holds them until SIGTERM/SIGINT.
// Exit status: 0 after a clean detach, 1 on any failure (nothing is left attached), 2 on usage.
#include <bpf/libbpf.h>
#include <signal.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "empty_probe.skel.h"
#include "trace/attach.h"
#include "trace/calls.h"
#include "trace/probe_cost.h"

namespace {

struct SkelDeleter {
  void operator()(empty_probe_bpf* skel) const { empty_probe_bpf__destroy(skel); }
};
struct OwnedLinkDeleter {
  void operator()(bpf_link* link) const { bpf_link__destroy(link); }
};
using OwnedLink = std::unique_ptr<bpf_link, OwnedLinkDeleter>;

OwnedLink attach(bpf_program* prog, const std::string& path, std::uint64_t offset, bool retprobe) {
  bpf_uprobe_opts opts{};
  opts.sz = sizeof(opts);
  opts.retprobe = retprobe;
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), offset, &opts);
  if (!link) {
    std::fprintf(stderr, "empty_probe: %s at %s+0x%llx: %s\n", retprobe ? "uretprobe" : "uprobe",
                 path.c_str(), static_cast<unsigned long long>(offset), std::strerror(errno));
  }
  return OwnedLink(link);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace stallwatch::trace;
  bool sched = false;
  bool timer = false;
  bool entry_only = false;
  bool sites_auto = true;
  LaunchLayer layer = LaunchLayer::kBoth;
  std::vector<std::string> paths;
  bool usage = false;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--sched") == 0) {
      sched = true;
    } else if (std::strcmp(argv[i], "--timer") == 0) {
      timer = true;
    } else if (std::strcmp(argv[i], "--entry-only") == 0) {
      entry_only = true;
    } else if (std::strcmp(argv[i], "--probe-sites") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "auto" && v != "entry") usage = true;
      sites_auto = v == "auto";
    } else if (std::strcmp(argv[i], "--launch-layer") == 0 && i + 1 < argc) {
      auto l = parse_launch_layer(argv[++i]);
      if (!l) usage = true;
      layer = l.value_or(layer);
    } else if (argv[i][0] == '-') {
      usage = true;
    } else {
      paths.emplace_back(argv[i]);
    }
  }
  if (usage || paths.empty()) {
    std::fprintf(stderr,
                 "usage: empty_probe LIBRARY... [--sched] [--timer] [--entry-only] "
                 "[--launch-layer driver|runtime|both] [--probe-sites auto|entry]   (e.g. "
                 "build/mock/libcudart.so.12)\n");
    return 2;
  }
  // Where the probes go: as the daemon would put them (--probe-sites auto: measured on this
  // kernel), or every one at its symbol (--probe-sites entry).
  SitePolicy policy;
  policy.moves = sites_auto;
  if (sites_auto) policy.emulation = calibrate_probes().emulation;
  // (path, offset) -> symbol: aliases share an offset, one pair each.
  std::map<std::pair<std::string, std::uint64_t>, std::string> targets;
  for (const std::string& path : paths) {
    auto api = api_of_library(path);
    if (!api) {
      std::fprintf(stderr, "empty_probe: %s is not a CUDA runtime, driver or NCCL library name\n",
                   path.c_str());
      return 1;
    }
    // The sites the daemon would choose (trace/attach.h): the floor pays the same kind of trap.
    auto plan = plan_probes(path, *api, layer, policy);
    if (!plan) {
      std::fprintf(stderr, "empty_probe: %s\n", plan.error().message.c_str());
      return 1;
    }
    for (const SymbolSite& s : plan->sites) {
      targets.emplace(std::make_pair(path, s.offset + s.site.delta), s.symbol);
    }
  }
  if (targets.empty()) {
    std::fprintf(stderr, "empty_probe: no traced symbol in the libraries named\n");
    return 1;
  }

  // Block the stop signals before any thread exists, then wait for them with sigwait: no
  // handler, no race between "ready" and an early SIGTERM.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::unique_ptr<empty_probe_bpf, SkelDeleter> skel(empty_probe_bpf__open());
  if (skel && !sched) {
    bpf_program__set_autoload(skel->progs.empty_switch, false);
    bpf_program__set_autoload(skel->progs.empty_wakeup, false);
  }
  if (skel) {
    bpf_program__set_autoload(timer ? skel->progs.empty_enter : skel->progs.timer_enter, false);
    bpf_program__set_autoload(timer ? skel->progs.empty_exit : skel->progs.timer_exit, false);
  }
  if (!skel || empty_probe_bpf__load(skel.get()) != 0) {
    std::fprintf(stderr, "empty_probe: loading the BPF object: %s\n", std::strerror(errno));
    return 1;
  }
  std::vector<OwnedLink> links;
  bool ok = true;
  if (sched) {
    for (bpf_program* prog : {skel->progs.empty_switch, skel->progs.empty_wakeup}) {
      links.emplace_back(bpf_program__attach(prog));
      if (!links.back()) {
        std::fprintf(stderr, "empty_probe: attaching %s: %s\n", bpf_program__name(prog),
                     std::strerror(errno));
        return 1;
      }
    }
  }
  bpf_program* enter = timer ? skel->progs.timer_enter : skel->progs.empty_enter;
  bpf_program* exit = timer ? skel->progs.timer_exit : skel->progs.empty_exit;
  for (const auto& [where, name] : targets) {
    links.push_back(attach(enter, where.first, where.second, false));
    if (!links.back()) {
      ok = false;
      break;
    }
    if (entry_only) continue;
    links.push_back(attach(exit, where.first, where.second, true));
    if (!links.back()) {
      ok = false;
      break;
    }
  }
  if (ok) {
    std::printf("ready %zu probes on %zu symbols of %zu libraries\n", links.size(),
                targets.size(), paths.size());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
  }
  // Detach, one link after another (the skeleton unloads after them). Each waits for an RCU grace
  // period (~110 ms here) and this kernel serialises them even across threads, so the daemon's
  // parallel detach would gain nothing: 42 links take about 4.5 s either way.
  links.clear();
  return ok ? 0 : 1;
}
