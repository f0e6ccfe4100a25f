// Unit tests for identity/kube_metadata.h: the PodList parser on a fixture shaped like a real API
// server answer, the in-cluster settings, and the refresher against a loopback fake of the one
// endpoint it uses (GET /api/v1/pods?fieldSelector=spec.nodeName=...): the request it sends
// (selector, bearer token re-read from the file), names filled in, an early list for a new pod,
// the last good names kept through 403, 500 and malformed answers, and a prompt shutdown while
// the API server hangs. Issue 35 row 13: credentials in --kube-api never reach a log line or
// an error, and an error body from the API server is logged escaped, cut and redacted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "identity/cgroup_identity.h"
#include "identity/kube_metadata.h"
#include "scripted_server.h"

namespace stallwatch::identity {
namespace {

using namespace std::chrono_literals;
using test::Action;
using test::ScriptedServer;

constexpr const char* kTrainCgroup =
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod6f1c2a3b_9d4e_4f5a_8b6c_7d8e9f0a1b2c.slice/"
    "cri-containerd-116f54c41d04e8b1a6a5b2c9d3e7f0a4b8c1d5e9f2a6b0c4d8e3f7a1b5c9d2e6.scope";
constexpr const char* kNewPodCgroup =
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod12345678_aaaa_4bbb_8ccc_dddddddddddd.slice/"
    "cri-containerd-eeee000000000000000000000000000000000000000000000000000000000004.scope";

std::string fixture() {
  std::ifstream in(std::string(FIXTURES_DIR) + "/kube/podlist.json");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string pod_list_with_new_pod() {
  std::string doc = fixture();
  const std::string extra =
      R"({"metadata": {"name": "bert-finetune-1", "namespace": "research", )"
      R"("uid": "12345678-aaaa-4bbb-8ccc-dddddddddddd"}, "status": {"containerStatuses": [)"
      R"({"name": "worker", "containerID": )"
      R"("containerd://eeee000000000000000000000000000000000000000000000000000000000004"}]}},)";
  doc.insert(doc.find("\"items\": [") + 10, extra);
  return doc;
}

Action ok(std::string body) {
  Action a;
  a.body = std::move(body);
  a.content_type = "application/json";
  return a;
}

Action status(int code, std::string body) {
  Action a = ok(std::move(body));
  a.status = code;
  return a;
}

// A token file in a fresh temporary directory.
struct TokenFile {
  std::filesystem::path dir;
  std::filesystem::path path;
  explicit TokenFile(const std::string& token) {
    dir = std::filesystem::temp_directory_path() /
          ("sw-kube-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
    std::filesystem::create_directories(dir);
    path = dir / "token";
    write(token);
  }
  ~TokenFile() { std::filesystem::remove_all(dir); }
  void write(const std::string& token) const { std::ofstream(path) << token << "\n"; }
  static inline int counter = 0;
};

KubeSettings settings_for(const ScriptedServer& server, const TokenFile& token) {
  KubeSettings s;
  s.enabled = true;
  s.api_url = "http://127.0.0.1:" + std::to_string(server.port());
  s.node = "gpu-node-7";
  s.node_source = "--kube-node";
  s.token_path = token.path.string();
  s.ca_path = (token.dir / "no-ca.crt").string();
  s.refresh = 1h;  // only early lists, unless a test says otherwise
  s.min_refresh = 50ms;
  s.timeout = 2s;
  return s;
}

Identity annotated(KubeMetadata& kube, const char* cgroup) {
  Identity id = parse_cgroup_path(cgroup);
  kube.annotate(id);
  return id;
}

TEST(KubePodList, ParsesNamesContainersAndStaticPods) {
  auto pods = parse_pod_list(fixture());
  ASSERT_TRUE(pods) << pods.error().message;
  ASSERT_EQ(pods->size(), 3u);  // the two entries without a uid or metadata are skipped
  const KubePod& train = (*pods)[0];
  EXPECT_EQ(train.uid, "6f1c2a3b-9d4e-4f5a-8b6c-7d8e9f0a1b2c");
  EXPECT_EQ(train.name, "llm-train-0");
  EXPECT_EQ(train.pod_namespace, "ml-training");
  EXPECT_EQ(train.mirror_uid, "");
  ASSERT_EQ(train.containers.size(), 3u);  // containers, then init containers
  EXPECT_EQ(train.containers[0].id,
            "116f54c41d04e8b1a6a5b2c9d3e7f0a4b8c1d5e9f2a6b0c4d8e3f7a1b5c9d2e6");
  EXPECT_EQ(train.containers[0].name, "trainer");
  EXPECT_EQ(train.containers[1].name, "log-shipper");
  EXPECT_EQ(train.containers[2].name, "fetch-weights");
  const KubePod& apiserver = (*pods)[1];
  EXPECT_EQ(apiserver.mirror_uid, "5b5b1f2c0e2d4c8f9a7b6c5d4e3f2a1b");
  ASSERT_EQ(apiserver.containers.size(), 1u);
  EXPECT_EQ(apiserver.containers[0].id,
            "cccc000000000000000000000000000000000000000000000000000000000003");
  EXPECT_TRUE((*pods)[2].containers.empty());  // pending: no containerID yet
}

TEST(KubePodList, RefusesWhatIsNotAPodList) {
  auto bad = parse_pod_list("{\"items\": [");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "the pod list is not valid JSON");
  auto status = parse_pod_list(R"({"kind": "Status", "status": "Failure", "code": 403})");
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().message, "the answer is not a PodList (kind \"Status\")");
  auto empty = parse_pod_list(R"({"kind": "PodList", "items": []})");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

// The training job of a pod, from the first of kPodJobLabels it carries (issue #52): JobSet
// before Volcano; a label outside the allowlist names nothing; annotate() carries it.
TEST(KubePodList, NamesThePodsJobFromItsFirstAllowlistedLabel) {
  auto pods = parse_pod_list(R"({"kind": "PodList", "items": [
    {"metadata": {"uid": "u-1", "name": "llm-0", "namespace": "ml",
                  "labels": {"volcano.sh/job-name": "vc-job",
                             "jobset.sigs.k8s.io/jobset-name": "llm-7", "app": "x"}}},
    {"metadata": {"uid": "u-2", "name": "pt-0", "namespace": "ml",
                  "labels": {"training.kubeflow.org/job-name": "pt-job"}}},
    {"metadata": {"uid": "u-3", "name": "tj-0", "namespace": "ml",
                  "labels": {"trainer.kubeflow.org/trainjob-name": "tj"}}},
    {"metadata": {"uid": "u-4", "name": "lws-0", "namespace": "ml",
                  "labels": {"leaderworkerset.sigs.k8s.io/name": "vllm-lws"}}},
    {"metadata": {"uid": "u-5", "name": "web-0", "namespace": "ml",
                  "labels": {"job-name": "not-on-the-list", "volcano.sh/job-name": 7}}}]})");
  ASSERT_TRUE(pods) << pods.error().message;
  ASSERT_EQ(pods->size(), 5u);
  EXPECT_EQ((*pods)[0].job, "llm-7");
  EXPECT_EQ((*pods)[1].job, "pt-job");
  EXPECT_EQ((*pods)[2].job, "tj");
  EXPECT_EQ((*pods)[3].job, "vllm-lws");
  EXPECT_EQ((*pods)[4].job, "");  // only allowlisted keys, only string values

  KubeMetadata kube(KubeSettings{});
  kube.replace(*pods);
  Identity id;
  id.pod_uid = "u-1";
  kube.annotate(id);
  EXPECT_EQ(id.pod, "llm-0");
  EXPECT_EQ(id.pod_job, "llm-7");
}

TEST(KubePodList, StripsRuntimeSchemes) {
  EXPECT_EQ(strip_container_scheme("containerd://abc"), "abc");
  EXPECT_EQ(strip_container_scheme("cri-o://abc"), "abc");
  EXPECT_EQ(strip_container_scheme("docker://abc"), "abc");
  EXPECT_EQ(strip_container_scheme("abc"), "abc");
}

TEST(KubeSettings, InClusterAutoNoneAndErrors) {
  std::map<std::string, std::string> env;
  Getenv getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto off = resolve_kube_settings("", "", 60s, getenv);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->enabled);
  EXPECT_EQ(off->why_off,
            "Kubernetes metadata off: not running in a pod (KUBERNETES_SERVICE_HOST is not set); "
            "--kube-api URL turns it on");

  env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"},
         {"NODE_NAME", "gpu-node-7"}};
  auto in_pod = resolve_kube_settings("", "", 30s, getenv);
  ASSERT_TRUE(in_pod);
  EXPECT_TRUE(in_pod->enabled);
  EXPECT_EQ(in_pod->api_url, "https://10.96.0.1:443");
  EXPECT_EQ(in_pod->node, "gpu-node-7");
  EXPECT_EQ(in_pod->node_source, "NODE_NAME");
  EXPECT_EQ(in_pod->refresh, 30s);

  env["KUBERNETES_SERVICE_HOST"] = "fd00:10:96::1";
  EXPECT_EQ(resolve_kube_settings("", "", 60s, getenv)->api_url, "https://[fd00:10:96::1]:443");

  auto flag = resolve_kube_settings("http://127.0.0.1:8001/", "other-node", 60s, getenv);
  ASSERT_TRUE(flag);
  EXPECT_EQ(flag->api_url, "http://127.0.0.1:8001");
  EXPECT_EQ(flag->node, "other-node");
  EXPECT_EQ(flag->node_source, "--kube-node");
  EXPECT_TRUE(flag->send_token) << "loopback (kubectl proxy)";
  EXPECT_TRUE(in_pod->send_token) << "https";
  // Issue #15: the token never goes in the clear across the network.
  auto plain = resolve_kube_settings("http://10.96.0.1:8080", "n", 60s, getenv);
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->enabled);
  EXPECT_FALSE(plain->send_token);
  EXPECT_FALSE(resolve_kube_settings("http://127.0.0.1.evil.example:80", "n", 60s, getenv)
                   ->send_token);
  EXPECT_TRUE(resolve_kube_settings("http://[::1]:8001", "n", 60s, getenv)->send_token);
  EXPECT_TRUE(resolve_kube_settings("http://localhost:8001/", "n", 60s, getenv)->send_token);

  env.erase("NODE_NAME");
  auto host = resolve_kube_settings("", "", 60s, getenv);
  ASSERT_TRUE(host);
  EXPECT_EQ(host->node_source, "hostname");

  auto none = resolve_kube_settings("none", "", 60s, getenv);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->enabled);
  EXPECT_EQ(none->why_off, "Kubernetes metadata off (--kube-api none)");

  auto bad = resolve_kube_settings("10.96.0.1:443", "", 60s, getenv);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--kube-api: '10.96.0.1:443' is not an http(s) URL (e.g. https://10.96.0.1:443, or "
            "none)");
}

TEST(KubeMetadata, ListsThisNodesPodsWithTheTokenAndNamesTheWorkload) {
  ScriptedServer server({ok(fixture())});
  TokenFile token("token-one");
  KubeMetadata kube(settings_for(server, token));
  ASSERT_TRUE(kube.wait_for_lists(1, 5s));

  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].path, "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-7&resourceVersion=0");
  EXPECT_EQ(reqs[0].headers.at("authorization"), "Bearer token-one");
  EXPECT_EQ(reqs[0].headers.at("accept"), "application/json");

  Identity id = annotated(kube, kTrainCgroup);
  EXPECT_EQ(id.pod, "llm-train-0");
  EXPECT_EQ(id.pod_namespace, "ml-training");
  EXPECT_EQ(id.container, "trainer");
  // A static pod's cgroup is named by its config hash, which the mirror pod carries.
  Identity mirror = parse_cgroup_path(
      "/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod5b5b1f2c0e2d4c8f9a7b6c5d4e3f2a1b.slice/"
      "crio-cccc000000000000000000000000000000000000000000000000000000000003.scope");
  kube.annotate(mirror);
  EXPECT_EQ(mirror.pod, "kube-apiserver-gpu-node-7");
  EXPECT_EQ(mirror.pod_namespace, "kube-system");
  EXPECT_EQ(mirror.container, "kube-apiserver");
  // Outside Kubernetes nothing is added.
  Identity unit = annotated(kube, "/system.slice/fluent-bit.service");
  EXPECT_EQ(unit, parse_cgroup_path("/system.slice/fluent-bit.service"));

  const KubeStats st = kube.stats();
  EXPECT_TRUE(st.enabled);
  EXPECT_EQ(st.pods, 3u);
  EXPECT_EQ(st.lists_ok, 1u);
  EXPECT_EQ(st.lists_failed, 0u);
}

TEST(KubeMetadata, AnUnknownPodAsksForOneEarlyListAndTheRotatedToken) {
  ScriptedServer server({ok(fixture()), ok(pod_list_with_new_pod())});
  TokenFile token("token-one");
  KubeMetadata kube(settings_for(server, token));
  ASSERT_TRUE(kube.wait_for_lists(1, 5s));
  token.write("token-two");  // kubelet rotated the projected token

  Identity before = annotated(kube, kNewPodCgroup);
  EXPECT_EQ(before.pod, "");  // never waits for the network
  // Asking again before the list ran does not queue more requests.
  for (int i = 0; i < 5; ++i) annotated(kube, kNewPodCgroup);
  ASSERT_TRUE(kube.wait_for_lists(2, 5s));
  Identity after = annotated(kube, kNewPodCgroup);
  EXPECT_EQ(after.pod, "bert-finetune-1");
  EXPECT_EQ(after.pod_namespace, "research");
  EXPECT_EQ(after.container, "worker");
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].headers.at("authorization"), "Bearer token-two");
}

TEST(KubeMetadata, APodAbsentFromTheEarlyListWaitsForThePeriodicOnes) {
  ScriptedServer server({ok(fixture()), ok(fixture()), ok(fixture())});
  TokenFile token("t");
  KubeMetadata kube(settings_for(server, token));  // min_refresh 50 ms, refresh 1 h
  ASSERT_TRUE(kube.wait_for_lists(1, 5s));
  annotated(kube, kNewPodCgroup);
  ASSERT_TRUE(kube.wait_for_lists(2, 5s));
  // Not on this node's list (a deleted pod's lingering cgroup): asking again, window after
  // window, must not turn into a list every min_refresh.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(annotated(kube, kNewPodCgroup).pod, "");
    std::this_thread::sleep_for(30ms);  // ten windows' worth of asking, 6× min_refresh
  }
  EXPECT_FALSE(kube.wait_for_lists(3, 200ms));
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(KubeMetadata, KeepsTheLastGoodNamesThroughFailures) {
  Action hang = ok(fixture());
  hang.hold = true;  // the fifth list never ends, so the counts below are final
  ScriptedServer server({ok(fixture()),
                         status(403, R"({"kind":"Status","reason":"Forbidden"})"),
                         status(500, "internal"), ok("{\"kind\": \"PodList\", \"items\": ["), hang});
  TokenFile token("t");
  KubeSettings s = settings_for(server, token);
  s.refresh = 60ms;  // periodic lists, so each scripted failure is met in turn
  KubeMetadata kube(s);
  ASSERT_TRUE(kube.wait_for_lists(4, 10s));
  const KubeStats st = kube.stats();
  EXPECT_GE(st.lists_ok, 1u);
  EXPECT_EQ(st.lists_failed, 3u);
  EXPECT_EQ(st.pods, 3u);
  EXPECT_EQ(annotated(kube, kTrainCgroup).pod, "llm-train-0");
}

TEST(KubeMetadata, NobodyListeningIsAFailureNotAHang) {
  int port;
  {
    ScriptedServer gone;
    port = gone.port();
  }
  TokenFile token("t");
  KubeSettings s;
  s.enabled = true;
  s.api_url = "http://127.0.0.1:" + std::to_string(port);
  s.node = "n";
  s.token_path = token.path.string();
  s.timeout = 1s;
  KubeMetadata kube(s);
  ASSERT_TRUE(kube.wait_for_lists(1, 5s));
  EXPECT_EQ(kube.stats().lists_failed, 1u);
  EXPECT_EQ(annotated(kube, kTrainCgroup).pod, "");
}

TEST(KubeMetadata, StopsPromptlyWhileTheApiServerHangs) {
  Action hang = ok(fixture());
  hang.hold = true;  // never answers until released
  ScriptedServer server({hang});
  TokenFile token("t");
  KubeSettings s = settings_for(server, token);
  s.timeout = 30s;
  const auto t0 = std::chrono::steady_clock::now();
  {
    KubeMetadata kube(s);
    ASSERT_TRUE(server.wait_requests(1, 5s));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  server.release();
}

TEST(KubeMetadata, DisabledServesReplacedPodsAndNeverConnects) {
  KubeMetadata kube(KubeSettings{});
  auto pods = parse_pod_list(fixture());
  ASSERT_TRUE(pods);
  kube.replace(*pods);
  EXPECT_EQ(annotated(kube, kTrainCgroup).pod, "llm-train-0");
  EXPECT_EQ(annotated(kube, kNewPodCgroup).pod, "");
  EXPECT_FALSE(kube.stats().enabled);
  EXPECT_EQ(kube.stats().lists_ok + kube.stats().lists_failed, 0u);
}

// What the process writes to stderr (the log) while it lives.
class StderrCapture {
 public:
  StderrCapture() : path_(std::filesystem::temp_directory_path() /
                          ("sw-kube-log-" + std::to_string(::getpid()))) {
    const int fd = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::ostringstream s;
    s << in.rdbuf();
    std::filesystem::remove(path_);
    return s.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  std::filesystem::path path_;
  int saved_ = -1;
};

TEST(KubeSettings, CredentialsInTheApiUrlNeverReachAMessage) {
  std::map<std::string, std::string> env;
  Getenv getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto s = resolve_kube_settings("https://admin:hunter2@10.96.0.1:443/", "n", 60s, getenv);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->api_url, "https://10.96.0.1:443") << "what daemon and check print";
  EXPECT_EQ(s->api_userinfo, "admin:hunter2");
  // A query is no part of a base address, and where a token would hide.
  auto query = resolve_kube_settings("https://10.96.0.1:443/?access_token=hunter2", "n", 60s, getenv);
  ASSERT_FALSE(query);
  EXPECT_EQ(query.error().message.find("hunter2"), std::string::npos) << query.error().message;
  EXPECT_NE(query.error().message.find("https://10.96.0.1:443/"), std::string::npos);
  auto bad = resolve_kube_settings("ftp://admin:hunter2@10.96.0.1", "n", 60s, getenv);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--kube-api: 'ftp://10.96.0.1' is not an http(s) URL (e.g. https://10.96.0.1:443, or "
            "none)");
  // A loopback check sees the host, not user info dressed as one.
  EXPECT_FALSE(resolve_kube_settings("http://127.0.0.1@evil.example:80", "n", 60s, getenv)
                   ->send_token);
}

TEST(KubeMetadata, AnErrorBodyIsLoggedEscapedCutAndRedacted) {
  const std::string body = "{\"kind\":\"Status\",\"message\":\"token sekrit-token-value rejected\","
                           "\"token\":\"abc123xyz\",\"note\":\"\x1b[31mred\x1b[0m\"," +
                           std::string(400, 'A') + "}";
  ScriptedServer server({status(401, body)});
  TokenFile token("sekrit-token-value");
  KubeSettings s = settings_for(server, token);
  s.api_userinfo = "admin:hunter2";
  std::string log;
  {
    StderrCapture capture;
    {
      KubeMetadata kube(s);
      ASSERT_TRUE(kube.wait_for_lists(1, 10s));
    }
    log = capture.text();
  }
  ASSERT_TRUE(server.wait_requests(1));
  EXPECT_EQ(server.requests()[0].path.find("hunter2"), std::string::npos);
  EXPECT_NE(log.find("HTTP 401"), std::string::npos) << log;
  EXPECT_NE(log.find("from http://127.0.0.1:"), std::string::npos) << log;
  for (const char* secret : {"sekrit-token-value", "abc123xyz", "hunter2", "\x1b"}) {
    EXPECT_EQ(log.find(secret), std::string::npos) << secret << " in: " << log;
  }
  EXPECT_NE(log.find("\"token\":\"<redacted>\""), std::string::npos) << log;
  EXPECT_NE(log.find("\\x1b[31mred"), std::string::npos) << log;
  EXPECT_EQ(log.find(std::string(300, 'A')), std::string::npos) << "cut to 200 bytes";
}

}  // namespace
}  // namespace stallwatch::identity
