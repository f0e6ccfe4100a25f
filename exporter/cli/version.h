// What `stallwatch version`, `stallwatch --version` and every command's --version print, in the
// shape Prometheus exporters print it:
//   stallwatch, version 0.1.0+git340.0fa3fed (revision: 0fa3feda3de1)
//     build date: 2026-11-29T05:00:00Z
//     compiler: gcc 12.2.0
//     platform: linux/amd64
// The version, revision and build date (the last commit's, reproducible) come from the header
// cmake/GitVersion.cmake generates; the compiler and platform from the compiler's own macros.
// Pure; thread-safe.
#pragma once

#include <string>

namespace stallwatch::cli {

// The four lines, each ending in '\n'.
std::string version_text();

// "gcc 12.2.0", "clang 16.0.6": the compiler that built this file.
std::string compiler_name();

// "linux/amd64", "linux/arm64" (Go's GOOS/GOARCH names, as exporters print them).
std::string platform_name();

}  // namespace stallwatch::cli
