#include "metrics/otlp/delivery.h"

#include <curl/curl.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <new>
#include <random>
#include <set>

#include "common/log.h"

namespace stallwatch::otlp {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kMaxResponseBytes = 64 << 10;  // enough to explain a failure or a partial success
constexpr size_t kMaxLoggedBody = 512;
// Longer than any max_retry_time anyone configures; keeps time arithmetic far from overflow.
constexpr std::int64_t kMaxRetryAfterSeconds = 365LL * 24 * 3600;

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, CurlDeleter>;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

bool iequals_prefix(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); ++i) {
    const char c = s[i];
    if ((c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c) != lower_prefix[i]) return false;
  }
  return true;
}

// The URL as it may appear in a log: no userinfo (credentials), no query (tokens), no fragment.
// Everything up to the last '@' goes, even one in a path: better an odd log line than a leaked
// password that contains a raw '/' or '?'.
std::string loggable_url(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t host = scheme == std::string_view::npos ? 0 : scheme + 3;
  const size_t at = url.rfind('@');
  std::string out(url.substr(0, host));
  out += url.substr(at == std::string_view::npos || at < host ? host : at + 1);
  return out.substr(0, out.find_first_of("?#"));
}

// A receiver's answer as one log-safe line.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, kMaxLoggedBody)) out += (c >= 0x20 && c < 0x7f) ? c : ' ';
  if (s.size() > kMaxLoggedBody) out += "...";
  return out;
}

struct Response {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string retry_after;
  std::string error;  // curl's description when code != CURLE_OK
};

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
    r->retry_after = trim(line.substr(12));
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

// One easy handle for the sender thread's lifetime, so the connection is kept alive.
class HttpClient {
 public:
  HttpClient(const DeliveryOptions& o, const std::atomic<bool>* stopping)
      : curl_(curl_easy_init()) {
    CURL* c = curl_.get();
    if (!c) return;
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

  Response post(const std::string& url, const curl_slist* headers, const std::string& body) {
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

 private:
  CurlPtr curl_;
};

// The failures-map reason of an attempt; nullptr when it succeeded.
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

// --- protobuf, only as much as a partial_success needs --------------------------------------

struct Field {
  std::uint64_t number = 0;
  std::uint32_t wire = 0;
  std::uint64_t varint = 0;
  std::string_view bytes;  // length-delimited fields
};

bool read_varint(std::string_view& in, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) return false;
    const auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

bool take(std::string_view& in, std::uint64_t n, std::string_view* out = nullptr) {
  if (n > in.size()) return false;
  if (out) *out = in.substr(0, n);
  in.remove_prefix(n);
  return true;
}

// One field off the front of `in`; a group (wire types 3/4, proto2 only) is skipped whole.
bool read_field(std::string_view& in, Field& f, int depth = 0) {
  std::uint64_t tag;
  if (!read_varint(in, tag)) return false;
  f.number = tag >> 3;
  f.wire = static_cast<std::uint32_t>(tag & 7);
  if (f.number == 0) return false;
  switch (f.wire) {
    case 0:
      return read_varint(in, f.varint);
    case 1:
      return take(in, 8);
    case 2: {
      std::uint64_t len;
      return read_varint(in, len) && take(in, len, &f.bytes);
    }
    case 3: {
      if (depth > 32) return false;
      for (;;) {
        Field inner;
        if (!read_field(in, inner, depth + 1)) return false;
        if (inner.wire == 4) return inner.number == f.number;
      }
    }
    case 4:
      return depth > 0;  // an end-group tag outside its group is malformed
    case 5:
      return take(in, 4);
    default:
      return false;
  }
}

}  // namespace

const char* signal_name(Signal s) { return s == Signal::kLogs ? "logs" : "metrics"; }

std::string gzip_compress(std::string_view data) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::bad_alloc();  // the only way it fails with these arguments
  }
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  size_t in_left = data.size();
  int rc = Z_OK;
  // zlib counts in 32-bit units; feed and drain in slices so any size works.
  while (rc != Z_STREAM_END) {
    if (zs.total_out == out.size()) out.resize(out.size() * 2);
    const auto in_now = static_cast<uInt>(std::min<size_t>(in_left, UINT_MAX));
    const auto out_now = static_cast<uInt>(std::min<size_t>(out.size() - zs.total_out, UINT_MAX));
    zs.avail_in = in_now;
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
    zs.avail_out = out_now;
    rc = deflate(&zs, in_now == in_left ? Z_FINISH : Z_NO_FLUSH);
    in_left -= in_now - zs.avail_in;
    if (rc == Z_STREAM_ERROR) {
      deflateEnd(&zs);
      throw std::bad_alloc();
    }
  }
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::optional<std::chrono::seconds> parse_retry_after(std::string_view value,
                                                      std::chrono::system_clock::time_point now) {
  using namespace std::chrono;
  value = trim(value);
  if (value.empty()) return std::nullopt;
  auto digits = [](std::string_view s, std::int64_t& out) {
    out = 0;
    if (s.empty()) return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      out = std::min(out * 10 + (c - '0'), kMaxRetryAfterSeconds);
    }
    return true;
  };
  std::int64_t n;
  if (digits(value, n)) return seconds(n);

  // IMF-fixdate, the only HTTP-date senders may generate: "Sun, 06 Nov 1994 08:49:37 GMT".
  if (value.size() != 29 || value.substr(3, 2) != ", " || value[7] != ' ' || value[11] != ' ' ||
      value[16] != ' ' || value[19] != ':' || value[22] != ':' || value.substr(25) != " GMT") {
    return std::nullopt;
  }
  constexpr std::array<std::string_view, 7> kDays = {"Mon", "Tue", "Wed", "Thu",
                                                     "Fri", "Sat", "Sun"};
  constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (std::find(kDays.begin(), kDays.end(), value.substr(0, 3)) == kDays.end()) {
    return std::nullopt;
  }
  const auto mon = std::find(kMonths.begin(), kMonths.end(), value.substr(8, 3));
  std::int64_t d, y, hh, mm, ss;
  if (mon == kMonths.end() || !digits(value.substr(5, 2), d) || !digits(value.substr(12, 4), y) ||
      !digits(value.substr(17, 2), hh) || !digits(value.substr(20, 2), mm) ||
      !digits(value.substr(23, 2), ss) || hh > 23 || mm > 59 || ss > 60) {
    return std::nullopt;
  }
  const year_month_day date{year(static_cast<int>(y)),
                            month(static_cast<unsigned>(mon - kMonths.begin() + 1)),
                            day(static_cast<unsigned>(d))};
  if (!date.ok()) return std::nullopt;
  const auto at = sys_days(date) + hours(hh) + minutes(mm) + seconds(ss);
  const auto delta = ceil<seconds>(at - now);
  return seconds(std::clamp<std::int64_t>(delta.count(), 0, kMaxRetryAfterSeconds));
}

std::uint64_t rejected_in_response(std::string_view body, std::string* error_message) {
  if (error_message) error_message->clear();
  std::int64_t rejected = 0;
  std::string_view message;
  std::string_view in = body;
  while (!in.empty()) {
    Field f;
    if (!read_field(in, f)) return 0;
    if (f.number != 1 || f.wire != 2) continue;
    // Repeated occurrences of an embedded message merge: the last value of each field wins.
    std::string_view ps = f.bytes;
    while (!ps.empty()) {
      Field g;
      if (!read_field(ps, g)) return 0;
      if (g.number == 1 && g.wire == 0) rejected = static_cast<std::int64_t>(g.varint);
      if (g.number == 2 && g.wire == 2) message = g.bytes;
    }
  }
  if (error_message) error_message->assign(message);
  return rejected > 0 ? static_cast<std::uint64_t>(rejected) : 0;
}

struct Delivery::State {
  explicit State(DeliveryOptions o) : options(std::move(o)) {}

  struct Queued {
    Payload payload;
    std::uint64_t seq = 0;
  };

  const std::string& url(Signal s) const {
    return s == Signal::kLogs ? options.logs_url : options.metrics_url;
  }

  void run();
  bool send(HttpClient& http, const curl_slist* headers, const Payload& p);
  bool wait_to_retry(Clock::time_point at);
  milliseconds jitter(milliseconds backoff);
  void record_attempt(Signal s, const char* failure);
  void on_success(const Payload& p, const Response& r);
  void on_rejected(const Payload& p, const Response& r);
  void on_retryable_failure(Signal s, const Response& r);
  void on_give_up(const Payload& p, Clock::time_point first);
  bool flush_until(Clock::time_point deadline, bool end_when_hopeless);

  const DeliveryOptions options;

  mutable std::mutex mu;
  std::condition_variable work;       // the sender: something queued, or stop
  std::condition_variable idle;       // flush(): something finished or was dropped
  std::atomic<bool> stopping{false};  // written under mu; curl's progress callback reads it too
  std::deque<Queued> queue;
  std::uint64_t queued_bytes = 0;
  std::uint64_t next_seq = 0;
  std::optional<std::uint64_t> in_flight;     // seq of the payload the sender holds
  std::optional<Clock::time_point> retry_at;  // while the sender waits to retry it
  std::uint64_t abandoned_requests = 0;       // in flight when stopped
  std::uint64_t abandoned_points = 0;
  DeliveryStats stats;

  // Sender thread only.
  std::array<std::uint64_t, 2> failed_attempts{};  // consecutive, by signal; 0 = healthy
  std::array<bool, 2> give_up_logged{};            // once per failing spell
  std::array<bool, 2> partial_logged{};
  std::set<long> rejected_logged;  // HTTP statuses
  std::mt19937_64 rng{std::random_device{}()};

  std::thread thread;
};

void Delivery::State::run() {
  HttpClient http(options, &stopping);
  const std::array<SlistPtr, 2> headers = {header_list(options.headers, options.gzip),
                                           header_list(options.logs_headers, options.gzip)};
  std::unique_lock lock(mu);
  for (;;) {
    work.wait(lock, [this] { return stopping.load() || !queue.empty(); });
    if (stopping) return;  // the destructor counts what is still queued
    Queued q = std::move(queue.front());
    queue.pop_front();
    queued_bytes -= q.payload.body.size();
    in_flight = q.seq;
    lock.unlock();
    const bool finished =
        send(http, headers[static_cast<size_t>(q.payload.signal)].get(), q.payload);
    lock.lock();
    if (!finished) {
      ++abandoned_requests;
      abandoned_points += q.payload.points;
      stats.points_dropped["shutdown"] += q.payload.points;
    }
    in_flight.reset();
    idle.notify_all();
  }
}

// Retries one payload until it is sent, rejected or out of time; false when abandoned on stop.
bool Delivery::State::send(HttpClient& http, const curl_slist* headers, const Payload& p) {
  std::string compressed;
  const std::string& body = options.gzip ? (compressed = gzip_compress(p.body)) : p.body;
  const auto first = Clock::now();
  milliseconds backoff = std::max(options.initial_backoff, milliseconds(1));
  for (;;) {
    if (stopping) return false;
    const Response r = http.post(url(p.signal), headers, body);
    if (r.code == CURLE_ABORTED_BY_CALLBACK) return false;  // stopping: not the receiver's fault
    const char* failure = failure_reason(r);
    record_attempt(p.signal, failure);
    if (!failure) {
      on_success(p, r);
      return true;
    }
    if (!retryable(r)) {
      on_rejected(p, r);
      return true;
    }
    on_retryable_failure(p.signal, r);
    // A Retry-After of 0 (or a past date) says nothing usable; the backoff still applies then,
    // so a confused proxy cannot make us spin.
    const auto hint = parse_retry_after(r.retry_after, std::chrono::system_clock::now());
    const milliseconds wait = hint && hint->count() > 0 ? milliseconds(*hint) : jitter(backoff);
    backoff = std::min(backoff * 2, std::max(options.max_backoff, backoff));
    const auto next = Clock::now() + wait;
    if (next > first + options.max_retry_time) {
      on_give_up(p, first);
      return true;
    }
    if (!wait_to_retry(next)) return false;
  }
}

// Waits on the condition variable so that the destructor wakes it; false when stopping.
bool Delivery::State::wait_to_retry(Clock::time_point at) {
  std::unique_lock lock(mu);
  retry_at = at;
  idle.notify_all();  // a flush that cannot succeed before its deadline may end now
  const bool stopped = work.wait_until(lock, at, [this] { return stopping.load(); });
  retry_at.reset();
  return !stopped;
}

milliseconds Delivery::State::jitter(milliseconds backoff) {
  std::uniform_int_distribution<std::int64_t> d(backoff.count() / 2, backoff.count());
  return milliseconds(d(rng));
}

void Delivery::State::record_attempt(Signal s, const char* failure) {
  std::lock_guard lock(mu);
  ++stats.requests[std::string(signal_name(s)) + (failure ? "/failure" : "/success")];
  if (failure) ++stats.failures[failure];
}

void Delivery::State::on_success(const Payload& p, const Response& r) {
  const auto sig = static_cast<size_t>(p.signal);
  if (failed_attempts[sig] > 0) {
    SW_LOG(kInfo) << "OTLP export to " << loggable_url(url(p.signal)) << " recovered after "
                  << failed_attempts[sig] << " failed attempts";
    failed_attempts[sig] = 0;
    give_up_logged[sig] = false;
  }
  std::string message;
  const std::uint64_t rejected = std::min(rejected_in_response(r.body, &message), p.points);
  {
    std::lock_guard lock(mu);
    stats.points_sent += p.points - rejected;
    if (rejected > 0) stats.points_dropped["partial_success"] += rejected;
  }
  if ((rejected > 0 || !message.empty()) && !partial_logged[sig]) {
    partial_logged[sig] = true;
    SW_LOG(kWarn) << "OTLP receiver at " << loggable_url(url(p.signal)) << " rejected " << rejected
                  << " of " << p.points << " " << signal_name(p.signal)
                  << " points: " << printable(message)
                  << " (logged once; counted in stallwatch_otlp_points_dropped_total)";
  }
}

void Delivery::State::on_rejected(const Payload& p, const Response& r) {
  {
    std::lock_guard lock(mu);
    stats.points_dropped["rejected"] += p.points;
  }
  if (rejected_logged.insert(r.status).second) {
    SW_LOG(kWarn) << "OTLP export to " << loggable_url(url(p.signal)) << " rejected with HTTP "
                  << r.status << ", not retried, points dropped: " << printable(r.body);
  }
}

void Delivery::State::on_retryable_failure(Signal s, const Response& r) {
  if (failed_attempts[static_cast<size_t>(s)]++ == 0) {
    SW_LOG(kWarn) << "OTLP export to " << loggable_url(url(s)) << " failing: " << describe(r)
                  << "; retrying with backoff";
  }
}

void Delivery::State::on_give_up(const Payload& p, Clock::time_point first) {
  {
    std::lock_guard lock(mu);
    stats.points_dropped["retries_exhausted"] += p.points;
  }
  const auto sig = static_cast<size_t>(p.signal);
  if (!give_up_logged[sig]) {
    give_up_logged[sig] = true;
    const auto tried = std::chrono::duration_cast<milliseconds>(Clock::now() - first);
    SW_LOG(kWarn) << "OTLP export to " << loggable_url(url(p.signal)) << ": gave up on a request "
                  << "after " << tried.count() << " ms of retries, " << p.points
                  << " points dropped (later ones are counted in "
                     "stallwatch_otlp_points_dropped_total)";
  }
}

// end_when_hopeless: also end (false) once the sender waits for a retry past the deadline.
bool Delivery::State::flush_until(Clock::time_point deadline, bool end_when_hopeless) {
  std::unique_lock lock(mu);
  const std::uint64_t target = next_seq;
  auto done = [&] {
    return (queue.empty() || queue.front().seq >= target) && (!in_flight || *in_flight >= target);
  };
  idle.wait_until(lock, deadline, [&] {
    return done() || (end_when_hopeless && retry_at && *retry_at > deadline);
  });
  return done();
}

Delivery::Delivery(DeliveryOptions options) : state_(std::make_unique<State>(std::move(options))) {
  static std::once_flag curl_once;
  std::call_once(curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

Delivery::~Delivery() {
  State& s = *state_;
  // A receiver that is down would only make shutdown wait the full 5 s: end early then.
  s.flush_until(Clock::now() + std::chrono::seconds(5), true);
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  s.work.notify_all();
  s.thread.join();
  std::uint64_t requests = s.abandoned_requests;
  std::uint64_t points = s.abandoned_points;
  for (const auto& q : s.queue) {
    ++requests;
    points += q.payload.points;
    s.stats.points_dropped["shutdown"] += q.payload.points;
  }
  if (requests > 0) {
    SW_LOG(kWarn) << "OTLP delivery stopped with " << requests << " requests (" << points
                  << " points) not delivered";
  }
}

void Delivery::enqueue(Payload p) {
  State& s = *state_;
  if (s.url(p.signal).empty()) return;  // that signal is not exported
  const size_t size = p.body.size();
  bool dropped = false;
  {
    std::lock_guard lock(s.mu);
    if (size > s.options.max_queue_bytes) {
      s.stats.points_dropped["queue_full"] += p.points;
      return;
    }
    while (!s.queue.empty() && s.queued_bytes + size > s.options.max_queue_bytes) {
      s.stats.points_dropped["queue_full"] += s.queue.front().payload.points;
      s.queued_bytes -= s.queue.front().payload.body.size();
      s.queue.pop_front();
      dropped = true;
    }
    s.queue.push_back({std::move(p), s.next_seq++});
    s.queued_bytes += size;
  }
  s.work.notify_one();
  if (dropped) s.idle.notify_all();
}

bool Delivery::flush(std::chrono::milliseconds deadline) {
  return state_->flush_until(Clock::now() + deadline, false);
}

DeliveryStats Delivery::stats() const {
  std::lock_guard lock(state_->mu);
  DeliveryStats out = state_->stats;
  out.queue_requests = state_->queue.size();
  out.queue_bytes = state_->queued_bytes;
  return out;
}

}  // namespace stallwatch::otlp
