// Hostile ELF files for the tests of issue #35 (rows 2 and 3), shared by the unit tier
// (elf_symbols_test) and the privileged tier (hostile_files_test): a 64-bit ET_DYN header with
// one PT_LOAD over the first 4 KiB and section headers at byte 128, padded to 4 KiB, which the
// caller fills with lying counts, offsets and sizes and then extends with a hole.
#pragma once

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace stallwatch::test {

// `shnum` section headers at byte 128 (zeroed; put_section fills them).
inline std::string hostile_image(std::uint16_t shnum) {
  std::string image(4096, '\0');
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phoff = 64;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 1;
  eh.e_shoff = 128;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = shnum;
  std::memcpy(image.data(), &eh, sizeof eh);
  Elf64_Phdr ph{};
  ph.p_type = PT_LOAD;
  ph.p_flags = PF_R | PF_X;
  ph.p_filesz = ph.p_memsz = 4096;
  std::memcpy(image.data() + 64, &ph, sizeof ph);
  return image;
}

inline void put_section(std::string& image, int index, const Elf64_Shdr& sh) {
  std::memcpy(image.data() + 128 + index * sizeof(Elf64_Shdr), &sh, sizeof sh);
}

// Row 2 of issue #35: e_shnum 0 and section 0's sh_size 2^34 (extended numbering): 2^34
// section headers claimed by a 4 KiB image.
inline std::string image_claiming_2to34_sections() {
  std::string image = hostile_image(0);
  Elf64_Shdr zero{};
  zero.sh_size = 1ull << 34;
  put_section(image, 0, zero);
  return image;
}

// Row 3: a .symtab of `claimed` bytes at 1 GiB (in the hole the caller leaves there), its
// string table 16 bytes at 1024.
inline std::string image_with_symtab_at_1gib(std::uint64_t claimed) {
  std::string image = hostile_image(3);
  Elf64_Shdr symtab{};
  symtab.sh_type = SHT_SYMTAB;
  symtab.sh_offset = 1ull << 30;
  symtab.sh_size = claimed;
  symtab.sh_entsize = sizeof(Elf64_Sym);
  symtab.sh_link = 2;
  put_section(image, 1, symtab);
  Elf64_Shdr strtab{};
  strtab.sh_type = SHT_STRTAB;
  strtab.sh_offset = 1024;
  strtab.sh_size = 16;
  put_section(image, 2, strtab);
  return image;
}

// Writes `image` (mode 0644, readable by any user) and extends the file to `apparent` bytes
// without storing them: a hole. False when any step failed.
inline bool write_sparse(const std::string& path, const std::string& image, off_t apparent) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, image.data(), image.size()) == static_cast<ssize_t>(image.size()) &&
                  ::ftruncate(fd, apparent) == 0 && ::fchmod(fd, 0644) == 0;
  ::close(fd);
  return ok;
}

}  // namespace stallwatch::test
