// A multi-uprobe link made with a raw BPF_LINK_CREATE (Linux 6.6; libbpf 1.1 predates them):
// one kernel object for many probes of one file and direction, no perf event. Shared by
// trace/attach.cpp (the call probes) and trace/probe_cost.cpp (the start's measure).
// Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "trace/attach.h"

struct bpf_program;

namespace stallwatch::trace {

// `cookies[i]` is bpf_get_attach_cookie() at `offsets[i]` (file offsets of `path`); pid 0: every
// process, else only that one. The error names the direction, the count and errno.
Result<FdLink> attach_uprobe_multi(bpf_program* prog, const std::string& path,
                                   const std::vector<std::uint64_t>& offsets,
                                   const std::vector<std::uint64_t>& cookies, bool retprobe,
                                   std::uint32_t pid = 0);

// Whether vmlinux has multi-uprobe links (its bpf_uprobe_multi_link type).
bool kernel_has_uprobe_multi();

// enum bpf_attach_type BPF_TRACE_UPROBE_MULTI: a program attached through such links must be
// loaded with it as its expected attach type.
inline constexpr int kUprobeMultiAttachType = 48;

}  // namespace stallwatch::trace
