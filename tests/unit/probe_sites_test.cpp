// Probe sites (trace/probe_sites.h): the decoder on the byte shapes of NVIDIA's libraries as
// they are on disk (libcuda.so.535.261.03's cu* stub, libcudart.so.13's and libnccl.so.2's
// push-first entries) and of compilers with -fcf-protection, and the choice over them.
#include "trace/probe_sites.h"

#include <gtest/gtest.h>

#include <vector>

namespace stallwatch::trace {
namespace {

using Bytes = std::vector<std::uint8_t>;

// cuLaunchKernel in Debian's libcuda1 535.261.03: cmpl $0x321cba00,0x18d933e(%rip) · je +0xc ·
// jmp *0x17e18c6(%rip) · nopw.
const Bytes kDriverStub = {0x81, 0x3d, 0x3e, 0x93, 0x8d, 0x01, 0x00, 0xba, 0x1c, 0x32,
                           0x74, 0x0c, 0xff, 0x25, 0xc6, 0x18, 0x7e, 0x01, 0x66, 0x0f,
                           0x1f, 0x44, 0x00, 0x00};
// cudaLaunchKernel in libcudart.so.13: push %rbp · mov %rsp,%rbp · push %r15.
const Bytes kRuntimeEntry = {0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56};
// ncclAllReduce in libnccl.so.2: push %r15 · mov %rsi,%r15.
const Bytes kNcclEntry = {0x41, 0x57, 0x49, 0x89, 0xf7, 0x41, 0x56};
// gcc -fcf-protection: endbr64 · push %rbp · mov %rsp,%rbp.
const Bytes kEndbrPush = {0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5};
// A leaf that stores first: endbr64 · mov %rdi,0x10(%rip) (the stack and arguments are safe,
// but a store is neither emulated nor walked over).
const Bytes kEndbrStore = {0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x89, 0x3d, 0x10, 0x00, 0x00, 0x00, 0xc3};
// ncclCommInitAll in libnccl.so.2: movabs $0x5919cafebeef,%rax · push %rbp · mov %rsp,%rbp.
const Bytes kNcclInit = {0x48, 0xb8, 0xef, 0xbe, 0xfe, 0xca, 0x19, 0x59, 0x00, 0x00,
                         0x55, 0x48, 0x89, 0xe5};
// ncclBcast: sub $0x10,%rsp · push %r9.
const Bytes kNcclBcast = {0x48, 0x83, 0xec, 0x10, 0x41, 0x51};
// sub $0x18,%rsp first: the stack pointer moves, nothing may be walked.
const Bytes kSubRsp = {0x48, 0x83, 0xec, 0x18, 0x74, 0x02};

Emulation with_push() {
  Emulation e = default_emulation();
  e.emulated[static_cast<int>(InsnKind::kPush)] = true;
  e.measured = true;
  return e;
}

TEST(ProbeSitesTest, DecodesTheShapesOfNvidiaEntries) {
  Insn cmp = decode_x86_64(kDriverStub);
  EXPECT_EQ(cmp.kind, InsnKind::kCompare);
  EXPECT_EQ(cmp.length, 10);
  Insn je = decode_x86_64(std::span(kDriverStub).subspan(10));
  EXPECT_EQ(je.kind, InsnKind::kJcc);
  EXPECT_EQ(je.length, 2);
  EXPECT_EQ(decode_x86_64(std::span(kDriverStub).subspan(12)).kind, InsnKind::kOther);  // jmp *
  Insn nopw = decode_x86_64(std::span(kDriverStub).subspan(18));
  EXPECT_EQ(nopw.kind, InsnKind::kNopl);
  EXPECT_EQ(nopw.length, 6);
  EXPECT_EQ(decode_x86_64(kRuntimeEntry).kind, InsnKind::kPush);
  EXPECT_EQ(decode_x86_64(kRuntimeEntry).length, 1);
  EXPECT_EQ(decode_x86_64(kNcclEntry).kind, InsnKind::kPush);
  EXPECT_EQ(decode_x86_64(kNcclEntry).length, 2);
  EXPECT_EQ(decode_x86_64(kEndbrPush).kind, InsnKind::kEndbr);
  EXPECT_EQ(decode_x86_64(kEndbrPush).length, 4);
}

TEST(ProbeSitesTest, DecodesOtherFormsExactly) {
  struct Case {
    Bytes bytes;
    InsnKind kind;
    int length;
  };
  const Case cases[] = {
      {{0x90}, InsnKind::kNop, 1},
      {{0x66, 0x90}, InsnKind::kNop, 2},
      {{0x41, 0x90}, InsnKind::kOther, 0},  // xchg %eax,%r8d
      {{0xf3, 0x90}, InsnKind::kOther, 0},  // pause
      {{0x0f, 0x1f, 0x00}, InsnKind::kNopl, 3},
      {{0x0f, 0x1f, 0x40, 0x00}, InsnKind::kNopl, 4},
      {{0x0f, 0x1f, 0x44, 0x00, 0x00}, InsnKind::kNopl, 5},
      {{0x0f, 0x1f, 0x80, 0, 0, 0, 0}, InsnKind::kNopl, 7},
      {{0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, InsnKind::kNopl, 10},
      {{0x0f, 0x1f, 0x48, 0x00}, InsnKind::kOther, 0},  // 0f 1f /1: not a nop
      {{0x0f, 0x84, 1, 2, 3, 4}, InsnKind::kJcc, 6},
      {{0xeb, 0x05}, InsnKind::kJmp, 2},
      {{0xe9, 1, 2, 3, 4}, InsnKind::kJmp, 5},
      {{0xe8, 1, 2, 3, 4}, InsnKind::kCall, 5},
      {{0x53}, InsnKind::kPush, 1},
      {{0x66, 0x55}, InsnKind::kOther, 0},  // 16-bit push
      {{0x48, 0x55}, InsnKind::kOther, 0},
      {{0x83, 0x3d, 1, 2, 3, 4, 0}, InsnKind::kCompare, 7},   // cmpl $0,disp(%rip)
      {{0x83, 0x2d, 1, 2, 3, 4, 0}, InsnKind::kOther, 0},     // subl: /5, not cmp
      {{0x48, 0x85, 0xff}, InsnKind::kCompare, 3},            // test %rdi,%rdi
      {{0xf6, 0x05, 1, 2, 3, 4, 1}, InsnKind::kCompare, 7},   // testb $1,disp(%rip)
      {{0xf7, 0x10}, InsnKind::kOther, 0},                    // notl (%rax)
      {{0x39, 0x7c, 0x24, 0x08}, InsnKind::kCompare, 4},      // cmp %edi,0x8(%rsp)
      {{0x3d, 1, 2, 3, 4}, InsnKind::kCompare, 5},
      {{0x66, 0x3d, 1, 2}, InsnKind::kCompare, 4},
      {{0x48, 0x89, 0xe5}, InsnKind::kOther, 0},  // mov %rsp,%rbp
      {{0xb8, 1, 0, 0, 0}, InsnKind::kScratch, 5},                   // mov $1,%eax
      {{0x41, 0xbb, 1, 0, 0, 0}, InsnKind::kScratch, 6},             // mov $1,%r11d
      {{0xbf, 1, 0, 0, 0}, InsnKind::kOther, 0},                     // mov $1,%edi: an argument
      {{0x41, 0xb9, 1, 0, 0, 0}, InsnKind::kOther, 0},               // mov $1,%r9d: an argument
      {{0x48, 0xc7, 0xc0, 1, 0, 0, 0}, InsnKind::kScratch, 7},       // mov $1,%rax
      {{0x48, 0xc7, 0xc4, 1, 0, 0, 0}, InsnKind::kOther, 0},         // mov $1,%rsp
      {{0x48, 0x8d, 0x05, 1, 2, 3, 4}, InsnKind::kScratch, 7},       // lea disp(%rip),%rax
      {{0x4c, 0x8d, 0x15, 1, 2, 3, 4}, InsnKind::kScratch, 7},       // lea disp(%rip),%r10
      {{0x48, 0x8d, 0x3d, 1, 2, 3, 4}, InsnKind::kOther, 0},         // lea disp(%rip),%rdi
      {{0x31, 0xc0}, InsnKind::kScratch, 2},                         // xor %eax,%eax
      {{0x31, 0xd2}, InsnKind::kOther, 0},                           // xor %edx,%edx
      {{0x31, 0xc8}, InsnKind::kOther, 0},                           // xor %ecx,%eax
  };
  for (const Case& c : cases) {
    const Insn insn = decode_x86_64(c.bytes);
    EXPECT_EQ(insn.kind, c.kind) << ::testing::PrintToString(c.bytes);
    EXPECT_EQ(insn.length, c.length) << ::testing::PrintToString(c.bytes);
  }
}

TEST(ProbeSitesTest, NeverReadsPastTheBytesGiven) {
  // Every prefix of every shape: an instruction cut short is kOther, never a read past the end.
  for (const Bytes& full : {kDriverStub, kRuntimeEntry, kEndbrPush, kNcclEntry}) {
    for (std::size_t n = 0; n <= full.size(); ++n) {
      const Bytes cut(full.begin(), full.begin() + static_cast<long>(n));
      const Insn insn = decode_x86_64(cut);
      EXPECT_LE(insn.length, n);
      const ProbeSite site = choose_site(cut, with_push());
      EXPECT_LE(site.delta, n);
    }
  }
  EXPECT_EQ(decode_x86_64({}).kind, InsnKind::kOther);
  const Bytes cut_je = {0x81, 0x3d, 0x3e, 0x93, 0x8d, 0x01, 0x00, 0xba, 0x1c, 0x32, 0x74};
  EXPECT_EQ(choose_site(cut_je, with_push()).delta, 0u);
  EXPECT_EQ(choose_site(cut_je, with_push()).cls, SiteClass::kStepped);
}

TEST(ProbeSitesTest, TheDriverStubIsProbedOnItsJump) {
  const ProbeSite site = choose_site(kDriverStub, default_emulation());
  EXPECT_EQ(site.delta, 10u);
  EXPECT_EQ(site.cls, SiteClass::kEmulated);
  EXPECT_EQ(site.at, InsnKind::kJcc);
  // --probe-sites=entry: +0, the compare, single-stepped.
  const ProbeSite entry = choose_site(kDriverStub, default_emulation(), false);
  EXPECT_EQ(entry.delta, 0u);
  EXPECT_EQ(entry.cls, SiteClass::kStepped);
  EXPECT_EQ(entry.at, InsnKind::kCompare);
}

TEST(ProbeSitesTest, PushFirstEntriesStayAtZeroWhereThePushIsEmulated) {
  for (const Bytes& b : {kRuntimeEntry, kNcclEntry}) {
    const ProbeSite site = choose_site(b, with_push());
    EXPECT_EQ(site.delta, 0u);
    EXPECT_EQ(site.cls, SiteClass::kEmulated);
    EXPECT_EQ(site.at, InsnKind::kPush);
    // A kernel that steps the push: nothing better before the stack moves.
    const ProbeSite stepped = choose_site(b, default_emulation());
    EXPECT_EQ(stepped.delta, 0u);
    EXPECT_EQ(stepped.cls, SiteClass::kStepped);
  }
}

TEST(ProbeSitesTest, Endbr64IsSkippedToThePushAfterIt) {
  const ProbeSite site = choose_site(kEndbrPush, with_push());
  EXPECT_EQ(site.delta, 4u);
  EXPECT_EQ(site.cls, SiteClass::kEmulated);
  // A kernel that emulates endbr64 keeps +0.
  Emulation e = with_push();
  e.emulated[static_cast<int>(InsnKind::kEndbr)] = true;
  EXPECT_EQ(choose_site(kEndbrPush, e).delta, 0u);
  // Without push emulation the walk stops at the push (it moves the stack): +0, stepped.
  const ProbeSite stepped = choose_site(kEndbrPush, default_emulation());
  EXPECT_EQ(stepped.delta, 0u);
  EXPECT_EQ(stepped.cls, SiteClass::kStepped);
  EXPECT_EQ(stepped.at, InsnKind::kEndbr);
}

TEST(ProbeSitesTest, TheWalkStopsAtAnythingThatIsNotAFlagsOnlyInstruction) {
  EXPECT_EQ(choose_site(kEndbrStore, with_push()).delta, 0u);
  EXPECT_EQ(choose_site(kEndbrStore, with_push()).cls, SiteClass::kStepped);
  EXPECT_EQ(choose_site(kSubRsp, with_push()).delta, 0u);  // the je after sub is not reached
  EXPECT_EQ(choose_site(kSubRsp, with_push()).cls, SiteClass::kStepped);
  // Compares alone, past the window: +0.
  Bytes compares;
  for (int i = 0; i < 8; ++i) compares.insert(compares.end(), {0x48, 0x85, 0xff});
  compares.insert(compares.end(), {0x74, 0x02});
  EXPECT_EQ(choose_site(compares, with_push()).delta, 0u);
}

TEST(ProbeSitesTest, NcclInitEntriesAreProbedOnThePushAfterTheirConstant) {
  const ProbeSite site = choose_site(kNcclInit, with_push());
  EXPECT_EQ(site.delta, 10u);
  EXPECT_EQ(site.cls, SiteClass::kEmulated);
  EXPECT_EQ(site.at, InsnKind::kPush);
  // ncclBcast moves the stack first: +0, stepped.
  EXPECT_EQ(choose_site(kNcclBcast, with_push()).delta, 0u);
  EXPECT_EQ(choose_site(kNcclBcast, with_push()).cls, SiteClass::kStepped);
}

TEST(ProbeSitesTest, Names) {
  EXPECT_EQ(site_class_name(SiteClass::kEmulated), "emulated");
  EXPECT_EQ(site_class_name(SiteClass::kStepped), "stepped");
  EXPECT_EQ(insn_kind_name(InsnKind::kEndbr), "endbr64");
  EXPECT_EQ(insn_kind_name(InsnKind::kJcc), "jcc");
  EXPECT_FALSE(default_emulation().measured);
  EXPECT_FALSE(default_emulation()(InsnKind::kPush));
  EXPECT_TRUE(default_emulation()(InsnKind::kJcc));
}

}  // namespace
}  // namespace stallwatch::trace
