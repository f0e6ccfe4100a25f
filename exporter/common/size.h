// Byte sizes as users write them: "2GiB", "500MiB", "1G" (= GiB), "750MB", "4096" (bytes).
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace stallwatch {

Result<std::uint64_t> parse_size(std::string_view text);
std::string format_size(std::uint64_t bytes);  // "2GiB", "1.5MiB", "512B"

}  // namespace stallwatch
