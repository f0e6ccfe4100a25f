#include "identity/cgroup_identity.h"

#include "common/strings.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace stallwatch::identity {
namespace {

bool is_hex_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool is_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_hex_char);
}

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Pod UIDs: 36-char UUIDs, or 32-hex config hashes for static pods; the systemd driver writes
// the dashes as '_'.
bool is_pod_uid(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return is_hex_char(c) || c == '-' || c == '_'; });
}

std::string pod_uid_from(std::string_view s) {
  std::string uid(s);
  std::replace(uid.begin(), uid.end(), '_', '-');
  return uid;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t pos = s.find(sep);
    if (pos != 0) parts.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) break;
    s.remove_prefix(pos + 1);
  }
  if (!parts.empty() && parts.back().empty()) parts.pop_back();
  return parts;
}

std::string normalize(const std::vector<std::string_view>& components) {
  if (components.empty()) return "/";
  std::string out;
  for (std::string_view c : components) {
    out += '/';
    out += c;
  }
  return out;
}

std::string_view strip_suffix(std::string_view s, std::string_view suffix) {
  if (s.ends_with(suffix)) s.remove_suffix(suffix.size());
  return s;
}

struct ContainerScope {
  std::string_view runtime;
  std::string_view id;  // empty for runtime helper scopes (conmon)
};

// "<prefix><id>.scope" as written by the systemd cgroup driver, or "<prefix><id>" by cgroupfs.
bool match_container_scope(std::string_view component, ContainerScope& out) {
  struct Prefix {
    std::string_view prefix;
    std::string_view runtime;
    bool holds_container;
  };
  static constexpr Prefix kPrefixes[] = {
      {"cri-containerd-", "containerd", true},
      {"crio-conmon-", "crio", false},  // before "crio-": conmon is not the container
      {"crio-", "crio", true},
      {"docker-", "docker", true},
      {"nerdctl-", "containerd", true},
  };
  const std::string_view stem = strip_suffix(component, ".scope");
  for (const Prefix& p : kPrefixes) {
    if (!stem.starts_with(p.prefix)) continue;
    const std::string_view id = stem.substr(p.prefix.size());
    // Short ids would also match ordinary units such as docker-cleanup.scope.
    if (id.size() < 12 || !is_hex(id)) return false;
    out.runtime = p.runtime;
    out.id = p.holds_container ? id : std::string_view{};
    return true;
  }
  return false;
}

}  // namespace

Identity parse_cgroup_path(std::string_view path) {
  const std::vector<std::string_view> components = split(path, '/');
  Identity id;
  id.cgroup = normalize(components);

  bool in_kube = false;
  bool in_slurm = false;
  bool in_containerd_service = false;
  bool container_seen = false;
  std::string_view container_runtime;
  std::string_view previous;

  for (std::string_view c : components) {
    ContainerScope scope;
    if (match_container_scope(c, scope)) {
      container_seen = true;
      container_runtime = scope.runtime;
      id.container_id = std::string(scope.id);
    } else if (c.size() == 64 && is_hex(c)) {
      // Bare id (cgroupfs layouts): the parent tells the runtime, when it can.
      container_seen = true;
      container_runtime = previous == "docker"    ? "docker"
                          : in_containerd_service ? "containerd"
                                                  : "";
      id.container_id = std::string(c);
    } else if (c.ends_with(".service") || c.ends_with(".scope")) {
      id.systemd_unit = std::string(c);
      if (c == "containerd.service") in_containerd_service = true;
    }

    // Kubernetes, systemd driver: kubepods[-<qos>][-pod<uid_>].slice.
    if (c.ends_with(".slice")) {
      bool after_kubepods = false;
      for (std::string_view part : split(strip_suffix(c, ".slice"), '-')) {
        if (part == "kubepods") {
          after_kubepods = in_kube = true;
        } else if (after_kubepods && (part == "burstable" || part == "besteffort")) {
          id.qos = std::string(part);
        } else if (after_kubepods && part.starts_with("pod") && is_pod_uid(part.substr(3))) {
          id.pod_uid = pod_uid_from(part.substr(3));
        }
      }
    }
    // Kubernetes, cgroupfs driver: /kubepods[/<qos>]/pod<uid>/<id>.
    if (c == "kubepods") {
      in_kube = true;
    } else if (in_kube && id.pod_uid.empty() && (c == "burstable" || c == "besteffort")) {
      id.qos = std::string(c);
    } else if (in_kube && c.starts_with("pod") && is_pod_uid(c.substr(3))) {
      id.pod_uid = pod_uid_from(c.substr(3));
    }

    // Slurm: slurmstepd.scope (cgroup v2) or /slurm[_<node>]/uid_N (legacy), then job_N/step_X.
    if (c.starts_with("slurm")) {
      in_slurm = true;
    } else if (in_slurm && c.starts_with("job_") && is_digits(c.substr(4))) {
      id.slurm_job = std::string(c.substr(4));
      id.slurm_step.clear();
    } else if (in_slurm && !id.slurm_job.empty() && c.starts_with("step_") && c.size() > 5) {
      id.slurm_step = std::string(c.substr(5));
    }
    previous = c;
  }

  if (in_kube && !id.pod_uid.empty() && id.qos.empty()) id.qos = "guaranteed";
  if (container_seen) {
    id.runtime = std::string(container_runtime);
  } else if (!id.slurm_job.empty()) {
    id.runtime = "slurm";
  } else if (!id.systemd_unit.empty()) {
    id.runtime = "systemd";
  }
  return id;
}

Identity parse_cgroup_path(std::string_view path, std::string_view trusted) {
  Identity id = parse_cgroup_path(trusted);
  const std::string full = normalize(split(path, '/'));
  id.delegated = full != id.cgroup;
  id.cgroup = full;
  return id;
}

namespace {

// FNV-1a, 64 bits: a stable tag for a shortened label (not a defence against collisions made
// on purpose; the kept head and tail already separate the names that matter).
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// `at` moved back to the start of the UTF-8 sequence it falls in.
std::size_t sequence_start(std::string_view s, std::size_t at) {
  while (at > 0 && at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  return at;
}

}  // namespace

std::string cgroup_label(std::string_view path) {
  std::string label;
  label.reserve(path.size());
  for (std::size_t i = 0; i < path.size();) {
    const auto c = static_cast<unsigned char>(path[i]);
    if (c == '\\') {
      label += "\\\\";
      ++i;
    } else if (c < 0x80) {
      label += path[i++];
    } else if (const std::size_t n = utf8_sequence(path.substr(i)); n > 0) {
      label.append(path.substr(i, n));
      i += n;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      label += hex;
      ++i;
    }
  }
  if (label.size() <= kMaxCgroupLabel) return label;
  const std::size_t head = sequence_start(label, kCgroupLabelKeep);
  const std::size_t tail = sequence_start(label, label.size() - kCgroupLabelKeep);
  char tag[17];
  std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(fnv1a(path)));
  return label.substr(0, head) + "\u2026" + tag + "\u2026" + label.substr(tail);
}

std::string cgroup_path_of_label(std::string_view label) {
  std::string path;
  path.reserve(label.size());
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < label.size(); ++i) {
    if (label[i] == '\\' && i + 1 < label.size() && label[i + 1] == '\\') {
      path += '\\';
      ++i;
    } else if (label[i] == '\\' && i + 3 < label.size() && label[i + 1] == 'x' &&
               hex(label[i + 2]) >= 0 && hex(label[i + 3]) >= 0) {
      path += static_cast<char>(hex(label[i + 2]) * 16 + hex(label[i + 3]));
      i += 3;
    } else {
      path += label[i];
    }
  }
  return path;
}

std::string workload_key(const Identity& id) {
  if (id.delegated) return id.cgroup.empty() ? std::string("/") : id.cgroup;
  const std::string short_id = id.container_id.substr(0, 12);
  if (!id.pod.empty()) {
    std::string key = id.pod_namespace + "/" + id.pod;
    if (!id.container.empty()) key += "/" + id.container;
    return key;
  }
  if (!id.pod_uid.empty()) return "pod/" + id.pod_uid + (short_id.empty() ? "" : "/" + short_id);
  if (!short_id.empty()) {
    return (id.runtime.empty() ? std::string("container") : id.runtime) + "/" + short_id;
  }
  if (!id.slurm_job.empty()) {
    return "slurm/job_" + id.slurm_job + (id.slurm_step.empty() ? "" : "/step_" + id.slurm_step);
  }
  if (!id.systemd_unit.empty()) return id.systemd_unit;
  return id.cgroup.empty() ? std::string("/") : id.cgroup;
}

}  // namespace stallwatch::identity
