// `stallwatch run`: the foreground daemon. Wires tracer, discovery, collector and the HTTP
// endpoint together; owns the threads and the shutdown on SIGINT/SIGTERM.
#pragma once

#include <string>
#include <vector>

namespace stallwatch::cli {

int run_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
