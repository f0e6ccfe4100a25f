// Fix recommendations: commands and settings a person can paste, chosen from the evidence
// (who the contributors are, where they run, what the workload is). One recommendation per
// line. Pure; thread-safe.
#pragma once

#include <string>

#include "chains/chain.h"

namespace stallwatch::chains {

std::string advise_cpu_contention(const Chain& c, int host_cpus);
std::string advise_alloc_spike(const Chain& c);
std::string advise_cold_start(const Chain& c);
std::string advise_memcpy_bound(const Chain& c);
std::string advise_gpu_contention(const Chain& c);
std::string advise_memory_pressure(const Chain& c);
// `device`: the busiest block device of the workload ("" when unknown).
std::string advise_io_stall(const Chain& c, const std::string& device);
std::string advise_network_retransmit(const Chain& c);
std::string advise_nccl_straggler(const Chain& c);

}  // namespace stallwatch::chains
