// Where and how to push OTLP: the --otlp-* flags merged with the standard OTEL_* environment
// variables (flags win), validated into one PushConfig. Pure apart from the environment lookup,
// which the caller passes in (tests use a map).
// Secrets: header values and URL credentials stay in PushConfig for the transport only;
// describe() and every error message name header keys, never values. Credentials belong in
// --otlp-headers-file (metrics/otlp/headers_file.h) or OTEL_EXPORTER_OTLP_HEADERS, not in
// --otlp-header on the command line: push_config_from_environment warns once when a
// secret-looking header is there.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "metrics/otlp/delivery.h"
#include "metrics/otlp/encoding.h"

namespace stallwatch::otlp {

// The flags as given; empty or nullopt = not given.
struct PushFlags {
  std::string endpoint;               // --otlp-endpoint URL (base, like OTEL_EXPORTER_OTLP_ENDPOINT)
  std::string logs_endpoint;          // --otlp-logs-endpoint URL|none
  std::vector<std::string> headers;   // --otlp-header K=V (repeatable)
  std::string headers_file;           // --otlp-headers-file PATH (name=value lines; secrets)
  std::string temporality;            // --otlp-temporality cumulative|delta|lowmemory
  std::string histogram;              // --otlp-histogram explicit|exponential
  std::string compression;            // --otlp-compression gzip|none
  std::optional<std::chrono::nanoseconds> interval;        // --otlp-interval
  std::optional<std::chrono::nanoseconds> timeout;         // --otlp-timeout
  std::optional<std::chrono::nanoseconds> max_retry_time;  // --otlp-max-retry-time
  std::optional<std::uint64_t> max_queue;                  // --otlp-max-queue
  std::string certificate;         // --otlp-certificate PEM (CA that verifies the receiver)
  std::string client_certificate;  // --otlp-client-certificate PEM (mutual TLS)
  std::string client_key;          // --otlp-client-key PEM
  bool operator==(const PushFlags&) const = default;
};

// The --otlp-* flags of `run` and `demo`: name (without --), value name, help.
struct PushFlagInfo {
  const char* name;
  const char* help;
  bool repeatable = false;
};
const std::vector<PushFlagInfo>& push_flag_infos();

// Sets one flag from its text; the error names the flag and what it accepts.
Result<Ok> set_push_flag(PushFlags& flags, const std::string& name, const std::string& value);

struct PushConfig {
  bool enabled = false;  // an endpoint came from a flag or the environment
  DeliveryOptions delivery;  // headers: those of the metrics requests
  Headers logs_headers;      // those of the logs requests
  Temporality temporality = Temporality::kCumulative;
  HistogramFormat histogram = HistogramFormat::kExplicit;
  std::chrono::nanoseconds interval = std::chrono::seconds(15);
  ResourceSettings resource;
  bool per_call = false;  // --metrics.calls call: one series per CUDA call, not per class
};

using Getenv = std::function<const char*(const char*)>;

// `host_name` and `version` seed host.name and service.version. Errors name the flag or
// variable and what would be accepted.
Result<PushConfig> resolve_push_config(const PushFlags& flags, const Getenv& getenv,
                                       const std::string& host_name, const std::string& version);

// The same with a lower layer: `file` (the --otlp-* settings of run's --config file) sets what
// neither a flag nor an OTEL_* variable sets; its headers come first, so OTEL_* and flag headers
// override them key by key. Precedence: flag > OTEL_* > file > default.
Result<PushConfig> resolve_push_config(const PushFlags& flags, const PushFlags& file,
                                       const Getenv& getenv, const std::string& host_name,
                                       const std::string& version);

// resolve_push_config with this process's environment and host name.
Result<PushConfig> push_config_from_environment(const PushFlags& flags, const std::string& version);
Result<PushConfig> push_config_from_environment(const PushFlags& flags, const PushFlags& file,
                                                const std::string& version);

// One line for the log and `check`: URLs without credentials or query, header keys only.
std::string describe(const PushConfig& c);

// scheme://host[:port]/path of a URL: no user:password@, no ?query (it may carry a key).
// (common/redact.h, here for the OTLP callers.)
std::string redact_url(const std::string& url);

// The names of the `headers` (--otlp-header K=V values) that look like credentials
// (common/redact.h looks_secret) and were given on the command line `argv`, which every local
// user can read in /proc/PID/cmdline; push_config_from_environment warns once about them.
std::vector<std::string> secret_headers_on_command_line(const std::vector<std::string>& headers,
                                                        const std::vector<std::string>& argv);

// The W3C-baggage-like lists of OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES:
// `k1=v1,k2=v2`, blanks around items trimmed, values percent-decoded. An item without '=' or
// with an empty key is an error naming the item's position (never its value).
Result<Headers> parse_key_value_list(const std::string& text, const std::string& what);

}  // namespace stallwatch::otlp
