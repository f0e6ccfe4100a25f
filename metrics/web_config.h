// --web.config.file: TLS and basic authentication for the HTTP endpoint, in the format of the
// Prometheus exporter-toolkit (node_exporter, ebpf_exporter), so a Prometheus already set up
// to scrape those scrapes stallwatch unchanged:
//
//   tls_server_config:
//     cert_file: server.crt            # PEM; relative paths are relative to this file
//     key_file: server.key
//     client_auth_type: RequireAndVerifyClientCert   # NoClientCert (default), RequestClientCert,
//                                                    # RequireAnyClientCert, VerifyClientCertIfGiven
//     client_ca_file: ca.crt           # needed by every type but NoClientCert
//     min_version: TLS12               # TLS10..TLS13 (default TLS12); max_version likewise
//   http_server_config:
//     headers: {X-Frame-Options: deny} # extra response headers
//   basic_auth_users:
//     prometheus: $2y$10$...           # bcrypt (htpasswd -nBC 10 ""), checked with crypt(3)
//
// Keys the toolkit has and stallwatch does not implement (cipher_suites, curve_preferences,
// client_allowed_sans, http2) are refused with a line saying so, never silently ignored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace stallwatch::metrics {

enum class ClientAuth { kNone, kRequest, kRequireAny, kVerifyIfGiven, kRequireAndVerify };

struct WebConfig {
  bool tls = false;
  std::string cert_file, key_file, client_ca_file;  // absolute after load_web_config
  ClientAuth client_auth = ClientAuth::kNone;
  std::string min_version = "TLS12", max_version = "TLS13";
  std::map<std::string, std::string> users;  // name -> bcrypt hash
  std::vector<std::pair<std::string, std::string>> headers;

  // The GnuTLS priority string of min/max_version.
  std::string tls_priorities() const;
  bool operator==(const WebConfig&) const = default;
};

// The YAML text of a web config file; relative file names are resolved against `dir`.
Result<WebConfig> parse_web_config(std::string_view yaml, const std::string& dir);
// The file: a regular file of at most 1 MiB, parsed; errors name the file.
Result<WebConfig> load_web_config(const std::string& path);

// A file's contents, bounded (PEM files, the config): regular files only, at most `max` bytes.
Result<std::string> read_small_file(const std::string& path, std::size_t max);

// Basic-auth checking (bcrypt, the cache of good credentials, the throttle of failures) is
// metrics/basic_auth.h.

}  // namespace stallwatch::metrics
