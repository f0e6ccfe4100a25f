// Unit tier, issue #17: the CPython facts stallwatch relies on, checked against every real
// interpreter of this machine (pyenv's 3.10-3.13; an absent one is skipped with the reason):
// - the built-in struct offsets equal offsetof() compiled against that interpreter's own
//   internal headers;
// - _Py_DebugOffsets read out of a live 3.13 gives the same layout as the table;
// - the line-table decoders give, for every instruction of real functions, the line that
//   CPython's own code.co_lines() gives.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "trace/python.h"

namespace stallwatch::trace {
namespace {

struct Interp {
  int minor = 0;
  std::string root;  // .../versions/3.X.Y
};

std::vector<Interp> interpreters() {
  const char* env = std::getenv("PYENV_ROOT");
  const std::string root = env && *env ? env : "/root/.pyenv";
  std::map<int, std::pair<int, std::string>> newest;
  if (DIR* d = opendir((root + "/versions").c_str())) {
    while (dirent* e = readdir(d)) {
      int major = 0, minor = 0, patch = 0;
      if (std::sscanf(e->d_name, "%d.%d.%d", &major, &minor, &patch) != 3 || major != 3 ||
          minor < 10 || minor > 13) {
        continue;
      }
      auto& n = newest[minor];
      if (n.second.empty() || patch > n.first) n = {patch, root + "/versions/" + e->d_name};
    }
    closedir(d);
  }
  std::vector<Interp> out;
  for (auto& [minor, v] : newest) out.push_back({minor, v.second});
  return out;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::map<std::string, long> key_values(const std::string& text) {
  std::map<std::string, long> out;
  std::istringstream in(text);
  std::string k;
  long v;
  while (in >> k >> v) out[k] = v;
  return out;
}

// offsetof() of every field the table holds, compiled against the interpreter's headers.
constexpr const char* kOffsetsProgram = R"c(
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))
int main(void) {
  P("rt_interp_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX >= 0x030b0000
  P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
  P("ts_tid", offsetof(PyThreadState, native_thread_id));
#else
  P("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
  P("ts_tid", offsetof(PyThreadState, thread_id));
#endif
  P("ts_next", offsetof(PyThreadState, next));
  P("ts_interp", offsetof(PyThreadState, interp));
#if PY_VERSION_HEX >= 0x030d0000
  P("ts_frame", offsetof(PyThreadState, current_frame));
  P("fr_code", offsetof(_PyInterpreterFrame, f_executable));
  P("fr_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#elif PY_VERSION_HEX >= 0x030b0000
  P("ts_frame", offsetof(PyThreadState, cframe));
  P("cframe_current", offsetof(_PyCFrame, current_frame));
  P("fr_code", offsetof(_PyInterpreterFrame, f_code));
  P("fr_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
  P("ts_frame", offsetof(PyThreadState, frame));
  P("fr_code", offsetof(PyFrameObject, f_code));
  P("fr_instr", offsetof(PyFrameObject, f_lasti));
#endif
#if PY_VERSION_HEX >= 0x030b0000
  P("fr_back", offsetof(_PyInterpreterFrame, previous));
  P("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
  P("co_qualname", offsetof(PyCodeObject, co_qualname));
#else
  P("fr_back", offsetof(PyFrameObject, f_back));
#endif
#if PY_VERSION_HEX >= 0x030c0000
  P("fr_owner", offsetof(_PyInterpreterFrame, owner));
#endif
  P("co_filename", offsetof(PyCodeObject, co_filename));
  P("co_name", offsetof(PyCodeObject, co_name));
  P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
  P("co_linetable", offsetof(PyCodeObject, co_linetable));
  P("ascii_size", sizeof(PyASCIIObject));
  P("compact_size", sizeof(PyCompactUnicodeObject));
  return 0;
}
)c";

TEST(PythonLayout, BuiltinTablesEqualOffsetofAgainstEachInterpretersHeaders) {
  auto all = interpreters();
  if (all.empty()) GTEST_SKIP() << "no pyenv CPython 3.10-3.13 on this machine";
  if (run("command -v cc").empty()) GTEST_SKIP() << "no C compiler (cc) to compile offsetof()";
  char dir[] = "/tmp/stallwatch-pylayout-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string src = std::string(dir) + "/offsets.c";
  std::ofstream(src) << kOffsetsProgram;
  for (const auto& py : all) {
    SCOPED_TRACE("CPython 3." + std::to_string(py.minor) + " at " + py.root);
    const std::string inc = py.root + "/include/python3." + std::to_string(py.minor);
    if (access((inc + "/internal/pycore_runtime.h").c_str(), R_OK) != 0) {
      std::cout << "[ SKIPPED  ] 3." << py.minor << ": no internal headers under " << inc << "\n";
      continue;
    }
    const std::string bin = std::string(dir) + "/offsets_3" + std::to_string(py.minor);
    ASSERT_EQ(std::system(("cc -w -I" + inc + " -I" + inc + "/internal " + src + " -o " + bin).c_str()), 0);
    auto facts = key_values(run(bin));
    auto table = builtin_layout(3, py.minor);
    ASSERT_TRUE(table);
    const PyLayout& l = *table;
    std::map<std::string, long> ours = {
        {"rt_interp_head", l.rt_interp_head}, {"interp_threads_head", l.interp_threads_head},
        {"ts_tid", l.ts_tid},                 {"ts_next", l.ts_next},
        {"ts_interp", l.ts_interp},           {"ts_frame", l.ts_frame},
        {"fr_code", l.fr_code},               {"fr_instr", l.fr_instr},
        {"fr_back", l.fr_back},               {"co_filename", l.co_filename},
        {"co_name", l.co_name},               {"co_firstlineno", l.co_firstlineno},
        {"co_linetable", l.co_linetable},     {"ascii_size", l.ascii_size},
        {"compact_size", l.compact_size}};
    if (py.minor >= 11) {
      ours["code_adaptive"] = l.code_adaptive;
      ours["co_qualname"] = l.co_qualname;
    }
    if (py.minor == 11 || py.minor == 12) ours["cframe_current"] = l.cframe_current;
    if (py.minor >= 12) ours["fr_owner"] = l.fr_owner;
    for (const auto& [name, value] : ours) {
      ASSERT_TRUE(facts.count(name)) << name << " not printed";
      EXPECT_EQ(value, facts[name]) << name;
    }
    unlink(bin.c_str());
  }
  unlink(src.c_str());
  rmdir(dir);
}

TEST(PythonLayout, DebugOffsetsOfALive313GiveTheTablesLayout) {
  std::string python;
  for (const auto& py : interpreters()) {
    if (py.minor == 13) python = py.root + "/bin/python3";
  }
  if (python.empty()) GTEST_SKIP() << "no pyenv CPython 3.13 on this machine";
  // The interpreter prints the first kDebugOffsetsBytes of its own _PyRuntime.
  const std::string hex = run(python +
                              " -c \"import ctypes; a = ctypes.addressof(ctypes.c_char.in_dll("
                              "ctypes.pythonapi, '_PyRuntime')); print(ctypes.string_at(a, " +
                              std::to_string(kDebugOffsetsBytes) + ").hex())\"");
  ASSERT_GE(hex.size(), kDebugOffsetsBytes * 2) << hex;
  std::string bytes;
  for (size_t i = 0; i + 1 < kDebugOffsetsBytes * 2; i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  auto parsed = layout_from_debug_offsets(bytes);
  ASSERT_TRUE(parsed) << parsed.error().message;
  auto table = builtin_layout(3, 13);
  EXPECT_EQ(parsed->rt_interp_head, table->rt_interp_head);
  EXPECT_EQ(parsed->interp_threads_head, table->interp_threads_head);
  EXPECT_EQ(parsed->ts_next, table->ts_next);
  EXPECT_EQ(parsed->ts_tid, table->ts_tid);
  EXPECT_EQ(parsed->ts_frame, table->ts_frame);
  EXPECT_EQ(parsed->fr_back, table->fr_back);
  EXPECT_EQ(parsed->fr_code, table->fr_code);
  EXPECT_EQ(parsed->fr_instr, table->fr_instr);
  EXPECT_EQ(parsed->fr_owner, table->fr_owner);
  EXPECT_EQ(parsed->code_adaptive, table->code_adaptive);
  EXPECT_EQ(parsed->co_filename, table->co_filename);
  EXPECT_EQ(parsed->co_qualname, table->co_qualname);
  EXPECT_EQ(parsed->co_firstlineno, table->co_firstlineno);
  EXPECT_EQ(parsed->co_linetable, table->co_linetable);
  EXPECT_EQ(parsed->ascii_size, table->ascii_size);
  EXPECT_EQ(parsed->compact_size, table->compact_size);
  // Damaged input is refused, not misread.
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_FALSE(layout_from_debug_offsets(bad));
  EXPECT_FALSE(layout_from_debug_offsets(bytes.substr(0, 100)));
  std::string free_threaded = bytes;
  free_threaded[16] = 1;
  EXPECT_FALSE(layout_from_debug_offsets(free_threaded));
}

// For each function of a sample module: its linetable (hex), first line, and co_lines().
constexpr const char* kLinesScript = R"py(
import sys, types
src = '''
def plain(a, b):
    x = a + b
    if x > 3:
        return [i * i for i in range(x)]
    return x

def tricky(n):
    total = 0
    for i in range(n):
        try:
            total += 10 // (i - 3)
        except ZeroDivisionError:
            total -= 1
    while total > 100:
        total //= 2
    return (total,
            n)
''' + "\n" * 300 + '''
def far():
    return 1
'''
code = compile(src, "/sample.py", "exec")
for c in code.co_consts:
    if isinstance(c, types.CodeType):
        for sub in [c] + [k for k in c.co_consts if isinstance(k, types.CodeType)]:
            lines = " ".join("%d,%d,%s" % (s, e, -1 if l is None else l) for s, e, l in sub.co_lines())
            print(sub.co_name, sub.co_firstlineno, sub.co_linetable.hex(), lines)
)py";

TEST(PythonLayout, LineTablesDecodeAsCPythonsOwnCoLines) {
  auto all = interpreters();
  if (all.empty()) GTEST_SKIP() << "no pyenv CPython 3.10-3.13 on this machine";
  char path[] = "/tmp/stallwatch-pylines-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << kLinesScript;
  for (const auto& py : all) {
    SCOPED_TRACE("CPython 3." + std::to_string(py.minor));
    std::istringstream out(run(py.root + "/bin/python3 " + path));
    int functions = 0, checked = 0;
    for (std::string line; std::getline(out, line);) {
      std::istringstream f(line);
      std::string name, hex, range;
      int first = 0;
      f >> name >> first >> hex;
      std::string table;
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        table += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
      }
      ++functions;
      while (f >> range) {
        unsigned start = 0, end = 0;
        int want = 0;
        ASSERT_EQ(std::sscanf(range.c_str(), "%u,%u,%d", &start, &end, &want), 3) << range;
        for (unsigned off = start; off < end; off += 2) {
          ++checked;
          auto got = py.minor >= 11 ? py_line_311(table, first, off) : py_line_310(table, first, off);
          if (want < 0) {
            EXPECT_FALSE(got) << name << " offset " << off;
          } else {
            EXPECT_EQ(got.value_or(-1), want) << name << " offset " << off;
          }
        }
      }
    }
    EXPECT_GE(functions, 3);
    EXPECT_GE(checked, 60) << "instructions compared";
  }
  unlink(path);
}

}  // namespace
}  // namespace stallwatch::trace
