// Native frames of user stacks: an address in a process to (module, function, offset).
// Owns: a cache of each process's mappings (re-read when an address falls outside them) and of
// each file's function symbols, keyed by (device, inode) so every copy of a library, in any
// container, is read once. Files are opened with open_mapped_file (the file the process maps,
// never through its symlinks) and read with elf_symbols.h (bounded preads, never a mapping).
// A stripped file shows `libfoo.so+0x1a2b` (the offset into the file). C++ names are demangled.
// A large file (libtorch_cuda.so: ~1 GB, seconds to read its symbol table) is read on a thread of
// its own: until it is in, its frames show as `libfoo.so+0x1a2b`, and the window that asked is
// not held up (on an H100, naming a loop's first 28 sites read libtorch's tables for 1.9 s).
// The symbols kept are a byte budget (kSymbolBudget by default, names and offsets counted):
// the least recently used files are dropped past it, and a file whose symbols alone exceed it
// is not kept (its frames stay `libfoo.so+0x1a2b`); both are counted. Traced processes choose
// what they map, so nothing they map grows the daemon past the budget.
// Thread-safety: not thread-safe (one owner, the pipeline thread); the loads it starts share
// nothing with it but their result.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/procfs.h"
#include "trace/elf_symbols.h"
#include "trace/proc_maps.h"

namespace stallwatch::trace {

struct NativeFrame {
  std::string module;    // the file's base name; "[unknown]" when no mapping holds the address
  std::string function;  // demangled; empty when the file has no symbol there
  std::uint64_t offset = 0;  // into the function when named, else into the file
};

// "_ZN3foo3barEv" → "foo::bar()"; the name itself when it is not a mangled C++ name.
std::string demangle(const std::string& name);

class Symbolizer {
 public:
  static constexpr std::uint64_t kBackgroundBytes = 32ull << 20;
  // 64 MiB: libtorch_cuda.so's exported functions (~40 MB as kept here) and every small file.
  static constexpr std::uint64_t kSymbolBudget = 64ull << 20;
  // Files of at least `background_bytes` are read in the background (0: every file).
  explicit Symbolizer(const host::Procfs& fs, std::uint64_t background_bytes = kBackgroundBytes,
                      std::uint64_t symbol_budget = kSymbolBudget)
      : fs_(fs), background_bytes_(background_bytes), symbol_budget_(symbol_budget) {}
  ~Symbolizer();  // waits for the loads in flight
  // Return addresses, innermost first (each looked up at address - 1: inside the call).
  std::vector<NativeFrame> symbolize(int pid, const std::vector<std::uint64_t>& ips);
  void forget(int pid) { maps_.erase(pid); }
  // Waits until every background load has finished (tests).
  void wait_for_loads();

  std::uint64_t cached_bytes() const { return cached_bytes_; }
  std::uint64_t evicted_files() const { return evicted_files_; }  // dropped past the budget
  std::uint64_t refused_files() const { return refused_files_; }  // alone over the budget

 private:
  struct File {
    std::vector<ElfSymbol> by_offset;  // sorted by file_offset
    bool readable = false;
    bool over_budget = false;  // read, but its symbols alone exceed the budget: not kept
    std::uint64_t bytes = 0;   // what it holds, as the budget counts it
    std::uint64_t last_used = 0;
  };
  using FileKey = std::pair<std::uint64_t, std::uint64_t>;  // (device, inode)
  const MapsEntry* mapping(int pid, std::uint64_t addr);
  const File& file(int pid, const MapsEntry& m);
  static File load(ScopedFd fd, const std::string& name, std::uint64_t budget);
  // Adds a loaded file to the cache, dropping the least recently used past the budget.
  const File& keep(const FileKey& key, File f);

  const host::Procfs& fs_;
  std::uint64_t background_bytes_;
  std::uint64_t symbol_budget_;
  std::map<int, std::vector<MapsEntry>> maps_;
  std::map<FileKey, File> files_;
  std::map<FileKey, std::future<File>> loading_;
  std::uint64_t use_clock_ = 0, cached_bytes_ = 0, evicted_files_ = 0, refused_files_ = 0;
};

}  // namespace stallwatch::trace
