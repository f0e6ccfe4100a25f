// `stallwatch stacks [--db PATH] [--since 10m] [--pid P] [--cgroup C] [--call NAME]`: the call
// sites of the period's outlier calls as folded stacks weighted by stalled time, one line per
// distinct stack, "frame;frame;...;call MICROSECONDS", outermost frame first (native frames,
// then Python ones, then the CUDA call): what flamegraph.pl, speedscope and Grafana's flame
// graph panel read. Reads the store's outlier_sites (schema 8) only; needs no root.
// Thread-safety: reentrant.
#pragma once

#include <string>
#include <vector>

namespace stallwatch::cli {

// Exit codes: 0 printed (also when the period has no stacks: a note on stderr says so);
// 1 the database cannot be read; 2 usage.
int stacks_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
