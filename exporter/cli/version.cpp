#include "cli/version.h"

#ifndef STALLWATCH_VERSION  // the fuzz build defines it and generates no header
#include "stallwatch_version.h"  // generated (cmake/GitVersion.cmake)
#endif

namespace stallwatch::cli {

std::string compiler_name() {
#if defined(__clang__)
  return "clang " + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__) + "." +
         std::to_string(__clang_patchlevel__);
#elif defined(__GNUC__)
  return std::string("gcc ") + __VERSION__;
#else
  return "unknown";
#endif
}

std::string platform_name() {
#if defined(__x86_64__)
  return "linux/amd64";
#elif defined(__aarch64__)
  return "linux/arm64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return "linux/ppc64le";
#elif defined(__s390x__)
  return "linux/s390x";
#elif defined(__riscv) && __riscv_xlen == 64
  return "linux/riscv64";
#else
  return "linux/unknown";
#endif
}

std::string version_text() {
  std::string out = "stallwatch, version ";
  out += STALLWATCH_VERSION;
  out += " (revision: ";
  out += STALLWATCH_REVISION;
  out += ")\n  build date: ";
  out += STALLWATCH_BUILD_DATE;
  out += "\n  compiler: " + compiler_name() + "\n  platform: " + platform_name() + "\n";
  return out;
}

}  // namespace stallwatch::cli
