// Human formatting shared by chain texts and explain: "7µs", "7.2ms", "1.3s"; "14,504";
// "52%"; "1,028x"; "1.2 GiB". Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace stallwatch::chains {

// 7µs, 7.2ms, 1.3s, 2m05s, 1h02m; "0" for zero, ">256s" for the histogram's overflow bucket.
std::string human_seconds(double s);
std::string human_ns(std::uint64_t ns);
std::string short_number(double v);        // 3 significant digits at most: 7.2, 65, 890
std::string thousands(std::uint64_t n);    // 14504 → "14,504"
std::string percent(double share);         // 0.517 → "51.7%"; 0.5 → "50%"
std::string times(double ratio);           // 1028.4 → "1,028x"; 8.46 → "8.5x"
std::string human_bytes(double bytes);     // 512 B, 7.5 KiB, 96 MiB, 1.2 GiB

}  // namespace stallwatch::chains
