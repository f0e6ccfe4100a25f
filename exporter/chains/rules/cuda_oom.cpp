// cuda_oom: a CUDA allocation returned out of memory. Names the request, what the workload's
// processes held (traced allocations) when it failed and the largest holders. docs/chains.md.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "trace/calls.h"

namespace stallwatch::chains {
namespace {

constexpr size_t kHolders = 3;  // largest holders named

struct Holder {
  int pid = 0;
  std::string comm;
  std::uint64_t bytes = 0;
};

// What each live process of the series holds now, largest first.
std::vector<Holder> holders_of(const Series& s) {
  std::map<int, std::uint64_t> held;
  for (const auto& p : s.processes) {
    if (trace::is_allocating_call(p.call_id) && !p.exited) held[p.pid] += p.totals.live_bytes();
  }
  std::vector<Holder> out;
  for (const auto& [pid, bytes] : held) {
    if (bytes == 0) continue;
    auto it = s.process_info.find(pid);
    out.push_back(Holder{pid, it == s.process_info.end() ? std::string() : it->second.comm, bytes});
  }
  std::sort(out.begin(), out.end(), [](const Holder& a, const Holder& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.pid < b.pid;
  });
  return out;
}

Advice advise(int pid) {
  Advice out;
  out.command(Command("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
              "fragmentation: free memory in pieces too small for the request");
  out.command(Command("nvidia-smi --query-compute-apps=pid,used_memory --format=csv"),
              "who else holds memory on the GPU (the context's own memory included)");
  out.command(Command("py-spy dump --pid").number(pid), "where the failing allocation is made");
  out.note("print(torch.cuda.memory_summary()) at the failure: allocated vs reserved (cached)");
  out.note("reduce the batch size, or recompute activations (torch.utils.checkpoint)");
  return out;
}

// What failed, for the chain's text: in a live process (its window) or one that exited.
struct Failure {
  int pid = 0;
  std::string comm;
  std::uint32_t call_id = 0;
  std::uint64_t failures = 0;
  std::uint64_t request = 0;
  std::uint64_t process_live = 0;
  bool exited = false;
};

class CudaOom : public Rule {
 public:
  Kind kind() const override { return Kind::kCudaOom; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    const MemoryWindow& m = p.memory;
    if (m.failures == 0) return;
    seen_[{p.cgroup, p.pid}] += m.failures;
    Finding f;
    f.chain = ctx.base_chain(kind(), p);
    f.chain.call = std::string(call_name(m.failed_call));
    f.chain.api = std::string(trace::api_name(trace::all_calls()[m.failed_call].api));
    fill(ctx, p.cgroup,
         Failure{p.pid, p.comm, m.failed_call, m.failures, m.failed_bytes, m.live_total(), false},
         f);
    out.push_back(std::move(f));
  }

  // Processes that failed and exited before a window saw them alive (an uncaught
  // OutOfMemoryError ends the process).
  void series(const WindowContext& ctx, const SeriesWindow& sw,
              std::vector<Finding>& out) override {
    auto sit = ctx.snap.series.find(sw.cgroup);
    if (sit == ctx.snap.series.end()) return;
    for (const auto& e : sit->second.exited_alloc_failures) {
      // Those a window saw while the process lived were reported then.
      auto seen = seen_.find({sw.cgroup, e.pid});
      const std::uint64_t known = seen == seen_.end() ? 0 : seen->second;
      if (e.failures <= known) continue;
      Finding f;
      f.chain = ctx.base_chain(kind(), sw.cgroup);
      f.chain.pid = e.pid;
      f.chain.comm = e.comm;
      f.chain.call = std::string(call_name(e.call_id));
      f.chain.api = std::string(trace::api_name(trace::all_calls()[e.call_id].api));
      fill(ctx, sw.cgroup,
           Failure{e.pid, e.comm, e.call_id, e.failures - known, e.failed_bytes, 0, true}, f);
      out.push_back(std::move(f));
    }
  }

  void forget(const std::string& cgroup, int pid) override { seen_.erase({cgroup, pid}); }

 private:
  std::map<std::pair<std::string, int>, std::uint64_t> seen_;  // failures reported, live

  void fill(const WindowContext& ctx, const std::string& cgroup, const Failure& m, Finding& f) {
    auto sit = ctx.snap.series.find(cgroup);
    const std::vector<Holder> holders =
        sit == ctx.snap.series.end() ? std::vector<Holder>{} : holders_of(sit->second);
    std::uint64_t workload_live = 0;
    for (const auto& h : holders) workload_live += h.bytes;
    const auto& p = m;  // the failing process
    f.immediate = true;  // one failure is the event: no second window to wait for
    Chain& c = f.chain;
    c.severity = kind_info(kind()).cutoffs.of(static_cast<double>(m.failures));
    const std::string call(call_name(m.call_id));
    const std::string who = process_text(p.comm, p.pid);
    c.root_cause = call + " of " + human_bytes(static_cast<double>(m.request)) +
                   " returned out of memory in " + who + " (" + thousands(m.failures) +
                   (m.failures == 1 ? " time" : " times") +
                   (m.exited ? ", then the process exited" : " this window") +
                   "); the workload's processes held " +
                   human_bytes(static_cast<double>(workload_live)) + " of traced GPU memory then";
    if (!holders.empty()) {
      c.root_cause += ", most by ";
      for (size_t i = 0; i < holders.size() && i < kHolders; ++i) {
        if (i > 0) c.root_cause += ", ";
        c.root_cause += process_text(holders[i].comm, holders[i].pid) + " " +
                        human_bytes(static_cast<double>(holders[i].bytes));
      }
    }
    c.effect = "the allocation failed: PyTorch raises torch.cuda.OutOfMemoryError unless freeing "
               "its cached blocks and retrying succeeds; other frameworks fail the step";
    c.summary = summary_of(c, call + " of " + human_bytes(static_cast<double>(m.request)) +
                                  " out of memory in " + who + ", " +
                                  human_bytes(static_cast<double>(workload_live)) + " held");
    set_advice(c, advise(p.pid));
    for (size_t i = 0; i < holders.size() && i < kHolders; ++i) {
      Contributor h;
      h.comm = holders[i].comm;
      h.pid = holders[i].pid;
      h.cgroup = cgroup;
      h.role = std::string(holders[i].pid == p.pid ? "memory holder, same process, "
                                                   : "memory holder, ") +
               human_bytes(static_cast<double>(holders[i].bytes)) + " held";
      c.contributors.push_back(std::move(h));
    }
    c.evidence = {{"failures", static_cast<double>(m.failures)},
                  {"request_bytes", static_cast<double>(m.request)},
                  {"workload_live_bytes", static_cast<double>(workload_live)},
                  {"process_live_bytes", static_cast<double>(m.process_live)}};
  }
};

}  // namespace

std::unique_ptr<Rule> make_cuda_oom_rule() { return std::make_unique<CudaOom>(); }

}  // namespace stallwatch::chains
