// Function symbols of an ELF file and the file offsets uprobes attach at.
// Owns: reading .dynsym/.symtab of one 64-bit little-endian ELF (shared object or executable)
// with bounded pread(2) (never a mapping: a library truncated during the parse must not raise
// SIGBUS in the daemon), and mapping each st_value to a file offset through PT_LOAD headers.
// Touches only the file it is given; every offset is bounds-checked, so a truncated or hostile
// file yields an Error, never a crash and never an exception.
// Budgets (per file; any local user can have a process map a file named libcudart.so.12, and
// the daemon is capped at 256 MiB): at most kElfMaxHeaders section and program headers, at
// most kElfTableBudget bytes of symbol, string and version tables read in all, at most
// kElfMaxSymbols function symbols; and every table read must be stored in the file (a range in
// a hole of a sparse file, whose apparent size costs its author nothing, is refused: lseek
// SEEK_DATA/SEEK_HOLE). Memory held while parsing stays under about 3 x kElfTableBudget however
// the headers lie. When .dynsym and .symtab do not both fit the budget, .symtab is left out.
// Thread-safety: no shared state; safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace stallwatch::trace {

inline constexpr std::uint64_t kElfMaxHeaders = 65536;           // sections; program headers
inline constexpr std::uint64_t kElfTableBudget = 64ull << 20;    // table bytes read per file
inline constexpr std::uint64_t kElfMaxSymbols = 1ull << 20;      // function symbols per file

struct ElfSymbol {
  std::string name;           // bare name: "cudaMalloc", never "cudaMalloc@@libcudart.so.12"
  std::uint64_t file_offset;  // offset in the file, what a uprobe on this path wants
  std::uint64_t size;         // st_size in bytes, 0 when the ELF does not say
};

// Defined functions (STT_FUNC and STT_GNU_IFUNC with a section and a non-zero value) from
// .dynsym and .symtab, one per name, sorted by name. Where a name appears more than once the
// exported, default-version definition wins (the one the dynamic linker binds callers to).
// Symbols whose address lies outside every file-backed PT_LOAD range are left out.
// Errors (message names the path and the problem): cannot open/map, not ELF, not 64-bit
// little-endian, not an executable or shared object, truncated or inconsistent headers, no
// symbol table at all.
Result<std::vector<ElfSymbol>> read_function_symbols(const std::string& path);
// The same over an open file (the caller keeps it; reads use pread and lseek SEEK_DATA/HOLE,
// so the descriptor's file position may move); errors name `name`.
Result<std::vector<ElfSymbol>> read_function_symbols(int fd, const std::string& name);
// The same over an ELF image in memory (tests and the fuzzer); errors do not name a path.
Result<std::vector<ElfSymbol>> read_function_symbols_in_memory(std::string_view image);

// Where named symbols of any type (data objects too) lie in a loaded image: their virtual
// addresses, and the lowest PT_LOAD address, so that an address in a process is
// (start of the file's mapping at offset 0) - (load_vaddr rounded down to a page) + vaddr.
struct ElfAddresses {
  std::map<std::string, std::uint64_t, std::less<>> vaddr;  // only the names found
  std::uint64_t load_vaddr = 0;
};
Result<ElfAddresses> read_symbol_addresses(const std::string& path,
                                           const std::vector<std::string>& names);
Result<ElfAddresses> read_symbol_addresses(int fd, const std::string& name,
                                           const std::vector<std::string>& names);
Result<ElfAddresses> read_symbol_addresses_in_memory(std::string_view image,
                                                     const std::vector<std::string>& names);

}  // namespace stallwatch::trace
