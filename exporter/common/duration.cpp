#include "common/duration.h"

#include <charconv>
#include <cstdint>

namespace stallwatch {

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  auto bad = [&](const char* why) {
    return make_error("invalid duration '" + std::string(text) + "': " + why +
                      " (write e.g. 500ms, 5s, 10m, 1h, 2d)");
  };
  if (text.empty()) return bad("empty");
  std::uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end == text.data()) return bad("it must start with a whole number");
  std::string_view unit(end, text.data() + text.size() - end);
  struct Unit {
    std::string_view name;
    std::uint64_t ns;
  };
  static constexpr Unit kUnits[] = {
      {"ns", 1ULL},           {"us", 1000ULL},          {"ms", 1000000ULL},
      {"s", 1000000000ULL},   {"m", 60000000000ULL},    {"h", 3600000000000ULL},
      {"d", 86400000000000ULL},
  };
  for (const auto& u : kUnits) {
    if (unit == u.name) {
      if (n > UINT64_MAX / u.ns / 2) return bad("too large");
      return std::chrono::nanoseconds(static_cast<std::int64_t>(n * u.ns));
    }
  }
  return bad(unit.empty() ? "missing unit" : "unknown unit");
}

std::string format_duration(std::chrono::nanoseconds d) {
  auto ns = static_cast<std::uint64_t>(d.count());
  struct Unit {
    const char* name;
    std::uint64_t ns;
  };
  static constexpr Unit kUnits[] = {{"d", 86400000000000ULL}, {"h", 3600000000000ULL},
                                    {"m", 60000000000ULL},    {"s", 1000000000ULL},
                                    {"ms", 1000000ULL},       {"us", 1000ULL}};
  for (const auto& u : kUnits) {
    if (ns != 0 && ns % u.ns == 0) return std::to_string(ns / u.ns) + u.name;
  }
  return std::to_string(ns) + "ns";
}

}  // namespace stallwatch
