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

template <typename... Args>
std::string fmt(const char* f, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

}  // namespace

std::string short_number(double v) {
  if (v < 9.95) {
    std::string s = fmt("%.1f", v);
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    return s;
  }
  return fmt("%.0f", v);
}

std::string human_seconds(double s) {
  if (std::isinf(s)) return ">256s";
  if (!(s > 0)) return "0";
  struct Unit {
    const char* name;
    double scale;
  };
  static constexpr Unit kUnits[] = {{"ns", 1e-9}, {"µs", 1e-6}, {"ms", 1e-3}};
  for (const auto& u : kUnits) {
    const double v = s / u.scale;
    if (v < 999.5) return (u.scale == 1e-9 ? fmt("%.0f", v) : short_number(v)) + u.name;
  }
  if (s < 59.95) return short_number(s) + "s";
  const auto secs = static_cast<long long>(std::llround(s));
  if (secs < 3600) return fmt("%lldm%02llds", secs / 60, secs % 60);
  const long long mins = secs / 60;
  if (mins < 48 * 60) return fmt("%lldh%02lldm", mins / 60, mins % 60);
  return fmt("%lldd%02lldh", mins / 1440, mins % 1440 / 60);
}

std::string human_ns(std::uint64_t ns) { return human_seconds(static_cast<double>(ns) / 1e9); }

std::string thousands(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); i++) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string percent(double share) { return sig3(std::round(share * 1000) / 10) + "%"; }

std::string times(double ratio) {
  if (ratio >= 100) return thousands(static_cast<std::uint64_t>(std::llround(ratio))) + "x";
  return sig3(ratio) + "x";
}

std::string human_bytes(double b) {
  if (b < 1024) return fmt("%.0f B", b);
  if (b < 1024.0 * 1024) return short_number(b / 1024) + " KiB";
  if (b < 1024.0 * 1024 * 1024) return short_number(b / 1024 / 1024) + " MiB";
  return short_number(b / 1024 / 1024 / 1024) + " GiB";
}

}  // namespace stallwatch::chains
