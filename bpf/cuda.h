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
