// Python frames out of a traced process's memory (python.h PyResolver): a code object's
// names and line table read through /proc/PID/mem, every length capped (the process forges them
// at will), and a cache of what was read under a byte budget.
#include "trace/python.h"

#include <cstring>
#include <exception>

namespace stallwatch::trace {
namespace {

// Bytes of a PyUnicode object read from the process, as UTF-8 (compact objects only: every
// identifier and file name CPython creates is compact). At most kMaxString characters.
constexpr size_t kMaxString = 1024;

void append_utf8(std::string& out, std::uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x110000) {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += '?';
  }
}

std::optional<std::string> read_unicode(const ProcessMemory& mem, const PyLayout& l,
                                        std::uint64_t obj) {
  if (!obj) return std::nullopt;
  // PyASCIIObject: ob_refcnt, ob_type, length, hash, state (a 32-bit bitfield).
  struct {
    std::uint64_t refcnt, type, length, hash;
    std::uint32_t state;
  } head{};
  if (!mem.read(obj, &head, sizeof head)) return std::nullopt;
  const unsigned kind = (head.state >> 2) & 7, compact = (head.state >> 5) & 1,
                 ascii = (head.state >> 6) & 1;
  if (!compact || head.length > kMaxString) return std::nullopt;
  const std::uint64_t data = obj + (ascii ? l.ascii_size : l.compact_size);
  if (kind != 1 && kind != 2 && kind != 4) return std::nullopt;
  std::string raw(head.length * kind, '\0');
  if (!raw.empty() && !mem.read(data, raw.data(), raw.size())) return std::nullopt;
  if (ascii) return raw;
  std::string out;
  for (size_t i = 0; i < head.length; ++i) {
    std::uint32_t c = 0;
    std::memcpy(&c, raw.data() + i * kind, kind);
    append_utf8(out, c);
  }
  return out;
}

// A PyBytesObject's contents (ob_size at 16, ob_sval at 32 in every version), at most `cap`.
std::optional<std::string> read_bytes(const ProcessMemory& mem, std::uint64_t obj, size_t cap) {
  if (!obj) return std::nullopt;
  auto size = mem.read_u64(obj + 16);
  if (!size || *size > cap) return std::nullopt;
  std::string out(*size, '\0');
  if (!out.empty() && !mem.read(obj + 32, out.data(), out.size())) return std::nullopt;
  return out;
}

}  // namespace

std::uint64_t PyResolver::bytes_of(const std::optional<Code>& c) {
  constexpr std::uint64_t kEntry = 160;  // map node, list node, key and Code, roughly
  return kEntry + (c ? c->function.size() + c->file.size() + c->linetable.size() : 0);
}

void PyResolver::drop_oldest() {
  auto it = codes_.find(lru_.back());
  cached_bytes_ -= it->second.bytes;
  codes_.erase(it);
  lru_.pop_back();
  evicted_++;
}

std::optional<PyFrame> PyResolver::resolve(const PythonRegistry::Found& p, std::uint64_t code,
                                           std::uint32_t instr) {
  const int pid = p.process.pid;
  const PyLayout& layout = p.process.layout;
  if (code == 0) return std::nullopt;
  try {
    const Key key{pid, p.serial, code};
    std::optional<Code> read_now;  // a code object too big to keep: answered, not cached
    const std::optional<Code>* found = nullptr;
    if (auto it = codes_.find(key); it != codes_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);  // most recently used first
      found = &it->second.code;
    } else {
      std::optional<Code> c = read_code(p, code);
      const std::uint64_t bytes = bytes_of(c);
      if (bytes > budget_) {
        refused_++;
        read_now = std::move(c);
        found = &read_now;
      } else {
        while (!lru_.empty() && (cached_bytes_ + bytes > budget_ || codes_.size() >= kMaxCodes)) {
          drop_oldest();
        }
        lru_.push_front(key);
        auto& slot = codes_[key];
        slot = Slot{std::move(c), bytes, lru_.begin()};
        cached_bytes_ += bytes;
        found = &slot.code;
      }
    }
    if (!*found) return std::nullopt;
    const Code& c = **found;
    PyFrame f{c.function, c.file, 0};
    auto line = layout.minor >= 11 ? py_line_311(c.linetable, c.firstlineno, instr)
                                   : py_line_310(c.linetable, c.firstlineno, instr);
    f.line = line.value_or(0);
    return f;
  } catch (const std::exception&) {
    return std::nullopt;  // out of memory: this frame unnamed, the pipeline goes on
  }
}

std::optional<PyResolver::Code> PyResolver::read_code(const PythonRegistry::Found& p,
                                                      std::uint64_t code) const {
  const PyLayout& layout = p.process.layout;
  ProcessMemory mem(fs_, p.process.pid);
  auto name_ptr = mem.read_u64(code + (layout.co_qualname ? layout.co_qualname : layout.co_name));
  auto file_ptr = mem.read_u64(code + layout.co_filename);
  auto table_ptr = mem.read_u64(code + layout.co_linetable);
  std::int32_t first = 0;
  auto name = name_ptr ? read_unicode(mem, layout, *name_ptr) : std::nullopt;
  auto file = file_ptr ? read_unicode(mem, layout, *file_ptr) : std::nullopt;
  if (!name || !file || !mem.read(code + layout.co_firstlineno, &first, sizeof first)) {
    return std::nullopt;
  }
  Code c;
  c.function = std::move(*name);
  c.file = std::move(*file);
  c.firstlineno = first;
  c.linetable = table_ptr ? read_bytes(mem, *table_ptr, kMaxLineTable).value_or("") : "";
  return c;
}

}  // namespace stallwatch::trace
