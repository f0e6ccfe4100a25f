/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Records of the memory hooks (host.bpf.c: memory reclaim and OOM kills), read by
 * exporter/trace/host_source.cpp. Like every host-side hook (io, net), they work only for
 * cgroups in watched_cgroups (cgroups with CUDA-issuing threads); everything else returns after
 * one map lookup.
 */
#ifndef STALLWATCH_HOST_H
#define STALLWATCH_HOST_H

#include "stallwatch.h"

/* Value of memory_reclaim, keyed by cgroup id: time the cgroup's tasks spent reclaiming. */
struct reclaim_stats {
	__u64 direct_ns;    /* global direct reclaim */
	__u64 direct_count;
	__u64 memcg_ns;     /* reclaim forced by the memory cgroup's limit */
	__u64 memcg_count;
	__u64 cuda_ns;      /* part of both spent by CUDA-issuing threads */
};

enum sw_host_event_kind {
	SW_HOST_OOM_KILL = 1,
};

/* One host event worth seeing one by one (rare): an OOM victim in a watched cgroup. */
struct host_event {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u32 kind;
	__u32 tgid;
	__u8 cuda; /* the victim thread had issued CUDA calls */
	__u8 pad[7];
	char comm[SW_COMM_LEN];
};

#endif /* STALLWATCH_HOST_H */
