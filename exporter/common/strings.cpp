#include "common/strings.h"

#include <algorithm>

namespace stallwatch {

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  while (pos < line.size()) {
    const size_t start = line.find_first_not_of(' ', pos);
    if (start == std::string_view::npos) break;
    const size_t end = std::min(line.find(' ', start), line.size());
    fields.push_back(line.substr(start, end - start));
    pos = end;
  }
  return fields;
}

std::string_view trim_left(std::string_view s, std::string_view chars) {
  const size_t start = s.find_first_not_of(chars);
  return start == std::string_view::npos ? s.substr(s.size()) : s.substr(start);
}

std::string_view trim_right(std::string_view s, std::string_view chars) {
  const size_t last = s.find_last_not_of(chars);
  return last == std::string_view::npos ? s.substr(0, 0) : s.substr(0, last + 1);
}

std::string_view trim(std::string_view s, std::string_view chars) {
  return trim_left(trim_right(s, chars), chars);
}

}  // namespace stallwatch
