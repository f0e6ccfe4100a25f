// Pressure stall information (PSI) of a cgroup v2 directory: cpu.pressure, memory.pressure and
// io.pressure read as cumulative stall time. Owns only reading and parsing those files; the
// collector decides which cgroup and when (once per window per series).
// Thread-safety: pure functions (read_pressure only reads files), safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>


namespace stallwatch::host {

// The cgroup's pressure stall information (cgroup v2 *.pressure files), as stall time.
struct PressureTotals {
  bool known = false;  // false where the file is missing (no PSI, cgroup v1 only)
  std::uint64_t cpu_some_ns = 0;
  std::uint64_t cpu_full_ns = 0;
  std::uint64_t memory_some_ns = 0;
  std::uint64_t memory_full_ns = 0;
  std::uint64_t io_some_ns = 0;
  std::uint64_t io_full_ns = 0;
};


// Parses the text of a cgroup v2 *.pressure file or a /proc/pressure/* file:
//   some avg10=0.00 avg60=0.00 avg300=0.00 total=<microseconds>
//   full avg10=0.00 avg60=0.00 avg300=0.00 total=<microseconds>
// Returns {some_ns, full_ns}. A text with only the `some` line (cpu.pressure before Linux 5.13)
// gives full_ns = 0. nullopt when the text is malformed: no `some` line, a line that is neither
// `some` nor `full` or appears twice, a missing or non-numeric `total=`, or a total that does not
// fit in nanoseconds. Never throws.
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_pressure(std::string_view text);

// Reads <cgroup_dir>/{cpu,memory,io}.pressure. known = false when none of the three can be read
// and parsed (no PSI: cgroup v1 only, a kernel without CONFIG_PSI or booted with psi=0, or the
// cgroup is gone); a file that is missing or malformed while another one is fine leaves its two
// fields at 0. Never throws.
PressureTotals read_pressure(const std::string& cgroup_dir);

}  // namespace stallwatch::host
