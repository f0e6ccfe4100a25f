// Reads function symbols and their uprobe file offsets out of one 64-bit little-endian ELF.
// Every structure is read with pread(2) after a bounds check against the size the file had
// when it was opened (misaligned or hostile offsets are harmless); a file truncated or replaced
// in place during the parse gives short reads and an error, never SIGBUS as a mapping would.
// Counts and sizes from the headers are never trusted for an allocation: each is capped
// (elf_symbols.h budgets) and each table must be stored in the file, not a hole (a 4 KiB sparse
// file can claim a terabyte). String tables are read whole, symbol tables in slices.
#include "trace/elf_symbols.h"

#include <elf.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "trace/elf_bytes.h"

namespace stallwatch::trace {
namespace {

using elf_detail::Bytes;
using elf_detail::FileSource;
using elf_detail::MemorySource;
using elf_detail::budget_words;

static_assert(std::endian::native == std::endian::little,
              "fields are read in host byte order; only little-endian ELF is accepted");

// Bit 15 of a .gnu.version entry: not the default version (glibc's elf.h lacks the name).
constexpr Elf64_Versym kVersymHidden = 0x8000;
// Symbols read per pread from a symbol table (only string tables are held whole).
constexpr std::uint64_t kSymbolsPerSlice = 4096;

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
  if (count > kElfMaxHeaders) {
    return format_error("claims " + std::to_string(count) + " section headers (at most " +
                        std::to_string(kElfMaxHeaders) + " are read)");
  }
  if (!file.contains_array(eh.e_shoff, count, eh.e_shentsize)) {
    return format_error("truncated: section headers lie past the end of the file");
  }
  if (!file.stored(eh.e_shoff, count * eh.e_shentsize)) {
    return format_error("section headers lie in a hole of a sparse file");
  }
  Sections s;
  s.reserve(count);  // at most kElfMaxHeaders x 64 bytes, all stored in the file
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
  if (count > kElfMaxHeaders) {
    return format_error("claims " + std::to_string(count) + " program headers (at most " +
                        std::to_string(kElfMaxHeaders) + " are read)");
  }
  if (!file.contains_array(eh.e_phoff, count, eh.e_phentsize)) {
    return format_error("truncated: program headers lie past the end of the file");
  }
  if (!file.stored(eh.e_phoff, count * eh.e_phentsize)) {
    return format_error("program headers lie in a hole of a sparse file");
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
  const char* name() const { return dynamic ? ".dynsym" : ".symtab"; }
  // Table bytes reading it costs: symbols, strings and versions (each at most the file size;
  // saturated rather than wrapped past the budget).
  std::uint64_t bytes() const {
    const std::uint64_t parts[] = {count * entsize, strtab_size,
                                   versym_offset ? count * sizeof(Elf64_Versym) : 0};
    std::uint64_t sum = 0;
    for (std::uint64_t p : parts) {
      if (p > kElfTableBudget) return ~std::uint64_t{0};
      sum += p;
    }
    return sum;
  }
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

// The symbol tables of a file, best first (.dynsym, what the dynamic linker binds, then
// .symtab). A table past the budget is an error only when no table came before it: .symtab
// adds local names, .dynsym alone still names every exported function.
Result<std::vector<SymbolTable>> tables_within_budget(const Bytes& file, const Sections& sections) {
  std::optional<std::size_t> dynsym, symtab;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    auto type = sections[i].sh_type;
    if (type == SHT_DYNSYM && !dynsym) dynsym = i;
    if (type == SHT_SYMTAB && !symtab) symtab = i;
  }
  if (!dynsym && !symtab) return format_error("no symbol table (.dynsym or .symtab)");
  std::vector<SymbolTable> out;
  std::uint64_t total = 0;
  for (auto index : {dynsym, symtab}) {
    if (!index) continue;
    auto t = describe_table(file, sections, *index);
    if (!t) return t.error();
    const std::uint64_t bytes = t->bytes();
    if (bytes > kElfTableBudget - total) {
      if (!out.empty()) continue;
      return make_error(std::string(t->name()) + " (" + std::to_string(t->count * t->entsize) +
                            " bytes) and its strings (" + std::to_string(t->strtab_size) +
                            " bytes) are over the budget of " + budget_words() +
                            " of tables per file",
                        EFBIG);
    }
    // Checked whole here so that the error names what the header claims; reads check again.
    for (auto [offset, size, what] : {std::tuple(t->offset, t->count * t->entsize, "symbols"),
                                      std::tuple(t->strtab_offset, t->strtab_size, "strings")}) {
      if (!file.stored(offset, size)) {
        return format_error(std::string(t->name()) + " " + what + " lie in a hole of a sparse file (" +
                            std::to_string(size) + " bytes claimed at offset " +
                            std::to_string(offset) + ", not stored)");
      }
    }
    total += bytes;
    out.push_back(*t);
  }
  return out;
}

// Walks the symbols of one table: `visit(index, sym, name)` for each with a name, reading the
// table in slices. The name is a view into `strings`, which the caller keeps.
template <typename Visit>
Result<Ok> for_each_symbol(Bytes& file, const SymbolTable& t, std::string_view strings,
                           Visit&& visit) {
  for (std::uint64_t first = 0; first < t.count; first += kSymbolsPerSlice) {
    const std::uint64_t n = std::min(kSymbolsPerSlice, t.count - first);
    auto slice = file.read_table(t.offset + first * t.entsize, n * t.entsize, t.name());
    if (!slice) return slice.error();
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::uint64_t i = first + k;
      if (i == 0) continue;  // entry 0 is the reserved null symbol
      Elf64_Sym sym;
      std::memcpy(&sym, slice->data() + k * t.entsize, sizeof sym);
      if (sym.st_name == 0) continue;
      if (sym.st_name >= strings.size()) {
        visit(i, sym, std::optional<std::string_view>());
        continue;
      }
      std::string_view rest = strings.substr(sym.st_name);
      auto nul = rest.find('\0');
      visit(i, sym, nul == std::string_view::npos ? std::optional<std::string_view>()
                                                  : std::optional(rest.substr(0, nul)));
    }
  }
  return Ok{};
}

// A definition of a name; for each name the highest rank wins, the first seen among equals.
struct Candidate {
  std::string_view name;  // into a string table the parse keeps
  std::uint64_t file_offset;
  std::uint64_t size;
  int rank;
};

Result<Ok> collect(Bytes& file, const SymbolTable& t, std::string_view strings,
                   const std::vector<LoadSegment>& segments, std::vector<Candidate>& out) {
  std::string versyms;
  if (t.versym_offset) {
    auto read = file.read_table(*t.versym_offset, t.count * sizeof(Elf64_Versym),
                                ".gnu.version");
    if (!read) return read.error();
    versyms = std::move(*read);
  }
  std::optional<Error> bad;
  auto done = for_each_symbol(file, t, strings, [&](std::uint64_t i, const Elf64_Sym& sym,
                                                    std::optional<std::string_view> full) {
    if (bad) return;
    unsigned type = ELF64_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) return;
    if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) return;
    if (!full) {
      bad = format_error("symbol " + std::to_string(i) +
                         " has a name outside its string table, or an unterminated one");
      return;
    }
    std::string_view name = *full;
    // Ranking: exported (.dynsym) over local-only tables, global/weak over local binding,
    // default version over hidden/old versions ("name@@V" or no '@' in .symtab).
    bool default_version = true;
    if (auto at = name.find('@'); at != std::string_view::npos) {
      default_version = name.substr(at).starts_with("@@");
      name = name.substr(0, at);
    }
    Elf64_Versym versym;
    if (!versyms.empty() && (i + 1) * sizeof versym <= versyms.size()) {
      std::memcpy(&versym, versyms.data() + i * sizeof versym, sizeof versym);
      if ((versym & kVersymHidden) != 0 || versym == VER_NDX_LOCAL) default_version = false;
    }
    if (name.empty()) return;
    auto offset = to_file_offset(segments, sym.st_value);
    if (!offset) return;  // not in a file-backed segment: nothing a uprobe could hit
    if (out.size() >= kElfMaxSymbols) {
      bad = make_error("more than " + std::to_string(kElfMaxSymbols) + " function symbols",
                       EFBIG);
      return;
    }
    int rank = (t.dynamic ? 4 : 0) + (ELF64_ST_BIND(sym.st_info) != STB_LOCAL ? 2 : 0) +
               (default_version ? 1 : 0);
    out.push_back({name, *offset, sym.st_size, rank});
  });
  if (!done) return done.error();
  if (bad) return *bad;
  return Ok{};
}

Result<Elf64_Ehdr> read_header(const Bytes& file) {
  auto ident = file.read<std::array<unsigned char, EI_NIDENT>>(0);
  if (!ident) return format_error("not an ELF file (too short)");
  if (std::memcmp(ident->data(), ELFMAG, SELFMAG) != 0) return format_error("not an ELF file");
  if ((*ident)[EI_CLASS] != ELFCLASS64) {
    return format_error((*ident)[EI_CLASS] == ELFCLASS32
                            ? "32-bit ELF is not supported (64-bit little-endian only)"
                            : "unknown ELF class " + std::to_string((*ident)[EI_CLASS]));
  }
  if ((*ident)[EI_DATA] != ELFDATA2LSB) {
    return format_error("big-endian ELF is not supported (64-bit little-endian only)");
  }
  auto eh = file.read<Elf64_Ehdr>(0);
  if (!eh) return format_error("truncated: ELF header is incomplete");
  return *eh;
}

Result<std::vector<ElfSymbol>> parse(Bytes& file) {
  auto eh = read_header(file);
  if (!eh) return eh.error();
  if (eh->e_type != ET_DYN && eh->e_type != ET_EXEC) {
    return format_error("not an executable or shared object (e_type " + std::to_string(eh->e_type) +
                        ")");
  }
  auto sections = read_sections(file, *eh);
  if (!sections) return sections.error();
  auto segments = read_load_segments(file, *eh, *sections);
  if (!segments) return segments.error();
  auto tables = tables_within_budget(file, *sections);
  if (!tables) return tables.error();

  std::deque<std::string> strings;  // a deque never moves its elements: views stay valid
  std::vector<Candidate> found;
  for (const SymbolTable& t : *tables) {
    auto read = file.read_table(t.strtab_offset, t.strtab_size,
                                std::string("the string table of ") + t.name());
    if (!read) return read.error();
    strings.push_back(std::move(*read));
    auto done = collect(file, t, strings.back(), *segments, found);
    if (!done) return done.error();
  }
  // Per name, the highest rank; stable: the first seen among equal ranks.
  std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return a.name != b.name ? a.name < b.name : a.rank > b.rank;
  });
  std::vector<ElfSymbol> symbols;
  for (std::size_t i = 0; i < found.size(); ++i) {
    if (i > 0 && found[i].name == found[i - 1].name) continue;
    symbols.push_back({std::string(found[i].name), found[i].file_offset, found[i].size});
  }
  return symbols;
}

Result<ElfAddresses> parse_addresses(Bytes& file, const std::vector<std::string>& names) {
  auto eh = read_header(file);
  if (!eh) return eh.error();
  auto sections = read_sections(file, *eh);
  if (!sections) return sections.error();
  auto segments = read_load_segments(file, *eh, *sections);
  if (!segments) return segments.error();
  auto tables = tables_within_budget(file, *sections);
  if (!tables) return tables.error();
  ElfAddresses out;
  out.load_vaddr = segments->front().vaddr;
  for (const auto& seg : *segments) out.load_vaddr = std::min(out.load_vaddr, seg.vaddr);
  for (const SymbolTable& t : *tables) {
    auto strings = file.read_table(t.strtab_offset, t.strtab_size,
                                   std::string("the string table of ") + t.name());
    if (!strings) return strings.error();
    auto done = for_each_symbol(file, t, *strings, [&](std::uint64_t, const Elf64_Sym& sym,
                                                       std::optional<std::string_view> full) {
      if (!full || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) return;
      std::string_view name = *full;
      if (auto at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
      for (const auto& want : names) {
        if (name == want) out.vaddr.emplace(want, sym.st_value);
      }
    });
    if (!done) return done.error();
  }
  return out;
}

// Runs a parse with the path named in its error; an exception (bad_alloc under a memory cap)
// becomes an error too: a thread that parses hostile files must not die of one.
template <typename T, typename Parse>
Result<T> guarded(const std::string& name, Parse&& parse) {
  try {
    auto r = parse();
    if (!r && !name.empty()) return make_error(name + ": " + r.error().message, r.error().err);
    return r;
  } catch (const std::bad_alloc&) {
    return make_error((name.empty() ? "" : name + ": ") + "out of memory while reading symbols",
                      ENOMEM);
  } catch (const std::exception& e) {
    return make_error((name.empty() ? "" : name + ": ") + "cannot read symbols: " + e.what(),
                      ENOEXEC);
  }
}

}  // namespace

Result<ElfAddresses> read_symbol_addresses(const std::string& path,
                                           const std::vector<std::string>& names) {
  return guarded<ElfAddresses>(path, [&]() -> Result<ElfAddresses> {
    auto source = FileSource::open(path);
    if (!source) return source.error();
    Bytes bytes(**source);
    return parse_addresses(bytes, names);
  });
}

Result<ElfAddresses> read_symbol_addresses(int fd, const std::string& name,
                                           const std::vector<std::string>& names) {
  return guarded<ElfAddresses>(name, [&]() -> Result<ElfAddresses> {
    auto source = FileSource::from_fd(fd, false);
    if (!source) return source.error();
    Bytes bytes(**source);
    return parse_addresses(bytes, names);
  });
}

Result<ElfAddresses> read_symbol_addresses_in_memory(std::string_view image,
                                                     const std::vector<std::string>& names) {
  return guarded<ElfAddresses>("", [&] {
    const MemorySource source(image);
    Bytes bytes(source);
    return parse_addresses(bytes, names);
  });
}

Result<std::vector<ElfSymbol>> read_function_symbols(const std::string& path) {
  return guarded<std::vector<ElfSymbol>>(path, [&]() -> Result<std::vector<ElfSymbol>> {
    auto source = FileSource::open(path);
    if (!source) return source.error();
    Bytes bytes(**source);
    return parse(bytes);
  });
}

Result<std::vector<ElfSymbol>> read_function_symbols(int fd, const std::string& name) {
  return guarded<std::vector<ElfSymbol>>(name, [&]() -> Result<std::vector<ElfSymbol>> {
    auto source = FileSource::from_fd(fd, false);
    if (!source) return source.error();
    Bytes bytes(**source);
    return parse(bytes);
  });
}

Result<std::vector<ElfSymbol>> read_function_symbols_in_memory(std::string_view image) {
  return guarded<std::vector<ElfSymbol>>("", [&] {
    const MemorySource source(image);
    Bytes bytes(source);
    return parse(bytes);
  });
}

}  // namespace stallwatch::trace
