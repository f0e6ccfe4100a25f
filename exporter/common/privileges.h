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

// What the tracing threads need, the set deploy/systemd/stallwatch.service bounds the daemon
// to: CAP_BPF and CAP_PERFMON (programs, maps, uprobes), CAP_SYS_ADMIN (cgroup handles,
// /proc/PID/map_files, BPF iterators and kernels without CAP_BPF), CAP_SYS_PTRACE (other
// processes' maps and memory), CAP_DAC_READ_SEARCH (their files and open_by_handle_at).
inline constexpr std::uint64_t kTracingCapabilities =
    (1ull << 39) | (1ull << 38) | (1ull << 21) | (1ull << 19) | (1ull << 2);

// Keeps, of the calling thread's effective and permitted sets, only the bits of `keep` (and
// empties its inheritable set); threads it starts afterwards inherit the result. Bits the
// thread does not hold stay off: never a way to gain one.
Result<Ok> limit_thread_capabilities(std::uint64_t keep);

// The effective capability mask of thread `tid` of this process, from /proc (tests, check).
std::uint64_t thread_effective_capabilities(int tid);

}  // namespace stallwatch
