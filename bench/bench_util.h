// Helpers the user-space benchmarks (engine_bench, exposition_bench) share: elapsed time,
// random hex ids for synthetic containers, and JSON numbers and arrays. Header-only; pure.
#pragma once

#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
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

// Pins the calling thread (and the threads it starts later) to `cpu`; -1 leaves it unpinned.
// False, with one line on stderr naming `prog`, when the kernel refuses.
inline bool pin_to_cpu(int cpu, const char* prog) {
  if (cpu < 0) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) == 0) return true;
  std::cerr << prog << ": cannot pin to CPU " << cpu << ": " << std::strerror(errno) << "\n";
  return false;
}

// Writes the result object to `path` ("" writes nothing). False, with one line on stderr, when
// the file cannot be written.
inline bool write_json(const std::string& path, const std::string& json, const char* prog) {
  if (path.empty()) return true;
  std::ofstream f(path);
  f << json << "\n";
  if (f) return true;
  std::cerr << prog << ": cannot write " << path << "\n";
  return false;
}

}  // namespace stallwatch::bench
