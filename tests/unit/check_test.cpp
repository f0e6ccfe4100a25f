// Unit tests for the pure pieces of `stallwatch check` (exporter/cli/check.h): maps and
// mountinfo parsing, cgroup classification, item verdicts, JSON quoting and rendering.
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
  EXPECT_EQ(cgroup2_mount_from_mountinfo(kPureV2), "/sys/fs/cgroup");
  const CgroupClass cls = classify_cgroup(kPureV2);
  EXPECT_EQ(cls.layout, CgroupLayout::kUnified);
  EXPECT_FALSE(cls.v1_controllers);
  const CheckItem item = cgroup_item(cls);
  EXPECT_EQ(item.status, Status::kOk);
  EXPECT_EQ(item.detail, "v2 (unified) at /sys/fs/cgroup");
  EXPECT_EQ(item.fix, "");
}

TEST(CgroupMountTest, Hybrid) {
  EXPECT_EQ(cgroup2_mount_from_mountinfo(kHybrid), "/sys/fs/cgroup/unified");
  const CgroupClass cls = classify_cgroup(kHybrid);
  EXPECT_EQ(cls.layout, CgroupLayout::kHybrid);
  EXPECT_TRUE(cls.v1_controllers);
  const CheckItem item = cgroup_item(cls);
  EXPECT_EQ(item.status, Status::kOk);
  EXPECT_EQ(item.detail,
            "hybrid: v1 controllers, v2 hierarchy at /sys/fs/cgroup/unified (cgroup labels are v2 "
            "paths)");
}

TEST(CgroupMountTest, NoCgroup2) {
  EXPECT_EQ(cgroup2_mount_from_mountinfo(kV1Only), std::nullopt);
  EXPECT_EQ(cgroup2_mount_from_mountinfo(""), std::nullopt);
  const CheckItem item = cgroup_item(classify_cgroup(kV1Only));
  EXPECT_EQ(item.status, Status::kFail);
  EXPECT_NE(item.fix.find("systemd.unified_cgroup_hierarchy=1"), std::string::npos);
}

TEST(CgroupMountTest, EscapedAndOddMountPoints) {
  // A cgroup2 mount elsewhere (escaped space), with optional fields, no trailing newline.
  constexpr std::string_view kOther =
      "50 1 0:40 / /run/my\\040cgroup rw shared:3 master:2 - cgroup2 none rw";
  EXPECT_EQ(cgroup2_mount_from_mountinfo(kOther), "/run/my cgroup");
  const CgroupClass cls = classify_cgroup(kOther);
  EXPECT_EQ(cls.layout, CgroupLayout::kOtherV2);
  EXPECT_EQ(cgroup_item(cls).status, Status::kOk);
  // /sys/fs/cgroup wins over an earlier mount elsewhere.
  const std::string both = std::string(kOther) + "\n" + std::string(kPureV2);
  EXPECT_EQ(cgroup2_mount_from_mountinfo(both), "/sys/fs/cgroup");
  // Garbage lines are skipped.
  EXPECT_EQ(cgroup2_mount_from_mountinfo("garbage\n1 2 3\n- cgroup2\n"), std::nullopt);
}

TEST(MapsLineTest, PathWithSpacesDeleted) {
  const auto e = parse_maps_line(
      "7f1c2a000000-7f1c2a021000 r-xp 0001a000 fd:01 1234567                    "
      "/opt/my env/lib/libcudart.so.12.4.127 (deleted)\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->start, 0x7f1c2a000000u);
  EXPECT_EQ(e->end, 0x7f1c2a021000u);
  EXPECT_EQ(e->perms, "r-xp");
  EXPECT_EQ(e->offset, 0x1a000u);
  EXPECT_EQ(e->inode, 1234567u);
  EXPECT_EQ(e->path, "/opt/my env/lib/libcudart.so.12.4.127");
  EXPECT_TRUE(e->deleted);
  EXPECT_EQ(cuda_library_kind(e->path), "cudart");
}

TEST(MapsLineTest, PlainAnonymousAndPseudo) {
  const auto lib = parse_maps_line(
      "7f00-8f00 r--p 00000000 08:01 42   /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  ASSERT_TRUE(lib.has_value());
  EXPECT_EQ(lib->path, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
  EXPECT_FALSE(lib->deleted);

  const auto anon = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ");
  ASSERT_TRUE(anon.has_value());
  EXPECT_EQ(anon->path, "");
  const auto no_pad = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0");
  ASSERT_TRUE(no_pad.has_value());
  EXPECT_EQ(no_pad->path, "");

  const auto stack = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0   [stack]");
  ASSERT_TRUE(stack.has_value());
  EXPECT_EQ(stack->path, "[stack]");
}

TEST(MapsLineTest, Malformed) {
  EXPECT_FALSE(parse_maps_line("").has_value());
  EXPECT_FALSE(parse_maps_line("not a maps line").has_value());
  EXPECT_FALSE(parse_maps_line("7f00 r-xp 0 08:01 1 /x").has_value());
  EXPECT_FALSE(parse_maps_line("7f00-zz r-xp 0 08:01 1 /x").has_value());
  EXPECT_FALSE(parse_maps_line("7f00-8f00 r-xp 0 0801 1 /x").has_value());
}

TEST(CudaLibraryKindTest, Names) {
  EXPECT_EQ(cuda_library_kind("libcudart.so"), "cudart");
  EXPECT_EQ(cuda_library_kind("/usr/local/cuda/lib64/libcudart.so.12"), "cudart");
  EXPECT_EQ(cuda_library_kind("torch/lib/libcudart-9335f6a2.so.12"), "cudart");
  EXPECT_EQ(cuda_library_kind("libcuda.so.1"), "cuda");
  EXPECT_EQ(cuda_library_kind("/usr/lib64/libcuda.so.550.54.15"), "cuda");
  EXPECT_EQ(cuda_library_kind("libnccl.so.2"), "nccl");
  EXPECT_EQ(cuda_library_kind("libnccl.so.2.21.5"), "nccl");
  EXPECT_EQ(cuda_library_kind("libcudart_static.a"), std::nullopt);
  EXPECT_EQ(cuda_library_kind("libcudadebugger.so.1"), std::nullopt);
  EXPECT_EQ(cuda_library_kind("libnccl-net.so"), std::nullopt);
  EXPECT_EQ(cuda_library_kind("libnccl_static.a"), std::nullopt);
  EXPECT_EQ(cuda_library_kind("libcuda.so.1.bak/x"), std::nullopt);
  EXPECT_EQ(cuda_library_kind("libcublas.so.12"), std::nullopt);
}

TEST(JsonQuoteTest, Escapes) {
  EXPECT_EQ(json_quote(""), R"("")");
  EXPECT_EQ(json_quote("plain /usr/lib"), R"("plain /usr/lib")");
  EXPECT_EQ(json_quote("say \"hi\""), R"("say \"hi\"")");
  EXPECT_EQ(json_quote("C:\\path\\"), R"("C:\\path\\")");
  EXPECT_EQ(json_quote("a\nb\tc\rd\be\ff"), R"("a\nb\tc\rd\be\ff")");
  EXPECT_EQ(json_quote(std::string_view("\x01\x1f\0x", 4)), R"("\u0001\u001f\u0000x")");
  EXPECT_EQ(json_quote("\x7f"), "\"\x7f\"");
}

TEST(JsonQuoteTest, Utf8) {
  EXPECT_EQ(json_quote("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x9a\x80"),
            "\"caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x9a\x80\"");
  EXPECT_EQ(json_quote("a\xff"), R"("a\ufffd")");                    // never valid
  EXPECT_EQ(json_quote("\xc3"), R"("\ufffd")");                      // truncated
  EXPECT_EQ(json_quote("\xc0\xaf"), R"("\ufffd\ufffd")");            // overlong '/'
  EXPECT_EQ(json_quote("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")");  // surrogate
  EXPECT_EQ(json_quote("\xe2\x80x"), R"("\ufffd\ufffdx")");          // bad continuation
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
  r.libraries.push_back({"/opt/libnccl.so.2", "nccl", false, {}, {}});
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
            R"j("pids":[12,345],"processes":["python3","pt_main\tthread"]},)j"
            R"j({"path":"/opt/libnccl.so.2","kind":"nccl","mapped":false,"pids":[],)j"
            R"j("processes":[]}]})j");
  r.items.push_back({"btf", Status::kFail, "missing", "rebuild"});
  r.libraries.clear();
  EXPECT_FALSE(r.tracing_possible());
  const std::string json = render_json(r);
  EXPECT_TRUE(json.starts_with(R"j({"ok":false,"checks":[)j"));
  EXPECT_NE(json.find(R"j({"name":"btf","status":"fail","detail":"missing","fix":"rebuild"})j"),
            std::string::npos);
  EXPECT_TRUE(json.ends_with(R"j(],"libraries":[]})j"));
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

}  // namespace
}  // namespace stallwatch::cli
