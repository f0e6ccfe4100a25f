// Native frames of user stacks: an address in a process to (module, function, offset).
// Owns: a cache of each process's mappings (re-read when an address falls outside them) and of
// each file's function symbols, keyed by (device, inode) so every copy of a library, in any
// container, is read once. Files are read with elf_symbols.h (bounded preads, never a mapping).
// A stripped file shows `libfoo.so+0x1a2b` (the offset into the file). C++ names are demangled.
// A large file (libtorch_cuda.so: ~1 GB, seconds to read its symbol table) is read on a thread of
// its own: until it is in, its frames show as `libfoo.so+0x1a2b`, and the window that asked is
// not held up (on an H100, naming a loop's first 28 sites read libtorch's tables for 1.9 s).
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
  // Files of at least `background_bytes` are read in the background (0: every file).
  explicit Symbolizer(const host::Procfs& fs, std::uint64_t background_bytes = kBackgroundBytes)
      : fs_(fs), background_bytes_(background_bytes) {}
  ~Symbolizer();  // waits for the loads in flight
  // Return addresses, innermost first (each looked up at address - 1: inside the call).
  std::vector<NativeFrame> symbolize(int pid, const std::vector<std::uint64_t>& ips);
  void forget(int pid) { maps_.erase(pid); }
  // Waits until every background load has finished (tests).
  void wait_for_loads();

 private:
  struct File {
    std::vector<ElfSymbol> by_offset;  // sorted by file_offset
    bool readable = false;
  };
  using FileKey = std::pair<std::uint64_t, std::uint64_t>;  // (device, inode)
  const MapsEntry* mapping(int pid, std::uint64_t addr);
  const File& file(int pid, const MapsEntry& m);

  const host::Procfs& fs_;
  std::uint64_t background_bytes_;
  std::map<int, std::vector<MapsEntry>> maps_;
  std::map<FileKey, File> files_;
  std::map<FileKey, std::future<File>> loading_;
};

}  // namespace stallwatch::trace
