#include "chains/format.h"

#include <cmath>
#include <cstdio>

namespace stallwatch::chains {
namespace {

// Up to 3 significant digits, no trailing zeros: 7.20 → "7.2", 120.0 → "120".
std::string sig3(double v) {
  char buf[32];
  int decimals = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  std::string s(buf);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

std::string human_seconds(double s) {
  if (!(s > 0)) return "0s";
  if (s < 1e-6) return sig3(s * 1e9) + "ns";
  if (s < 1e-3) return sig3(s * 1e6) + "µs";
  if (s < 1) return sig3(s * 1e3) + "ms";
  if (s < 120) return sig3(s) + "s";
  if (s < 7200) return sig3(s / 60) + "min";
  return sig3(s / 3600) + "h";
}

std::string human_ns(std::uint64_t ns) { return human_seconds(static_cast<double>(ns) / 1e9); }

std::string thousands(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); i++) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string percent(double share) { return sig3(std::round(share * 1000) / 10) + "%"; }

std::string times(double ratio) {
  if (ratio >= 100) return thousands(static_cast<std::uint64_t>(std::llround(ratio))) + "x";
  return sig3(ratio) + "x";
}

}  // namespace stallwatch::chains
