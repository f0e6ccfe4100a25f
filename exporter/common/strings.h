// Small string helpers shared by the /proc parsers.
#pragma once

#include <string_view>
#include <vector>

namespace stallwatch {

// Space-separated fields of a line (runs of spaces separate; no empty fields).
std::vector<std::string_view> split_fields(std::string_view line);

}  // namespace stallwatch
