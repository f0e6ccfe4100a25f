// The rules: one function per chain kind, each reading one window (and what the engine
// remembers) and returning findings. docs/chains.md states every rule and threshold; keep the
// two in step. Called only by Engine::observe.
#pragma once

#include <vector>

#include "chains/engine.h"

namespace stallwatch::chains {

// The engine's memory as the rules see it.
class RuleContext {
 public:
  RuleContext(Engine& engine, const Snapshot& snap, const WindowView& view,
              const OutlierWindow& outliers)
      : engine_(engine), snap_(snap), view_(view), outliers_(outliers) {}

  std::vector<Finding> run();

 private:
  void cpu_contention(const ProcessWindow& p, std::vector<Finding>& out);
  void alloc_spike(const ProcessWindow& p, std::vector<Finding>& out);
  void cold_start(const ProcessWindow& p, std::vector<Finding>& out);
  void memcpy_bound(const ProcessWindow& p, std::vector<Finding>& out);
  void gpu_contention(const ProcessWindow& p, std::vector<Finding>& out);
  void forget_exited();

  Chain base_chain(Kind kind, const ProcessWindow& p) const;
  const Baseline* baseline(const ProcessWindow& p, std::uint32_t call_id) const;
  bool baseline_known(const Baseline* b) const;
  std::uint64_t worst_stall_ns(const ProcessWindow& p) const;

  Engine& engine_;
  const Snapshot& snap_;
  const WindowView& view_;
  const OutlierWindow& outliers_;
};

// Call classes by call id (trace/calls.h).
bool is_sync_call(std::uint32_t call_id);
bool is_alloc_call(std::uint32_t call_id);
bool is_copy_call(std::uint32_t call_id);

}  // namespace stallwatch::chains
