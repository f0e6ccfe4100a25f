// A protobuf wire-format writer for the OTLP messages stallwatch sends. Hand-written rather than
// generated: the daemon sends a handful of messages (field numbers from the OpenTelemetry
// protocol's .proto files, opentelemetry-proto v1), a generated binding would add protoc and
// libprotobuf to the build for ~200 lines of encoding, and the tests decode every payload with
// an independent implementation (the OpenTelemetry JS SDK's) instead of our own reader.
// Not thread-safe; one writer per message.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/strings.h"

namespace stallwatch::otlp {

class ProtoWriter {
 public:
  enum WireType : std::uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

  void tag(std::uint32_t field, WireType type) { varint((field << 3) | type); }

  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      buf_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    buf_.push_back(static_cast<char>(v));
  }

  // Little-endian, as the wire format wants (this daemon runs on little-endian hosts only:
  // x86-64 and arm64, where the BPF side lives too).
  void fixed64_raw(std::uint64_t v) { buf_.append(reinterpret_cast<const char*>(&v), 8); }

  void uint64_field(std::uint32_t field, std::uint64_t v) {
    tag(field, kVarint);
    varint(v);
  }
  void int64_field(std::uint32_t field, std::int64_t v) {
    uint64_field(field, static_cast<std::uint64_t>(v));
  }
  void sint32_field(std::uint32_t field, std::int32_t v) {
    tag(field, kVarint);
    varint((static_cast<std::uint32_t>(v) << 1) ^ static_cast<std::uint32_t>(v >> 31));
  }
  void bool_field(std::uint32_t field, bool v) { uint64_field(field, v ? 1 : 0); }
  void fixed64_field(std::uint32_t field, std::uint64_t v) {
    tag(field, kFixed64);
    fixed64_raw(v);
  }
  void double_field(std::uint32_t field, double v) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    fixed64_field(field, bits);
  }
  void bytes_field(std::uint32_t field, std::string_view v) {
    tag(field, kLengthDelimited);
    varint(v.size());
    buf_.append(v);
  }
  // Protobuf strings must be UTF-8: bytes from the host that are not become U+FFFD.
  void string_field(std::uint32_t field, std::string_view v) {
    if (is_valid_utf8(v)) {
      bytes_field(field, v);
    } else {
      bytes_field(field, to_valid_utf8(v));
    }
  }
  // An embedded message already encoded by another writer.
  void message_field(std::uint32_t field, const ProtoWriter& m) { bytes_field(field, m.buf_); }

  // Bytes encoded elsewhere, e.g. the values of a packed repeated field.
  void append_raw(std::string_view bytes) { buf_.append(bytes); }

  const std::string& data() const { return buf_; }
  std::string take() { return std::move(buf_); }
  size_t size() const { return buf_.size(); }
  bool empty() const { return buf_.empty(); }

  static size_t varint_size(std::uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
      v >>= 7;
      ++n;
    }
    return n;
  }
  // Bytes a length-delimited field of `payload` bytes takes, tag included (fields < 16).
  static size_t field_size(size_t payload) { return 1 + varint_size(payload) + payload; }

 private:
  std::string buf_;
};

}  // namespace stallwatch::otlp
