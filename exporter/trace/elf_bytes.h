// The bytes an ELF parse reads (trace/elf_symbols.cpp's internals, kept apart so that the
// parser reads as ELF and this file as I/O): a file through pread(2) or an image in memory, the
// check that a range is stored in the file rather than a hole of a sparse file, and the table
// byte budget of one parse (elf_symbols.h). Not an interface of its own.
#pragma once

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "trace/elf_symbols.h"

namespace stallwatch::trace::elf_detail {

// Where the bytes come from: a file (pread) or memory (tests, fuzzing). Reads outside `size`
// or short reads fail.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::uint64_t size() const = 0;
  virtual bool read(std::uint64_t offset, std::uint64_t length, void* out) const = 0;
  // Whether [offset, offset + length) is stored: false where it touches a hole of a sparse
  // file (reads as zeros, costs its author no disk) or lies past the end.
  virtual bool stored(std::uint64_t offset, std::uint64_t length) const = 0;
};

class MemorySource : public Source {
 public:
  explicit MemorySource(std::string_view data) : data_(data) {}
  std::uint64_t size() const override { return data_.size(); }
  bool read(std::uint64_t offset, std::uint64_t length, void* out) const override {
    if (offset > data_.size() || length > data_.size() - offset) return false;
    std::memcpy(out, data_.data() + offset, length);
    return true;
  }
  bool stored(std::uint64_t offset, std::uint64_t length) const override {
    return offset <= data_.size() && length <= data_.size() - offset;
  }

 private:
  std::string_view data_;
};

class Fd {
 public:
  explicit Fd(int fd, bool owned = true) : fd_(fd), owned_(owned) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (owned_ && fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
  bool owned_;
};

class FileSource : public Source {
 public:
  FileSource(int fd, bool owned) : fd_(fd, owned) {}
  std::uint64_t size() const override { return size_; }
  bool read(std::uint64_t offset, std::uint64_t length, void* out) const override {
    if (offset > size_ || length > size_ - offset) return false;
    auto* p = static_cast<char*>(out);
    while (length > 0) {
      const ssize_t n = pread(fd_.get(), p, length, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;  // truncated under us, or an I/O error
      p += n;
      offset += static_cast<std::uint64_t>(n);
      length -= static_cast<std::uint64_t>(n);
    }
    return true;
  }
  bool stored(std::uint64_t offset, std::uint64_t length) const override {
    if (offset > size_ || length > size_ - offset) return false;
    if (length == 0) return true;
    // Data must start at `offset` and the next hole (end of file counts) lie past the range.
    const off_t data = lseek(fd_.get(), static_cast<off_t>(offset), SEEK_DATA);
    if (data < 0) return errno == EINVAL;  // EINVAL: no SEEK_DATA here, the caps still hold
    if (static_cast<std::uint64_t>(data) != offset) return false;
    const off_t hole = lseek(fd_.get(), static_cast<off_t>(offset), SEEK_HOLE);
    return hole >= 0 && static_cast<std::uint64_t>(hole) - offset >= length;
  }
  // Takes `fd` (closed here when `owned`); fails unless it is a regular file. Errors leave
  // the name out, as below.
  static Result<std::unique_ptr<FileSource>> from_fd(int fd, bool owned);
  static Result<std::unique_ptr<FileSource>> open(const std::string& path);

 private:
  Fd fd_;
  std::uint64_t size_ = 0;
};

inline Result<std::unique_ptr<FileSource>> FileSource::from_fd(int fd, bool owned) {
  auto source = std::make_unique<FileSource>(fd, owned);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    return make_error(std::string("cannot stat: ") + std::strerror(err), err);
  }
  if (!S_ISREG(st.st_mode)) return make_error("not a regular file", EINVAL);
  if (st.st_size < static_cast<off_t>(EI_NIDENT)) {
    return make_error("not an ELF file (only " + std::to_string(st.st_size) + " bytes)", ENOEXEC);
  }
  source->size_ = static_cast<std::uint64_t>(st.st_size);
  return source;
}

inline Result<std::unique_ptr<FileSource>> FileSource::open(const std::string& path) {
  // O_NONBLOCK: a FIFO handed in by mistake must not hang the caller (no effect on files).
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (raw < 0) {
    int err = errno;
    return make_error(std::string("cannot open: ") + std::strerror(err), err);
  }
  return from_fd(raw, true);
}

inline std::string budget_words() {
  return std::to_string(kElfTableBudget >> 20) + " MiB";
}

// Bounds-checked reads, and the table budget of one parse. Messages returned by the helpers
// below leave the path out; the public functions prefix it.
class Bytes {
 public:
  explicit Bytes(const Source& source) : source_(source), size_(source.size()) {}

  bool contains(std::uint64_t offset, std::uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }
  // Whether count entries of entsize bytes starting at offset lie inside the file.
  bool contains_array(std::uint64_t offset, std::uint64_t count, std::uint64_t entsize) const {
    if (count == 0) return offset <= size_;
    return entsize != 0 && offset <= size_ && count <= (size_ - offset) / entsize;
  }
  bool stored(std::uint64_t offset, std::uint64_t length) const {
    return source_.stored(offset, length);
  }
  template <typename T>
  std::optional<T> read(std::uint64_t offset) const {
    T value;
    if (!source_.read(offset, sizeof(T), &value)) return std::nullopt;
    return value;
  }
  // Table bytes this parse may still read.
  std::uint64_t budget_left() const { return budget_left_; }
  // `length` bytes of a table at `offset`, charged to the budget; `what` names the table in
  // the error. Memory is allocated only once the bytes are known to be stored in the file.
  Result<std::string> read_table(std::uint64_t offset, std::uint64_t length,
                                 const std::string& what) {
    if (!contains(offset, length)) {
      return make_error("truncated: " + what + " lies past the end of the file", ENOEXEC);
    }
    if (length > budget_left_) {
      return make_error(what + " of " + std::to_string(length) + " bytes is over the budget of " +
                            budget_words() + " of tables per file",
                        EFBIG);
    }
    if (!stored(offset, length)) {
      return make_error(what + " lies in a hole of a sparse file (" + std::to_string(length) +
                            " bytes claimed, not stored)",
                        ENOEXEC);
    }
    budget_left_ -= length;
    std::string out(length, '\0');
    if (!source_.read(offset, length, out.data())) {
      return make_error("truncated while reading " + what, ENOEXEC);
    }
    return out;
  }

 private:
  const Source& source_;
  std::uint64_t size_;
  std::uint64_t budget_left_ = kElfTableBudget;
};

}  // namespace stallwatch::trace::elf_detail
