// `stallwatch run`: the foreground daemon. Wires tracer, discovery, collector and the HTTP
// endpoint together; owns the threads and the shutdown on SIGINT/SIGTERM.
#pragma once

#include <string>
#include <vector>

namespace stallwatch::cli {

// args exclude the program and subcommand names; env holds "NAME=value" strings (environ),
// read for STALLWATCH_* (cli/options.h).
int run_main(const std::vector<std::string>& args, const std::vector<std::string>& env);

}  // namespace stallwatch::cli
