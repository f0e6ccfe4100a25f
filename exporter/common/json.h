// Minimal JSON writing helpers (no parsing): string escaping and number formatting.
#pragma once

#include <string>
#include <string_view>

namespace stallwatch {

// `s` as a JSON string literal, quotes included.
std::string json_string(std::string_view s);
// A finite double as JSON (non-finite values become null).
std::string json_number(double v);

}  // namespace stallwatch
