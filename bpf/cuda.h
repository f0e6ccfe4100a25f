/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Records of the CUDA call probes (cuda.bpf.c), read by exporter/trace/cuda_source.cpp. */
#ifndef STALLWATCH_CUDA_H
#define STALLWATCH_CUDA_H

#include "stallwatch.h"

/* Key of cuda_call_duration: label fields in label order, then the process. */
struct call_key {
	__u64 cgroup_id;
	__u32 call_id; /* index into exporter/trace/calls.cpp's table; the uprobe's bpf_cookie */
	__u32 tgid;
	__u32 start_tag; /* sw_start_tag(): with tgid, one process even when its PID is reused */
	__u32 pad;
};

/* Cumulative per (cgroup, call, process); never reset, never deleted while the process lives. */
struct call_stats {
	__u64 count;
	__u64 sum_ns;
	__u64 runnable_ns; /* off-CPU, runnable (waiting for a CPU) during the call */
	__u64 blocked_ns;  /* off-CPU, blocked (sleeping) during the call */
	__u64 max_ns;
	__u64 buckets[SW_HIST_BUCKETS];
	/*
	 * Memory calls (SW_MEM_*): bytes of successful allocations by this call, bytes of them
	 * freed since (by any free call, matched through cuda_allocs), out-of-memory returns, and
	 * the size the latest of those asked for.
	 */
	__u64 alloc_bytes;
	__u64 freed_bytes;
	__u64 alloc_failures;
	__u64 failed_bytes;
};

/* Key of cuda_allocs: an address (or a cuMemCreate handle) a process holds. */
struct cuda_alloc_key {
	__u64 addr;
	__u32 tgid;
	__u32 handle; /* 1: addr is a cuMemCreate handle */
};

/* Which allocation it was: the call_key of the call_stats entry its free credits. */
struct cuda_alloc {
	__u64 bytes;
	__u64 cgroup_id;
	__u32 call_id;
	__u32 start_tag;
};

/* A call at or above outlier_threshold_ns; the only per-call record user space sees. */
struct outlier_event {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u64 duration_ns;
	__u64 runnable_ns;
	__u64 blocked_ns;
	__u32 tgid;
	__u32 tid;
	__u32 call_id;
	__u32 preemptions;
	char comm[SW_COMM_LEN];
};

#endif /* STALLWATCH_CUDA_H */
