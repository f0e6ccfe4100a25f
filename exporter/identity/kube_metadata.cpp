#include "identity/kube_metadata.h"

#include <curl/curl.h>
#include <algorithm>
#include <cctype>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/duration.h"
#include "common/guard.h"
#include "common/log.h"
#include "common/privileges.h"
#include "common/redact.h"
#include "common/strings.h"

namespace stallwatch::identity {
namespace {

using nlohmann::json;

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string string_at(const json& obj, const char* key) {
  const json* v = member(obj, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// The hostname, which is the node name on most clusters (kubelet's default --hostname-override).
std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

std::string url_escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789ABCDEF";
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return std::string(trim(s.str()));
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

struct Download {
  std::string body;
  bool too_large = false;
  const std::atomic<bool>* stopping = nullptr;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* d = static_cast<Download*>(user);
  if (d->body.size() + size * n > kMaxListBytes) {
    d->too_large = true;
    return 0;  // aborts the transfer
  }
  d->body.append(data, size * n);
  return size * n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<Download*>(user)->stopping->load() ? 1 : 0;
}

}  // namespace

std::string strip_container_scheme(std::string_view container_id) {
  auto pos = container_id.find("://");
  return std::string(pos == std::string_view::npos ? container_id : container_id.substr(pos + 3));
}

Result<std::vector<KubePod>> parse_pod_list(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error("the pod list is not valid JSON");
  const json* items = member(doc, "items");
  if (string_at(doc, "kind") != "PodList" || !items || !items->is_array()) {
    return make_error("the answer is not a PodList (kind \"" + string_at(doc, "kind") + "\")");
  }
  std::vector<KubePod> pods;
  for (const json& item : *items) {
    if (pods.size() >= kMaxPods) break;
    const json* meta = member(item, "metadata");
    if (!meta) continue;
    KubePod p;
    p.uid = string_at(*meta, "uid");
    p.name = string_at(*meta, "name");
    p.pod_namespace = string_at(*meta, "namespace");
    if (p.uid.empty() || p.name.empty()) continue;
    if (const json* ann = member(*meta, "annotations")) {
      p.mirror_uid = string_at(*ann, "kubernetes.io/config.mirror");
    }
    if (const json* labels = member(*meta, "labels")) {
      for (const char* key : kPodJobLabels) {
        p.job = string_at(*labels, key);
        if (!p.job.empty()) break;
      }
    }
    if (const json* status = member(item, "status")) {
      for (const char* list : {"containerStatuses", "initContainerStatuses",
                               "ephemeralContainerStatuses"}) {
        const json* cs = member(*status, list);
        if (!cs || !cs->is_array()) continue;
        for (const json& c : *cs) {
          std::string id = strip_container_scheme(string_at(c, "containerID"));
          std::string name = string_at(c, "name");
          if (!id.empty() && !name.empty()) p.containers.push_back({std::move(id), std::move(name)});
        }
      }
    }
    pods.push_back(std::move(p));
  }
  return pods;
}

Result<KubeSettings> resolve_kube_settings(const std::string& api_flag,
                                           const std::string& node_flag,
                                           std::chrono::milliseconds refresh,
                                           const Getenv& getenv) {
  KubeSettings s;
  s.refresh = refresh;
  if (api_flag == "none") {
    s.why_off = "Kubernetes metadata off (--kube-api none)";
    return s;
  }
  if (api_flag.empty()) {
    const char* host = getenv("KUBERNETES_SERVICE_HOST");
    const char* port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host) {
      s.why_off =
          "Kubernetes metadata off: not running in a pod (KUBERNETES_SERVICE_HOST is not set); "
          "--kube-api URL turns it on";
      return s;
    }
    std::string h = host;
    if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 service address
    s.api_url = "https://" + h + ":" + (port && *port ? port : "443");
  } else {
    if (api_flag.rfind("http://", 0) != 0 && api_flag.rfind("https://", 0) != 0) {
      return make_error("--kube-api: '" + redact_url(api_flag) +
                        "' is not an http(s) URL (e.g. https://10.96.0.1:443, or none)");
    }
    if (api_flag.find_first_of("?#") != std::string::npos) {
      return make_error("--kube-api: '" + redact_url(api_flag) +
                        "' with a ?query or #fragment: pass the API server's base URL only (e.g. "
                        "https://10.96.0.1:443); the token comes from the service account");
    }
    s.api_url = std::string(trim_right(api_flag, "/"));
    // user:password@ moves out of the URL, so no log line or check can print it.
    const size_t authority = s.api_url.find("://") + 3;
    const size_t path = std::min(s.api_url.find('/', authority), s.api_url.size());
    if (const size_t at = s.api_url.rfind('@', path); at != std::string::npos && at >= authority) {
      s.api_userinfo = s.api_url.substr(authority, at - authority);
      s.api_url.erase(authority, at + 1 - authority);
    }
    if (s.api_url.rfind("http://", 0) == 0) {
      // The host part exactly: localhost, [::1], or an IPv4 literal in 127.0.0.0/8.
      std::string host = s.api_url.substr(7);
      host = host.substr(0, host.find('/'));
      if (host.rfind("[::1]", 0) == 0) {
        host = "[::1]";
      } else {
        host = host.substr(0, host.find(':'));
      }
      const bool ipv4_loopback = host.rfind("127.", 0) == 0 &&
                                 host.find_first_not_of("0123456789.") == std::string::npos;
      s.send_token = host == "localhost" || host == "[::1]" || ipv4_loopback;
    }
  }
  if (!node_flag.empty()) {
    s.node = node_flag;
    s.node_source = "--kube-node";
  } else if (const char* n = getenv("NODE_NAME"); n && *n) {
    s.node = n;
    s.node_source = "NODE_NAME";
  } else {
    s.node = hostname();
    s.node_source = "hostname";
  }
  if (s.node.empty()) {
    return make_error("--kube-node: no node name (NODE_NAME is not set and the hostname is "
                      "empty); pass --kube-node NAME or set NODE_NAME from spec.nodeName");
  }
  s.enabled = true;
  return s;
}

KubeMetadata::KubeMetadata(KubeSettings settings) : settings_(std::move(settings)) {
  stats_.enabled = settings_.enabled;
  if (settings_.enabled) thread_ = std::thread([this] { refresher(); });
}

KubeMetadata::~KubeMetadata() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KubeMetadata::annotate(Identity& id) {
  if (id.pod_uid.empty() && id.container_id.empty()) return;
  bool ask = false;
  {
    std::lock_guard lock(mu_);
    if (!id.pod_uid.empty()) {
      auto it = pods_.find(id.pod_uid);
      if (it != pods_.end()) {
        id.pod = it->second.name;
        id.pod_namespace = it->second.pod_namespace;
        id.pod_job = it->second.job;
      } else if (settings_.enabled && !not_listed_.contains(id.pod_uid) &&
                 asked_for_.size() < kMaxPods) {
        asked_for_.insert(id.pod_uid);
        ask = !refresh_asked_;
        refresh_asked_ = true;
      }
    }
    if (!id.container_id.empty()) {
      auto it = containers_.find(id.container_id);
      if (it != containers_.end()) id.container = it->second;
    }
  }
  if (ask) wake_.notify_all();
}

void KubeMetadata::replace(const std::vector<KubePod>& pods) {
  std::map<std::string, PodNames> by_uid;
  std::map<std::string, std::string> containers;
  for (const auto& p : pods) {
    by_uid[p.uid] = {p.name, p.pod_namespace, p.job};
    if (!p.mirror_uid.empty()) by_uid[p.mirror_uid] = {p.name, p.pod_namespace, p.job};
    for (const auto& c : p.containers) containers[c.id] = c.name;
  }
  std::lock_guard lock(mu_);
  pods_.swap(by_uid);
  containers_.swap(containers);
  stats_.pods = pods.size();
  // UIDs asked about before this list and still not in it: no more early lists for them.
  for (const auto& uid : asked_for_) {
    if (!pods_.contains(uid) && not_listed_.size() < kMaxPods) not_listed_.insert(uid);
  }
  asked_for_.clear();
  std::erase_if(not_listed_, [&](const std::string& uid) { return pods_.contains(uid); });
}

KubeStats KubeMetadata::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool KubeMetadata::wait_for_lists(std::uint64_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return wake_.wait_for(lock, timeout,
                        [&] { return stats_.lists_ok + stats_.lists_failed >= n; });
}

void KubeMetadata::refresher() {
  using clock = std::chrono::steady_clock;
  // The API client talks to the network: it holds no capabilities (common/privileges.h).
  if (auto dropped = drop_thread_capabilities("sw-kube"); !dropped) {
    SW_LOG(kWarn) << dropped.error().message;
  }
  while (true) {
    // An API server's answer is hostile input: whatever a parse throws is logged once and the
    // next list goes on (common/guard.h).
    run_guarded("Kubernetes pod list", [this] { list_once(); });
    std::unique_lock lock(mu_);
    last_list_ = clock::now();
    refresh_asked_ = false;
    wake_.notify_all();  // wait_for_lists
    // Sleep until the next periodic list; an early one when annotate() met an unknown pod, but
    // never sooner than min_refresh after the last (a pod that is not on this node's list must
    // not turn into a request per window).
    const auto periodic = *last_list_ + settings_.refresh;
    const auto earliest = *last_list_ + settings_.min_refresh;
    wake_.wait_until(lock, periodic, [&] { return stopping_.load() || refresh_asked_; });
    if (stopping_) return;
    if (clock::now() < earliest) {
      wake_.wait_until(lock, earliest, [&] { return stopping_.load(); });
      if (stopping_) return;
    }
  }
}

void KubeMetadata::list_once() {
  std::string url = settings_.api_url + "/api/v1/pods?fieldSelector=" +
                    url_escape("spec.nodeName=" + settings_.node) + "&resourceVersion=0";
  if (!settings_.api_userinfo.empty()) {
    url.insert(url.find("://") + 3, settings_.api_userinfo + "@");  // curl's basic auth
  }
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  Download d;
  d.stopping = &stopping_;
  std::unique_ptr<curl_slist, CurlDeleter> headers(
      curl_slist_append(nullptr, "Accept: application/json"));
  const std::string token = settings_.send_token ? read_file(settings_.token_path) : std::string();
  if (!token.empty()) {
    headers.reset(curl_slist_append(headers.release(), ("Authorization: Bearer " + token).c_str()));
  }
  char curl_error[CURL_ERROR_SIZE] = {};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &d);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &d);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(settings_.timeout.count()));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(settings_.timeout.count()));
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");  // gzip when the API server offers it
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_error);
  if (access(settings_.ca_path.c_str(), R_OK) == 0) {
    curl_easy_setopt(c, CURLOPT_CAINFO, settings_.ca_path.c_str());
  }
  const CURLcode code = curl_easy_perform(c);
  if (stopping_) return;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);

  std::string failure;
  std::string hint;
  Result<std::vector<KubePod>> pods = make_error("");
  if (d.too_large) {
    failure = "the answer is larger than " + std::to_string(kMaxListBytes >> 20) + " MiB";
  } else if (code != CURLE_OK) {
    failure = std::string(curl_easy_strerror(code)) +
              (*curl_error ? ": " + redact_text(curl_error, {token}) : std::string());
    hint = "check that the API server is reachable from the node (hostNetwork, NetworkPolicy)";
  } else if (status != 200) {
    // The body is the API server's (or a proxy's) text: escaped, cut, our token redacted.
    failure = "HTTP " + std::to_string(status) + ": " + redact_text(d.body, {token}, 200);
    if (status == 401) hint = "the service account token is missing or expired (" + settings_.token_path + ")";
    if (status == 403) {
      hint = "the service account may not list pods: apply deploy/kubernetes/rbac.yaml "
             "(get, list, watch on pods)";
    }
  } else if (pods = parse_pod_list(d.body); !pods) {
    failure = redact_text(pods.error().message, {token}, 300);
  }

  if (!failure.empty()) {
    {
      std::lock_guard lock(mu_);
      ++stats_.lists_failed;
    }
    if (!failing_) {  // once per spell of failures, not per attempt
      SW_LOG(kWarn) << "Kubernetes metadata: cannot list the pods of node "
                    << escape_name(settings_.node) << " from " << redact_url(settings_.api_url)
                    << ": " << failure
                    << " (keeping the last names known; retrying every "
                    << format_duration(settings_.refresh) << ")";
      if (!hint.empty()) SW_LOG(kHint) << hint;
      failing_ = true;
    }
    return;
  }
  replace(*pods);
  {
    std::lock_guard lock(mu_);
    ++stats_.lists_ok;
  }
  if (failing_ || stats().lists_ok == 1) {
    SW_LOG(kInfo) << "Kubernetes metadata: " << pods->size() << " pods on node "
                  << escape_name(settings_.node) << " (from " << redact_url(settings_.api_url)
                  << ", node name from "
                  << settings_.node_source << ")";
  }
  failing_ = false;
}

}  // namespace stallwatch::identity
