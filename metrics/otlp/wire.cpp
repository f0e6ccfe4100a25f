#include "metrics/otlp/wire.h"

#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <climits>
#include <memory>
#include <new>

#include "common/strings.h"

namespace stallwatch::otlp {
namespace {

// Longer than any max_retry_time anyone configures; keeps time arithmetic far from overflow.
constexpr std::int64_t kMaxRetryAfterSeconds = 365LL * 24 * 3600;

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

std::string gzip_compress(std::string_view data, int level) {
  // libdeflate: one call over the whole buffer. Measured on the /metrics bodies of 256 cgroups
  // (2026-11-26, docs/performance.md): 1.27x faster than zlib at level 1 on the text, 1.37x on
  // the protobuf, and 17 % / 6 % smaller.
  std::unique_ptr<libdeflate_compressor, decltype(&libdeflate_free_compressor)> c(
      libdeflate_alloc_compressor(level < 0 ? 6 : std::clamp(level, 0, 12)),
      &libdeflate_free_compressor);
  if (!c) throw std::bad_alloc();
  // The bound is about the input's size. Uninitialised, so only the pages the compressor
  // writes are ever resident; the result is copied into a string of its own size, so a cached
  // body does not keep the bound's capacity (was: a zero-filled string of the bound, shrunk in
  // size only: 234 MB resident per cached text body of 256 cgroups instead of 4.8).
  const size_t bound = libdeflate_gzip_compress_bound(c.get(), data.size());
  std::unique_ptr<char[]> buf(new char[bound]);
  const size_t n = libdeflate_gzip_compress(c.get(), data.data(), data.size(), buf.get(), bound);
  if (n == 0) throw std::bad_alloc();  // not with a buffer of the bound
  return std::string(buf.get(), n);
}

struct GzipStream::State {
  z_stream zs{};
};

GzipStream::GzipStream(int level) : state_(std::make_unique<State>()) {
  if (deflateInit2(&state_->zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::bad_alloc();  // the only way it fails with these arguments
  }
}

GzipStream::~GzipStream() { deflateEnd(&state_->zs); }

void GzipStream::run(std::string_view data, int flush) {
  z_stream& zs = state_->zs;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  size_t in_left = data.size();
  for (;;) {
    if (out_.capacity() - out_.size() < 64 * 1024) out_.reserve(out_.capacity() * 2 + 256 * 1024);
    const size_t at = out_.size();
    const size_t room = std::min<size_t>(out_.capacity() - at, UINT_MAX);
    out_.resize(at + room);  // written by deflate; shrunk back below
    const auto in_now = static_cast<uInt>(std::min<size_t>(in_left, UINT_MAX));
    zs.avail_in = in_now;
    zs.next_out = reinterpret_cast<Bytef*>(out_.data() + at);
    zs.avail_out = static_cast<uInt>(room);
    const bool last_slice = in_now == in_left;
    const int rc = deflate(&zs, last_slice ? flush : Z_NO_FLUSH);
    out_.resize(at + room - zs.avail_out);
    in_left -= in_now - zs.avail_in;
    if (rc == Z_STREAM_ERROR) throw std::bad_alloc();
    if (rc == Z_STREAM_END) return;
    // Done with this piece once all input is taken and deflate had room left over.
    if (flush == Z_NO_FLUSH && in_left == 0 && zs.avail_out != 0) return;
  }
}

void GzipStream::write(std::string_view data) {
  if (!data.empty()) run(data, Z_NO_FLUSH);
}

std::string GzipStream::finish() {
  run({}, Z_FINISH);
  std::string out = std::move(out_);
  out.shrink_to_fit();
  return out;
}

std::optional<std::chrono::seconds> parse_retry_after(std::string_view value,
                                                      std::chrono::system_clock::time_point now) {
  using namespace std::chrono;
  // Blanks (HTTP's optional whitespace) around it; a raw header line also ends in CRLF.
  value = trim_left(trim_right(value, " \t\r\n"), " \t");
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

}  // namespace stallwatch::otlp
