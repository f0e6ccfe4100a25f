// The reserve file beside the chain store (PATH.reserve): space taken from the file system in
// advance and handed back when the disk is full, so that the store can prune. In WAL mode even
// a DELETE appends to the -wal file and the checkpoint that shrinks the main file writes first,
// so on a full disk pruning fails like any write unless some room is kept for it (store.cpp).
// The file holds nothing: it is allocated (posix_fallocate, never sparse) and removed again.
// A path that exists and is not a regular file (a directory, a symlink, a FIFO; a regular file
// with a second hard link counts as another file) is never touched: the store runs without a
// reserve and says so.
// Not thread-safe: the store's writer thread (or open and close, before and after it runs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/result.h"

namespace stallwatch::store {

class Reserve {
 public:
  Reserve() = default;  // none: held() is false, create() does nothing
  Reserve(std::string path, std::uint64_t bytes) : path_(std::move(path)), bytes_(bytes) {}

  // PATH.reserve, or "" for a database that is not a file of its own (":memory:", a "file:"
  // URI, an empty path): no reserve for those.
  static std::string path_for(const std::string& db_path);
  // clamp(--max-db / 100, 1 MiB, 16 MiB).
  static std::uint64_t size_for(std::uint64_t max_bytes);

  // Creates the file (mode 0640) or completes an existing regular one to exactly bytes().
  // Errors: no room (the partial file is removed, err ENOSPC) or a path that is not a regular
  // file (left alone, and refused() from then on); both name the path.
  Result<Ok> create();
  // Removes the file; true when it held the space (false when there was none).
  bool release();

  bool enabled() const { return !path_.empty() && !refused_; }
  bool held() const { return held_; }
  bool refused() const { return refused_; }
  const std::string& path() const { return path_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  std::uint64_t bytes_ = 0;
  bool held_ = false;
  bool refused_ = false;
};

// Bytes that the caller may still write on the file system holding `path` (root may use the
// blocks reserved for it); nullopt when statvfs fails.
std::optional<std::uint64_t> free_bytes(const std::string& path);

}  // namespace stallwatch::store
