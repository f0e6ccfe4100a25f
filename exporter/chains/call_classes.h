// Call classes by call id, as the `cls` column of trace/calls.cpp's table gives them; shared by
// the window view and the rules.
// Pure; thread-safe.
#pragma once

#include <cstdint>

namespace stallwatch::chains {

bool is_sync_call(std::uint32_t call_id);   // cudaStreamSynchronize, cuCtxSynchronize, ...
bool is_alloc_call(std::uint32_t call_id);  // cudaMalloc, cuMemAlloc_v2, ...
bool is_copy_call(std::uint32_t call_id);   // cudaMemcpy, cuMemcpyHtoD_v2, ...

}  // namespace stallwatch::chains
