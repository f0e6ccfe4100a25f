// Kubernetes names for cgroups: `pod`, `namespace` and `container` from the API server, for the
// pods of this node only. The cgroup path already gives the pod UID and the container id
// (cgroup_identity.h); this module maps them to names.
//
// Owns a background thread that lists the node's pods, GET
//   /api/v1/pods?fieldSelector=spec.nodeName=<node>&resourceVersion=0
// (served from the API server's watch cache, one request per node and refresh), every
// `refresh`, and sooner, at most once per `min_refresh`, when asked about a pod UID it does not
// know yet (a pod started since the last list). Authenticates with the service account's token,
// read again before every request (projected tokens rotate), and verifies the API server with
// the service account's CA. A failed list keeps the last good cache.
//
// Thread-safety: annotate(), replace() and stats() are safe from any thread; annotate() never
// waits on the network (a mutex held for a map lookup). Construct and destroy from one thread;
// the destructor stops the refresher within a moment (an in-flight request is aborted).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/result.h"
#include "identity/cgroup_identity.h"

namespace stallwatch::identity {

// Kubernetes metadata (identity/kube_metadata.h): the API server lists behind pod names.
struct KubeStats {
  bool enabled = false;           // a source of pod names is configured
  std::uint64_t pods = 0;         // pods of this node in the cache now
  std::uint64_t lists_ok = 0;     // pod lists answered and parsed
  std::uint64_t lists_failed = 0; // pod lists that failed (connection, HTTP status, bad JSON)
};


struct KubeContainer {
  std::string id;    // runtime's container id without the scheme ("containerd://" stripped)
  std::string name;  // container name in the pod spec
};

// The pod labels that name a training job, in the order they are tried (issue #52): JobSet,
// Kubeflow's PyTorchJob (training-operator) and TrainJob (trainer v2), Volcano's Job,
// LeaderWorkerSet. The first one a pod carries is its job.
inline constexpr const char* kPodJobLabels[] = {
    "jobset.sigs.k8s.io/jobset-name", "training.kubeflow.org/job-name",
    "trainer.kubeflow.org/trainjob-name", "volcano.sh/job-name",
    "leaderworkerset.sigs.k8s.io/name"};

struct KubePod {
  std::string uid;
  std::string mirror_uid;  // static pods: the kubelet's config hash, which names the cgroup
  std::string name;
  std::string pod_namespace;
  std::string job;  // the value of its first label of kPodJobLabels, "" when none
  std::vector<KubeContainer> containers;  // containers, init and ephemeral containers
};

// At most this many pods are kept from one list (a node runs ~110 by default, 250+ rarely).
inline constexpr std::size_t kMaxPods = 10000;
// A pod list answer larger than this is refused (a node's list is a few MiB at most).
inline constexpr std::size_t kMaxListBytes = 64u << 20;

// A PodList JSON document (the answer of the list above). Fails on malformed JSON or a
// document that is not a PodList; pods lacking a UID or a name are skipped; at most kMaxPods.
Result<std::vector<KubePod>> parse_pod_list(std::string_view json);

// "containerd://<id>" → "<id>"; also cri-o://, docker://; a bare id is returned as is.
std::string strip_container_scheme(std::string_view container_id);

struct KubeSettings {
  bool enabled = false;
  std::string why_off;  // when !enabled: the one line saying why (logged once)
  // https://10.96.0.1:443, no trailing '/', no credentials: safe to show in a log line or check.
  std::string api_url;
  // The user:password of a --kube-api URL (percent-encoded as given), kept out of api_url so
  // that no line can print it; put back only into the request's URL.
  std::string api_userinfo;
  // The service-account token goes only over TLS or to a loopback address (kubectl proxy):
  // never in the clear across the network (issue #15).
  bool send_token = true;
  std::string node;
  std::string node_source;  // "--kube-node", "NODE_NAME", "hostname"
  std::string token_path = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_path = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::chrono::milliseconds refresh{std::chrono::seconds(60)};
  std::chrono::milliseconds min_refresh{std::chrono::seconds(5)};
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
};

using Getenv = std::function<const char*(const char*)>;

// From --kube-api ("" = auto: on inside a pod, from KUBERNETES_SERVICE_HOST/_PORT; "none" = off;
// else an http(s) URL) and --kube-node ("" = $NODE_NAME, else the hostname). Fails with one line
// on a malformed URL, or one with a ?query or #fragment (never part of an API server's base
// address, and where a token would hide); errors show the URL without credentials.
Result<KubeSettings> resolve_kube_settings(const std::string& api_flag,
                                           const std::string& node_flag,
                                           std::chrono::milliseconds refresh,
                                           const Getenv& getenv);

class KubeMetadata {
 public:
  // Starts the refresher when settings.enabled; a disabled instance only serves replace()d pods.
  explicit KubeMetadata(KubeSettings settings);
  ~KubeMetadata();
  KubeMetadata(const KubeMetadata&) = delete;
  KubeMetadata& operator=(const KubeMetadata&) = delete;

  // Fills id.pod, id.pod_namespace and id.container where the pod UID / container id are known.
  // An unknown pod UID asks the refresher for one early list (rate-limited); a UID still absent
  // from that list waits for the periodic ones (a deleted pod's lingering cgroup, a static pod
  // without a mirror) instead of asking again.
  void annotate(Identity& id);

  // Replaces the cache (the refresher's list; the demo's synthetic pods).
  void replace(const std::vector<KubePod>& pods);

  KubeStats stats() const;
  const KubeSettings& settings() const { return settings_; }

  // Blocks until a list has been attempted at least `n` times or `timeout` passes (tests).
  bool wait_for_lists(std::uint64_t n, std::chrono::milliseconds timeout);

 private:
  struct PodNames {
    std::string name;
    std::string pod_namespace;
    std::string job;
  };

  void refresher();
  void list_once();

  KubeSettings settings_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, PodNames> pods_;        // by pod UID and mirror UID; guarded by mu_
  std::map<std::string, std::string> containers_;  // container id → name; guarded by mu_
  KubeStats stats_;                               // guarded by mu_
  bool refresh_asked_ = false;                    // guarded by mu_
  std::set<std::string> asked_for_;   // unknown UIDs an early list was asked for; guarded by mu_
  std::set<std::string> not_listed_;  // UIDs an early list did not have; guarded by mu_
  std::optional<std::chrono::steady_clock::time_point> last_list_;  // guarded by mu_
  bool failing_ = false;                          // refresher thread only
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace stallwatch::identity
