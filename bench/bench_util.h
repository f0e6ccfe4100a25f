// Helpers the user-space benchmarks (engine_bench, exposition_bench) share: elapsed time,
// random hex ids for synthetic containers, and JSON numbers and arrays. Header-only; pure.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace stallwatch::bench {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// `digits` random lowercase hex digits (container ids, pod UIDs).
inline std::string hex(std::mt19937_64& rng, std::size_t digits) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < digits; i++) s += d[rng() % 16];
  return s;
}

// A JSON number with 10 significant digits; null for NaN and infinities.
inline std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream o;
  o << std::setprecision(10) << v;
  return o.str();
}

inline std::string arr(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + num(v[i]);
  return s + "]";
}

}  // namespace stallwatch::bench
