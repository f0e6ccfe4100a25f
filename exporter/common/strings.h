// Small string helpers shared by the /proc parsers and the OTLP configuration and delivery.
#pragma once

#include <string_view>
#include <vector>

namespace stallwatch {

// Space-separated fields of a line (runs of spaces separate; no empty fields).
std::vector<std::string_view> split_fields(std::string_view line);

// What isspace() accepts in the C locale.
inline constexpr std::string_view kAsciiWhitespace = " \t\n\v\f\r";

// `s` without the leading (trim_left), trailing (trim_right) or both (trim) characters that are
// in `chars`. A view into `s`: it lives as long as what `s` views.
std::string_view trim_left(std::string_view s, std::string_view chars = kAsciiWhitespace);
std::string_view trim_right(std::string_view s, std::string_view chars = kAsciiWhitespace);
std::string_view trim(std::string_view s, std::string_view chars = kAsciiWhitespace);

}  // namespace stallwatch
