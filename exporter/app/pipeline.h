// The window pipeline shared by `run` and `demo`: cumulative snapshot → window deltas →
// chain engine → chain counters on the snapshot → store batch → published snapshot → OTLP. Whatever
// feeds it (the kernel collector or the demo's synthetic host), the chains, rows and metrics
// come out of the same code.
// Not thread-safe: one caller (the window loop). The store and board are thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "chains/budget.h"
#include "chains/engine.h"
#include "chains/outliers.h"
#include "metrics/http_server.h"
#include "store/records.h"
#include "trace/snapshot.h"

namespace stallwatch::store {
class Store;
}
namespace stallwatch::otlp {
class Pusher;
}

namespace stallwatch::app {

struct PipelineOptions {
  chains::EngineOptions engine;
  size_t stored_outliers = 64;   // per window, longest first
  otlp::Pusher* otlp = nullptr;  // gets every published snapshot and changed chain; may be null
  std::function<HttpStats()> http_stats;  // the listener's counters (run); may be empty
  // The store's counters for the process's life (run: app::StoreKeeper::stats, which carries
  // them across reopened stores); empty: the open store's own.
  std::function<StoreStats()> store_stats;
  // The cost budget (chains/budget.h): each window's duty plan goes to `launch_duty` (run:
  // discovery cycles the launches); 0 or no callback: none.
  double cost_budget = 0;
  std::function<void(const chains::DutyPlan&)> launch_duty;
};

class Pipeline {
 public:
  // `store` may be null (no --db); both must outlive the pipeline.
  Pipeline(PipelineOptions options, metrics::SnapshotBoard& board, store::Store* store);

  // One window. Returns the chains it opened, updated or closed.
  std::vector<chains::Chain> window(std::shared_ptr<Snapshot> snap,
                                    const chains::OutlierWindow& outliers,
                                    const store::HostContext& host);

  const chains::Engine& engine() const { return engine_; }
  // The store from now on (null while it cannot be opened); `configured`: a --db was given, so
  // its absence is reported (stallwatch_store_up 0).
  void set_store(store::Store* store, bool configured) {
    store_ = store;
    store_configured_ = configured || store != nullptr;
  }

 private:
  PipelineOptions options_;
  metrics::SnapshotBoard& board_;
  store::Store* store_;
  bool store_configured_ = false;
  chains::Engine engine_;
  std::shared_ptr<const Snapshot> previous_;
  std::map<int, double> launch_duty_;  // the cost budget's latest plan, per process
};

// Outlier records with names resolved: the series label from the snapshot's processes,
// the call name from the call table.
std::vector<store::Outlier> resolve_outliers(const Snapshot& snap, const chains::OutlierWindow& w,
                                             size_t keep);

}  // namespace stallwatch::app
