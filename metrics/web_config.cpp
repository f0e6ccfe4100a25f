#include "metrics/web_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/file_trust.h"

namespace stallwatch::metrics {
namespace {

constexpr std::size_t kMaxConfigBytes = 1 << 20;

std::string resolve(const std::string& dir, const std::string& file) {
  if (file.empty() || file[0] == '/' || dir.empty()) return file;
  return dir + "/" + file;
}

Result<std::string> scalar(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) return make_error(where + ": expected a string");
  return n.as<std::string>();
}

bool valid_header_text(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
}

Result<ClientAuth> parse_client_auth(const std::string& s) {
  static const std::pair<const char*, ClientAuth> kTypes[] = {
      {"NoClientCert", ClientAuth::kNone},
      {"RequestClientCert", ClientAuth::kRequest},
      {"RequireAnyClientCert", ClientAuth::kRequireAny},
      {"VerifyClientCertIfGiven", ClientAuth::kVerifyIfGiven},
      {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerify}};
  for (const auto& [name, type] : kTypes) {
    if (s == name) return type;
  }
  return make_error("tls_server_config.client_auth_type: unknown type '" + s +
                    "' (NoClientCert, RequestClientCert, RequireAnyClientCert, "
                    "VerifyClientCertIfGiven or RequireAndVerifyClientCert)");
}

bool valid_tls_version(const std::string& v) {
  return v == "TLS10" || v == "TLS11" || v == "TLS12" || v == "TLS13";
}

Result<Ok> parse_tls(const YAML::Node& tls, const std::string& dir, WebConfig& c) {
  if (!tls.IsMap()) return make_error("tls_server_config: expected a mapping");
  for (const auto& kv : tls) {
    const std::string key = kv.first.as<std::string>();
    const std::string where = "tls_server_config." + key;
    if (key == "cipher_suites" || key == "curve_preferences" || key == "client_allowed_sans" ||
        key == "cert" || key == "key" || key == "client_ca") {
      return make_error(where + " is not supported by stallwatch (it uses GnuTLS's defaults "
                        "and PEM files); remove it");
    }
    if (key == "prefer_server_cipher_suites") continue;  // GnuTLS servers prefer their own
    auto v = scalar(kv.second, where);
    if (!v) return v.error();
    if (key == "cert_file") {
      c.cert_file = resolve(dir, *v);
    } else if (key == "key_file") {
      c.key_file = resolve(dir, *v);
    } else if (key == "client_ca_file") {
      c.client_ca_file = resolve(dir, *v);
    } else if (key == "client_auth_type") {
      auto a = parse_client_auth(*v);
      if (!a) return a.error();
      c.client_auth = *a;
    } else if (key == "min_version" || key == "max_version") {
      if (!valid_tls_version(*v)) {
        return make_error(where + ": '" + *v + "' is not TLS10, TLS11, TLS12 or TLS13");
      }
      (key == "min_version" ? c.min_version : c.max_version) = *v;
    } else {
      return make_error("tls_server_config: unknown key '" + key + "'");
    }
  }
  if (c.cert_file.empty() != c.key_file.empty() || c.cert_file.empty()) {
    return make_error("tls_server_config needs both cert_file and key_file");
  }
  if (c.client_auth != ClientAuth::kNone && c.client_ca_file.empty()) {
    return make_error("tls_server_config.client_auth_type needs client_ca_file in stallwatch "
                      "(the CA that signed the scrapers' certificates)");
  }
  if (c.min_version > c.max_version) {
    return make_error("tls_server_config: min_version is above max_version");
  }
  c.tls = true;
  return Ok{};
}

}  // namespace

std::string WebConfig::tls_priorities() const {
  static const char* kNames[] = {"TLS10", "TLS11", "TLS12", "TLS13"};
  static const char* kGnutls[] = {"VERS-TLS1.0", "VERS-TLS1.1", "VERS-TLS1.2", "VERS-TLS1.3"};
  std::string p = "NORMAL:-VERS-ALL";
  for (int i = 0; i < 4; ++i) {
    if (min_version <= kNames[i] && std::string(kNames[i]) <= max_version) {
      p += std::string(":+") + kGnutls[i];
    }
  }
  return p;
}

Result<WebConfig> parse_web_config(std::string_view yaml, const std::string& dir) {
  WebConfig c;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return make_error(std::string("not valid YAML: ") + e.what());
  }
  if (root.IsNull()) return c;  // an empty file: plain HTTP, no users
  if (!root.IsMap()) return make_error("expected a mapping at the top");
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key == "tls_server_config") {
        if (kv.second.IsNull()) continue;
        if (auto r = parse_tls(kv.second, dir, c); !r) return r.error();
      } else if (key == "basic_auth_users") {
        if (kv.second.IsNull()) continue;
        if (!kv.second.IsMap()) return make_error("basic_auth_users: expected user: hash lines");
        for (const auto& u : kv.second) {
          const std::string user = u.first.as<std::string>();
          auto hash = scalar(u.second, "basic_auth_users." + user);
          if (!hash) return hash.error();
          if (user.empty() || user.find(':') != std::string::npos || !valid_header_text(user)) {
            return make_error("basic_auth_users: user names must be non-empty, without ':' or "
                              "control characters");
          }
          if (!(hash->starts_with("$2a$") || hash->starts_with("$2b$") ||
                hash->starts_with("$2y$")) ||
              hash->size() != 60) {
            return make_error("basic_auth_users." + user +
                              ": expected a bcrypt hash ($2y$...; make one with "
                              "`htpasswd -nBC 10 \"\" | tr -d ':\\n'`)");
          }
          c.users[user] = *hash;
        }
      } else if (key == "http_server_config") {
        if (kv.second.IsNull()) continue;
        if (!kv.second.IsMap()) return make_error("http_server_config: expected a mapping");
        for (const auto& h : kv.second) {
          const std::string k = h.first.as<std::string>();
          if (k == "http2") continue;  // HTTP/1.1 only; Prometheus scrapes over HTTP/1.1
          if (k != "headers") return make_error("http_server_config: unknown key '" + k + "'");
          if (!h.second.IsMap()) return make_error("http_server_config.headers: expected a mapping");
          for (const auto& hv : h.second) {
            const std::string name = hv.first.as<std::string>();
            auto value = scalar(hv.second, "http_server_config.headers." + name);
            if (!value) return value.error();
            if (name.empty() || name.find(':') != std::string::npos ||
                name.find(' ') != std::string::npos || !valid_header_text(name) ||
                !valid_header_text(*value)) {
              return make_error("http_server_config.headers: '" + name +
                                "' is not a valid header");
            }
            c.headers.emplace_back(name, *value);
          }
        }
      } else {
        return make_error("unknown key '" + key +
                          "' (tls_server_config, http_server_config, basic_auth_users)");
      }
    }
  } catch (const YAML::Exception& e) {
    return make_error(std::string("unexpected structure: ") + e.what());
  }
  return c;
}

Result<std::string> read_small_file(const std::string& path, std::size_t max) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return make_error("cannot read " + path + ": " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(path + " is not a regular file");
  }
  if (static_cast<std::size_t>(st.st_size) > max) {
    ::close(fd);
    return make_error(path + " is larger than " + std::to_string(max >> 10) + " KiB");
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Result<WebConfig> load_web_config(const std::string& path) {
  // It decides who may read /metrics and with which keys: only root (or the user running
  // this) may be able to change it, checked on the descriptor that is read.
  auto fd = open_trusted_file(path, "--web.config.file " + path,
                              "it decides who may scrape stallwatch");
  if (!fd) return make_error(fd.error().message);
  auto text = read_small_file("/proc/self/fd/" + std::to_string(*fd), kMaxConfigBytes);
  ::close(*fd);
  if (!text) return make_error("--web.config.file: " + text.error().message);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  auto c = parse_web_config(*text, dir.empty() ? "." : dir);
  if (!c) return make_error("--web.config.file " + path + ": " + c.error().message);
  return c;
}

}  // namespace stallwatch::metrics
