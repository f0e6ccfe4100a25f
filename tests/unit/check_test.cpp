// Unit tests for the pure pieces of `stallwatch check` (exporter/cli/check.h): cgroup
// classification, library kinds, item verdicts and rendering. The parsers check shares with the
// daemon are tested beside them: proc_maps_test (maps lines), calls_test (library names),
// identity_test (cgroup2 mount) and json_test (string quoting).
#include "cli/check.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace stallwatch::cli {
namespace {

constexpr std::string_view kPureV2 =
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    "25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "27 25 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
    "28 25 0:12 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:12 - tracefs "
    "tracefs rw\n";

constexpr std::string_view kHybrid =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw\n";

constexpr std::string_view kV1Only =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";

TEST(CgroupMountTest, PureV2) {
  const CgroupClass cls = classify_cgroup(kPureV2);
  EXPECT_EQ(cls.mount, "/sys/fs/cgroup");
  EXPECT_EQ(cls.layout, CgroupLayout::kUnified);
  EXPECT_FALSE(cls.v1_controllers);
  const CheckItem item = cgroup_item(cls);
  EXPECT_EQ(item.status, Status::kOk);
  EXPECT_EQ(item.detail, "v2 (unified) at /sys/fs/cgroup");
  EXPECT_EQ(item.fix, "");
}

TEST(CgroupMountTest, Hybrid) {
  const CgroupClass cls = classify_cgroup(kHybrid);
  EXPECT_EQ(cls.mount, "/sys/fs/cgroup/unified");
  EXPECT_EQ(cls.layout, CgroupLayout::kHybrid);
  EXPECT_TRUE(cls.v1_controllers);
  const CheckItem item = cgroup_item(cls);
  EXPECT_EQ(item.status, Status::kOk);
  EXPECT_EQ(item.detail,
            "hybrid: v1 controllers, v2 hierarchy at /sys/fs/cgroup/unified (cgroup labels are v2 "
            "paths)");
}

TEST(CgroupMountTest, NoCgroup2) {
  const CgroupClass v1 = classify_cgroup(kV1Only);
  EXPECT_EQ(v1.layout, CgroupLayout::kNone);
  EXPECT_EQ(v1.mount, "");
  EXPECT_TRUE(v1.v1_controllers);
  const CgroupClass empty = classify_cgroup("");
  EXPECT_EQ(empty.layout, CgroupLayout::kNone);
  EXPECT_EQ(empty.mount, "");
  EXPECT_FALSE(empty.v1_controllers);
  const CheckItem item = cgroup_item(v1);
  EXPECT_EQ(item.status, Status::kFail);
  EXPECT_NE(item.fix.find("systemd.unified_cgroup_hierarchy=1"), std::string::npos);
}

TEST(CgroupMountTest, EscapedAndOddMountPoints) {
  // A cgroup2 mount elsewhere (escaped space), with optional fields, no trailing newline.
  constexpr std::string_view kOther =
      "50 1 0:40 / /run/my\\040cgroup rw shared:3 master:2 - cgroup2 none rw";
  const CgroupClass cls = classify_cgroup(kOther);
  EXPECT_EQ(cls.mount, "/run/my cgroup");
  EXPECT_EQ(cls.layout, CgroupLayout::kOtherV2);
  EXPECT_EQ(cgroup_item(cls).status, Status::kOk);
  // /sys/fs/cgroup wins over an earlier mount elsewhere.
  const std::string both = std::string(kOther) + "\n" + std::string(kPureV2);
  EXPECT_EQ(classify_cgroup(both).mount, "/sys/fs/cgroup");
  // Garbage lines are skipped.
  const CgroupClass garbage = classify_cgroup("garbage\n1 2 3\n- cgroup2\n");
  EXPECT_EQ(garbage.layout, CgroupLayout::kNone);
  EXPECT_EQ(garbage.mount, "");
}

TEST(LibraryKindTest, EachApi) {
  EXPECT_STREQ(library_kind(trace::Api::kRuntime), "cudart");
  EXPECT_STREQ(library_kind(trace::Api::kDriver), "cuda");
  EXPECT_STREQ(library_kind(trace::Api::kNccl), "nccl");
}

TEST(CapabilitiesTest, Verdicts) {
  const std::uint64_t all = (1ull << 39) | (1ull << 38) | (1ull << 21);
  EXPECT_EQ(capabilities_item(all).status, Status::kOk);
  EXPECT_EQ(capabilities_item(~0ull).fix, "");

  const CheckItem none = capabilities_item(0);
  EXPECT_EQ(none.status, Status::kFail);
  EXPECT_EQ(none.detail, "missing CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN");
  EXPECT_NE(none.fix.find("AmbientCapabilities="), std::string::npos);

  const CheckItem no_admin = capabilities_item((1ull << 39) | (1ull << 38));
  EXPECT_EQ(no_admin.status, Status::kFail);
  EXPECT_EQ(no_admin.detail, "missing CAP_SYS_ADMIN");

  const CheckItem admin_only = capabilities_item(1ull << 21);
  EXPECT_EQ(admin_only.status, Status::kWarn);
}

TEST(TracefsTest, Verdicts) {
  EXPECT_EQ(tracefs_item(true, true, 0).status, Status::kOk);
  const CheckItem unmounted = tracefs_item(true, false, ENOENT);
  EXPECT_EQ(unmounted.status, Status::kWarn);
  EXPECT_EQ(unmounted.fix,
            "stallwatch run mounts tracefs at /sys/kernel/tracing itself; or: mount -t tracefs "
            "tracefs /sys/kernel/tracing");
  const CheckItem no_syscalls = tracefs_item(true, true, ENOENT);
  EXPECT_EQ(no_syscalls.status, Status::kFail);
  EXPECT_EQ(no_syscalls.fix,
            "kernel needs CONFIG_FTRACE_SYSCALLS=y (library discovery uses "
            "syscalls:sys_enter_mmap)");
  EXPECT_EQ(tracefs_item(false, false, ENOENT).status, Status::kFail);
  EXPECT_EQ(tracefs_item(true, true, EACCES).status, Status::kWarn);
}

CheckReport small_report() {
  CheckReport r;
  r.items.push_back({"kernel", Status::kOk, "6.18.44 (x86_64)", ""});
  r.items.push_back({"tracefs", Status::kWarn, "not \"mounted\"", "mount it"});
  CudaLibrary lib;
  lib.path = "/usr/lib/libcuda.so.1";
  lib.kind = "cuda";
  lib.mapped = true;
  lib.pids = {12, 345};
  lib.comms = {"python3", "pt_main\tthread"};
  r.libraries.push_back(lib);
  r.libraries.push_back({"/opt/libnccl.so.2", "nccl", false, {}, {}, trace::Api::kNccl, ""});
  return r;
}

TEST(CudaLibrariesItemTest, Counts) {
  const CheckReport r = small_report();
  const CheckItem item = cuda_libraries_item(r.libraries, 2);
  EXPECT_EQ(item.status, Status::kOk);
  EXPECT_EQ(item.detail, "2 on disk, 1 mapped by 2 processes");
  const CheckItem none = cuda_libraries_item({}, 0);
  EXPECT_EQ(none.status, Status::kWarn);
  EXPECT_EQ(none.detail,
            "no CUDA library found; stallwatch attaches automatically when a process maps one");
}

TEST(RenderTest, Json) {
  CheckReport r = small_report();
  EXPECT_TRUE(r.tracing_possible());
  EXPECT_EQ(render_json(r),
            R"j({"ok":true,"checks":[)j"
            R"j({"name":"kernel","status":"ok","detail":"6.18.44 (x86_64)","fix":""},)j"
            R"j({"name":"tracefs","status":"warn","detail":"not \"mounted\"","fix":"mount it"}],)j"
            R"j("libraries":[{"path":"/usr/lib/libcuda.so.1","kind":"cuda","mapped":true,)j"
            R"j("pids":[12,345],"processes":["python3","pt_main\tthread"],"sites":""},)j"
            R"j({"path":"/opt/libnccl.so.2","kind":"nccl","mapped":false,"pids":[],)j"
            R"j("processes":[],"sites":""}],"python":[]})j");
  r.python.push_back({12, "python3", true, "Python 3.12 frames (/usr/lib/libpython3.12.so.1.0)"});
  r.python.push_back({345, "pt_main\tthread", false, "no Python frames: not CPython"});
  EXPECT_TRUE(render_json(r).ends_with(
      R"j("python":[{"pid":12,"comm":"python3","frames":true,"detail":"Python 3.12 frames )j"
      R"j((/usr/lib/libpython3.12.so.1.0)"},{"pid":345,"comm":"pt_main\tthread","frames":false,)j"
      R"j("detail":"no Python frames: not CPython"}]})j"))
      << render_json(r);
  const std::string text = render_text(r);
  EXPECT_NE(text.find("  python3 (PID 12): Python 3.12 frames (/usr/lib/libpython3.12.so.1.0)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  pt_main\\tthread (PID 345): no Python frames: not CPython; native "
                      "frames only\n"),
            std::string::npos)
      << text;
  r.python.clear();
  r.items.push_back({"btf", Status::kFail, "missing", "rebuild"});
  r.libraries.clear();
  EXPECT_FALSE(r.tracing_possible());
  const std::string json = render_json(r);
  EXPECT_TRUE(json.starts_with(R"j({"ok":false,"checks":[)j"));
  EXPECT_NE(json.find(R"j({"name":"btf","status":"fail","detail":"missing","fix":"rebuild"})j"),
            std::string::npos);
  EXPECT_TRUE(json.ends_with(R"j(],"libraries":[],"python":[]})j"));
}

TEST(RenderTest, Text) {
  CheckReport r = small_report();
  r.libraries[0].pids = {1, 2, 3, 4, 5, 6, 7};
  r.libraries[0].comms = {"a", "b", "c", "d", "e", "f", "g"};
  EXPECT_EQ(render_text(r),
            "stallwatch check\n"
            "ok   kernel   6.18.44 (x86_64)\n"
            "warn tracefs  not \"mounted\" (fix: mount it)\n"
            "CUDA libraries:\n"
            "  /usr/lib/libcuda.so.1  (cuda, mapped by pid 1 a, pid 2 b, pid 3 c, pid 4 d, pid 5 "
            "e, and 2 more)\n"
            "  /opt/libnccl.so.2  (nccl, not mapped)\n"
            "tracing: possible\n");
  r.items.push_back({"btf", Status::kFail, "missing", "rebuild"});
  r.libraries.clear();
  const std::string text = render_text(r);
  EXPECT_NE(text.find("FAIL btf      missing (fix: rebuild)\n"), std::string::npos);
  EXPECT_NE(text.find("CUDA libraries:\n  none found\n"), std::string::npos);
  EXPECT_TRUE(text.ends_with("tracing: NOT possible \u2014 fix the failures above\n"));
}

// Issue #35 row 9: a library path and a process name are any local user's choice. Neither an
// ESC sequence, a CSI (U+009B), a bidi override nor a newline reaches the terminal raw.
TEST(RenderTest, HostileNamesAreEscaped) {
  CheckReport r = small_report();
  r.libraries[0].path = "/tmp/x\x1b[2J\n/libcudart.so.12";
  r.libraries[0].pids = {7};
  r.libraries[0].comms = {"py\xc2\x9b" "31m\xe2\x80\xaetxt"};
  const std::string text = render_text(r);
  EXPECT_NE(text.find("  /tmp/x\\x1b[2J\\n/libcudart.so.12  (cuda, mapped by pid 7 py\\u009b31m\\u202etxt)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos);
  EXPECT_EQ(text.find("\xe2\x80\xae"), std::string::npos);
}

}  // namespace
}  // namespace stallwatch::cli
