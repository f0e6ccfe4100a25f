// The libcurl side of OTLP delivery: one keep-alive easy handle that POSTs a request body and
// returns the receiver's answer (status, a bounded body, Retry-After), the request headers, and
// how an answer counts (failure reason, retryable, log text). Knows nothing of queues or retries.
// Thread-safety: an HttpClient belongs to one thread (the delivery sender); the free functions
// are pure. HttpClient::global_init() must run before the first client is made.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "metrics/otlp/delivery.h"

namespace stallwatch::otlp {

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, CurlDeleter>;

struct Response {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;         // the first 64 KiB
  std::string retry_after;  // the raw header value of the final response (parse_retry_after)
  std::string error;        // curl's description when code != CURLE_OK
};

// Content-Type, Content-Encoding when gzip, no Expect, then `extra` (CR/LF removed).
SlistPtr header_list(const Headers& extra, bool gzip);

// One easy handle for the sender thread's lifetime, so the connection is kept alive.
class HttpClient {
 public:
  // curl_global_init, once per process.
  static void global_init();

  // A request in flight ends (CURLE_ABORTED_BY_CALLBACK) soon after *stopping turns true.
  HttpClient(const DeliveryOptions& o, const std::atomic<bool>* stopping, const TlsFiles& tls = {});

  Response post(const std::string& url, const curl_slist* headers, const std::string& body);

 private:
  CurlPtr curl_;
};

// The failures-map reason of an attempt; nullptr when it succeeded.
const char* failure_reason(const Response& r);

// Connection errors, timeouts, 429, 502, 503 and 504 are worth another try.
bool retryable(const Response& r);

// "HTTP 503" or "timeout (curl's error)", for a log line.
std::string describe(const Response& r);

// A receiver's answer as one log-safe line (common/redact.h redact_text): the values of the
// headers we sent (`sent`: an API key a receiver echoes back), bearer tokens and secret-looking
// key=value pairs redacted, escaped, at most about 512 bytes.
std::string printable(std::string_view s, const Headers& sent = {});

}  // namespace stallwatch::otlp
