// Runs a demo scenario through the same pipeline as `stallwatch run` (app/pipeline.h):
// chain engine, SQLite store and the /metrics snapshot board, printing each window as the chain
// forms. Blocking; one runner at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <ostream>
#include <string>

#include "chains/chain.h"
#include "common/result.h"
#include "demo/scenarios.h"
#include "demo/synthetic.h"
#include "metrics/http_server.h"
#include "store/store.h"

namespace stallwatch::otlp {
class Pusher;
}

namespace stallwatch::demo {

struct RunnerOptions {
  // Time between windows. Each window's synthetic content covers max(window, 1 s), so a
  // shorter window only plays the story faster.
  std::chrono::nanoseconds window = std::chrono::seconds(1);
  bool realtime = true;  // wait `window` between windows; false: as fast as possible, with
                         // timestamps laid out so the story ends now
  bool hold = false;     // after the story, keep repeating the incident phase
  const std::atomic<bool>* stop = nullptr;  // ends the hold/serve loop when set
  bool serve_after = false;  // after the story, keep emitting windows until `stop`
  int host_cpus = 8;         // the synthetic host's CPU count (recommendations, context)
  otlp::Pusher* otlp = nullptr;  // pushes every window's snapshot and chains; may be null
  // Reproducible runs (the golden tests): with realtime false, the story ends at this unix time
  // instead of now, and chain ids come from this seed instead of the random device. 0: unset.
  std::int64_t end_ns = 0;
  std::uint64_t seed = 0;
  // Test seam (issue #35): every cgroup path, comm, and pod and namespace name of the story goes
  // through these, so each rule's advice can be run with hostile host strings. Unset: as written.
  SyntheticHost::Renamer rename_cgroup, rename_comm, rename_pod;
};

struct RunnerResult {
  std::uint64_t windows = 0;
  std::vector<chains::Chain> opened;  // every chain opened (final state of each)
};

// `store` may be null. `board` receives every window's snapshot.
RunnerResult run_scenario(const Scenario& scenario, const RunnerOptions& options,
                          metrics::SnapshotBoard& board, store::Store* store, std::ostream& out);

}  // namespace stallwatch::demo
