// CPython in traced processes: which interpreter a process runs (version, where its _PyRuntime
// lies, the struct offsets bpf/python.bpf.h needs to walk a thread's frames) and, after the
// kernel recorded (code object, instruction offset) pairs, the function, file and line of each.
// Offsets come from the interpreter's own _Py_DebugOffsets (3.13+, parsed by its version field)
// or from per-version tables for 3.10-3.12 (facts of CPython's headers); either is checked
// against the live process before use (distribution builds can differ from upstream).
// Process memory is read through /proc/PID/mem with bounded preads: no ptrace attach, the
// process never stops. Everything read there is hostile: lengths are capped, strings escaped by
// the caller where shown.
// Thread-safety: the free functions are pure or touch only /proc; PyResolver is not
// thread-safe (one owner, the pipeline thread).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/result.h"
#include "host/procfs.h"

struct py_proc;

namespace stallwatch::trace {

// Where things are in one CPython version (bytes into each structure).
struct PyLayout {
  int major = 3, minor = 0;
  bool from_debug_offsets = false;  // _Py_DebugOffsets (3.13+) rather than the built-in table
  // What the kernel walks (bpf/cuda.h struct py_proc).
  std::uint16_t rt_interp_head = 0, interp_threads_head = 0, ts_next = 0, ts_interp = 0,
                ts_tid = 0, ts_frame = 0, cframe_current = 0, fr_back = 0, fr_code = 0,
                fr_instr = 0, fr_owner = 0xffff, code_adaptive = 0;
  std::uint8_t tid_kind = 0, frame_kind = 0, owner_cstack = 3;
  std::uint64_t code_mask = ~std::uint64_t{0};
  // What user space reads from a code object.
  std::uint16_t co_filename = 0, co_name = 0, co_qualname = 0, co_firstlineno = 0,
                co_linetable = 0;
  std::uint16_t ascii_size = 0, compact_size = 0;  // sizeof(PyASCIIObject), (PyCompactUnicodeObject)
};

// The built-in table: 3.10, 3.11, 3.12 and 3.13 (3.13 is used only when the process's own
// _Py_DebugOffsets cannot be read). nullopt for other versions.
std::optional<PyLayout> builtin_layout(int major, int minor);

// Parses _Py_DebugOffsets (the first bytes of _PyRuntime in 3.13+): cookie "xdebugpy", then
// the version (PY_VERSION_HEX), then sections of uint64 offsets whose order depends on the
// minor version (3.13 and 3.14 are known). Errors name what does not fit.
Result<PyLayout> layout_from_debug_offsets(std::string_view bytes);
inline constexpr size_t kDebugOffsetsBytes = 1024;  // read this much from _PyRuntime

// Line of the instruction at byte offset `instr` of a code object, from its co_linetable:
// the 3.10 format (PEP 626 (start delta, line delta) pairs) or the 3.11+ location table.
// nullopt when the table says "no line" or ends first.
std::optional<int> py_line_310(std::string_view table, int firstlineno, std::uint32_t instr);
std::optional<int> py_line_311(std::string_view table, int firstlineno, std::uint32_t instr);

// A CPython process the kernel can walk.
struct PyProcess {
  int pid = 0;
  std::string interpreter;  // the file holding _PyRuntime, as the process maps it
  std::uint64_t runtime = 0;
  PyLayout layout;
};

// Bounded reads of another process's memory (/proc/PID/mem, opened once).
class ProcessMemory {
 public:
  ProcessMemory(const host::Procfs& fs, int pid);
  ~ProcessMemory();
  ProcessMemory(const ProcessMemory&) = delete;
  ProcessMemory& operator=(const ProcessMemory&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool read(std::uint64_t addr, void* out, size_t len) const;
  std::optional<std::uint64_t> read_u64(std::uint64_t addr) const;

 private:
  int fd_ = -1;
};

// Finds the interpreter of `pid`: a mapped libpython3.X.so or python3.X executable exporting
// _PyRuntime; reads its version and layout; validates them on the live process (the thread
// list's first state points back at its interpreter). The error says why it gets no frames:
// "not CPython", "CPython 3.9 (3.10+ supported)", "offsets do not match the process", ...
Result<PyProcess> inspect_python(const host::Procfs& fs, int pid);

// The kernel's view of a PyProcess (bpf/cuda.h).
void fill_py_proc(const PyProcess& p, std::uint32_t start_tag, py_proc& out);

// One decoded Python frame.
struct PyFrame {
  std::string function;  // co_qualname (3.11+) or co_name
  std::string file;
  int line = 0;  // 0 when unknown
};

// Keeps the kernel's py_procs map in step with the CUDA processes discovery finds: inspects
// each new one, logs which get Python frames and why others do not, deletes the entry when
// the process goes. Thread-safety: seen/gone from the discovery thread; find/describe from any.
class PythonRegistry {
 public:
  // map_fd: py_procs; -1 keeps the registry in user space only (tests, --stacks=off).
  PythonRegistry(const host::Procfs& fs, int map_fd) : fs_(fs), map_fd_(map_fd) {}
  void seen(int pid);
  void gone(int pid);
  struct Found {
    PyProcess process;
    std::uint64_t serial = 0;  // changes when a PID is reused
  };
  std::optional<Found> find(int pid) const;
  // "Python 3.12 frames (/usr/lib/libpython3.12.so.1.0)" or why not; empty when never seen.
  std::string describe(int pid) const;
  size_t python_processes() const;

 private:
  struct Entry {
    std::uint32_t start_tag = 0;
    std::optional<PyProcess> process;
    std::string why_not;
    std::uint64_t serial = 0;
  };
  const host::Procfs& fs_;
  int map_fd_;
  mutable std::mutex mu_;
  std::map<int, Entry> entries_;
  std::uint64_t next_serial_ = 1;
};

// Decodes (code object, instruction offset) pairs; caches each code object's names and line
// table (code objects of functions live as long as their module) under a byte budget: the
// traced process decides how many code objects and how long a line table (up to
// kMaxLineTable each) it shows us, so past kCodeBudget bytes or kMaxCodes entries the least
// recently used are dropped (re-read if asked again), and one bigger than the whole budget is
// answered without being kept. Evictions and refusals are counted. (python_frames.cpp)
class PyResolver {
 public:
  static constexpr std::uint64_t kCodeBudget = 16ull << 20;    // names and line tables kept
  static constexpr size_t kMaxCodes = 65536;                  // code objects kept
  static constexpr size_t kMaxLineTable = 1u << 20;           // bytes read of one line table
  explicit PyResolver(const host::Procfs& fs, std::uint64_t budget = kCodeBudget)
      : fs_(fs), budget_(budget) {}
  std::optional<PyFrame> resolve(const PythonRegistry::Found& p, std::uint64_t code,
                                 std::uint32_t instr);

  std::uint64_t cached_bytes() const { return cached_bytes_; }
  size_t cached_codes() const { return codes_.size(); }
  std::uint64_t evicted() const { return evicted_; }  // dropped, least recently used first
  std::uint64_t refused() const { return refused_; }  // alone over the budget: not kept

 private:
  struct Code {
    std::string function, file, linetable;
    int firstlineno = 0;
  };
  using Key = std::tuple<int, std::uint64_t, std::uint64_t>;  // (pid, serial, code object)
  struct Slot {
    std::optional<Code> code;  // nullopt: unreadable (remembered so, too)
    std::uint64_t bytes = 0;
    std::list<Key>::iterator lru;
  };
  std::optional<Code> read_code(const PythonRegistry::Found& p, std::uint64_t code) const;
  static std::uint64_t bytes_of(const std::optional<Code>& c);
  void drop_oldest();

  const host::Procfs& fs_;
  std::uint64_t budget_;
  std::map<Key, Slot> codes_;
  std::list<Key> lru_;  // most recently used first
  std::uint64_t cached_bytes_ = 0, evicted_ = 0, refused_ = 0;
};

}  // namespace stallwatch::trace
