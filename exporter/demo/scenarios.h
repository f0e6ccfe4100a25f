// The demo scenarios: short stories of a GPU host told as synthetic windows (synthetic.h),
// each with the chain the engine should find. Used by `stallwatch demo` and by the chain
// unit tests. Pure data and small generators; thread-safe to build, not to run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "demo/synthetic.h"

namespace stallwatch::demo {

struct Phase {
  std::string narration;  // printed when the phase begins
  int windows = 0;
  // Adds one window of activity; `i` counts windows within the phase, `now_ns` is the
  // window's end (unix time), `window_ns` its length.
  std::function<void(SyntheticHost&, int i, std::int64_t now_ns, std::int64_t window_ns)> step;
};

struct Scenario {
  std::string name;
  std::string title;
  std::string expect;  // the chain a person should see (or "no chain")
  std::vector<Phase> phases;
  int hold_phase = 0;  // the phase `--hold` repeats (the incident)
};

std::vector<std::string> scenario_names();
std::optional<Scenario> make_scenario(const std::string& name);

}  // namespace stallwatch::demo
