#include "host/xid.h"

#include <array>
#include <charconv>

#include "common/strings.h"

namespace stallwatch::host {
namespace {

// NVIDIA's Xid catalog, the codes a GPU cluster meets (docs.nvidia.com/deploy/xid-errors).
constexpr std::array<XidInfo, 24> kXids{{
    {8, "GPU stopped processing (a channel timed out)", XidAction::kApplication},
    {13, "graphics engine exception (an illegal instruction or address in a kernel)",
     XidAction::kApplication},
    {31, "GPU memory page fault (MMU fault: a kernel read or wrote an illegal address)",
     XidAction::kApplication},
    {32, "invalid or corrupted push buffer stream", XidAction::kCheck},
    {38, "driver firmware error", XidAction::kReset},
    {43, "GPU stopped processing a channel after an application fault", XidAction::kApplication},
    {45, "preemptive cleanup: a channel was stopped after earlier errors",
     XidAction::kApplication},
    {48, "double-bit ECC error (uncorrectable memory error)", XidAction::kReset},
    {61, "internal micro-controller breakpoint or warning", XidAction::kCheck},
    {62, "internal micro-controller halt", XidAction::kReset},
    {63, "ECC page retirement or row remapping recorded", XidAction::kCheck},
    {64, "ECC page retirement or row remapping failed", XidAction::kReset},
    {68, "video processor exception", XidAction::kCheck},
    {74, "NVLink error", XidAction::kReset},
    {79, "GPU has fallen off the bus", XidAction::kReset},
    {92, "high single-bit ECC error rate", XidAction::kCheck},
    {94, "contained ECC error (the affected processes must restart)", XidAction::kApplication},
    {95, "uncontained ECC error", XidAction::kReset},
    {109, "context switch timeout", XidAction::kApplication},
    {119, "GSP RPC timeout (the GPU's system processor stopped answering)", XidAction::kReset},
    {120, "GSP error", XidAction::kReset},
    {121, "C2C link error", XidAction::kReset},
    {140, "unrecovered ECC error", XidAction::kReset},
    {154, "GPU recovery action changed (the driver asks for a reset or a drain)",
     XidAction::kReset},
}};

template <typename T>
bool number(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string_view xid_action_name(XidAction a) {
  switch (a) {
    case XidAction::kApplication: return "application";
    case XidAction::kCheck: return "check";
    case XidAction::kReset: return "reset";
    case XidAction::kUnknown: break;
  }
  return "unknown";
}

XidInfo xid_info(int code) {
  for (const auto& x : kXids) {
    if (x.code == code) return x;
  }
  return XidInfo{code, "", XidAction::kUnknown};
}

std::optional<XidEvent> parse_xid(std::string_view m) {
  // The driver's own lines start so; text that merely quotes one elsewhere is not an Xid. Only
  // the driver's full format counts: a PCI address in the parentheses and a comma after the
  // code. A process may name itself "NVRM: Xid (): 8" (15 bytes, a whole comm) and crash: the
  // kernel's "NVRM: Xid (): 8[4242]: segfault at ..." line is not an Xid (issue #49).
  constexpr std::string_view kMark = "NVRM: Xid (";
  while (!m.empty() && m.front() == ' ') m.remove_prefix(1);
  if (m.substr(0, kMark.size()) != kMark) return std::nullopt;
  m.remove_prefix(kMark.size());
  const size_t close = m.find("): ");
  if (close == std::string_view::npos || close > 64) return std::nullopt;
  std::string_view addr = m.substr(0, close);
  if (addr.substr(0, 4) == "PCI:") addr.remove_prefix(4);
  m.remove_prefix(close + 3);
  PciAddress address;
  if (!parse_pci_address(addr, address)) return std::nullopt;
  size_t digits = 0;
  while (digits < m.size() && m[digits] >= '0' && m[digits] <= '9') ++digits;
  XidEvent e;
  if (digits == 0 || digits > 4 || !number(m.substr(0, digits), e.code)) return std::nullopt;
  m.remove_prefix(digits);
  if (m.empty() || m.front() != ',') return std::nullopt;
  m.remove_prefix(1);
  while (!m.empty() && m.front() == ' ') m.remove_prefix(1);
  e.pci = pci_text(address);  // one format with NVML's (the kernel writes "0000:2a:00")
  e.address = address;
  e.address_known = true;
  // "pid=1234, name=python3, …" when the driver knew the process.
  if (m.substr(0, 4) == "pid=") {
    size_t end = 4;
    while (end < m.size() && m[end] >= '0' && m[end] <= '9' && end < 14) ++end;
    int pid = 0;
    if (number(m.substr(4, end - 4), pid) && pid > 0) e.pid = pid;
  }
  e.text = escape_line(m.substr(0, kMaxXidText));
  return e;
}

std::optional<KmsgRecord> parse_kmsg_record(std::string_view r) {
  const size_t semi = r.find(';');
  if (semi == std::string_view::npos || semi > 128) return std::nullopt;
  std::string_view head = r.substr(0, semi);
  KmsgRecord k;
  std::string_view fields[3];
  for (int i = 0; i < 3; ++i) {
    const size_t comma = head.find(',');
    if (comma == std::string_view::npos) return std::nullopt;
    fields[i] = head.substr(0, comma);
    head.remove_prefix(comma + 1);
  }
  unsigned prefix = 0;
  if (!number(fields[0], prefix) || !number(fields[1], k.seq) || !number(fields[2], k.ts_us)) {
    return std::nullopt;
  }
  k.facility = static_cast<int>(prefix >> 3);
  k.level = static_cast<int>(prefix & 7);
  std::string_view msg = r.substr(semi + 1);
  if (const size_t nl = msg.find('\n'); nl != std::string_view::npos) msg = msg.substr(0, nl);
  k.message = msg;
  return k;
}

}  // namespace stallwatch::host
