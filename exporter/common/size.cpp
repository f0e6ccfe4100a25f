#include "common/size.h"

#include <array>
#include <charconv>
#include <cstdio>
#include <utility>

namespace stallwatch {

Result<std::uint64_t> parse_size(std::string_view text) {
  const std::string_view original = text;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) {
    return make_error("'" + std::string(original) + "' is not a size; write e.g. 2GiB, 500MiB, 750MB");
  }
  std::string_view unit = text.substr(static_cast<size_t>(end - text.data()));
  constexpr std::array<std::pair<std::string_view, std::uint64_t>, 14> kUnits = {{
      {"", 1},          {"B", 1},           {"K", 1ull << 10}, {"KiB", 1ull << 10},
      {"M", 1ull << 20}, {"MiB", 1ull << 20}, {"G", 1ull << 30}, {"GiB", 1ull << 30},
      {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"KB", 1000},      {"MB", 1000000},
      {"GB", 1000000000}, {"TB", 1000000000000},
  }};
  for (const auto& [name, mult] : kUnits) {
    if (unit != name) continue;
    if (value > UINT64_MAX / mult) return make_error("size '" + std::string(original) + "' is too large");
    return value * mult;
  }
  return make_error("unknown size unit in '" + std::string(original) +
                    "'; use B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)");
}

std::string format_size(std::uint64_t bytes) {
  constexpr std::array<const char*, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (v >= 1024 && i + 1 < kNames.size()) {
    v /= 1024;
    i++;
  }
  char buf[32];
  if (v == static_cast<double>(static_cast<std::uint64_t>(v))) {
    std::snprintf(buf, sizeof(buf), "%llu%s", static_cast<unsigned long long>(v), kNames[i]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f%s", v, kNames[i]);
  }
  return buf;
}

}  // namespace stallwatch
