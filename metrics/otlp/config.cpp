#include "metrics/otlp/config.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/duration.h"
#include "common/log.h"
#include "common/redact.h"
#include "common/size.h"
#include "common/strings.h"
#include "metrics/otlp/headers_file.h"

namespace stallwatch::otlp {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() &&
        std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// An environment variable, trimmed; empty when unset (the spec treats empty as unset).
std::string env(const Getenv& getenv, const char* name) {
  const char* v = getenv(name);
  return v ? std::string(trim(v)) : std::string();
}

bool is_http_url(const std::string& url) {
  return url.starts_with("http://") || url.starts_with("https://");
}

Error bad_url(const std::string& source, const std::string& url) {
  return make_error(source + " " + redact_url(url) +
                    ": expected an http:// or https:// URL, e.g. http://127.0.0.1:4318");
}

// Base endpoint + signal path: the spec's rule for OTEL_EXPORTER_OTLP_ENDPOINT.
std::string signal_url(std::string base, std::string_view path) {
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + std::string(path);
}

Result<std::chrono::milliseconds> env_millis(const Getenv& getenv, const char* name) {
  const std::string v = env(getenv, name);
  std::uint64_t ms = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  // At most a day: larger values overflowed the conversion to nanoseconds (issue #15).
  constexpr std::uint64_t kMaxMs = 86'400'000;
  if (ec != std::errc() || end != v.data() + v.size() || ms == 0 || ms > kMaxMs) {
    return make_error(std::string(name) + "=" + v +
                      ": expected a whole number of milliseconds from 1 to 86400000 (1 day)");
  }
  return std::chrono::milliseconds(ms);
}

// Later lists override earlier ones key by key (case-insensitive, as HTTP header names are).
void merge(Headers& into, const Headers& from) {
  for (const auto& [k, v] : from) {
    const std::string key = lower(k);  // clang 14 cannot capture a structured binding
    auto it = std::find_if(into.begin(), into.end(),
                           [&](const auto& kv) { return lower(kv.first) == key; });
    if (it != into.end()) {
      it->second = v;
    } else {
      into.emplace_back(k, v);
    }
  }
}

}  // namespace

std::string redact_url(const std::string& url) { return stallwatch::redact_url(url); }

std::vector<std::string> secret_headers_on_command_line(const std::vector<std::string>& headers,
                                                        const std::vector<std::string>& argv) {
  std::vector<std::string> names;
  for (const auto& h : headers) {
    const std::string name(trim(std::string_view(h).substr(0, h.find('='))));
    if (!looks_secret(name)) continue;
    const bool given = std::any_of(argv.begin(), argv.end(), [&](const std::string& a) {
      return a == h || a.ends_with("=" + h);  // --otlp-header K=V, --otlp-header=K=V
    });
    if (given && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
    }
  }
  return names;
}

Result<Headers> parse_key_value_list(const std::string& text, const std::string& what) {
  Headers out;
  size_t start = 0, item = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string part(trim(std::string_view(text).substr(start, comma - start)));
    ++item;
    start = comma + 1;
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string::npos || trim(part.substr(0, eq)).empty()) {
      return make_error(what + ": item " + std::to_string(item) +
                        " is not key=value (expected k1=v1,k2=v2)");
    }
    out.emplace_back(percent_decode(trim(part.substr(0, eq))),
                     percent_decode(trim(part.substr(eq + 1))));
  }
  return out;
}

const std::vector<PushFlagInfo>& push_flag_infos() {
  static const std::vector<PushFlagInfo> kFlags = {
      {"otlp-endpoint",
       "push OTLP/HTTP (protobuf) to URL: /v1/metrics and /v1/logs are appended (a URL ending "
       "in /v1/metrics is used as is); default $OTEL_EXPORTER_OTLP_ENDPOINT, off without it"},
      {"otlp-logs-endpoint", "where chain log records go (default: beside the metrics; none: off)"},
      {"otlp-header", "KEY=VALUE header on every request, e.g. x-scope-orgid=ml; repeatable "
                      "(adds to $OTEL_EXPORTER_OTLP_HEADERS). Not for API keys: every local "
                      "user can read the command line; use --otlp-headers-file", true},
      {"otlp-headers-file", "file of headers for every request, one name=value a line (# "
                            "comments), e.g. dd-api-key=<key>: where credentials go; owned by "
                            "root or this user, not writable by group or others"},
      {"otlp-temporality", "cumulative, delta or lowmemory (= delta here) (default cumulative; "
                           "Datadog wants delta)"},
      {"otlp-histogram", "explicit (Prometheus' buckets) or exponential (base-2, scale 0) "
                         "(default explicit)"},
      {"otlp-interval", "time between pushes (default 15s)"},
      {"otlp-compression", "gzip or none (default gzip)"},
      {"otlp-timeout", "per request (default 10s)"},
      {"otlp-max-retry-time", "give a request up after retrying this long (default 2m)"},
      {"otlp-max-queue", "requests waiting to be sent, uncompressed, at most: oldest dropped "
                         "past it (default 32MiB)"},
      {"otlp-certificate", "PEM file of the CA that verifies an https receiver (default: the "
                           "system's; $OTEL_EXPORTER_OTLP_CERTIFICATE)"},
      {"otlp-client-certificate", "PEM file of our certificate for mutual TLS "
                                  "($OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE)"},
      {"otlp-client-key", "PEM file of its private key ($OTEL_EXPORTER_OTLP_CLIENT_KEY)"},
  };
  return kFlags;
}

Result<Ok> set_push_flag(PushFlags& flags, const std::string& name, const std::string& value) {
  auto duration = [&](std::optional<std::chrono::nanoseconds>& into) -> Result<Ok> {
    auto d = parse_duration(value);
    if (!d) return make_error("--" + name + ": " + d.error().message);
    if (d->count() <= 0) return make_error("--" + name + " must be greater than 0");
    into = *d;
    return Ok{};
  };
  if (name == "otlp-endpoint") {
    flags.endpoint = value;
  } else if (name == "otlp-logs-endpoint") {
    flags.logs_endpoint = value;
  } else if (name == "otlp-header") {
    flags.headers.push_back(value);
  } else if (name == "otlp-headers-file") {
    flags.headers_file = value;
  } else if (name == "otlp-temporality") {
    flags.temporality = value;
  } else if (name == "otlp-histogram") {
    flags.histogram = value;
  } else if (name == "otlp-compression") {
    flags.compression = value;
  } else if (name == "otlp-interval") {
    return duration(flags.interval);
  } else if (name == "otlp-timeout") {
    return duration(flags.timeout);
  } else if (name == "otlp-max-retry-time") {
    return duration(flags.max_retry_time);
  } else if (name == "otlp-certificate") {
    flags.certificate = value;
  } else if (name == "otlp-client-certificate") {
    flags.client_certificate = value;
  } else if (name == "otlp-client-key") {
    flags.client_key = value;
  } else if (name == "otlp-max-queue") {
    auto size = parse_size(value);
    if (!size) return make_error("--otlp-max-queue: " + size.error().message);
    flags.max_queue = *size;
  } else {
    return make_error("unknown option --" + name);
  }
  return Ok{};
}

Result<PushConfig> resolve_push_config(const PushFlags& flags, const Getenv& getenv,
                                       const std::string& host_name, const std::string& version) {
  return resolve_push_config(flags, PushFlags{}, getenv, host_name, version);
}

Result<PushConfig> resolve_push_config(const PushFlags& given, const PushFlags& file,
                                       const Getenv& getenv, const std::string& host_name,
                                       const std::string& version) {
  // The config file fills each setting that neither a flag nor its OTEL_* variables set.
  PushFlags flags = given;
  auto env_unset = [&](std::initializer_list<const char*> vars) {
    return std::all_of(vars.begin(), vars.end(),
                       [&](const char* var) { return env(getenv, var).empty(); });
  };
  bool endpoint_from_file = false;
  if (flags.endpoint.empty() && !file.endpoint.empty() &&
      env_unset({"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"})) {
    flags.endpoint = file.endpoint;
    endpoint_from_file = true;
  }
  if (flags.logs_endpoint.empty() && env_unset({"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"})) {
    flags.logs_endpoint = file.logs_endpoint;
  }
  if (flags.temporality.empty() &&
      env_unset({"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"})) {
    flags.temporality = file.temporality;
  }
  if (flags.histogram.empty() &&
      env_unset({"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"})) {
    flags.histogram = file.histogram;
  }
  if (flags.compression.empty() &&
      env_unset({"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"})) {
    flags.compression = file.compression;
  }
  if (!flags.interval && env_unset({"OTEL_METRIC_EXPORT_INTERVAL"})) flags.interval = file.interval;
  if (!flags.timeout &&
      env_unset({"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"})) {
    flags.timeout = file.timeout;
  }
  if (!flags.max_retry_time) flags.max_retry_time = file.max_retry_time;
  if (!flags.max_queue) flags.max_queue = file.max_queue;

  PushConfig c;
  if (const std::string protocol = lower(env(getenv, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL").empty()
                                             ? env(getenv, "OTEL_EXPORTER_OTLP_PROTOCOL")
                                             : env(getenv, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"));
      !protocol.empty() && protocol != "http/protobuf") {
    return make_error("OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol +
                      ": stallwatch sends OTLP/HTTP with protobuf only; unset it or set "
                      "http/protobuf (receivers listen for it on port 4318)");
  }

  // Endpoints: the flag, else the signal-specific variable as is, else the base variable.
  const std::string base_env = env(getenv, "OTEL_EXPORTER_OTLP_ENDPOINT");
  if (!flags.endpoint.empty()) {
    if (!is_http_url(flags.endpoint)) return bad_url("--otlp-endpoint", flags.endpoint);
    if (flags.endpoint.ends_with("/v1/metrics")) {
      c.delivery.metrics_url = flags.endpoint;
      c.delivery.logs_url =
          flags.endpoint.substr(0, flags.endpoint.size() - std::string("/metrics").size()) + "/logs";
    } else {
      c.delivery.metrics_url = signal_url(flags.endpoint, "/v1/metrics");
      c.delivery.logs_url = signal_url(flags.endpoint, "/v1/logs");
    }
    // The file's endpoint is below OTEL_*: the logs variable still wins for the logs.
    if (std::string l = env(getenv, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT");
        endpoint_from_file && !l.empty()) {
      if (!is_http_url(l)) return bad_url("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", l);
      c.delivery.logs_url = l;
    }
  } else {
    if (!base_env.empty()) {
      if (!is_http_url(base_env)) return bad_url("OTEL_EXPORTER_OTLP_ENDPOINT", base_env);
      c.delivery.metrics_url = signal_url(base_env, "/v1/metrics");
      c.delivery.logs_url = signal_url(base_env, "/v1/logs");
    }
    if (std::string m = env(getenv, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"); !m.empty()) {
      if (!is_http_url(m)) return bad_url("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", m);
      c.delivery.metrics_url = m;
    }
    if (std::string l = env(getenv, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"); !l.empty()) {
      if (!is_http_url(l)) return bad_url("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", l);
      c.delivery.logs_url = l;
    }
  }
  if (!flags.logs_endpoint.empty()) {
    if (flags.logs_endpoint == "none") {
      c.delivery.logs_url.clear();
    } else if (!is_http_url(flags.logs_endpoint)) {
      return bad_url("--otlp-logs-endpoint", flags.logs_endpoint);
    } else {
      c.delivery.logs_url = flags.logs_endpoint;
    }
  }
  c.enabled = !c.delivery.metrics_url.empty();
  if (!c.enabled) {
    // Logs alone are not a configuration anyone means; say what is missing.
    if (!flags.logs_endpoint.empty() && flags.logs_endpoint != "none") {
      return make_error("--otlp-logs-endpoint needs --otlp-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT)");
    }
    return c;
  }

  // Headers: all signals, then the signal's own, then the flags.
  Headers common, metrics, logs, flag_headers, file_headers;
  for (const auto& [var, into] : {std::pair{"OTEL_EXPORTER_OTLP_HEADERS", &common},
                                  std::pair{"OTEL_EXPORTER_OTLP_METRICS_HEADERS", &metrics},
                                  std::pair{"OTEL_EXPORTER_OTLP_LOGS_HEADERS", &logs}}) {
    auto parsed = parse_key_value_list(env(getenv, var), var);
    if (!parsed) return parsed.error();
    *into = *parsed;
  }
  auto parse_flag_headers = [](const std::vector<std::string>& list, Headers& into,
                               const char* where) -> Result<Ok> {
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string& h = list[i];
      const size_t eq = h.find('=');
      if (eq == std::string::npos || trim(h.substr(0, eq)).empty()) {
        return make_error("--otlp-header number " + std::to_string(i + 1) + where +
                          " is not KEY=VALUE (e.g. --otlp-header x-scope-orgid=ml; API keys go "
                          "in --otlp-headers-file)");
      }
      into.emplace_back(trim(h.substr(0, eq)), trim(h.substr(eq + 1)));
    }
    return Ok{};
  };
  // A layer's headers file first, then its --otlp-header values (they name one header each).
  if (!given.headers_file.empty()) {
    auto h = read_headers_file(given.headers_file, "--otlp-headers-file");
    if (!h) return h.error();
    merge(flag_headers, *h);
  }
  if (!file.headers_file.empty()) {
    auto h = read_headers_file(file.headers_file, "the config file's otlp-headers-file");
    if (!h) return h.error();
    merge(file_headers, *h);
  }
  if (auto r = parse_flag_headers(flags.headers, flag_headers, ""); !r) return r.error();
  if (auto r = parse_flag_headers(file.headers, file_headers, " in the config file"); !r) {
    return r.error();
  }
  c.delivery.headers = file_headers;
  merge(c.delivery.headers, common);
  merge(c.delivery.headers, metrics);
  merge(c.delivery.headers, flag_headers);
  c.logs_headers = file_headers;
  merge(c.logs_headers, common);
  merge(c.logs_headers, logs);
  merge(c.logs_headers, flag_headers);

  // Temporality and histogram format.
  std::string temporality = flags.temporality;
  std::string temporality_source = "--otlp-temporality";
  if (temporality.empty()) {
    temporality = env(getenv, "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE");
    temporality_source = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
  }
  if (const std::string t = lower(temporality); t.empty() || t == "cumulative") {
    c.temporality = Temporality::kCumulative;
  } else if (t == "delta") {
    c.temporality = Temporality::kDelta;
  } else if (t == "lowmemory") {
    c.temporality = Temporality::kLowMemory;
  } else {
    return make_error(temporality_source + " " + temporality +
                      ": expected cumulative, delta or lowmemory");
  }
  std::string histogram = flags.histogram;
  std::string histogram_source = "--otlp-histogram";
  if (histogram.empty()) {
    histogram = env(getenv, "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION");
    histogram_source = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION";
  }
  if (const std::string h = lower(histogram);
      h.empty() || h == "explicit" || h == "explicit_bucket_histogram") {
    c.histogram = HistogramFormat::kExplicit;
  } else if (h == "exponential" || h == "base2_exponential_bucket_histogram") {
    c.histogram = HistogramFormat::kExponential;
  } else {
    return make_error(histogram_source + " " + histogram + ": expected explicit or exponential");
  }

  // Compression.
  std::string compression = flags.compression;
  if (compression.empty()) compression = env(getenv, "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION");
  if (compression.empty()) compression = env(getenv, "OTEL_EXPORTER_OTLP_COMPRESSION");
  if (const std::string z = lower(compression); z.empty() || z == "gzip") {
    c.delivery.gzip = true;
  } else if (z == "none") {
    c.delivery.gzip = false;
  } else {
    return make_error("OTLP compression " + compression + ": expected gzip or none");
  }

  // Times and sizes.
  if (flags.interval) {
    c.interval = *flags.interval;
  } else if (!env(getenv, "OTEL_METRIC_EXPORT_INTERVAL").empty()) {
    auto ms = env_millis(getenv, "OTEL_METRIC_EXPORT_INTERVAL");
    if (!ms) return ms.error();
    c.interval = *ms;
  }
  if (c.interval < std::chrono::milliseconds(100) || c.interval > std::chrono::hours(24)) {
    return make_error("OTLP export interval " + format_duration(c.interval) +
                      ": must be 100ms to 1d (default 15s)");
  }
  if (flags.timeout) {
    c.delivery.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*flags.timeout);
  } else {
    for (const char* var : {"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"}) {
      if (env(getenv, var).empty()) continue;
      auto ms = env_millis(getenv, var);
      if (!ms) return ms.error();
      c.delivery.timeout = *ms;
      break;
    }
  }
  if (c.delivery.timeout < std::chrono::milliseconds(100) ||
      c.delivery.timeout > std::chrono::hours(1)) {
    return make_error("OTLP timeout " + format_duration(c.delivery.timeout) +
                      ": must be 100ms to 1h (default 10s)");
  }
  if (flags.max_retry_time) {
    c.delivery.max_retry_time =
        std::chrono::duration_cast<std::chrono::milliseconds>(*flags.max_retry_time);
  }
  if (flags.max_queue) {
    if (*flags.max_queue < (64u << 10)) {
      return make_error("--otlp-max-queue " + format_size(*flags.max_queue) +
                        ": must be at least 64KiB (one export request can be 500 KB)");
    }
    c.delivery.max_queue_bytes = *flags.max_queue;
  }
  c.delivery.user_agent = "stallwatch/" + version;

  // TLS files, per signal: the flag, else OTEL_EXPORTER_OTLP_<SIGNAL>_<X>, else
  // OTEL_EXPORTER_OTLP_<X>, else the config file's flag.
  for (auto [signal, into] : {std::pair{"METRICS", &c.delivery.tls},
                              std::pair{"LOGS", &c.delivery.logs_tls}}) {
    struct Field {
      const std::string* flag;
      const std::string* file_flag;
      const char* name;
      const char* flag_name;
      std::string* out;
    } fields[] = {
        {&flags.certificate, &file.certificate, "CERTIFICATE", "--otlp-certificate",
         &into->certificate},
        {&flags.client_certificate, &file.client_certificate, "CLIENT_CERTIFICATE",
         "--otlp-client-certificate", &into->client_certificate},
        {&flags.client_key, &file.client_key, "CLIENT_KEY", "--otlp-client-key",
         &into->client_key},
    };
    for (const Field& f : fields) {
      const std::string per_signal = std::string("OTEL_EXPORTER_OTLP_") + signal + "_" + f.name;
      const std::string common_var = std::string("OTEL_EXPORTER_OTLP_") + f.name;
      std::string source = f.flag_name;
      std::string value = *f.flag;
      if (value.empty() && !env(getenv, per_signal.c_str()).empty()) {
        value = env(getenv, per_signal.c_str());
        source = per_signal;
      } else if (value.empty() && !env(getenv, common_var.c_str()).empty()) {
        value = env(getenv, common_var.c_str());
        source = common_var;
      } else if (value.empty()) {
        value = *f.file_flag;
      }
      if (value.empty()) continue;
      // Read once now, so a wrong path is one line at start and not a failing push later.
      std::error_code ec;
      if (!std::filesystem::is_regular_file(value, ec) || access(value.c_str(), R_OK) != 0) {
        return make_error(source + " " + value +
                          ": not a readable file (a PEM certificate or key)");
      }
      *f.out = value;
    }
    if (into->client_certificate.empty() != into->client_key.empty()) {
      return make_error(std::string("OTLP mutual TLS for ") + (signal[0] == 'M' ? "metrics" : "logs") +
                        " needs both a client certificate and its key (--otlp-client-certificate "
                        "and --otlp-client-key, or OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and "
                        "OTEL_EXPORTER_OTLP_CLIENT_KEY)");
    }
  }

  // Resource: host.name, service.name, service.version, then OTEL_RESOURCE_ATTRIBUTES (they
  // may override host.name), then OTEL_SERVICE_NAME over any service.name.
  c.resource.attributes = {{"host.name", host_name},
                           {"service.name", "stallwatch"},
                           {"service.version", version}};
  auto extra = parse_key_value_list(env(getenv, "OTEL_RESOURCE_ATTRIBUTES"),
                                    "OTEL_RESOURCE_ATTRIBUTES");
  if (!extra) return extra.error();
  merge(c.resource.attributes, *extra);
  if (std::string name = env(getenv, "OTEL_SERVICE_NAME"); !name.empty()) {
    merge(c.resource.attributes, {{"service.name", name}});
  }
  return c;
}

Result<PushConfig> push_config_from_environment(const PushFlags& flags, const std::string& version) {
  return push_config_from_environment(flags, PushFlags{}, version);
}

Result<PushConfig> push_config_from_environment(const PushFlags& flags, const PushFlags& file,
                                                const std::string& version) {
  static std::atomic<bool> warned{false};
  if (!flags.headers.empty() && !warned.exchange(true)) {
    std::vector<std::string> argv;
    std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
    for (std::string arg; std::getline(cmdline, arg, '\0');) argv.push_back(arg);
    for (const auto& name : secret_headers_on_command_line(flags.headers, argv)) {
      SW_LOG(kWarn) << "--otlp-header " << escape_name(name)
                    << "=... is on the command line, which every local user can read "
                       "(/proc/PID/cmdline); move it to --otlp-headers-file FILE (mode 600) or "
                       "OTEL_EXPORTER_OTLP_HEADERS";
    }
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return resolve_push_config(flags, file, [](const char* name) { return std::getenv(name); },
                             host, version);
}

std::string describe(const PushConfig& c) {
  if (!c.enabled) return "off";
  std::string s = redact_url(c.delivery.metrics_url);
  s += c.delivery.logs_url.empty() ? " (chain logs off)" : ", chains to " + redact_url(c.delivery.logs_url);
  s += ", every " + format_duration(c.interval) + ", " + std::string(temporality_name(c.temporality)) +
       ", " + std::string(histogram_format_name(c.histogram)) + " histograms";
  s += c.delivery.gzip ? ", gzip" : ", uncompressed";
  if (!c.delivery.headers.empty()) {
    s += ", headers:";
    for (const auto& [k, v] : c.delivery.headers) s += " " + k;
  }
  return s;
}

}  // namespace stallwatch::otlp
