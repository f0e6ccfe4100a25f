// CPython layouts, interpreter discovery and the registry (python.h); frames are decoded in
// python_frames.cpp.
#include "trace/python.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include <bpf/bpf.h>

#include "bpf/cuda.h"
#include "common/log.h"
#include "common/strings.h"
#include "trace/elf_symbols.h"
#include "trace/proc_maps.h"

namespace stallwatch::trace {
namespace {

// Facts of CPython's headers (Include/cpython/pystate.h, Include/internal/pycore_interp.h,
// pycore_runtime.h, pycore_frame.h, Include/cpython/code.h, frameobject.h, unicodeobject.h) for
// the default (GIL) x86-64/arm64 build, as offsetof() gives them for 3.10.13, 3.11.7, 3.12.1
// and 3.13.0; tests/unit/python_layout_test.cpp compiles the same offsetof()s against each
// interpreter's headers found on the machine and compares.
PyLayout layout_310() {
  PyLayout l;
  l.minor = 10;
  l.rt_interp_head = 32;
  l.interp_threads_head = 8;  // tstate_head
  l.ts_next = 8;
  l.ts_interp = 16;
  l.ts_tid = 176;  // thread_id: pthread_self()
  l.tid_kind = SW_PY_TID_PTHREAD;
  l.ts_frame = 24;
  l.frame_kind = SW_PY_FRAME_OBJECT;
  l.fr_back = 24;
  l.fr_code = 32;
  l.fr_instr = 96;  // f_lasti
  l.co_filename = 104;
  l.co_name = 112;
  l.co_qualname = 0;
  l.co_firstlineno = 40;
  l.co_linetable = 120;
  l.ascii_size = 48;
  l.compact_size = 72;
  return l;
}

PyLayout layout_311() {
  PyLayout l;
  l.minor = 11;
  l.rt_interp_head = 40;
  l.interp_threads_head = 16;
  l.ts_next = 8;
  l.ts_interp = 16;
  l.ts_tid = 160;  // native_thread_id
  l.ts_frame = 56;  // cframe
  l.cframe_current = 8;
  l.frame_kind = SW_PY_FRAME_CFRAME;
  l.fr_back = 48;
  l.fr_code = 32;
  l.fr_instr = 56;  // prev_instr
  l.code_adaptive = 184;
  l.co_filename = 112;
  l.co_name = 120;
  l.co_qualname = 128;
  l.co_firstlineno = 72;
  l.co_linetable = 136;
  l.ascii_size = 48;
  l.compact_size = 72;
  return l;
}

PyLayout layout_312() {
  PyLayout l = layout_311();
  l.minor = 12;
  l.interp_threads_head = 72;
  l.ts_tid = 144;
  l.ts_frame = 56;
  l.cframe_current = 0;
  l.fr_back = 8;
  l.fr_code = 0;
  l.fr_instr = 56;
  l.fr_owner = 70;
  l.owner_cstack = 3;  // FRAME_OWNED_BY_CSTACK
  l.code_adaptive = 192;
  l.co_firstlineno = 68;
  l.ascii_size = 40;
  l.compact_size = 56;
  return l;
}

PyLayout layout_313() {
  PyLayout l = layout_312();
  l.minor = 13;
  l.rt_interp_head = 632;
  l.interp_threads_head = 7344;
  l.ts_tid = 160;
  l.ts_frame = 72;  // current_frame
  l.frame_kind = SW_PY_FRAME_CURRENT;
  l.code_adaptive = 200;
  return l;
}

std::uint64_t u64_at(std::string_view b, size_t index) {
  std::uint64_t v = 0;
  std::memcpy(&v, b.data() + index * 8, 8);
  return v;
}

// "python3.12", "libpython3.12.so.1.0", "libpython3.12d.so" → (3, 12).
std::optional<std::pair<int, int>> version_in_name(std::string_view path) {
  auto slash = path.rfind('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (name.starts_with("lib")) name.remove_prefix(3);
  if (!name.starts_with("python3.")) return std::nullopt;
  name.remove_prefix(8);
  int minor = 0;
  size_t i = 0;
  while (i < name.size() && i < 3 && name[i] >= '0' && name[i] <= '9') minor = minor * 10 + (name[i++] - '0');
  if (i == 0) return std::nullopt;
  return std::pair{3, minor};
}

bool looks_like_python(std::string_view path) {
  auto slash = path.rfind('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return name.starts_with("libpython3") || name.starts_with("python3") || name == "python";
}

}  // namespace

std::optional<PyLayout> builtin_layout(int major, int minor) {
  if (major != 3) return std::nullopt;
  switch (minor) {
    case 10: return layout_310();
    case 11: return layout_311();
    case 12: return layout_312();
    case 13: return layout_313();
    default: return std::nullopt;
  }
}

Result<PyLayout> layout_from_debug_offsets(std::string_view b) {
  if (b.size() < 64 || b.substr(0, 8) != std::string_view("xdebugpy", 8)) {
    return make_error("no _Py_DebugOffsets cookie at _PyRuntime");
  }
  const std::uint64_t hex = u64_at(b, 1);
  const int major = static_cast<int>(hex >> 24), minor = static_cast<int>((hex >> 16) & 0xff);
  if (major != 3 || minor < 13) {
    return make_error("_Py_DebugOffsets of version " + std::to_string(major) + "." +
                      std::to_string(minor) + " (3.13+ expected)");
  }
  if (u64_at(b, 2) != 0) return make_error("free-threaded CPython builds are not supported");
  // Index (in uint64s) of each field; the sections' lengths are per minor version.
  struct Fields {
    size_t interpreters_head, threads_head, ts_next, ts_interp, ts_frame, ts_native_tid,
        fr_previous, fr_executable, fr_instr, fr_owner, co_filename, co_name, co_qualname,
        co_linetable, co_firstlineno, co_adaptive, uni_ascii_size, end;
  };
  Fields f{};
  if (minor == 13) {
    // header 3; runtime_state 3 (3..5); interpreter_state 13 (6..18); thread_state 9 (19..27);
    // interpreter_frame 6 (28..33); code_object 10 (34..43); pyobject 2; type_object 4;
    // tuple 3; list 3; dict 3; float 2; long 3; bytes 3 (44..66); unicode_object 4 (67..70).
    f = {5, 9, 21, 22, 23, 25, 29, 30, 31, 33, 35, 36, 37, 38, 39, 43, 70, 71};
  } else if (minor == 14) {
    // header 3; runtime_state 3 (3..5); interpreter_state 16 (6..21); thread_state 9
    // (22..30); interpreter_frame 8 (31..38); code_object 11 (39..49); pyobject 2; type 4;
    // tuple 3; list 3; set 4; dict 3; float 2; long 3; bytes 3 (50..76); unicode 4 (77..80).
    f = {5, 9, 24, 25, 26, 28, 32, 33, 34, 36, 40, 41, 42, 43, 44, 48, 80, 81};
  } else {
    return make_error("_Py_DebugOffsets of CPython 3." + std::to_string(minor) +
                      " has a layout this stallwatch does not know (3.13 and 3.14 are known)");
  }
  if (b.size() < f.end * 8) return make_error("_Py_DebugOffsets is shorter than its layout");
  PyLayout l;
  l.major = 3;
  l.minor = minor;
  l.from_debug_offsets = true;
  auto narrow = [&](size_t index, std::uint16_t& out) {
    std::uint64_t v = u64_at(b, index);
    if (v > 0xfff0) return false;
    out = static_cast<std::uint16_t>(v);
    return true;
  };
  std::uint16_t ascii = 0;
  bool ok = narrow(f.interpreters_head, l.rt_interp_head) &&
            narrow(f.threads_head, l.interp_threads_head) && narrow(f.ts_next, l.ts_next) &&
            narrow(f.ts_interp, l.ts_interp) && narrow(f.ts_frame, l.ts_frame) &&
            narrow(f.ts_native_tid, l.ts_tid) && narrow(f.fr_previous, l.fr_back) &&
            narrow(f.fr_executable, l.fr_code) && narrow(f.fr_instr, l.fr_instr) &&
            narrow(f.fr_owner, l.fr_owner) && narrow(f.co_filename, l.co_filename) &&
            narrow(f.co_name, l.co_name) && narrow(f.co_qualname, l.co_qualname) &&
            narrow(f.co_linetable, l.co_linetable) && narrow(f.co_firstlineno, l.co_firstlineno) &&
            narrow(f.co_adaptive, l.code_adaptive) && narrow(f.uni_ascii_size, ascii);
  if (!ok) return make_error("_Py_DebugOffsets holds an offset past 64 KiB (corrupt?)");
  l.tid_kind = SW_PY_TID_NATIVE;
  l.frame_kind = SW_PY_FRAME_CURRENT;
  // Frames owned by the C stack or the interpreter (shims, no code of the user) are skipped:
  // owner 3 (CSTACK in 3.12/3.13, INTERPRETER in 3.14) and above.
  l.owner_cstack = 3;
  // 3.14's f_executable is a _PyStackRef: the low bits are tags.
  if (minor >= 14) l.code_mask = ~std::uint64_t{3};
  l.ascii_size = ascii;
  // PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
  l.compact_size = static_cast<std::uint16_t>(ascii + 16);
  return l;
}

std::optional<int> py_line_310(std::string_view table, int firstlineno, std::uint32_t instr) {
  // Objects/lnotab_notes.txt (3.10): (start delta, line delta) byte pairs; a line delta of
  // -128 means "no line"; 0 extends the previous range.
  int line = firstlineno;
  std::optional<int> current = firstlineno;
  std::uint64_t end = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    const std::uint64_t start = end;
    end += static_cast<unsigned char>(table[i]);
    const int delta = static_cast<signed char>(table[i + 1]);
    if (delta == -128) {
      current.reset();
    } else if (delta != 0) {
      line += delta;
      current = line;
    }
    if (instr >= start && instr < end) return current;
  }
  return std::nullopt;
}

std::optional<int> py_line_311(std::string_view table, int firstlineno, std::uint32_t instr) {
  // Objects/locations.md: each entry starts with a byte 1CCCCLLL (code, length - 1 in code
  // units of 2 bytes), then varints of 6-bit chunks (0x40: more follows), signed ones with the
  // sign in bit 0.
  size_t i = 0;
  auto varint = [&]() -> std::uint64_t {
    std::uint64_t v = 0;
    unsigned shift = 0;
    while (i < table.size() && shift < 54) {  // at most 9 chunks: v < 2^54
      auto b = static_cast<unsigned char>(table[i++]);
      v |= static_cast<std::uint64_t>(b & 0x3f) << shift;
      shift += 6;
      if (!(b & 0x40)) break;
    }
    return v;
  };
  auto svarint = [&]() -> std::int64_t {
    std::uint64_t v = varint();
    return (v & 1) ? -static_cast<std::int64_t>(v >> 1) : static_cast<std::int64_t>(v >> 1);
  };
  std::int64_t line = firstlineno;
  std::uint64_t addr = 0;
  while (i < table.size()) {
    auto first = static_cast<unsigned char>(table[i++]);
    if (!(first & 0x80)) return std::nullopt;  // lost sync: corrupt table
    const unsigned code = (first >> 3) & 15;
    const std::uint64_t length = ((first & 7) + 1) * 2;
    bool has_line = true;
    if (code == 15) {
      has_line = false;
    } else if (code == 14) {
      line += svarint();  // |delta| < 2^59 and |line| < 2^31 below: no overflow
      varint();  // end line delta
      varint();  // column + 1
      varint();  // end column + 1
    } else if (code == 13) {
      line += svarint();
    } else if (code >= 10) {
      line += code - 10;
      i += 2;  // column, end column
    } else {
      i += 1;  // short form: column bits
    }
    if (line > INT32_MAX || line < INT32_MIN) return std::nullopt;  // corrupt: no such line
    if (instr >= addr && instr < addr + length) {
      if (!has_line) return std::nullopt;
      return static_cast<int>(line);
    }
    addr += length;
  }
  return std::nullopt;
}

ProcessMemory::ProcessMemory(const host::Procfs& fs, int pid)
    : fd_(::open(fs.pid_path(pid, "mem").c_str(), O_RDONLY | O_CLOEXEC)) {}

ProcessMemory::~ProcessMemory() {
  if (fd_ >= 0) ::close(fd_);
}

bool ProcessMemory::read(std::uint64_t addr, void* out, size_t len) const {
  if (fd_ < 0 || len > (16u << 20) || addr > static_cast<std::uint64_t>(INT64_MAX)) return false;
  auto* p = static_cast<char*>(out);
  while (len > 0) {
    ssize_t n = ::pread(fd_, p, len, static_cast<off_t>(addr));
    if (n <= 0) return false;
    p += n;
    addr += static_cast<std::uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::uint64_t> ProcessMemory::read_u64(std::uint64_t addr) const {
  std::uint64_t v = 0;
  if (!read(addr, &v, sizeof v)) return std::nullopt;
  return v;
}

Result<PyProcess> inspect_python(const host::Procfs& fs, int pid) {
  const std::string maps = host::Procfs::read_bounded(fs.pid_path(pid, "maps"), kMaxMapsBytes);
  if (maps.empty()) return make_error("its /proc/PID/maps cannot be read (exited?)");
  // Candidate files, each by its first mapping at file offset 0 (the lowest address).
  std::vector<MapsEntry> files;
  size_t pos = 0;
  while (pos < maps.size()) {
    size_t nl = maps.find('\n', pos);
    if (nl == std::string::npos) nl = maps.size();
    MapsEntry e;
    if (parse_maps_line(std::string_view(maps).substr(pos, nl - pos), e) && e.offset == 0 &&
        !e.path.empty() && e.path[0] == '/' && looks_like_python(e.file_path())) {
      if (std::none_of(files.begin(), files.end(),
                       [&](const MapsEntry& f) { return f.file_path() == e.file_path(); })) {
        files.push_back(std::move(e));
      }
    }
    pos = nl + 1;
  }
  if (files.empty()) return make_error("not CPython (no libpython3.X or python3 mapped)");
  ProcessMemory mem(fs, pid);
  if (!mem.ok()) return make_error("its memory cannot be read (" + std::string(std::strerror(errno)) + ")");
  std::string last_error = "no mapped python file exports _PyRuntime";
  for (const MapsEntry& mapping : files) {
    const std::string path(mapping.file_path());
    const std::uint64_t start = mapping.start;
    // The file the process maps (also when deleted since), never what a symlink planted in
    // its root names on the host.
    auto file = open_mapped_file(fs, pid, mapping);
    if (!file) {
      last_error = file.error().message;
      continue;
    }
    auto found = read_symbol_addresses(file->get(), path, {"_PyRuntime", "Py_Version"});
    if (!found) {
      last_error = found.error().message;
      continue;
    }
    auto rt = found->vaddr.find("_PyRuntime");
    if (rt == found->vaddr.end()) continue;
    const std::uint64_t base = start - (found->load_vaddr & ~std::uint64_t{0xfff});
    PyProcess p;
    p.pid = pid;
    p.interpreter = path;
    p.runtime = base + rt->second;
    // The version: Py_Version (3.11+, PY_VERSION_HEX) in the process, else the file's name.
    int major = 0, minor = 0;
    if (auto v = found->vaddr.find("Py_Version"); v != found->vaddr.end()) {
      std::uint32_t hex = 0;
      if (mem.read(base + v->second, &hex, sizeof hex)) {
        major = static_cast<int>(hex >> 24);
        minor = static_cast<int>((hex >> 16) & 0xff);
      }
    }
    if (major == 0) {
      auto named = version_in_name(path);
      if (!named) return make_error(path + " exports _PyRuntime but its version is unknown");
      std::tie(major, minor) = *named;
    }
    if (major != 3 || minor < 10) {
      return make_error("CPython " + std::to_string(major) + "." + std::to_string(minor) +
                        " (3.10 and later get Python frames)");
    }
    std::optional<PyLayout> layout;
    std::string why_table;
    if (minor >= 13) {
      std::string raw(kDebugOffsetsBytes, '\0');
      if (mem.read(p.runtime, raw.data(), raw.size())) {
        auto parsed = layout_from_debug_offsets(raw);
        if (parsed) {
          layout = *parsed;
        } else {
          why_table = parsed.error().message;
        }
      }
    }
    if (!layout) layout = builtin_layout(major, minor);
    if (!layout) {
      return make_error("CPython 3." + std::to_string(minor) + ": " +
                        (why_table.empty() ? "no offsets known for this version" : why_table));
    }
    p.layout = *layout;
    // The kernel reads the first SW_PY_FRAME_BLOCK bytes of a frame and takes every field
    // from them.
    const PyLayout& l = p.layout;
    if (l.fr_code + 8 > SW_PY_FRAME_BLOCK || l.fr_back + 8 > SW_PY_FRAME_BLOCK ||
        l.fr_instr + 8 > SW_PY_FRAME_BLOCK ||
        (l.fr_owner != 0xffff && l.fr_owner + 1 > SW_PY_FRAME_BLOCK)) {
      return make_error("CPython 3." + std::to_string(minor) + ": frame fields past byte " +
                        std::to_string(SW_PY_FRAME_BLOCK) + " (not supported)");
    }
    // Validate on the live process: its interpreter's first thread state points back at it.
    auto interp = mem.read_u64(p.runtime + p.layout.rt_interp_head);
    if (!interp || *interp == 0) {
      return make_error("CPython 3." + std::to_string(minor) +
                        ": no interpreter at _PyRuntime (not initialised yet, or the offsets "
                        "do not match this build)");
    }
    auto ts = mem.read_u64(*interp + p.layout.interp_threads_head);
    auto back = ts && *ts ? mem.read_u64(*ts + p.layout.ts_interp) : std::nullopt;
    if (!back || *back != *interp) {
      return make_error("CPython 3." + std::to_string(minor) +
                        ": the struct offsets do not match this build (a thread state does not "
                        "point back at its interpreter)");
    }
    return p;
  }
  return make_error(last_error);
}

void fill_py_proc(const PyProcess& p, std::uint32_t start_tag, py_proc& out) {
  const PyLayout& l = p.layout;
  out = {};
  out.runtime = p.runtime;
  out.code_mask = l.code_mask;
  out.start_tag = start_tag;
  out.tid_kind = l.tid_kind;
  out.frame_kind = l.frame_kind;
  out.owner_cstack = l.owner_cstack;
  out.rt_interp_head = l.rt_interp_head;
  out.interp_threads_head = l.interp_threads_head;
  out.ts_next = l.ts_next;
  out.ts_tid = l.ts_tid;
  out.ts_frame = l.ts_frame;
  out.cframe_current = l.cframe_current;
  out.fr_back = l.fr_back;
  out.fr_code = l.fr_code;
  out.fr_instr = l.fr_instr;
  out.fr_owner = l.fr_owner;
  out.code_adaptive = l.code_adaptive;
}

void PythonRegistry::seen(int pid) {
  const std::uint32_t tag = fs_.start_tag(pid);
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(pid);
    if (it != entries_.end() && it->second.start_tag == tag) return;  // known
  }
  Entry e;
  e.start_tag = tag;
  auto found = inspect_python(fs_, pid);
  const std::string comm = escape_name(fs_.comm(pid));
  if (found) {
    e.process = *found;
    if (map_fd_ >= 0) {
      py_proc v{};
      fill_py_proc(*found, tag, v);
      const std::uint32_t key = static_cast<std::uint32_t>(pid);
      if (bpf_map_update_elem(map_fd_, &key, &v, BPF_ANY) != 0) {
        e.process.reset();
        e.why_not = "the py_procs map is full (4096 Python processes)";
      }
    }
    if (e.process) {
      SW_LOG(kInfo) << comm << " (pid " << pid << "): Python 3." << found->layout.minor
                    << " frames from " << escape_name(found->interpreter)
                    << (found->layout.from_debug_offsets ? " (its _Py_DebugOffsets)"
                                                         : " (built-in offsets, validated)");
    }
  } else {
    e.why_not = found.error().message;
  }
  if (!e.process) {
    // A process that is not CPython at all is the common case: not worth a line at info.
    if (e.why_not.starts_with("not CPython")) {
      SW_LOG(kDebug) << comm << " (pid " << pid << "): no Python frames: " << e.why_not;
    } else {
      SW_LOG(kWarn) << comm << " (pid " << pid << "): no Python frames: " << e.why_not;
    }
  }
  std::lock_guard lock(mu_);
  e.serial = next_serial_++;
  entries_[pid] = std::move(e);
}

void PythonRegistry::gone(int pid) {
  std::lock_guard lock(mu_);
  if (entries_.erase(pid) && map_fd_ >= 0) {
    const std::uint32_t key = static_cast<std::uint32_t>(pid);
    bpf_map_delete_elem(map_fd_, &key);
  }
}

std::optional<PythonRegistry::Found> PythonRegistry::find(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end() || !it->second.process) return std::nullopt;
  return Found{*it->second.process, it->second.serial};
}

std::string PythonRegistry::describe(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return "";
  if (!it->second.process) return "no Python frames: " + it->second.why_not;
  return "Python 3." + std::to_string(it->second.process->layout.minor) + " frames (" +
         it->second.process->interpreter + ")";
}

size_t PythonRegistry::python_processes() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(),
                                           [](const auto& e) { return e.second.process; }));
}

}  // namespace stallwatch::trace
