// Unit tests for exporter/trace/calls.h: which files are CUDA libraries, the table of traced
// calls and the mapping of exported symbols (and their _ptsz/_ptds variants) to call ids.
#include "trace/calls.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace stallwatch::trace {
namespace {

// The call id of `name` in the table, found independently of call_for_symbol.
std::uint32_t id_of(std::string_view name) {
  const auto calls = all_calls();
  for (std::uint32_t i = 0; i < calls.size(); ++i) {
    if (calls[i].name == name) return i;
  }
  ADD_FAILURE() << name << " is not in the table";
  return UINT32_MAX;
}

TEST(ApiOfLibraryTest, BaseNames) {
  EXPECT_EQ(api_of_library("libcudart.so.12"), Api::kRuntime);
  EXPECT_EQ(api_of_library("libcudart.so"), Api::kRuntime);
  EXPECT_EQ(api_of_library("libcuda.so.1"), Api::kDriver);
  EXPECT_EQ(api_of_library("libcuda.so"), Api::kDriver);
  EXPECT_EQ(api_of_library("libnccl.so.2"), Api::kNccl);
  EXPECT_EQ(api_of_library("libnccl.so.2.21.5"), Api::kNccl);
  EXPECT_EQ(api_of_library("libcudart-9335f6a2.so.12"), Api::kRuntime);
  EXPECT_EQ(api_of_library("libcudadebugger.so.1"), std::nullopt);
  EXPECT_EQ(api_of_library("libcudart_static.a"), std::nullopt);
  EXPECT_EQ(api_of_library("libnccl-net.so"), std::nullopt);
  EXPECT_EQ(api_of_library("libnccl_static.a"), std::nullopt);
  EXPECT_EQ(api_of_library("libcublas.so.12"), std::nullopt);
  EXPECT_EQ(api_of_library(""), std::nullopt);
}

TEST(ApiOfLibraryTest, Paths) {
  EXPECT_EQ(api_of_library("/usr/local/cuda/lib64/libcudart.so.12"), Api::kRuntime);
  EXPECT_EQ(api_of_library("torch/lib/libcudart-9335f6a2.so.12"), Api::kRuntime);
  EXPECT_EQ(api_of_library("/usr/lib64/libcuda.so.550.54.15"), Api::kDriver);
  EXPECT_EQ(api_of_library("libcuda.so.1.bak/x"), std::nullopt);  // the last component counts
  EXPECT_EQ(api_of_library("/usr/lib/"), std::nullopt);
}

TEST(ApiOfLibraryTest, NearMisses) {
  EXPECT_EQ(api_of_library("libcuda.sox"), std::nullopt);               // ".so" then a non-dot
  EXPECT_EQ(api_of_library("libcudart.so12"), std::nullopt);            // ".so" then a non-dot
  EXPECT_EQ(api_of_library("libcudart-9335f.so.12"), std::nullopt);     // hash too short
  EXPECT_EQ(api_of_library("libcudart-9335F6A2.so.12"), std::nullopt);  // not lowercase hex
  EXPECT_EQ(api_of_library("libcudart-9335f6a2"), std::nullopt);        // no ".so"
  EXPECT_EQ(api_of_library("libcudart-9335f6a2.a"), std::nullopt);
  EXPECT_EQ(api_of_library("libnccl-9335f6a2.so.2"), Api::kNccl);
  EXPECT_EQ(api_of_library("libcuda-9335f6a2.so.1"), Api::kDriver);
}

TEST(AllCallsTest, TableShape) {
  const auto calls = all_calls();
  ASSERT_EQ(calls.size(), 72u);
  std::size_t runtime = 0, driver = 0, nccl = 0;
  std::set<std::string_view> names;
  for (const CallInfo& c : calls) {
    runtime += c.api == Api::kRuntime;
    driver += c.api == Api::kDriver;
    nccl += c.api == Api::kNccl;
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
    // Runtime calls are cuda*, driver calls cu* but not cuda*.
    if (c.api == Api::kRuntime) {
      EXPECT_TRUE(c.name.starts_with("cuda")) << c.name;
    }
    if (c.api == Api::kDriver) {
      EXPECT_TRUE(c.name.starts_with("cu") && !c.name.starts_with("cuda")) << c.name;
    }
    if (c.api == Api::kNccl) {
      EXPECT_TRUE(c.name.starts_with("nccl")) << c.name;
    } else {
      EXPECT_EQ(c.nccl.kind, NcclKind::kNone) << c.name;
    }
  }
  EXPECT_EQ(runtime, 24u);
  EXPECT_EQ(driver, 26u);
  EXPECT_EQ(nccl, 22u);
  EXPECT_EQ(names.size(), 72u);
}

// What cuda.bpf.c reads of a memory call: argument positions (cuda_runtime_api.h, cuda.h),
// the handle flag and the op, in the cookie's bits 32-47; where the memory lives.
TEST(MemArgsTest, CookiesOfTheRealSignatures) {
  auto cookie = [](std::string_view name) { return cookie_of(id_of(name)) >> 32; };
  // cudaMalloc(void **devPtr, size_t size): out 1, size 2, op kAlloc (1).
  EXPECT_EQ(cookie("cudaMalloc"), 0x1u << 12 | 2u << 4 | 1u);
  // cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, ...): a handle (bit 8).
  EXPECT_EQ(cookie("cuMemCreate"), 0x1u << 12 | 1u << 8 | 2u << 4 | 1u);
  // cuMemRelease(handle) frees by handle; cudaFree(ptr) by address: op kFree (4), pointer 1.
  EXPECT_EQ(cookie("cuMemRelease"), 0x4u << 12 | 1u << 8 | 1u);
  EXPECT_EQ(cookie("cudaFree"), 0x4u << 12 | 1u);
  EXPECT_EQ(cookie("cudaMallocPitch"), 0x2u << 12);
  EXPECT_EQ(cookie("cudaMalloc3D"), 0x3u << 12);
  EXPECT_EQ(cookie("cudaStreamSynchronize"), 0u);
  EXPECT_TRUE(is_allocating_call(id_of("cuMemAllocHost_v2")));
  EXPECT_FALSE(is_allocating_call(id_of("cuMemFreeHost")));
  EXPECT_EQ(mem_kind(id_of("cudaHostAlloc")), MemKind::kHost);
  EXPECT_EQ(mem_kind(id_of("cuMemAllocManaged")), MemKind::kManaged);
  EXPECT_EQ(mem_kind(id_of("cudaMallocAsync")), MemKind::kDevice);
  EXPECT_EQ(call_class(id_of("cudaGraphInstantiateWithFlags")), CallClass::kGraphBuild);
  EXPECT_EQ(call_class(id_of("cudaGraphLaunch")), CallClass::kOther);
}

// Argument positions are facts of nccl.h (x86-64: six in registers, the seventh on the stack).
TEST(NcclArgsTest, PositionsOfTheRealSignatures) {
  const auto calls = all_calls();
  auto args = [&](std::string_view name) { return calls[id_of(name)].nccl; };
  // ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream)
  EXPECT_EQ(args("ncclAllReduce").count_arg, 3);
  EXPECT_EQ(args("ncclAllReduce").dtype_arg, 4);
  EXPECT_EQ(args("ncclAllReduce").comm_arg, 6);
  // ncclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream): comm 7th
  EXPECT_EQ(args("ncclReduce").comm_arg, 7);
  // ncclSend(sendbuff, count, datatype, peer, comm, stream)
  EXPECT_EQ(args("ncclSend").count_arg, 2);
  EXPECT_EQ(args("ncclSend").dtype_arg, 3);
  EXPECT_EQ(args("ncclSend").comm_arg, 5);
  // ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream)
  EXPECT_EQ(args("ncclAllGather").comm_arg, 5);
  // ncclCommSplit(comm, color, key, newcomm*, config): the out-communicator is 4th
  EXPECT_EQ(args("ncclCommSplit").kind, NcclKind::kSplit);
  EXPECT_EQ(args("ncclCommSplit").comm_arg, 4);
  EXPECT_EQ(args("ncclCommInitRank").kind, NcclKind::kInitRank);
  EXPECT_EQ(args("ncclGroupStart").kind, NcclKind::kNone);
  EXPECT_TRUE(is_nccl_op(id_of("ncclRecv")));
  EXPECT_FALSE(is_nccl_op(id_of("ncclCommInitRank")));
  EXPECT_FALSE(is_nccl_op(id_of("cudaMalloc")));
}

TEST(NcclArgsTest, CookieCarriesIdPositionsAndKind) {
  const std::uint32_t id = id_of("ncclReduce");
  const std::uint64_t c = cookie_of(id);
  EXPECT_EQ(c & 0xffffffffu, id);
  EXPECT_EQ((c >> 32) & 0xf, 3u);
  EXPECT_EQ((c >> 36) & 0xf, 4u);
  EXPECT_EQ((c >> 40) & 0xf, 7u);
  EXPECT_EQ((c >> 44) & 0xf, static_cast<unsigned>(NcclKind::kOp));
  EXPECT_EQ(cookie_of(id_of("cudaLaunchKernel")), id_of("cudaLaunchKernel"));  // the id alone
}

// The classes the chain rules read: exactly these calls, none other.
TEST(AllCallsTest, ClassesOfTheRules) {
  const std::vector<std::pair<CallClass, std::vector<std::string_view>>> want = {
      {CallClass::kSync,
       {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
        "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"}},
      {CallClass::kAlloc,
       {"cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cuMemAlloc_v2", "cudaMallocHost",
        "cudaHostAlloc", "cudaMallocPitch", "cudaMalloc3D", "cuMemAllocManaged",
        "cuMemAllocAsync", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemAllocPitch_v2",
        "cuMemCreate"}},
      {CallClass::kGraphBuild,
       {"cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate",
        "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams", "cudaGraphExecUpdate",
        "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
        "cuGraphInstantiateWithParams", "cuGraphExecUpdate_v2"}},
      {CallClass::kCopy,
       {"cudaMemcpy", "cudaMemcpyAsync", "cuMemcpy", "cuMemcpyAsync", "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2"}},
  };
  size_t classified = 0;
  for (const auto& [cls, names] : want) {
    for (auto name : names) {
      EXPECT_EQ(call_class(id_of(name)), cls) << name;
      classified++;
    }
  }
  size_t in_table = 0;
  for (const auto& c : all_calls()) in_table += c.cls != CallClass::kOther;
  EXPECT_EQ(in_table, classified);
  EXPECT_EQ(call_class(static_cast<std::uint32_t>(all_calls().size())), CallClass::kOther);
}

TEST(AllCallsTest, ApiNames) {
  EXPECT_EQ(api_name(Api::kRuntime), "runtime");
  EXPECT_EQ(api_name(Api::kDriver), "driver");
  EXPECT_EQ(api_name(Api::kNccl), "nccl");
}

TEST(CallForSymbolTest, EveryCallMapsToItself) {
  const auto calls = all_calls();
  for (std::uint32_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(call_for_symbol(calls[i].name, calls[i].api), i) << calls[i].name;
  }
}

TEST(CallForSymbolTest, PerThreadVariants) {
  EXPECT_EQ(call_for_symbol("cudaMemcpyAsync_ptsz", Api::kRuntime), id_of("cudaMemcpyAsync"));
  EXPECT_EQ(call_for_symbol("cudaMemcpy_ptds", Api::kRuntime), id_of("cudaMemcpy"));
  EXPECT_EQ(call_for_symbol("cudaLaunchKernel_ptsz", Api::kRuntime), id_of("cudaLaunchKernel"));
  EXPECT_EQ(call_for_symbol("cuMemcpyHtoD_v2_ptds", Api::kDriver), id_of("cuMemcpyHtoD_v2"));
  EXPECT_EQ(call_for_symbol("cuLaunchKernel_ptsz", Api::kDriver), id_of("cuLaunchKernel"));
  EXPECT_EQ(call_for_symbol("cudaMalloc_ptsz_ptsz", Api::kRuntime), std::nullopt);  // one suffix
}

TEST(CallForSymbolTest, Misses) {
  EXPECT_EQ(call_for_symbol("cuMemAlloc", Api::kDriver), std::nullopt);  // only _v2 is traced
  EXPECT_EQ(call_for_symbol("cuMemAlloc_v2", Api::kDriver), id_of("cuMemAlloc_v2"));
  EXPECT_EQ(call_for_symbol("cudaMalloc", Api::kDriver), std::nullopt);  // wrong api
  EXPECT_EQ(call_for_symbol("cuLaunchKernel", Api::kRuntime), std::nullopt);
  EXPECT_EQ(call_for_symbol("cudaMalloc", Api::kNccl), std::nullopt);
  EXPECT_EQ(call_for_symbol("cudaGetDevice", Api::kRuntime), std::nullopt);
  EXPECT_EQ(call_for_symbol("", Api::kRuntime), std::nullopt);
  EXPECT_EQ(call_for_symbol("_ptsz", Api::kRuntime), std::nullopt);
  EXPECT_EQ(call_for_symbol("cudamalloc", Api::kRuntime), std::nullopt);  // case-sensitive
}

}  // namespace
}  // namespace stallwatch::trace

namespace stallwatch::trace {
namespace {

// Issue #40: one probe pair per launch. Under the driver layer (the default) the runtime's
// cudaLaunchKernel gets no probes and the driver's launches do; the runtime layer is the
// reverse; both probes both, none neither. Every other call is probed whatever the layer.
TEST(LaunchLayer, OnlyTheChosenLayersLaunchesAreProbed) {
  const auto calls = all_calls();
  std::vector<std::string_view> launches;
  for (std::uint32_t i = 0; i < calls.size(); ++i) {
    if (calls[i].kernel_launch) {
      launches.push_back(calls[i].name);
      EXPECT_TRUE(probed_under(i, LaunchLayer::kBoth)) << calls[i].name;
      EXPECT_EQ(probed_under(i, LaunchLayer::kDriver), calls[i].api == Api::kDriver)
          << calls[i].name;
      EXPECT_EQ(probed_under(i, LaunchLayer::kRuntime), calls[i].api == Api::kRuntime)
          << calls[i].name;
      EXPECT_FALSE(probed_under(i, LaunchLayer::kNone)) << calls[i].name;
    } else {
      for (LaunchLayer l : {LaunchLayer::kDriver, LaunchLayer::kRuntime, LaunchLayer::kBoth,
                            LaunchLayer::kNone}) {
        EXPECT_TRUE(probed_under(i, l)) << calls[i].name << " " << launch_layer_name(l);
      }
    }
  }
  EXPECT_EQ(launches, (std::vector<std::string_view>{"cudaLaunchKernel", "cuLaunchKernel",
                                                     "cuLaunchKernelEx"}));
  EXPECT_FALSE(probed_under(static_cast<std::uint32_t>(calls.size()), LaunchLayer::kBoth));
  for (LaunchLayer l :
       {LaunchLayer::kDriver, LaunchLayer::kRuntime, LaunchLayer::kBoth, LaunchLayer::kNone}) {
    EXPECT_EQ(parse_launch_layer(launch_layer_name(l)), l);
  }
  EXPECT_EQ(parse_launch_layer("Driver"), std::nullopt);
  EXPECT_EQ(parse_launch_layer(""), std::nullopt);
}

}  // namespace
}  // namespace stallwatch::trace
