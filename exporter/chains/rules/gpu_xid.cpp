// gpu_xid: the NVIDIA driver logged an Xid error (host/xid.h) on a GPU a CUDA process uses, or
// naming the process. An Xid is itself the effect: a fault of the GPU, its memory or the
// process's own kernel, which stops or corrupts GPU work. A process whose call is already a
// call_hang chain gets no second chain: call_hang names the Xid (the cause of most hangs).
// Opens at once; stays open 10 minutes after the last Xid that needs a GPU reset, a minute after
// others. docs/chains.md.
#include <string>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"

namespace stallwatch::chains {
namespace {

constexpr std::int64_t kResetHoldNs = 600'000'000'000LL;
constexpr std::int64_t kHoldNs = 60'000'000'000LL;

double measure_of(host::XidAction a) {
  switch (a) {
    case host::XidAction::kReset: return 3;
    case host::XidAction::kApplication: return 2;
    case host::XidAction::kCheck:
    case host::XidAction::kUnknown: break;
  }
  return 1;
}

Advice advise(const host::XidEvent& x, const host::XidInfo& info) {
  Advice out;
  const bool known_gpu = x.gpu >= 0;
  switch (info.action) {
    case host::XidAction::kReset:
      if (known_gpu) {
        out.command(Command("nvidia-smi -q -i").number(x.gpu),
                    "is the GPU still on the bus; its ECC errors and remapped rows");
      } else {
        out.command(Command("nvidia-smi -q"), "is every GPU still on the bus");
      }
      out.note("drain the node, then reset the GPU (nvidia-smi -r once no process uses it) or "
               "reboot; if the same Xid returns, the GPU or its board needs service");
      out.command(Command("dcgmi diag -r 3"), "DCGM diagnostics before the node takes work again");
      break;
    case host::XidAction::kApplication:
      out.command(Command("dmesg -T").pipe(Command("grep -i").arg("xid")),
                  "every Xid of the node, with the process the driver named");
      out.note("the process's GPU work faulted or was stopped: restart it; an MMU fault (31) or "
               "engine exception (13) that repeats is a bug in a kernel (run it under "
               "compute-sanitizer)");
      break;
    case host::XidAction::kCheck:
      if (known_gpu) {
        out.command(Command("nvidia-smi -q -d ECC,ROW_REMAPPER -i").number(x.gpu),
                    "the GPU's memory error counters and remapped rows");
      } else {
        out.command(Command("nvidia-smi -q -d ECC,ROW_REMAPPER"),
                    "the GPUs' memory error counters and remapped rows");
      }
      out.note("schedule a GPU reset at the next drain if the counters keep growing");
      break;
    case host::XidAction::kUnknown:
      out.command(Command("dmesg -T").pipe(Command("grep -i").arg("xid")),
                  "the driver's lines around it");
      out.note("look the code up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)");
      break;
  }
  return out;
}

std::string xid_name(const host::XidEvent& x) {
  const host::XidInfo info = host::xid_info(x.code);
  return "Xid " + std::to_string(x.code) +
         (info.meaning.empty() ? std::string() : " (" + std::string(info.meaning) + ")");
}

class GpuXid : public Rule {
 public:
  Kind kind() const override { return Kind::kGpuXid; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    // An Xid keeps its chain open for a while: one that needs a reset for 10 minutes (the GPU
    // stays broken until someone acts), the others for a minute; a new one reopens it.
    std::vector<const host::XidEvent*> xids;
    for (const auto* x : ctx.xids_of(p.pid, ctx.view.end_ns - kResetHoldNs)) {
      const bool reset = host::xid_info(x->code).action == host::XidAction::kReset;
      if (reset || x->unix_ns >= ctx.view.end_ns - kHoldNs) xids.push_back(x);
    }
    if (xids.empty()) return;
    // A hung call of the process: call_hang names the Xid.
    if (ctx.current_chain && ctx.current_chain(Kind::kCallHang, p.cgroup, p.pid)) return;
    const host::XidEvent* worst = xids.front();
    for (const auto* x : xids) {
      if (measure_of(host::xid_info(x->code).action) >
          measure_of(host::xid_info(worst->code).action)) {
        worst = x;
      }
    }
    const host::XidInfo info = host::xid_info(worst->code);
    Finding f;
    f.immediate = true;  // an Xid is an event: one is enough
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(measure_of(info.action));
    const std::string gpu =
        worst->gpu >= 0 ? "GPU " + std::to_string(worst->gpu) + " (PCI " + worst->pci + ")"
                        : "the GPU at PCI " + worst->pci;
    c.evidence = {{"xid", static_cast<double>(worst->code)},
                  {"gpu", static_cast<double>(worst->gpu)},
                  {"xids_in_window", static_cast<double>(xids.size())},
                  {"action", measure_of(info.action)}};
    c.root_cause = "the NVIDIA driver logged " + xid_name(*worst) + " on " + gpu + ", which " +
                   process_text(p.comm, p.pid) + " uses: \"" + worst->text + "\"";
    if (xids.size() > 1) {
      c.root_cause += "; " + std::to_string(xids.size()) + " Xid errors on its GPUs lately";
    }
    switch (info.action) {
      case host::XidAction::kReset:
        c.effect = "the GPU needs a reset or the node a drain: GPU work on it fails or hangs "
                   "until then";
        break;
      case host::XidAction::kApplication:
        c.effect = "the process's GPU work faulted or was stopped: its CUDA calls return errors "
                   "from now on";
        break;
      default:
        c.effect = "the GPU recorded a fault; GPU work may have been slowed or retried";
        break;
    }
    c.summary = summary_of(c, xid_name(*worst) + " on " + gpu + " under " + p.comm + " (PID " +
                                  std::to_string(p.pid) + ")");
    set_advice(c, advise(*worst, info));
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_gpu_xid_rule() { return std::make_unique<GpuXid>(); }

}  // namespace stallwatch::chains
