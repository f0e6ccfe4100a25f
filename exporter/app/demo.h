// `stallwatch demo [SCENARIO]`: a synthetic incident through the real engine, store and
// /metrics, no root and no GPU. Ends with the explain report of what it stored.
#pragma once

#include <string>
#include <vector>

namespace stallwatch::cli {

int demo_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
