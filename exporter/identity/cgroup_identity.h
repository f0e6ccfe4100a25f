// Workload identity from a cgroup v2 path: which container, pod, systemd unit or Slurm job a
// cgroup belongs to, read from the names container runtimes, the kubelet, systemd and slurmstepd
// give their cgroups. Owns only string parsing: no I/O, no Kubernetes API (pod name, namespace
// and container name come from elsewhere).
// Thread-safety: pure functions, safe to call from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace stallwatch::identity {

struct Identity {
  std::string cgroup{};        // relative to the cgroup2 mount, "/" for the root; always set
  std::string container_id{};  // container id as found in the path (64 hex), empty if none
  std::string pod_uid{};       // Kubernetes pod UID with dashes, empty outside kubepods
  std::string runtime{};       // "containerd", "crio", "docker", "systemd", "slurm" or ""
  std::string qos{};           // "guaranteed", "burstable", "besteffort" for kubepods, else ""
  std::string systemd_unit{};  // innermost .service/.scope unit that is not a container scope
  std::string slurm_job{};     // "1234" from .../job_1234/...
  std::string slurm_step{};    // "0", "batch", "extern", "interactive" from .../step_X/...
  // Kubernetes metadata, when a source of it is configured (not from the path; empty otherwise).
  std::string pod{};
  std::string pod_namespace{};
  std::string container{};
  // The training job the pod belongs to, from its first label of kPodJobLabels
  // (identity/kube_metadata.h): JobSet, Kubeflow, Volcano, LeaderWorkerSet.
  std::string pod_job{};
  // The `workload` label on /metrics (metrics/model.h's shape_families sets it on its copies;
  // empty elsewhere).
  std::string workload{};
  // The cgroup lies below a level a user owns (a delegated subtree: a systemd user manager's,
  // a rootless container's), where the user chooses every name: the fields above come only from
  // the levels the runtime owns, and workload_key is the cgroup path (issue #49).
  bool delegated = false;

  bool operator==(const Identity&) const = default;
};

// Parses a cgroup path such as
//   /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
//       cri-containerd-<id>.scope                (kubelet systemd driver; crio-<id>.scope)
//   /kubepods/burstable/pod<uid>/<id>            (kubelet cgroupfs driver)
//   /system.slice/docker-<id>.scope, /docker/<id>
//   /system.slice/fluent-bit.service, /user.slice/user-1000.slice/session-3.scope
//   /system.slice/slurmstepd.scope/job_1234/step_0/user/task_0, /slurm/uid_1000/job_1234/step_batch
// The path is normalised (leading '/', no empty components, no trailing '/' except for the
// root). Anything not recognised leaves the matching fields empty; never throws on bad input.
// runtime is the runtime of the innermost container if the path holds one ("" when only the
// cgroupfs layout is seen, which does not name the runtime), else "slurm" inside a Slurm job,
// else "systemd" when a unit was found. crio-conmon-<id>.scope holds CRI-O's monitor process,
// not the container: runtime "crio" without a container_id.
Identity parse_cgroup_path(std::string_view path);
// The same for a path whose leading `trusted` part alone was made by the runtime (the resolver's
// trusted_path_of): the fields come from `trusted`, cgroup is `path`, delegated is set when the
// two differ.
Identity parse_cgroup_path(std::string_view path, std::string_view trusted);

// The `cgroup` label of a cgroup path: the path with a backslash doubled and each byte of an
// invalid UTF-8 sequence written \xNN (lowercase hex), everything else as is (issue #49: a lossy
// repair made two cgroups one label set, and Prometheus keeps one of them). Two names that
// differ in any byte stay two labels; every label is valid UTF-8 (what Prometheus and protobuf
// need; controls are escaped where a label is shown, not here). Past kMaxCgroupLabel bytes,
// the first and last kCgroupLabelKeep bytes around "…<16 hex of a hash of the path>…".
inline constexpr std::size_t kMaxCgroupLabel = 1024;
inline constexpr std::size_t kCgroupLabelKeep = 480;
std::string cgroup_label(std::string_view path);
// The path a label was made from (the escapes undone), for commands that name the cgroup's
// files; a shortened label gives a path that names nothing.
std::string cgroup_path_of_label(std::string_view label);

// A short key for a workload, stable across its container's restarts where the Kubernetes names
// are known (issue #37: the `workload` label of every per-workload series):
//   namespace/pod/container      Kubernetes names known (container left off when unknown)
//   pod/<uid>/<12 hex>           a pod's container, names not known
//   <runtime>/<12 hex>           another container (docker/3f2a9c1b7d4e)
//   slurm/job_<id>/step_<step>   a Slurm job (the step left off when unknown)
//   <unit>                       a systemd unit or scope (fluent-bit.service, session-3.scope)
//   <cgroup path>                anything else ("/" for the root), and every delegated cgroup
// Never empty.
std::string workload_key(const Identity& id);

}  // namespace stallwatch::identity
