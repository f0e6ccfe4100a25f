#include "common/strings.h"

#include <cstdint>
#include <cstdio>

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

size_t utf8_sequence(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  if (s.empty()) return 0;
  const unsigned char c = b(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; i++) {
    if (b(i) < 0x80 || b(i) > 0xbf) return 0;
  }
  return n;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out += s[i++];
    } else if (const size_t n = utf8_sequence(s.substr(i)); n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
  return out;
}

namespace {

constexpr char kHex[] = "0123456789abcdef";

// The code point of a valid UTF-8 sequence of `n` (2 to 4) bytes.
std::uint32_t code_point(std::string_view seq) {
  const auto b = [&](size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(seq[i])); };
  if (seq.size() == 2) return ((b(0) & 0x1f) << 6) | (b(1) & 0x3f);
  if (seq.size() == 3) return ((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
}

}  // namespace

bool is_hostile_code_point(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) ||      // C1 controls: U+009B is a one-byte CSI
         cp == 0x061c ||                    // Arabic letter mark
         cp == 0x200e || cp == 0x200f ||    // left-to-right and right-to-left marks
         (cp >= 0x2028 && cp <= 0x202e) ||  // line/paragraph separators, bidi embeddings
         (cp >= 0x2066 && cp <= 0x2069);    // bidi isolates
}

std::string escape_name(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (size_t n = utf8_sequence(s.substr(i)); n > 0) {
        const std::uint32_t cp = code_point(s.substr(i, n));
        if (is_hostile_code_point(cp)) {
          char buf[16];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          out += buf;
        } else {
          out.append(s.substr(i, n));
        }
        i += n;
        continue;
      }
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
    i++;
  }
  return out;
}

namespace {

// escape_name over each piece of `s` between `keep` bytes, which are copied as they are.
std::string escape_between(std::string_view s, std::string_view keep) {
  std::string out;
  for (;;) {
    const size_t k = s.find_first_of(keep);
    out += escape_name(s.substr(0, k));
    if (k == std::string_view::npos) return out;
    out += s[k];
    s.remove_prefix(k + 1);
  }
}

}  // namespace

std::string escape_line(std::string_view s) { return escape_between(s, "\\"); }
std::string escape_text(std::string_view s) { return escape_between(s, "\\\n"); }

namespace {

// Whether `s` holds a byte a terminal or bash would not show as itself inside '...': a control
// character, an invalid UTF-8 sequence, a C1 control or a bidi override.
bool needs_ansi_c(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return true;
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence(s.substr(i));
    if (n == 0 || is_hostile_code_point(code_point(s.substr(i, n)))) return true;
    i += n;
  }
  return false;
}

bool is_plain_shell_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_@%+=:,./-").find(static_cast<char>(c)) != std::string_view::npos;
}

}  // namespace

std::string shell_quote(std::string_view s) {
  std::string out;
  if (needs_ansi_c(s)) {
    // $'...': bash turns each \xNN back into its byte, and the line stays one printable line.
    out = "$'";
    for (size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      size_t n = c >= 0x80 ? utf8_sequence(s.substr(i)) : 1;
      const bool keep = c >= 0x80 ? n > 0 && !is_hostile_code_point(code_point(s.substr(i, n)))
                                  : c >= 0x20 && c != 0x7f;
      if (n == 0) n = 1;
      if (!keep) {
        for (size_t k = 0; k < n; ++k) {
          const auto b = static_cast<unsigned char>(s[i + k]);
          out += "\\x";
          out += kHex[b >> 4];
          out += kHex[b & 0xf];
        }
      } else if (c == '\\' || c == '\'') {
        out += '\\';
        out += static_cast<char>(c);
      } else {
        out.append(s.substr(i, n));
      }
      i += n;
    }
    return out + "'";
  }
  out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string shell_word(std::string_view s) {
  if (s.empty()) return "''";
  for (char c : s) {
    if (!is_plain_shell_byte(static_cast<unsigned char>(c))) return shell_quote(s);
  }
  return std::string(s);
}

}  // namespace stallwatch
