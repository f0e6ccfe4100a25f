/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Records of the NCCL probes (nccl.bpf.c), read by exporter/trace/nccl_source.cpp. */
#ifndef STALLWATCH_NCCL_H
#define STALLWATCH_NCCL_H

#include "stallwatch.h"

/* Key of nccl_op_duration: an NCCL op of a process, with its communicator's rank and size. */
struct nccl_key {
	__u64 cgroup_id;
	__u32 tgid;
	__u32 call_id;
	__s32 rank;       /* -1 until learnt */
	__s32 world_size; /* -1 until learnt */
	__u32 start_tag;  /* sw_start_tag() of the process */
	__u32 pad;
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
	/*
	 * NCCL's commHash of the communicator, the same on every node of the job (0: not known,
	 * e.g. ncclCommInitAll, or a split of a communicator created before tracing began).
	 */
	__u64 comm_hash;
	__u32 splits; /* ncclCommSplit calls on it so far: NCCL's splitCount */
	__u32 pad;
};

/*
 * NCCL's communicator hash (init.cc; the mixing of utils.h eatHash/digestHash), shared by the
 * BPF programs and user space (exporter/trace/nccl_ranks.cpp): a 128-bit accumulator that
 * starts at {1, 1}; each piece of input first XORs its size into acc[0], then per 8-byte chunk
 * (the last one zero-padded) the accumulator is mixed and the chunk added.
 */
static inline void sw_nccl_hash_chunk(__u64 acc[2], __u64 chunk)
{
	acc[0] += acc[1];
	acc[1] ^= acc[0];
	acc[0] ^= acc[0] >> 31;
	acc[0] *= 0x9de62bbc8cef3ce3ULL;
	acc[1] ^= acc[1] >> 32;
	acc[1] *= 0x485cd6311b599e79ULL;
	acc[0] += chunk;
}

static inline __u64 sw_nccl_hash_digest(const __u64 acc[2])
{
	__u64 h = acc[0];

	h ^= h >> 31;
	h *= 0xbac3bd562846de6bULL;
	h += acc[1];
	h ^= h >> 32;
	h *= 0x995a187a14e7b445ULL;
	return h;
}

#endif /* STALLWATCH_NCCL_H */
