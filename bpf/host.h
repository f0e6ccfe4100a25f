/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Records of the host-side hooks (host.bpf.c: memory reclaim and OOM kills, io.bpf.c: block
 * requests, net.bpf.c: TCP retransmits), read by exporter/trace/host_collector.cpp. Every hook
 * works only for cgroups in watched_cgroups (cgroups with CUDA-issuing threads); everything else
 * returns after one map lookup.
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

/* Key of block_io_duration: a process of a cgroup, a whole disk, an operation. */
struct io_key {
	__u64 cgroup_id;
	__u32 dev_major;
	__u32 dev_minor;
	__u32 op; /* REQ_OP_*: 0 read, 1 write, 2 flush, 3 discard, else other */
	__u32 tgid;
};

struct io_stats {
	__u64 count;
	__u64 bytes;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 buckets[SW_HIST_BUCKETS];
};

/* Value of tcp_retransmits, keyed by the socket's cgroup id: retransmitted segments. */
struct retransmit_stats {
	__u64 ipv4;
	__u64 ipv6;
};

/* Key of nccl_op_duration: an NCCL op of a process, with its communicator's rank and size. */
struct nccl_key {
	__u64 cgroup_id;
	__u32 tgid;
	__u32 call_id;
	__s32 rank;       /* -1 until learnt */
	__s32 world_size; /* -1 until learnt */
};

struct nccl_stats {
	__u64 count;
	__u64 bytes;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 buckets[SW_HIST_BUCKETS];
};

/* Key of nccl_comms: a communicator handle in a process. */
struct nccl_comm_key {
	__u64 comm;
	__u32 tgid;
	__u32 pad;
};

struct nccl_comm_info {
	__s32 rank;
	__s32 world_size;
};

#endif /* STALLWATCH_HOST_H */
