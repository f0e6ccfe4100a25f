// The rules: one function per chain kind, each reading one window (and what the engine
// remembers) and returning findings. docs/chains.md states every rule and threshold; keep the
// two in step. The process rules are in rules.cpp, the host-evidence rules (memory, I/O,
// network) in rules_host.cpp, nccl_straggler in rules_nccl.cpp. Called only by Engine::observe.
#pragma once

#include <string>
#include <vector>

#include "chains/call_classes.h"
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
  // Per process.
  void cpu_contention(const ProcessWindow& p, std::vector<Finding>& out);
  void alloc_spike(const ProcessWindow& p, std::vector<Finding>& out);
  void cold_start(const ProcessWindow& p, std::vector<Finding>& out);
  void memcpy_bound(const ProcessWindow& p, std::vector<Finding>& out);
  void gpu_contention(const ProcessWindow& p, std::vector<Finding>& out);
  // Per series (chains about a cgroup: pid 0).
  void memory_pressure(const SeriesWindow& s, std::vector<Finding>& out);
  void io_stall(const SeriesWindow& s, std::vector<Finding>& out);
  void network_retransmit(const SeriesWindow& s, std::vector<Finding>& out);
  // Across the host's processes.
  void nccl_straggler(std::vector<Finding>& out);
  void forget_exited();

  Chain base_chain(Kind kind, const ProcessWindow& p) const;
  Chain base_chain(Kind kind, const std::string& cgroup) const;  // pid 0
  const Baseline* baseline(const ProcessWindow& p, std::uint32_t call_id) const;
  bool baseline_known(const Baseline* b) const;
  std::uint64_t worst_stall_ns(const ProcessWindow& p) const;
  // The series' CUDA processes this window, most CUDA time first.
  std::vector<const ProcessWindow*> cuda_processes(const std::string& cgroup) const;

  Engine& engine_;
  const Snapshot& snap_;
  const WindowView& view_;
  const OutlierWindow& outliers_;
};

}  // namespace stallwatch::chains
