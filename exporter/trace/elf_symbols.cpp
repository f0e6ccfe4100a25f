// Reads function symbols and their uprobe file offsets out of one 64-bit little-endian ELF.
// Every structure is read with pread(2) after a bounds check against the size the file had
// when it was opened (misaligned or hostile offsets are harmless); a file truncated or replaced
// in place during the parse gives short reads and an error, never SIGBUS as a mapping would.
// Symbol and string tables are read whole (bounded by kMaxTableBytes), headers one by one.
#include "trace/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

namespace stallwatch::trace {
namespace {

static_assert(std::endian::native == std::endian::little,
              "fields are read in host byte order; only little-endian ELF is accepted");

// Where the bytes come from: a file (pread) or memory (tests, fuzzing). Reads outside `size`
// or short reads fail.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::uint64_t size() const = 0;
  virtual bool read(std::uint64_t offset, std::uint64_t length, void* out) const = 0;
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

 private:
  std::string_view data_;
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

class FileSource : public Source {
 public:
  FileSource(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
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
  static Result<std::unique_ptr<FileSource>> open(const std::string& path);

 private:
  Fd fd_;
  std::uint64_t size_;
};

Result<std::unique_ptr<FileSource>> FileSource::open(const std::string& path) {
  // O_NONBLOCK: a FIFO handed in by mistake must not hang the caller (no effect on files).
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (raw < 0) {
    int err = errno;
    return make_error(path + ": cannot open: " + std::strerror(err), err);
  }
  auto source = std::make_unique<FileSource>(raw, 0);
  struct stat st {};
  if (fstat(raw, &st) != 0) {
    int err = errno;
    return make_error(path + ": cannot stat: " + std::strerror(err), err);
  }
  if (!S_ISREG(st.st_mode)) return make_error(path + ": not a regular file", EINVAL);
  if (st.st_size < static_cast<off_t>(EI_NIDENT)) {
    return make_error(path + ": not an ELF file (only " + std::to_string(st.st_size) + " bytes)",
                      ENOEXEC);
  }
  source->size_ = static_cast<std::uint64_t>(st.st_size);
  return source;
}

// One symbol table or string table is read whole; libnccl's .symtab is a few MB.
constexpr std::uint64_t kMaxTableBytes = 256ull << 20;

// Bounds-checked reads. Messages returned by the helpers below leave the path out;
// read_function_symbols prefixes it.
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
  template <typename T>
  std::optional<T> read(std::uint64_t offset) const {
    T value;
    if (!source_.read(offset, sizeof(T), &value)) return std::nullopt;
    return value;
  }
  // `length` bytes at `offset` (at most kMaxTableBytes); nullopt when they cannot be read.
  std::optional<std::string> read_block(std::uint64_t offset, std::uint64_t length) const {
    if (length > kMaxTableBytes || !contains(offset, length)) return std::nullopt;
    std::string out(length, '\0');
    if (!source_.read(offset, length, out.data())) return std::nullopt;
    return out;
  }
  std::uint64_t size() const { return size_; }

 private:
  const Source& source_;
  std::uint64_t size_;
};

// Bit 15 of a .gnu.version entry: not the default version (glibc's elf.h lacks the name).
constexpr Elf64_Versym kVersymHidden = 0x8000;

Error format_error(std::string why) { return make_error(std::move(why), ENOEXEC); }

using Sections = std::vector<Elf64_Shdr>;

Result<Sections> read_sections(const Bytes& file, const Elf64_Ehdr& eh) {
  if (eh.e_shoff == 0) return format_error("no section headers (stripped with sstrip?)");
  if (eh.e_shentsize < sizeof(Elf64_Shdr)) {
    return format_error("bad e_shentsize " + std::to_string(eh.e_shentsize));
  }
  auto first = file.read<Elf64_Shdr>(eh.e_shoff);
  if (!first) return format_error("truncated: section headers lie past the end of the file");
  // With 0xff00 or more sections the real count lives in section 0's sh_size.
  std::uint64_t count = eh.e_shnum != 0 ? eh.e_shnum : first->sh_size;
  if (!file.contains_array(eh.e_shoff, count, eh.e_shentsize)) {
    return format_error("truncated: section headers lie past the end of the file");
  }
  Sections s;
  s.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    auto sh = file.read<Elf64_Shdr>(eh.e_shoff + i * eh.e_shentsize);
    if (!sh) return format_error("truncated while reading section headers");
    s.push_back(*sh);
  }
  return s;
}

struct LoadSegment {
  std::uint64_t vaddr;
  std::uint64_t filesz;
  std::uint64_t offset;
};

Result<std::vector<LoadSegment>> read_load_segments(const Bytes& file, const Elf64_Ehdr& eh,
                                                    const Sections& sections) {
  if (eh.e_phoff == 0 || eh.e_phnum == 0) return format_error("no program headers");
  if (eh.e_phentsize < sizeof(Elf64_Phdr)) {
    return format_error("bad e_phentsize " + std::to_string(eh.e_phentsize));
  }
  // PN_XNUM: the real count lives in section 0's sh_info.
  std::uint64_t count = eh.e_phnum;
  if (eh.e_phnum == PN_XNUM && !sections.empty()) count = sections[0].sh_info;
  if (!file.contains_array(eh.e_phoff, count, eh.e_phentsize)) {
    return format_error("truncated: program headers lie past the end of the file");
  }
  std::vector<LoadSegment> segments;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto read = file.read<Elf64_Phdr>(eh.e_phoff + i * eh.e_phentsize);
    if (!read) return format_error("truncated while reading program headers");
    const Elf64_Phdr& ph = *read;
    if (ph.p_type != PT_LOAD || ph.p_filesz == 0) continue;
    if (!file.contains(ph.p_offset, ph.p_filesz)) {
      return format_error("truncated: PT_LOAD segment " + std::to_string(i) +
                          " extends past the end of the file");
    }
    if (ph.p_vaddr + ph.p_filesz < ph.p_vaddr) {
      return format_error("PT_LOAD segment " + std::to_string(i) + " wraps the address space");
    }
    segments.push_back({ph.p_vaddr, ph.p_filesz, ph.p_offset});
  }
  if (segments.empty()) return format_error("no file-backed PT_LOAD segment");
  return segments;
}

std::optional<std::uint64_t> to_file_offset(const std::vector<LoadSegment>& segments,
                                            std::uint64_t vaddr) {
  for (const auto& s : segments) {
    if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) return vaddr - s.vaddr + s.offset;
  }
  return std::nullopt;
}

// A definition found so far for one name; a later one replaces it only with a higher rank.
struct Candidate {
  std::uint64_t file_offset;
  std::uint64_t size;
  int rank;
};

// One symbol table (.dynsym or .symtab) with its string table and, for .dynsym, the
// .gnu.version array that says which of several versions of a name is the default.
struct SymbolTable {
  std::uint64_t offset;
  std::uint64_t count;
  std::uint64_t entsize;
  std::uint64_t strtab_offset;
  std::uint64_t strtab_size;
  std::optional<std::uint64_t> versym_offset;  // Elf64_Versym per symbol, when present
  bool dynamic;
};

Result<SymbolTable> describe_table(const Bytes& file, const Sections& sections, std::size_t index) {
  const Elf64_Shdr& sh = sections[index];
  const char* what = sh.sh_type == SHT_DYNSYM ? ".dynsym" : ".symtab";
  if (sh.sh_entsize < sizeof(Elf64_Sym)) {
    return format_error(std::string(what) + ": bad sh_entsize " + std::to_string(sh.sh_entsize));
  }
  if (!file.contains(sh.sh_offset, sh.sh_size)) {
    return format_error(std::string("truncated: ") + what + " lies past the end of the file");
  }
  if (sh.sh_link == 0 || sh.sh_link >= sections.size() ||
      sections[sh.sh_link].sh_type != SHT_STRTAB) {
    return format_error(std::string(what) + ": sh_link does not name a string table");
  }
  const Elf64_Shdr& str = sections[sh.sh_link];
  if (!file.contains(str.sh_offset, str.sh_size)) {
    return format_error(std::string("truncated: string table of ") + what +
                        " lies past the end of the file");
  }
  SymbolTable t{sh.sh_offset, sh.sh_size / sh.sh_entsize, sh.sh_entsize, str.sh_offset, str.sh_size,
                std::nullopt, sh.sh_type == SHT_DYNSYM};
  if (t.dynamic) {
    for (const auto& v : sections) {
      if (v.sh_type == SHT_GNU_versym && v.sh_link == index &&
          file.contains_array(v.sh_offset, t.count, sizeof(Elf64_Versym)) &&
          v.sh_size / sizeof(Elf64_Versym) >= t.count) {
        t.versym_offset = v.sh_offset;
        break;
      }
    }
  }
  return t;
}

Result<Ok> collect(const Bytes& file, const SymbolTable& t,
                   const std::vector<LoadSegment>& segments,
                   std::map<std::string, Candidate, std::less<>>& out) {
  auto table = file.read_block(t.offset, t.count * t.entsize);
  auto strings = file.read_block(t.strtab_offset, t.strtab_size);
  if (!table || !strings) {
    return format_error(std::string(t.dynamic ? ".dynsym" : ".symtab") +
                        " or its string table cannot be read (truncated, or over 256 MiB)");
  }
  std::optional<std::string> versyms;
  if (t.versym_offset) versyms = file.read_block(*t.versym_offset, t.count * sizeof(Elf64_Versym));
  const MemorySource table_bytes(*table), versym_bytes(versyms ? *versyms : std::string_view());
  for (std::uint64_t i = 1; i < t.count; ++i) {  // entry 0 is the reserved null symbol
    Elf64_Sym sym;
    if (!table_bytes.read(i * t.entsize, sizeof sym, &sym)) break;
    unsigned type = ELF64_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
    if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0 || sym.st_name == 0) continue;
    if (sym.st_name >= t.strtab_size) {
      return format_error("symbol " + std::to_string(i) + " has a name outside its string table");
    }
    const char* begin = strings->data() + sym.st_name;
    const void* nul = std::memchr(begin, '\0', t.strtab_size - sym.st_name);
    if (nul == nullptr) {
      return format_error("symbol " + std::to_string(i) + " has an unterminated name");
    }
    std::string_view name(begin, static_cast<const char*>(nul) - begin);

    // Ranking: exported (.dynsym) over local-only tables, global/weak over local binding,
    // default version over hidden/old versions ("name@@V" or no '@' in .symtab).
    bool default_version = true;
    if (auto at = name.find('@'); at != std::string_view::npos) {
      default_version = name.substr(at).starts_with("@@");
      name = name.substr(0, at);
    }
    Elf64_Versym versym;
    if (versyms && versym_bytes.read(i * sizeof versym, sizeof versym, &versym) &&
        ((versym & kVersymHidden) != 0 || versym == VER_NDX_LOCAL)) {
      default_version = false;
    }
    if (name.empty()) continue;
    auto offset = to_file_offset(segments, sym.st_value);
    if (!offset) continue;  // not in a file-backed segment: nothing a uprobe could hit
    int rank = (t.dynamic ? 4 : 0) + (ELF64_ST_BIND(sym.st_info) != STB_LOCAL ? 2 : 0) +
               (default_version ? 1 : 0);
    auto it = out.find(name);
    if (it == out.end()) {
      out.emplace(std::string(name), Candidate{*offset, sym.st_size, rank});
    } else if (rank > it->second.rank) {
      it->second = Candidate{*offset, sym.st_size, rank};
    }
  }
  return Ok{};
}

Result<std::vector<ElfSymbol>> parse(const Bytes& file) {
  auto ident_bytes = file.read_block(0, EI_NIDENT);
  if (!ident_bytes) return format_error("not an ELF file (too short)");
  const auto* ident = reinterpret_cast<const unsigned char*>(ident_bytes->data());
  if (std::memcmp(ident, ELFMAG, SELFMAG) != 0) return format_error("not an ELF file");
  if (ident[EI_CLASS] != ELFCLASS64) {
    return format_error(ident[EI_CLASS] == ELFCLASS32
                            ? "32-bit ELF is not supported (64-bit little-endian only)"
                            : "unknown ELF class " + std::to_string(ident[EI_CLASS]));
  }
  if (ident[EI_DATA] != ELFDATA2LSB) {
    return format_error("big-endian ELF is not supported (64-bit little-endian only)");
  }
  auto eh = file.read<Elf64_Ehdr>(0);
  if (!eh) return format_error("truncated: ELF header is incomplete");
  if (eh->e_type != ET_DYN && eh->e_type != ET_EXEC) {
    return format_error("not an executable or shared object (e_type " + std::to_string(eh->e_type) +
                        ")");
  }
  auto sections = read_sections(file, *eh);
  if (!sections) return sections.error();
  auto segments = read_load_segments(file, *eh, *sections);
  if (!segments) return segments.error();

  std::optional<std::size_t> dynsym, symtab;
  for (std::size_t i = 0; i < sections->size(); ++i) {
    auto type = (*sections)[i].sh_type;
    if (type == SHT_DYNSYM && !dynsym) dynsym = i;
    if (type == SHT_SYMTAB && !symtab) symtab = i;
  }
  if (!dynsym && !symtab) return format_error("no symbol table (.dynsym or .symtab)");

  std::map<std::string, Candidate, std::less<>> found;
  for (auto index : {dynsym, symtab}) {
    if (!index) continue;
    auto table = describe_table(file, *sections, *index);
    if (!table) return table.error();
    auto done = collect(file, *table, *segments, found);
    if (!done) return done.error();
  }
  std::vector<ElfSymbol> symbols;
  symbols.reserve(found.size());
  for (auto& [name, c] : found) symbols.push_back({name, c.file_offset, c.size});
  return symbols;
}

Result<ElfAddresses> parse_addresses(const Bytes& file, const std::vector<std::string>& names) {
  auto eh = file.read<Elf64_Ehdr>(0);
  if (!eh || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
      eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB) {
    return format_error("not a 64-bit little-endian ELF file");
  }
  auto sections = read_sections(file, *eh);
  if (!sections) return sections.error();
  auto segments = read_load_segments(file, *eh, *sections);
  if (!segments) return segments.error();
  ElfAddresses out;
  out.load_vaddr = segments->front().vaddr;
  for (const auto& seg : *segments) out.load_vaddr = std::min(out.load_vaddr, seg.vaddr);
  for (std::size_t i = 0; i < sections->size(); ++i) {
    auto type = (*sections)[i].sh_type;
    if (type != SHT_DYNSYM && type != SHT_SYMTAB) continue;
    auto t = describe_table(file, *sections, i);
    if (!t) return t.error();
    auto table = file.read_block(t->offset, t->count * t->entsize);
    auto strings = file.read_block(t->strtab_offset, t->strtab_size);
    if (!table || !strings) return format_error("a symbol table cannot be read");
    const MemorySource table_bytes(*table);
    for (std::uint64_t k = 1; k < t->count; ++k) {
      Elf64_Sym sym;
      if (!table_bytes.read(k * t->entsize, sizeof sym, &sym)) break;
      if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0 || sym.st_name >= t->strtab_size) continue;
      const char* begin = strings->data() + sym.st_name;
      const void* nul = std::memchr(begin, '\0', t->strtab_size - sym.st_name);
      if (nul == nullptr) continue;
      std::string_view name(begin, static_cast<const char*>(nul) - begin);
      if (auto at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
      for (const auto& want : names) {
        if (name == want) out.vaddr.emplace(want, sym.st_value);
      }
    }
  }
  return out;
}

}  // namespace

Result<ElfAddresses> read_symbol_addresses(const std::string& path,
                                           const std::vector<std::string>& names) {
  auto source = FileSource::open(path);
  if (!source) return source.error();
  auto found = parse_addresses(Bytes(**source), names);
  if (!found) return make_error(path + ": " + found.error().message, found.error().err);
  return found;
}

Result<ElfAddresses> read_symbol_addresses_in_memory(std::string_view image,
                                                     const std::vector<std::string>& names) {
  const MemorySource source(image);
  return parse_addresses(Bytes(source), names);
}

Result<std::vector<ElfSymbol>> read_function_symbols(const std::string& path) {
  auto source = FileSource::open(path);
  if (!source) return source.error();
  auto symbols = parse(Bytes(**source));
  if (!symbols) return make_error(path + ": " + symbols.error().message, symbols.error().err);
  return symbols;
}

Result<std::vector<ElfSymbol>> read_function_symbols_in_memory(std::string_view image) {
  const MemorySource source(image);
  return parse(Bytes(source));
}

}  // namespace stallwatch::trace
