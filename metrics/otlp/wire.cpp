#include "metrics/otlp/wire.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <climits>
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
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
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
