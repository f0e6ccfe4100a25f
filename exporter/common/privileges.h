// Capabilities are per thread on Linux. The threads that talk to the network (the HTTP
// listener, the OTLP pusher and its delivery, the Kubernetes client) give up all of theirs
// when they start, so a flaw reached from the network does not run with CAP_SYS_ADMIN; threads
// they create inherit the empty sets. The raw capset(2) changes only the calling thread
// (glibc's setuid family would broadcast to every thread; libcap is not needed for this).
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace stallwatch {

// Empties the calling thread's effective, permitted and inheritable sets and names the thread
// (for ps and the tests: /proc/self/task/TID/comm) when `name` is given (at most 15 bytes).
Result<Ok> drop_thread_capabilities(const char* name = nullptr);

// The effective capability mask of thread `tid` of this process, from /proc (tests, check).
std::uint64_t thread_effective_capabilities(int tid);

}  // namespace stallwatch
