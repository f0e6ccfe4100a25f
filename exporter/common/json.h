// JSON writing. Documents (explain --json, check --json, /debug/snapshot, the store's JSON
// columns) are built as nlohmann::ordered_json values (keys keep their order) and written by
// dump_json, which never throws: invalid UTF-8 (paths and comms are arbitrary bytes) becomes
// U+FFFD. json_string/json_number serve the streaming writers (query's rows, log lines), which
// write one value at a time. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace stallwatch {

using Json = nlohmann::ordered_json;

// A double as a JSON value: null when not finite; an integer when it is a whole number of
// magnitude below 2^53 (so 3600 stays 3600, not 3600.0); else the double (shortest form that
// reads back to the same value).
Json json_value(double v);
// Compact text of `j`; never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump_json(const Json& j);

// `s` as a JSON string literal, quotes included. Escapes '"', '\\' and control characters;
// invalid UTF-8 bytes (paths and comms are arbitrary bytes) become U+FFFD, so the output is
// always valid JSON.
std::string json_string(std::string_view s);
// A finite double as JSON (non-finite values become null).
std::string json_number(double v);

}  // namespace stallwatch
