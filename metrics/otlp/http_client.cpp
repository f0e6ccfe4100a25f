#include "metrics/otlp/http_client.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "common/redact.h"

namespace stallwatch::otlp {
namespace {

constexpr size_t kMaxResponseBytes = 64 << 10;  // enough to explain a failure or a partial success
constexpr size_t kMaxLoggedBody = 512;

bool iequals_prefix(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); ++i) {
    const char c = s[i];
    if ((c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c) != lower_prefix[i]) return false;
  }
  return true;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const size_t len = size * n;
  r->body.append(data, std::min(len, kMaxResponseBytes - r->body.size()));
  return len;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    r->retry_after.clear();  // a new response (after a 100 Continue): only its headers count
  } else if (iequals_prefix(line, "retry-after:")) {
    r->retry_after = line.substr(12);  // parse_retry_after() trims blanks and the CRLF
  }
  return size * n;
}

// Lets a request in flight end as soon as the destructor asks the sender to stop.
int on_progress(void* stopping, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(stopping)->load() ? 1 : 0;
}

std::string no_crlf(std::string s) {
  std::erase_if(s, [](char c) { return c == '\r' || c == '\n'; });
  return s;
}

}  // namespace

void HttpClient::global_init() {
  static std::once_flag curl_once;
  std::call_once(curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

SlistPtr header_list(const Headers& extra, bool gzip) {
  curl_slist* list = nullptr;
  auto add = [&list](const std::string& h) {
    if (curl_slist* l = curl_slist_append(list, h.c_str())) list = l;
  };
  add("Content-Type: application/x-protobuf");
  if (gzip) add("Content-Encoding: gzip");
  // curl 7.x sends "Expect: 100-continue" with bodies over 1 KiB and then waits up to a second
  // for an interim answer that OTLP receivers have no reason to give.
  add("Expect:");
  for (const auto& [name, value] : extra) {
    // "Name;" is curl's spelling of a header with an empty value ("Name:" would remove it).
    add(value.empty() ? no_crlf(name) + ";" : no_crlf(name) + ": " + no_crlf(value));
  }
  return SlistPtr(list);
}

HttpClient::HttpClient(const DeliveryOptions& o, const std::atomic<bool>* stopping,
                       const TlsFiles& tls)
    : curl_(curl_easy_init()) {
  CURL* c = curl_.get();
  if (!c) return;
  if (!tls.certificate.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, tls.certificate.c_str());
  if (!tls.client_certificate.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, tls.client_certificate.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, tls.client_key.c_str());
  }
  const long timeout = std::max<long>(1, static_cast<long>(o.timeout.count()));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout);
  curl_easy_setopt(c, CURLOPT_USERAGENT, o.user_agent.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(c, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, stopping);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
}

Response HttpClient::post(const std::string& url, const curl_slist* headers,
                          const std::string& body) {
  Response r;
  CURL* c = curl_.get();
  if (!c) {
    r.code = CURLE_FAILED_INIT;
    r.error = "curl_easy_init failed";
    return r;
  }
  char errbuf[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  r.code = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  if (r.code != CURLE_OK) r.error = errbuf[0] ? errbuf : curl_easy_strerror(r.code);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, nullptr);  // errbuf is about to go away
  return r;
}

const char* failure_reason(const Response& r) {
  if (r.code == CURLE_OPERATION_TIMEDOUT) return "timeout";
  if (r.code != CURLE_OK) return "connection";
  if (r.status >= 200 && r.status < 300) return nullptr;
  if (r.status == 429) return "throttled";
  if (r.status == 502 || r.status == 503 || r.status == 504) return "unavailable";
  if (r.status >= 500) return "server_error";
  return "rejected";  // 4xx, and 1xx/3xx that only a misconfigured endpoint gives
}

bool retryable(const Response& r) {
  return r.code != CURLE_OK || r.status == 429 || r.status == 502 || r.status == 503 ||
         r.status == 504;
}

std::string describe(const Response& r) {
  if (r.code != CURLE_OK) return std::string(failure_reason(r)) + " (" + r.error + ")";
  return "HTTP " + std::to_string(r.status);
}

std::string printable(std::string_view s, const Headers& sent) {
  std::vector<std::string> secrets;
  for (const auto& [name, value] : sent) secrets.push_back(value);
  return redact_text(s, secrets, kMaxLoggedBody);
}

}  // namespace stallwatch::otlp
