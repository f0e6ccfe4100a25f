// call_hang: a synchronize, copy or NCCL op that has not returned for --hang-threshold (default
// 60 s), seen while it hangs from the kernel's open call of the thread (Series::inflight). For
// an NCCL op, the local ranks of the same world size that are not in it are named: the rank
// that stopped progressing. docs/chains.md.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chains/call_classes.h"
#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "trace/calls.h"

namespace stallwatch::chains {
namespace {

bool can_hang(std::uint32_t call_id) {
  return is_sync_call(call_id) || is_copy_call(call_id) || trace::is_nccl_op(call_id);
}

struct Hung {
  std::string cgroup;
  const Series* series = nullptr;
  const InflightCall* call = nullptr;
};

std::string comm_of(const Series& s, int pid) {
  auto it = s.process_info.find(pid);
  return it == s.process_info.end() ? std::string() : it->second.comm;
}

// The local members of the hung op's world that are not in a hung op of that world: the ranks
// that stopped progressing. Empty when the world is ambiguous (two jobs of the same size: a
// rank number twice) or every local member is in it.
std::vector<NcclMember> missing_ranks(const Snapshot& snap, int world_size,
                                      const std::set<int>& in_op) {
  std::vector<NcclMember> members, out;
  std::set<int> ranks;
  for (const auto& m : snap.nccl_members) {
    if (m.world_size != world_size || m.rank < 0) continue;
    if (!ranks.insert(m.rank).second) {
      // The same rank twice: one process with two communicators of this size is fine, two
      // processes are two jobs.
      auto same = std::find_if(members.begin(), members.end(),
                               [&](const NcclMember& o) { return o.rank == m.rank; });
      if (same != members.end() && same->pid != m.pid) return {};
      continue;
    }
    members.push_back(m);
  }
  for (const auto& m : members) {
    if (!in_op.count(m.rank)) out.push_back(m);
  }
  return out;
}

Advice advise(const Chain& c, const InflightCall& h, const std::vector<NcclMember>& missing,
              const host::XidEvent* xid) {
  Advice out;
  if (xid && host::xid_info(xid->code).action == host::XidAction::kReset) {
    if (xid->gpu >= 0) {
      out.command(Command("nvidia-smi -q -i").number(xid->gpu),
                  "is the GPU still on the bus after the Xid");
    }
    out.note("drain the node and reset the GPU (nvidia-smi -r) or reboot; the job must restart "
             "from its last checkpoint");
  }
  for (const auto& m : missing) {
    out.command(Command("py-spy dump --pid").number(m.pid),
                "where rank " + std::to_string(m.rank) +
                    " is stuck instead of joining the collective");
  }
  out.command(Command("py-spy dump --pid").number(c.pid),
              "the Python stack of every thread: which line issued the hung call");
  out.command(Command("cat").arg("/proc/" + std::to_string(c.pid) + "/task/" +
                                 std::to_string(h.tid) + "/stack"),
              "where the thread waits in the kernel (run as root)");
  if (trace::is_nccl_op(h.call_id)) {
    out.code("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL,NET",
             "which peer each rank waits for; restart the job with it set");
    out.code("torch.distributed.init_process_group(..., timeout=timedelta(minutes=5))",
             "fail a hung collective in minutes, not after the 30-minute default");
  } else {
    out.command(Command("nvidia-smi").then(Command("dmesg").pipe(Command("grep -i xid"))),
                "is the GPU still alive? an Xid error means the GPU or driver failed");
  }
  return out;
}

class CallHang : public Rule {
 public:
  Kind kind() const override { return Kind::kCallHang; }

  void host(const WindowContext& ctx, std::vector<Finding>& out) override {
    const std::uint64_t threshold = ctx.options.hang_threshold_ns;
    // The oldest hung call per process: its thread's outermost open call.
    std::map<std::pair<std::string, int>, Hung> worst;
    // Ranks in a hung NCCL op, by world size.
    std::map<int, std::set<int>> in_op;
    for (const auto& [label, s] : ctx.snap.series) {
      for (const auto& c : s.inflight) {
        if (c.age_ns < threshold || !can_hang(c.call_id)) continue;
        if (trace::is_nccl_op(c.call_id) && c.world_size > 1 && c.rank >= 0) {
          in_op[c.world_size].insert(c.rank);
        }
        Hung& w = worst[{label, c.pid}];
        if (!w.call || c.age_ns > w.call->age_ns ||
            (c.age_ns == w.call->age_ns && c.depth < w.call->depth)) {
          w = Hung{label, &s, &c};
        }
      }
    }
    for (const auto& [key, h] : worst) {
      const InflightCall& call = *h.call;
      Finding f;
      f.immediate = true;  // the threshold is the persistence
      f.close_after = 1;   // it returned: close at once
      Chain& c = f.chain;
      c = ctx.base_chain(kind(), h.cgroup);
      c.pid = call.pid;
      c.comm = comm_of(*h.series, call.pid);
      c.severity = Severity::kCritical;
      c.call = std::string(call_name(call.call_id));
      const auto calls = trace::all_calls();
      c.api = call.call_id < calls.size() ? std::string(trace::api_name(calls[call.call_id].api))
                                          : std::string();
      const double age = secs(call.age_ns);
      c.p50_s = c.p99_s = age;  // the call's duration so far
      const double blocked = share(secs(call.blocked_ns), age);
      const double runnable = share(secs(call.runnable_ns), age);
      const double oncpu = std::max(0.0, 1 - blocked - runnable);
      std::vector<NcclMember> missing;
      const host::XidEvent* xid = nullptr;
      std::string rank_text;
      if (trace::is_nccl_op(call.call_id) && call.world_size > 1 && call.rank >= 0) {
        rank_text = ", rank " + std::to_string(call.rank) + " of " + std::to_string(call.world_size);
        missing = missing_ranks(ctx.snap, call.world_size, in_op[call.world_size]);
      }
      const std::string thread =
          "thread " + std::to_string(call.tid) + (call.thread.empty() ? "" : " (" + call.thread + ")");
      std::string rest = c.call + " in " + process_text(c.comm, c.pid) + rank_text +
                         " has not returned for " + human_seconds(age);
      if (!missing.empty()) {
        rest += "; rank " + std::to_string(missing.front().rank) + " (PID " +
                std::to_string(missing.front().pid) + ") has not entered it";
      }
      c.summary = summary_of(c, rest);
      c.root_cause =
          c.call + " on " + thread + " entered " + human_seconds(age) + " ago and is still open: " +
          (blocked >= 0.5 ? "the thread is blocked (asleep " + percent(blocked) +
                                " of it), waiting for the GPU or a peer"
                          : "the thread is spinning (on a CPU " + percent(oncpu) +
                                ", runnable " + percent(runnable) +
                                " of it): a busy-wait the GPU never ends");
      if (!missing.empty()) {
        c.root_cause += ". Local ranks of this world size in a hung collective: ";
        bool first = true;
        for (int r : in_op[call.world_size]) {
          c.root_cause += (first ? "" : ",") + std::to_string(r);
          first = false;
        }
        c.root_cause += "; not in it: ";
        first = true;
        for (const auto& m : missing) {
          c.root_cause += std::string(first ? "" : ", ") + "rank " + std::to_string(m.rank) +
                          " (PID " + std::to_string(m.pid) + ")";
          first = false;
        }
        c.root_cause += ", the rank that stopped progressing";
      }
      // An Xid on the process's GPUs from a minute before the call entered: the GPU failed.
      const std::int64_t entered = ctx.view.end_ns - static_cast<std::int64_t>(call.age_ns);
      const auto xids = ctx.xids_of(call.pid, entered - 60'000'000'000LL);
      if (!xids.empty()) {
        const host::XidEvent& x = *xids.back();
        const host::XidInfo info = host::xid_info(x.code);
        c.root_cause += ". The NVIDIA driver logged Xid " + std::to_string(x.code) +
                        (info.meaning.empty() ? "" : " (" + std::string(info.meaning) + ")") +
                        " on " +
                        (x.gpu >= 0 ? "GPU " + std::to_string(x.gpu) + ", which it uses,"
                                    : "the GPU at PCI " + x.pci) +
                        " " + human_seconds(secs(static_cast<std::uint64_t>(
                                  std::max<std::int64_t>(0, ctx.view.end_ns - x.unix_ns)))) +
                        " ago: \"" + x.text + "\"" +
                        (info.action == host::XidAction::kReset
                             ? ", a fault that needs a GPU reset: the call will not return"
                             : "");
        c.summary += " (Xid " + std::to_string(x.code) + ")";
        xid = &x;
      }
      // A GPU of the process that NVML calls lost (off the bus): its work will never finish.
      int lost_gpu = -1;
      if (const auto used = ctx.view.process_gpus.find(call.pid);
          used != ctx.view.process_gpus.end()) {
        for (const auto& g : ctx.view.gpus) {
          if (g.lost_since_ns <= 0 ||
              std::find(used->second.begin(), used->second.end(), g.last.index) ==
                  used->second.end()) {
            continue;
          }
          c.root_cause += ". GPU " + std::to_string(g.last.index) +
                          (g.last.uuid.empty() ? std::string() : " (" + g.last.uuid + ")") +
                          " has been lost for " +
                          human_seconds(secs(static_cast<std::uint64_t>(
                              std::max<std::int64_t>(0, ctx.view.end_ns - g.lost_since_ns)))) +
                          ": NVML answers \"GPU is lost\" (fallen off the bus)";
          if (!xid) c.summary += " (GPU " + std::to_string(g.last.index) + " lost)";
          lost_gpu = static_cast<int>(g.last.index);
          break;
        }
      }
      c.effect = "the process makes no progress: the GPU work behind this call is stalled" +
                 std::string(trace::is_nccl_op(call.call_id)
                                 ? ", and NCCL aborts the job only when its timeout expires "
                                   "(30 minutes by default)"
                                 : "");
      for (const auto& m : missing) {
        const auto sit = ctx.snap.series.find(m.cgroup);
        const std::string comm = sit == ctx.snap.series.end() ? "" : comm_of(sit->second, m.pid);
        c.contributors.push_back(Contributor{comm, m.pid, m.cgroup,
                                             "rank " + std::to_string(m.rank) +
                                                 ", not in the collective",
                                             0, 0, {}});
      }
      c.evidence = {{"inflight_s", age},
                    {"blocked_share", blocked},
                    {"runnable_share", runnable},
                    {"tid", static_cast<double>(call.tid)}};
      if (lost_gpu >= 0) c.evidence.push_back({"gpu_lost", static_cast<double>(lost_gpu)});
      if (call.world_size > 1) {
        c.evidence.push_back({"rank", static_cast<double>(call.rank)});
        c.evidence.push_back({"world_size", static_cast<double>(call.world_size)});
      }
      if (xid) {
        c.evidence.push_back({"xid", static_cast<double>(xid->code)});
        c.evidence.push_back({"xid_gpu", static_cast<double>(xid->gpu)});
      }
      set_advice(c, advise(c, call, missing, xid));
      out.push_back(std::move(f));
    }
  }
};

}  // namespace

std::unique_ptr<Rule> make_call_hang_rule() { return std::make_unique<CallHang>(); }

}  // namespace stallwatch::chains
