// Durations as users write them on the command line and in config files:
// "500ms", "5s", "10m", "1h", "2d", "250us"; a bare number is refused (the unit is required).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/result.h"

namespace stallwatch {

Result<std::chrono::nanoseconds> parse_duration(std::string_view text);
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace stallwatch
