#include "common/privileges.h"

#include <linux/capability.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace stallwatch {

Result<Ok> drop_thread_capabilities(const char* name) {
  if (name) pthread_setname_np(pthread_self(), name);
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;  // the calling thread
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capset, &header, data) != 0) {
    return make_error(std::string("cannot drop the capabilities of a network thread: ") +
                      std::strerror(errno));
  }
  return Ok{};
}

Result<Ok> limit_thread_capabilities(std::uint64_t keep) {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) {
    return make_error(std::string("cannot read this thread's capabilities: ") +
                      std::strerror(errno));
  }
  for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; ++i) {
    const auto k = static_cast<std::uint32_t>(keep >> (32 * i));
    data[i].effective &= k;
    data[i].permitted &= k;
    data[i].inheritable = 0;
  }
  header.pid = 0;
  if (syscall(SYS_capset, &header, data) != 0) {
    return make_error(std::string("cannot limit the tracing threads' capabilities: ") +
                      std::strerror(errno) + "; they keep the ones the daemon started with");
  }
  return Ok{};
}

std::uint64_t thread_effective_capabilities(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    return std::stoull(line.substr(7), nullptr, 16);
  }
  return ~0ull;
}

}  // namespace stallwatch
