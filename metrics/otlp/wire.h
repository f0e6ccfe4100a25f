// What OTLP/HTTP puts on the wire around an encoded request, apart from the transport itself:
// the gzip body, the Retry-After answer and the partial_success of an Export*ServiceResponse.
// Pure functions (no I/O, no shared state): safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace stallwatch::otlp {

// gzip (RFC 1952) of `data`, for Content-Encoding: gzip (libdeflate); `level` 1 (fastest) to
// 12, -1: 6 (zlib's default).
std::string gzip_compress(std::string_view data, int level = -1);

// gzip of a body written in pieces (zlib's stream): the input is never held whole, only the
// compressed output. For the text /metrics, ~60x larger than its gzip.
class GzipStream {
 public:
  explicit GzipStream(int level);
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;
  void write(std::string_view data);
  // The whole gzip member; nothing may be written after.
  std::string finish();

 private:
  void run(std::string_view data, int flush);
  struct State;
  std::unique_ptr<State> state_;
  std::string out_;
};

// Retry-After as seconds from now: delta-seconds or an HTTP-date; nullopt when absent or bad.
// `value` may be the raw header value: blanks around it and a trailing line ending are ignored.
std::optional<std::chrono::seconds> parse_retry_after(std::string_view value,
                                                      std::chrono::system_clock::time_point now);

// rejected_data_points / rejected_log_records of an OTLP Export*ServiceResponse body
// (partial_success = 1 { rejected = 1 (int64), error_message = 2 (string) }); 0 when absent.
std::uint64_t rejected_in_response(std::string_view body, std::string* error_message);

}  // namespace stallwatch::otlp
