// Result<T>: the value of an operation or the reason it failed (what, where, errno).
// Used at every boundary that touches the kernel or the file system (attach, discovery,
// store) so callers decide what is fatal; main turns fatal ones into one clear line.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace stallwatch {

struct Error {
  std::string message;  // one line: what failed and, where known, how to fix it
  int err = 0;          // errno or negative libbpf code, 0 when not applicable
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}       // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}   // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void> spelled as Result<Ok>.
struct Ok {};

inline Error make_error(std::string message, int err = 0) { return Error{std::move(message), err}; }

}  // namespace stallwatch
