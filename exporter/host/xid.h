// Xid errors: the NVIDIA driver's reports of GPU faults in the kernel log
// ("NVRM: Xid (PCI:0000:3b:00): 79, pid=…, GPU has fallen off the bus."), read from /dev/kmsg
// records. Owns parsing (records, Xid lines) and the table of documented codes with what each
// asks of an operator; the GPU monitor (host/gpu_monitor.h) follows the device. Every line is
// hostile text: lengths are bounded and what is kept is escaped. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "host/nvml.h"

namespace stallwatch::host {

// What an Xid asks of an operator (NVIDIA's Xid catalog).
enum class XidAction : std::uint8_t {
  kUnknown,      // a code stallwatch does not know: look it up
  kApplication,  // the application faulted or was stopped: restart it, check its code
  kCheck,        // the GPU recorded a problem it contained: check the GPU when convenient
  kReset,        // the GPU needs a reset, or the node a drain (hardware, driver or firmware)
};
std::string_view xid_action_name(XidAction a);  // "reset", "application", "check", "unknown"

struct XidInfo {
  int code = 0;
  std::string_view meaning;
  XidAction action = XidAction::kUnknown;
};
// The documented code, or {code, "", kUnknown}.
XidInfo xid_info(int code);

// One Xid as the kernel logged it.
struct XidEvent {
  std::uint64_t seq = 0;     // stallwatch's own count of Xid lines read, 1-based
  std::int64_t unix_ns = 0;  // when it was logged (the record's boot time stamp made wall time)
  std::string pci;           // pci_text of the address ("00000000:3B:00.0", as NVML writes it)
  PciAddress address;
  bool address_known = false;
  int gpu = -1;              // NVML's index of the GPU at that address; -1 unknown
  int code = 0;
  int pid = 0;               // "pid=N" when the driver named the process, else 0
  std::string text;          // the rest of the line, escaped, at most kMaxXidText bytes
};
inline constexpr std::size_t kMaxXidText = 160;

// The Xid in a kernel log message that starts "NVRM: Xid (PCI:…): N, …"; nullopt when the
// message is not one or is malformed (no closing parenthesis, no code, a code past 9999).
std::optional<XidEvent> parse_xid(std::string_view message);

// A /dev/kmsg record: "PRI,SEQ,TS_US,FLAGS[,…];MESSAGE\n" followed by " KEY=VALUE" lines.
struct KmsgRecord {
  int facility = 0;  // 0: the kernel; 1: a user's write to /dev/kmsg
  int level = 0;
  std::uint64_t seq = 0;
  std::uint64_t ts_us = 0;  // since boot (CLOCK_MONOTONIC)
  std::string_view message;  // up to the first newline, into the record's buffer
};
std::optional<KmsgRecord> parse_kmsg_record(std::string_view record);

}  // namespace stallwatch::host
