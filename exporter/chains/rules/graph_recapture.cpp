// graph_recapture: CUDA Graphs captured, instantiated or updated again and again after warm-up,
// at a cost that shows in the process's CUDA time (torch.compile's CUDA graphs re-recorded for
// new shapes). docs/chains.md.
#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "trace/calls.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  size_t warmup_windows = 12;  // windows after the process's first graph build: compile time
  size_t history = 6;          // the pattern is judged over this many windows
  size_t min_windows = 3;      // with builds in at least this many of them
  double min_share = 0.05;     // costing at least this share of the process's CUDA time
};

// A build is an instantiation or an update of an executable graph; a capture's begin and end
// are timed with it but not counted again.
bool counts_as_build(std::uint32_t id) {
  const std::string_view n = call_name(id);
  return n.find("Instantiate") != std::string_view::npos || n.find("ExecUpdate") != n.npos;
}

Advice advise() {
  Advice out;
  out.note("torch.compile(mode=\"reduce-overhead\") records a CUDA graph per input shape: pad "
           "or bucket inputs to a few fixed shapes");
  out.note("mark a dimension that really varies: torch._dynamo.mark_dynamic(x, 0)");
  out.code("TORCH_LOGS=recompiles,cudagraphs python train.py",
           "why each graph is recompiled or re-recorded");
  out.note("torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True skips CUDA "
           "graphs for dynamic-shape graphs; a CUDA Graph tree that re-records every step costs "
           "more than it saves");
  return out;
}

class GraphRecapture : public Rule {
 public:
  Kind kind() const override { return Kind::kGraphRecapture; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    // One api's calls: the runtime's when the process makes any (each runtime call reaches the
    // driver underneath, which would count it twice), else the driver's. NCCL ops are left out
    // for the same reason.
    bool runtime = false;
    for (const auto& [id, t] : p.calls) {
      runtime |= id < trace::all_calls().size() && trace::all_calls()[id].api == trace::Api::kRuntime;
    }
    const trace::Api scope = runtime ? trace::Api::kRuntime : trace::Api::kDriver;
    Window w;
    for (const auto& [id, t] : p.calls) {
      if (id >= trace::all_calls().size() || trace::all_calls()[id].api != scope) continue;
      w.cuda_ns += t.sum_ns;
      if (trace::call_class(id) != trace::CallClass::kGraphBuild) continue;
      w.build_ns += t.sum_ns;
      if (counts_as_build(id)) w.builds += t.count;
      if (!w.top_id || t.sum_ns > w.top_ns) {
        w.top_id = id;
        w.top_ns = t.sum_ns;
      }
    }
    auto key = std::make_pair(p.cgroup, p.pid);
    auto it = state_.find(key);
    if (it == state_.end()) {
      if (w.builds == 0) return;  // no graph yet: warm-up starts at the first build
      it = state_.emplace(key, State{}).first;
    }
    State& st = it->second;
    if (st.windows_seen++ < th_.warmup_windows) return;
    st.recent.push_back(w);
    while (st.recent.size() > th_.history) st.recent.pop_front();

    size_t with_builds = 0;
    std::uint64_t builds = 0, build_ns = 0, cuda_ns = 0;
    std::map<std::uint32_t, std::uint64_t> by_call;
    for (const auto& r : st.recent) {
      with_builds += r.builds > 0 ? 1 : 0;
      builds += r.builds;
      build_ns += r.build_ns;
      cuda_ns += r.cuda_ns;
      if (r.top_id) by_call[*r.top_id] += r.top_ns;
    }
    const double cost = share(static_cast<double>(build_ns), static_cast<double>(cuda_ns));
    if (w.builds == 0 || with_builds < th_.min_windows || cost < th_.min_share) return;
    std::uint32_t top = by_call.begin()->first;
    for (const auto& [id, ns] : by_call) {
      if (ns > by_call[top]) top = id;
    }
    const double span = secs(static_cast<std::uint64_t>(ctx.view.window_ns)) *
                        static_cast<double>(st.recent.size());
    const std::string who = process_text(p.comm, p.pid);

    Finding f;
    f.immediate = true;  // the pattern is already judged over several windows
    f.close_after = static_cast<int>(th_.history);
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(cost);
    auto t = p.calls.find(top);
    if (t != p.calls.end()) set_call(c, stat_of(top, t->second), nullptr);
    c.root_cause = who + " instantiated or updated CUDA graphs " + thousands(builds) +
                   " times in the last " + human_seconds(span) + " (in " +
                   std::to_string(with_builds) + " of " + std::to_string(st.recent.size()) +
                   " windows, after warm-up); capturing and building them took " +
                   human_ns(build_ns) + ", " + percent(cost) + " of its CUDA " +
                   (scope == trace::Api::kRuntime ? "runtime" : "driver") + " call time";
    c.effect = "every rebuild runs on the host while the GPU waits, and replaces the launch the "
               "graph was meant to make cheap";
    c.summary = summary_of(c, std::string(call_name(top)) + " again and again in " + who + ": " +
                                  percent(cost) + " of its CUDA time rebuilding graphs");
    set_advice(c, advise());
    c.evidence = {{"builds", static_cast<double>(builds)},
                  {"windows_with_builds", static_cast<double>(with_builds)},
                  {"build_s", secs(build_ns)},
                  {"build_share", cost}};
    out.push_back(std::move(f));
  }

  void forget(const std::string& cgroup, int pid) override { state_.erase({cgroup, pid}); }

 private:
  struct Window {
    std::uint64_t builds = 0;
    std::uint64_t build_ns = 0;
    std::uint64_t cuda_ns = 0;
    std::optional<std::uint32_t> top_id;
    std::uint64_t top_ns = 0;
  };
  struct State {
    size_t windows_seen = 0;  // since the first build
    std::deque<Window> recent;
  };
  Thresholds th_;
  std::map<std::pair<std::string, int>, State> state_;
};

}  // namespace

std::unique_ptr<Rule> make_graph_recapture_rule() { return std::make_unique<GraphRecapture>(); }

}  // namespace stallwatch::chains
