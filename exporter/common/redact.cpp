#include "common/redact.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "common/strings.h"

namespace stallwatch {
namespace {

constexpr std::string_view kRedacted = "<redacted>";

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool blank(char c) { return c == ' ' || c == '\t'; }

// Where an unquoted value ends: blanks, separators of JSON, query strings, cookies, headers.
bool value_end(char c) {
  return blank(c) || c == '\r' || c == '\n' || c == ',' || c == '&' || c == ';' || c == '}' ||
         c == ']' || c == ')' || c == '"' || c == '\'' || c == '<' || c == '>';
}

void replace_all(std::string& out, std::string_view s) {
  if (s.size() < 4) return;  // "1" or "on" would blank half the line and hide nothing
  for (size_t at = 0; (at = out.find(s, at)) != std::string::npos; at += kRedacted.size()) {
    out.replace(at, s.size(), kRedacted);
  }
}

// Each secret whole, then each of its blank-separated words but an auth scheme's name: a
// server echoes the token of "Bearer <token>" without its scheme.
std::string replace_secrets(std::string_view text, const std::vector<std::string>& secrets) {
  std::string out(text);
  for (const auto& s : secrets) replace_all(out, s);
  for (const auto& s : secrets) {
    for (size_t i = 0; i < s.size();) {
      const size_t end = std::min(s.find_first_of(" \t", i), s.size());
      const std::string_view word = std::string_view(s).substr(i, end - i);
      if (!iequals(word, "bearer") && !iequals(word, "basic")) replace_all(out, word);
      i = end + 1;
    }
  }
  return out;
}

// Copies `s` word by word; after each word, `after(word, end, out)` may append what follows it
// (redacted) and returns where copying goes on (`end` to leave the rest as it is).
template <class After>
std::string rewrite_after_words(std::string_view s, After after) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (!word_char(s[i]) || (i > 0 && word_char(s[i - 1]))) {
      out += s[i++];
      continue;
    }
    size_t j = i;
    while (j < s.size() && word_char(s[j])) ++j;
    const std::string_view word = s.substr(i, j - i);
    out += word;
    i = after(word, j, out);
  }
  return out;
}

// The credential after an HTTP auth scheme: `Bearer X`, `Basic X`.
std::string redact_schemes(std::string_view s) {
  return rewrite_after_words(s, [s](std::string_view word, size_t j, std::string& out) {
    if (!iequals(word, "bearer") && !iequals(word, "basic")) return j;
    size_t k = j;
    while (k < s.size() && blank(s[k])) ++k;
    if (k == j || k >= s.size() || value_end(s[k])) return j;
    out += s.substr(j, k - j);  // the scheme, blanks, a credential
    out += kRedacted;
    while (k < s.size() && !value_end(s[k])) ++k;
    return k;
  });
}

// `secret-looking-key <sep> value`: key=value, key: value, "key": "value".
std::string redact_pairs(std::string_view s) {
  return rewrite_after_words(s, [s](std::string_view word, size_t j, std::string& out) {
    if (!looks_secret(word)) return j;
    // key"  :  "value"   or   key=value
    size_t k = j;
    if (k < s.size() && (s[k] == '"' || s[k] == '\'')) ++k;
    while (k < s.size() && blank(s[k])) ++k;
    if (k >= s.size() || (s[k] != ':' && s[k] != '=')) return j;
    ++k;
    while (k < s.size() && blank(s[k])) ++k;
    const char quote = k < s.size() && (s[k] == '"' || s[k] == '\'') ? s[k] : 0;
    if (quote) ++k;
    size_t end = k;
    if (quote) {
      while (end < s.size() && s[end] != quote) end += s[end] == '\\' ? 2 : 1;
      end = std::min(end, s.size());
    } else {
      while (end < s.size() && !value_end(s[end])) ++end;
    }
    if (end == k) return j;  // nothing to hide (an empty value, or a key used as a word)
    out += s.substr(j, k - j);
    out += kRedacted;
    return end;
  });
}

}  // namespace

std::string redact_url(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t host = scheme == std::string_view::npos ? 0 : scheme + 3;
  const size_t at = url.rfind('@');
  std::string out(url.substr(0, host));
  out += url.substr(at == std::string_view::npos || at < host ? host : at + 1);
  return escape_name(out.substr(0, out.find_first_of("?#")));
}

bool looks_secret(std::string_view name) {
  static constexpr std::array<std::string_view, 9> kHints = {
      "key", "token", "secret", "passw", "auth", "cookie", "credential", "signature", "session"};
  std::string l(name);
  for (char& c : l) c = lower(c);
  for (const auto h : kHints) {
    if (l.find(h) != std::string::npos) return true;
  }
  return false;
}

std::string redact_text(std::string_view text, const std::vector<std::string>& secrets,
                        size_t max) {
  std::string line = escape_name(redact_pairs(redact_schemes(replace_secrets(text, secrets))));
  if (line.size() <= max) return line;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xc0) == 0x80) --cut;  // UTF-8
  return line.substr(0, cut) + "\xe2\x80\xa6 (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace stallwatch
