// A protobuf wire-format reader for unit tests of the OTLP encoders: splits a message into its
// fields so a test can walk the structure by field number. It knows nothing of the schema
// (the e2e tier decodes with the OpenTelemetry JS SDK's schema instead); malformed input fails
// the test. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace stallwatch::prototest {

struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire = 0;
  std::uint64_t scalar = 0;  // varint, fixed64, fixed32
  std::string_view bytes;    // length-delimited

  double as_double() const {
    double d;
    std::memcpy(&d, &scalar, sizeof d);
    return d;
  }
  std::int64_t as_sint() const {
    return static_cast<std::int64_t>((scalar >> 1) ^ (~(scalar & 1) + 1));
  }
};

inline bool read_varint(std::string_view& in, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

inline std::vector<Field> fields(std::string_view in) {
  std::vector<Field> out;
  while (!in.empty()) {
    std::uint64_t key;
    if (!read_varint(in, key)) {
      ADD_FAILURE() << "truncated key";
      return out;
    }
    Field f;
    f.number = static_cast<std::uint32_t>(key >> 3);
    f.wire = static_cast<std::uint32_t>(key & 7);
    if (f.wire == 0) {
      if (!read_varint(in, f.scalar)) ADD_FAILURE() << "truncated varint";
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      if (in.size() < n) {
        ADD_FAILURE() << "truncated fixed field";
        return out;
      }
      std::memcpy(&f.scalar, in.data(), n);
      in.remove_prefix(n);
    } else if (f.wire == 2) {
      std::uint64_t len;
      if (!read_varint(in, len) || len > in.size()) {
        ADD_FAILURE() << "bad length";
        return out;
      }
      f.bytes = in.substr(0, len);
      in.remove_prefix(len);
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire;
      return out;
    }
    out.push_back(f);
  }
  return out;
}

// Every field `number` of a message, in order.
inline std::vector<Field> all(std::string_view msg, std::uint32_t number) {
  std::vector<Field> out;
  for (const Field& f : fields(msg)) {
    if (f.number == number) out.push_back(f);
  }
  return out;
}

// The one field `number` (a default Field when absent).
inline Field one(std::string_view msg, std::uint32_t number) {
  auto v = all(msg, number);
  return v.empty() ? Field{} : v.back();
}

// KeyValue list (string, int and double values rendered as text) of a message's field.
inline std::vector<std::pair<std::string, std::string>> attributes(std::string_view msg,
                                                                   std::uint32_t number) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Field& kv : all(msg, number)) {
    const std::string key(one(kv.bytes, 1).bytes);
    const std::string_view any = one(kv.bytes, 2).bytes;
    std::string value;
    for (const Field& v : fields(any)) {
      if (v.number == 1) value = std::string(v.bytes);
      if (v.number == 3) value = std::to_string(static_cast<std::int64_t>(v.scalar));
      if (v.number == 4) value = std::to_string(v.as_double());
    }
    out.emplace_back(key, value);
  }
  return out;
}

inline std::string attribute(std::string_view msg, std::uint32_t number, std::string_view key) {
  for (const auto& [k, v] : attributes(msg, number)) {
    if (k == key) return v;
  }
  return "<absent>";
}

}  // namespace stallwatch::prototest
