// Where a call's uprobe goes inside its function (issue #48). A uprobe replaces one instruction
// with a breakpoint; after the BPF programs ran, the kernel either emulates that instruction
// (x86-64: push of a register, nop, conditional and direct jumps and calls) or copies it to a
// page of the process and single-steps it there, a second trap: about 10 µs a call on the
// development VM against ~1 µs emulated. NVIDIA's driver begins every cu* entry with a stub,
// `cmpl $imm, X(%rip)` · `je` · `jmp *Y(%rip)`, whose compare is single-stepped; its `je` is
// emulated and nothing before it has touched the stack or an argument register.
// So the site of a call is the first instruction of its function that the running kernel
// emulates, reached by walking over instructions that change neither the stack pointer nor any
// register an argument lives in (endbr64, compare, test, a constant or address loaded into
// %rax, %r10 or %r11: NCCL's init entries begin with `movabs $imm,%rax`); the walk stops at anything else and
// the site stays at +0, single-stepped. At the chosen site the registers and the stack are
// exactly those of the entry, so the programs read the same arguments, and a return probe there
// finds the caller's return address at the stack pointer as at +0 (docs/bpf.md "Probe sites").
// Owns: the bounded decoder of the few x86-64 forms that matter, the choice. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace stallwatch::trace {

// The instruction forms the decoder tells apart.
enum class InsnKind : std::uint8_t {
  kEndbr,     // endbr64 / endbr32: a no-op marker, single-stepped by the kernels we know
  kPush,      // push of a general register (50+r, REX.B 41 50+r)
  kNop,       // 0x90 (with prefixes)
  kNopl,      // 0f 1f /0: the multi-byte nop compilers pad with
  kJcc,       // conditional jump, rel8 or rel32
  kJmp,       // direct jump, rel8 or rel32
  kCall,      // direct call rel32
  kCompare,   // cmp / test: only the flags change
  kScratch,   // mov $imm, lea, xor into %rax, %r10 or %r11: no argument lives there
  kOther,     // anything else, or bytes the decoder does not know
};
inline constexpr int kInsnKinds = 10;
std::string_view insn_kind_name(InsnKind kind);  // endbr64, push, nop, nopl, jcc, jmp, call, ...

struct Insn {
  InsnKind kind = InsnKind::kOther;
  std::uint8_t length = 0;  // 0 for kOther: the walk cannot go past it
};

// Decodes the instruction at the start of `code` (x86-64, 64-bit mode). Never reads past the
// span; an instruction cut off by its end is kOther.
Insn decode_x86_64(std::span<const std::uint8_t> code);

// Which instruction kinds the running kernel emulates at a uprobe (probe_cost.h measures it:
// no single-step page appears in a process that hit the probe). Indexed by InsnKind.
struct Emulation {
  bool emulated[kInsnKinds] = {};
  bool measured = false;  // false: the defaults below, not this kernel's answer
  bool operator()(InsnKind k) const { return emulated[static_cast<int>(k)]; }
};
// What every x86-64 kernel since uprobes' branch emulation (Linux 3.x) does: jumps, calls and
// the one-byte nop. Used when the measurement could not run.
Emulation default_emulation();

enum class SiteClass : std::uint8_t { kEmulated, kStepped };
std::string_view site_class_name(SiteClass cls);  // emulated, stepped

struct ProbeSite {
  std::uint32_t delta = 0;  // bytes past the symbol's start
  SiteClass cls = SiteClass::kStepped;
  InsnKind at = InsnKind::kOther;  // the instruction the probe replaces
};

// How far the walk looks: the stub's je sits at +10, endbr64 + push at +4.
inline constexpr std::size_t kSiteWindow = 32;
inline constexpr int kSiteMaxInsns = 6;

// The site for a function whose first bytes are `code` (up to kSiteWindow of them; fewer where
// the function or the file ends). `moves` false: always +0 (--probe-sites=entry), classed.
ProbeSite choose_site(std::span<const std::uint8_t> code, const Emulation& emulation,
                      bool moves = true);

}  // namespace stallwatch::trace
