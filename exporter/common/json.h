// Minimal JSON writing helpers (no parsing): string escaping and number formatting.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace stallwatch {

// `s` as a JSON string literal, quotes included. Escapes '"', '\\' and control characters;
// invalid UTF-8 bytes (paths and comms are arbitrary bytes) become U+FFFD, so the output is
// always valid JSON.
std::string json_string(std::string_view s);
// A finite double as JSON (non-finite values become null).
std::string json_number(double v);

}  // namespace stallwatch
