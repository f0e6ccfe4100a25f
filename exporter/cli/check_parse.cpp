// The pure half of `stallwatch check`: parsers for /proc/<pid>/maps and mountinfo, the
// classifiers and item builders that decide each check's verdict, and the JSON string quoting.
// Nothing here touches the live system, so all of it is unit-tested (tests/unit/check_test.cpp).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

#include "cli/check.h"

namespace stallwatch::cli {
namespace {

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  while (pos < line.size()) {
    const size_t start = line.find_first_not_of(' ', pos);
    if (start == std::string_view::npos) break;
    const size_t end = std::min(line.find(' ', start), line.size());
    fields.push_back(line.substr(start, end - start));
    pos = end;
  }
  return fields;
}

// Takes the next space-delimited token off the front of `s` (skipping leading spaces).
std::string_view next_token(std::string_view& s) {
  const size_t start = s.find_first_not_of(' ');
  if (start == std::string_view::npos) {
    s = {};
    return {};
  }
  s.remove_prefix(start);
  const size_t end = std::min(s.find(' '), s.size());
  const std::string_view token = s.substr(0, end);
  s.remove_prefix(end);
  return token;
}

bool parse_number(std::string_view s, std::uint64_t& out, int base) {
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_field(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Calls f(fstype, mount_point) for each well-formed mountinfo line:
// id parent major:minor root mount_point options [optional...] - fstype source super_options
template <typename F>
void for_each_mount(std::string_view mountinfo, F&& f) {
  while (!mountinfo.empty()) {
    const size_t nl = std::min(mountinfo.find('\n'), mountinfo.size());
    const std::vector<std::string_view> fields = split_fields(mountinfo.substr(0, nl));
    mountinfo.remove_prefix(std::min(nl + 1, mountinfo.size()));
    if (fields.size() < 7) continue;
    size_t sep = 6;
    while (sep < fields.size() && fields[sep] != "-") ++sep;
    if (sep + 1 >= fields.size()) continue;
    f(fields[sep + 1], unescape_mount_field(fields[4]));
  }
}

int mount_preference(std::string_view mount_point) {
  if (mount_point == "/sys/fs/cgroup") return 2;
  if (mount_point == "/sys/fs/cgroup/unified") return 1;
  return 0;
}

// Length of the valid UTF-8 sequence at s[i], or 0 when the byte there does not start one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

}  // namespace

const char* status_name(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kWarn:
      return "warn";
    case Status::kFail:
      return "fail";
  }
  return "fail";
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = utf8_sequence_length(s, i);
      if (len == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

std::optional<MapsEntry> parse_maps_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  MapsEntry e;
  const std::string_view range = next_token(line);
  const size_t dash = range.find('-');
  if (dash == std::string_view::npos || !parse_number(range.substr(0, dash), e.start, 16) ||
      !parse_number(range.substr(dash + 1), e.end, 16)) {
    return std::nullopt;
  }
  e.perms = std::string(next_token(line));
  if (e.perms.size() != 4) return std::nullopt;
  if (!parse_number(next_token(line), e.offset, 16)) return std::nullopt;
  if (next_token(line).find(':') == std::string_view::npos) return std::nullopt;  // dev
  if (!parse_number(next_token(line), e.inode, 10)) return std::nullopt;
  // The path is everything after the padding, spaces included.
  const size_t start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) return e;
  std::string_view path = line.substr(start);
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.ends_with(kDeleted)) {
    path.remove_suffix(kDeleted.size());
    e.deleted = true;
  }
  e.path = std::string(path);
  return e;
}

std::optional<std::string> cuda_library_kind(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  struct Kind {
    std::string_view prefix;
    const char* kind;
  };
  static constexpr Kind kKinds[] = {
      {"libcudart", "cudart"}, {"libcuda", "cuda"}, {"libnccl", "nccl"}};
  for (const Kind& k : kKinds) {
    if (!name.starts_with(k.prefix)) continue;
    std::string_view rest = name.substr(k.prefix.size());
    if (rest.starts_with('-')) {  // auditwheel copy: libcudart-9335f6a2.so.12
      const size_t dot = rest.find('.');
      const std::string_view hash = rest.substr(1, dot == std::string_view::npos ? 0 : dot - 1);
      if (hash.size() < 6 || hash.find_first_not_of("0123456789abcdef") != hash.npos) continue;
      rest.remove_prefix(dot);
    }
    if (rest == ".so" || rest.starts_with(".so.")) return std::string(k.kind);
  }
  return std::nullopt;
}

std::optional<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo) {
  std::optional<std::string> best;
  int best_preference = -1;
  for_each_mount(mountinfo, [&](std::string_view fstype, std::string mount_point) {
    if (fstype != "cgroup2") return;
    const int p = mount_preference(mount_point);
    if (p > best_preference) {
      best_preference = p;
      best = std::move(mount_point);
    }
  });
  return best;
}

CgroupClass classify_cgroup(std::string_view mountinfo) {
  CgroupClass cls;
  for_each_mount(mountinfo, [&](std::string_view fstype, const std::string&) {
    if (fstype == "cgroup") cls.v1_controllers = true;
  });
  const std::optional<std::string> mount = cgroup2_mount_from_mountinfo(mountinfo);
  if (!mount) return cls;
  cls.mount = *mount;
  if (cls.mount == "/sys/fs/cgroup") {
    cls.layout = CgroupLayout::kUnified;
  } else if (cls.mount == "/sys/fs/cgroup/unified" && cls.v1_controllers) {
    cls.layout = CgroupLayout::kHybrid;
  } else {
    cls.layout = CgroupLayout::kOtherV2;
  }
  return cls;
}

CheckItem cgroup_item(const CgroupClass& cls) {
  CheckItem item{"cgroup", Status::kOk, "", ""};
  switch (cls.layout) {
    case CgroupLayout::kUnified:
      item.detail = "v2 (unified) at /sys/fs/cgroup";
      break;
    case CgroupLayout::kHybrid:
      item.detail =
          "hybrid: v1 controllers, v2 hierarchy at /sys/fs/cgroup/unified (cgroup labels are v2 "
          "paths)";
      break;
    case CgroupLayout::kOtherV2:
      item.detail = "v2 at " + cls.mount + (cls.v1_controllers ? " (v1 controllers too)" : "");
      break;
    case CgroupLayout::kNone:
      item.status = Status::kFail;
      item.detail = cls.v1_controllers ? "cgroup v1 only; no cgroup2 hierarchy is mounted"
                                       : "no cgroup2 hierarchy is mounted";
      item.fix =
          "mount a cgroup2 hierarchy (systemd.unified_cgroup_hierarchy=1 or mount -t cgroup2 none "
          "/sys/fs/cgroup/unified)";
      break;
  }
  return item;
}

CheckItem capabilities_item(std::uint64_t effective) {
  struct Cap {
    int bit;
    const char* name;
  };
  static constexpr Cap kNeeded[] = {{39, "CAP_BPF"}, {38, "CAP_PERFMON"}, {21, "CAP_SYS_ADMIN"}};
  const auto has = [&](int bit) { return ((effective >> bit) & 1) != 0; };
  std::vector<std::string> missing;
  for (const Cap& c : kNeeded) {
    if (!has(c.bit)) missing.push_back(c.name);
  }
  CheckItem item{"capabilities", Status::kOk, "", ""};
  if (missing.empty()) {
    item.detail = "CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN effective";
    return item;
  }
  item.fix =
      "run as root, or grant CAP_BPF,CAP_PERFMON,CAP_SYS_ADMIN (systemd: "
      "AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_SYS_ADMIN)";
  if (has(21)) {
    // The kernel's bpf_capable() and perfmon_capable() accept CAP_SYS_ADMIN instead.
    item.status = Status::kWarn;
    item.detail = "missing " + join(missing, ", ") + "; CAP_SYS_ADMIN stands in for them";
  } else {
    item.status = Status::kFail;
    item.detail = "missing " + join(missing, ", ");
  }
  return item;
}

CheckItem tracefs_item(bool tracing_dir, bool events_dir, int mmap_id_errno) {
  CheckItem item{"tracefs", Status::kOk, "", ""};
  if (mmap_id_errno == 0) {
    item.detail = "syscalls:sys_enter_mmap available at /sys/kernel/tracing";
  } else if (mmap_id_errno == EACCES || mmap_id_errno == EPERM) {
    item.status = Status::kWarn;
    item.detail = "/sys/kernel/tracing/events is not readable (permission denied)";
    item.fix = "run as root";
  } else if (tracing_dir && !events_dir) {
    item.status = Status::kWarn;
    item.detail = "tracefs is not mounted at /sys/kernel/tracing";
    item.fix =
        "stallwatch run mounts tracefs at /sys/kernel/tracing itself; or: mount -t tracefs "
        "tracefs /sys/kernel/tracing";
  } else {
    item.status = Status::kFail;
    item.detail = tracing_dir ? "tracefs has no syscalls:sys_enter_mmap event"
                              : "/sys/kernel/tracing does not exist (no tracefs)";
    item.fix =
        "kernel needs CONFIG_FTRACE_SYSCALLS=y (library discovery uses syscalls:sys_enter_mmap)";
  }
  return item;
}

CheckItem cuda_libraries_item(const std::vector<CudaLibrary>& libraries, std::size_t on_disk) {
  CheckItem item{"cuda_libraries", Status::kOk, "", ""};
  if (libraries.empty()) {
    item.status = Status::kWarn;
    item.detail =
        "no CUDA library found; stallwatch attaches automatically when a process maps one";
    return item;
  }
  std::size_t mapped = 0;
  std::set<int> pids;
  for (const CudaLibrary& lib : libraries) {
    if (lib.mapped) ++mapped;
    pids.insert(lib.pids.begin(), lib.pids.end());
  }
  std::ostringstream d;
  d << on_disk << " on disk, " << mapped << " mapped by " << pids.size()
    << (pids.size() == 1 ? " process" : " processes");
  item.detail = d.str();
  return item;
}

}  // namespace stallwatch::cli
