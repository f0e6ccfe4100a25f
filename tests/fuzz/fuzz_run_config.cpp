// The settings of `run` from a --config file and from STALLWATCH_* variables: any bytes give a
// result or one error line, never a crash, a hang or an exception. The first byte picks the
// layer: even = config file (written to a memfd, a regular file), odd = environment lines.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cli/options.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> args, env;
  int fd = -1;
  if (data[0] % 2 == 0) {
    fd = memfd_create("stallwatch-fuzz-config", MFD_CLOEXEC);
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      std::abort();
    }
    args = {"--config", "/proc/self/fd/" + std::to_string(fd)};
  } else {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) env.push_back("STALLWATCH_" + line);
  }
  std::string usage;
  auto o = stallwatch::cli::parse_run_options(args, env, &usage);
  if (!o && o.error().message.empty()) std::abort();
  if (fd >= 0) close(fd);
  return 0;
}
