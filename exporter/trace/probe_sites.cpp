#include "trace/probe_sites.h"

namespace stallwatch::trace {

namespace {

// Bytes of a ModRM operand (the ModRM byte, a SIB byte, a displacement) at `code[0]`; 0 when
// the span ends first.
std::size_t modrm_length(std::span<const std::uint8_t> code) {
  if (code.empty()) return 0;
  const std::uint8_t modrm = code[0];
  const int mod = modrm >> 6;
  const int rm = modrm & 7;
  std::size_t n = 1;
  if (mod != 3 && rm == 4) {
    if (code.size() < 2) return 0;
    const int base = code[1] & 7;
    n += 1;
    if (mod == 0 && base == 5) n += 4;
  } else if (mod == 0 && rm == 5) {
    n += 4;  // RIP-relative
  }
  if (mod == 1) n += 1;
  if (mod == 2) n += 4;
  return n <= code.size() ? n : 0;
}

Insn make(InsnKind kind, std::size_t length, std::size_t available) {
  if (length == 0 || length > available || length > 15) return {};
  return {kind, static_cast<std::uint8_t>(length)};
}

}  // namespace

std::string_view insn_kind_name(InsnKind kind) {
  switch (kind) {
    case InsnKind::kEndbr: return "endbr64";
    case InsnKind::kPush: return "push";
    case InsnKind::kNop: return "nop";
    case InsnKind::kNopl: return "nopl";
    case InsnKind::kJcc: return "jcc";
    case InsnKind::kJmp: return "jmp";
    case InsnKind::kCall: return "call";
    case InsnKind::kCompare: return "cmp";
    case InsnKind::kScratch: return "mov-scratch";
    case InsnKind::kOther: break;
  }
  return "other";
}

std::string_view site_class_name(SiteClass cls) {
  return cls == SiteClass::kEmulated ? "emulated" : "stepped";
}

Insn decode_x86_64(std::span<const std::uint8_t> code) {
  const std::size_t size = code.size();
  // endbr64 / endbr32 before any other prefix handling (f3 is also rep).
  if (size >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e &&
      (code[3] == 0xfa || code[3] == 0xfb)) {
    return {InsnKind::kEndbr, 4};
  }
  std::size_t i = 0;
  bool opsize = false;  // 0x66
  bool other_prefix = false;
  while (i < size && i < 4) {
    const std::uint8_t b = code[i];
    if (b == 0x66) {
      opsize = true;
    } else if (b == 0x2e || b == 0x3e) {  // segment overrides padding nops carry
      other_prefix = true;
    } else {
      break;
    }
    ++i;
  }
  std::uint8_t rex = 0;
  if (i < size && (code[i] & 0xf0) == 0x40) rex = code[i++];
  if (i >= size) return {};
  const bool prefixed = opsize || other_prefix || rex != 0;
  const std::uint8_t op = code[i];
  const std::span<const std::uint8_t> rest = code.subspan(i + 1);
  const std::size_t imm_z = opsize ? 2 : 4;  // iz: 16 or 32 bits

  if (op >= 0x50 && op <= 0x57) {
    // push r64, or push r8..r15 with REX.B alone; 0x66 would make it a 16-bit push.
    if (opsize || other_prefix || (rex != 0 && rex != 0x41)) return {};
    return make(InsnKind::kPush, i + 1, size);
  }
  if (op == 0x90) {
    // 41 90 is xchg %eax,%r8d, not a nop.
    if (rex != 0 || other_prefix) return {};
    return make(InsnKind::kNop, i + 1, size);
  }
  if (op >= 0x70 && op <= 0x7f) return prefixed ? Insn{} : make(InsnKind::kJcc, i + 2, size);
  if (op == 0xeb) return prefixed ? Insn{} : make(InsnKind::kJmp, i + 2, size);
  if (op == 0xe9) return prefixed ? Insn{} : make(InsnKind::kJmp, i + 5, size);
  if (op == 0xe8) return prefixed ? Insn{} : make(InsnKind::kCall, i + 5, size);
  if (op == 0x0f) {
    if (rest.empty()) return {};
    const std::uint8_t op2 = rest[0];
    if (op2 >= 0x80 && op2 <= 0x8f) return prefixed ? Insn{} : make(InsnKind::kJcc, i + 6, size);
    if (op2 == 0x1f) {
      const std::span<const std::uint8_t> m = rest.subspan(1);
      if (m.empty() || ((m[0] >> 3) & 7) != 0) return {};
      const std::size_t n = modrm_length(m);
      return n ? make(InsnKind::kNopl, i + 2 + n, size) : Insn{};
    }
    return {};
  }
  if (other_prefix) return {};
  // Writes to a register no argument of the SysV x86-64 ABI lives in, nor the stack pointer:
  // %rax (al counts vector registers only for variadic calls, set by the caller before the call),
  // %r10, %r11. Nothing the entry and return programs read changes.
  const bool rex_w = rex & 8, rex_r = rex & 4, rex_b = rex & 1;
  auto scratch = [](int reg) { return reg == 0 || reg == 10 || reg == 11; };
  if (!opsize && op >= 0xb8 && op <= 0xbf) {  // mov $imm32/$imm64, reg
    if (!scratch((op - 0xb8) | (rex_b ? 8 : 0))) return {};
    return make(InsnKind::kScratch, i + 1 + (rex_w ? 8 : 4), size);
  }
  if (!opsize && op == 0xc7 && !rest.empty() && (rest[0] >> 6) == 3 && ((rest[0] >> 3) & 7) == 0) {
    if (!scratch((rest[0] & 7) | (rex_b ? 8 : 0))) return {};  // mov $imm32, reg
    return make(InsnKind::kScratch, i + 2 + 4, size);
  }
  if (!opsize && op == 0x8d && !rest.empty() && (rest[0] >> 6) != 3) {  // lea mem, reg
    if (!scratch(((rest[0] >> 3) & 7) | (rex_r ? 8 : 0))) return {};
    const std::size_t n = modrm_length(rest);
    return n ? make(InsnKind::kScratch, i + 1 + n, size) : Insn{};
  }
  if (!opsize && (op == 0x31 || op == 0x33) && !rest.empty() && (rest[0] >> 6) == 3) {
    const int a = ((rest[0] >> 3) & 7) | (rex_r ? 8 : 0);
    const int b = (rest[0] & 7) | (rex_b ? 8 : 0);
    if (a != b || !scratch(a)) return {};  // xor %eax,%eax
    return make(InsnKind::kScratch, i + 2, size);
  }
  // cmp and test: they write the flags and nothing else.
  switch (op) {
    case 0x38: case 0x39: case 0x3a: case 0x3b: case 0x84: case 0x85: {
      const std::size_t n = modrm_length(rest);
      return n ? make(InsnKind::kCompare, i + 1 + n, size) : Insn{};
    }
    case 0x3c: case 0xa8:
      return make(InsnKind::kCompare, i + 2, size);
    case 0x3d: case 0xa9:
      return make(InsnKind::kCompare, i + 1 + imm_z, size);
    case 0x80: case 0x81: case 0x83: case 0xf6: case 0xf7: {
      if (rest.empty()) return {};
      const int reg = (rest[0] >> 3) & 7;
      const bool is_cmp = (op == 0x80 || op == 0x81 || op == 0x83) ? reg == 7 : reg == 0;
      if (!is_cmp) return {};
      const std::size_t n = modrm_length(rest);
      if (!n) return {};
      const std::size_t imm = (op == 0x81 || op == 0xf7) ? imm_z : 1;
      return make(InsnKind::kCompare, i + 1 + n + imm, size);
    }
    default:
      return {};
  }
}

Emulation default_emulation() {
  Emulation e;
  e.emulated[static_cast<int>(InsnKind::kNop)] = true;
  e.emulated[static_cast<int>(InsnKind::kJcc)] = true;
  e.emulated[static_cast<int>(InsnKind::kJmp)] = true;
  e.emulated[static_cast<int>(InsnKind::kCall)] = true;
  return e;
}

ProbeSite choose_site(std::span<const std::uint8_t> code, const Emulation& emulation,
                      bool moves) {
  const Insn first = decode_x86_64(code);
  const ProbeSite entry{0, emulation(first.kind) && first.kind != InsnKind::kOther
                               ? SiteClass::kEmulated
                               : SiteClass::kStepped,
                        first.kind};
  if (!moves || entry.cls == SiteClass::kEmulated) return entry;
  std::size_t pos = 0;
  for (int n = 0; n < kSiteMaxInsns && pos < code.size() && pos < kSiteWindow; ++n) {
    const Insn insn = n == 0 ? first : decode_x86_64(code.subspan(pos));
    if (insn.kind == InsnKind::kOther) break;
    if (emulation(insn.kind)) {
      return {static_cast<std::uint32_t>(pos), SiteClass::kEmulated, insn.kind};
    }
    // Only instructions that leave the stack pointer and every argument register as they were
    // may be walked over; anything else (a push the kernel steps, a jump it steps) ends it.
    if (insn.kind != InsnKind::kEndbr && insn.kind != InsnKind::kCompare &&
        insn.kind != InsnKind::kScratch) {
      break;
    }
    pos += insn.length;
  }
  return entry;
}

}  // namespace stallwatch::trace
