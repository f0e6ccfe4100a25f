/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Constants and helpers shared by the BPF programs and user space.
 *
 * Latency histograms use upper-inclusive log2 buckets over powers of two of seconds:
 * bucket k counts values v with 2^(k-1-SW_TICK_SHIFT) s < v <= 2^(k-SW_TICK_SHIFT) s
 * (bucket 0: v <= 2^-30 s, about 0.93 ns). The last bucket counts everything above
 * 2^(SW_HIST_BUCKETS-2-SW_TICK_SHIFT) s (256 s) and is Prometheus' +Inf. These are exactly
 * Prometheus' `le` bounds and OTLP base-2 exponential buckets at scale 0, so neither
 * exporter re-bins.
 */
#ifndef STALLWATCH_H
#define STALLWATCH_H

#ifndef __VMLINUX_H__
#include <linux/types.h> /* user space; BPF code gets the types from vmlinux.h */
#endif

#define SW_HIST_BUCKETS 40
#define SW_TICK_SHIFT 30
#define SW_NS_PER_S 1000000000ULL
#define SW_MAX_DEPTH 4
/* Two probe sets on one entry fire within this of each other (calls.bpf.h sw_call_enter). */
#define SW_DOUBLE_PROBE_NS 1000000ULL
#define SW_COMM_LEN 16
/* Native frames kept per stack (user_stacks), Python frames per outlier record. */
#define SW_STACK_DEPTH 64
#define SW_PY_FRAMES 32
/* Python threads searched for the calling one (python.bpf.h). */
#define SW_PY_THREADS 64
/* Bytes of a Python frame read at once: every field the walk needs lies in them. */
#define SW_PY_FRAME_BLOCK 112

/*
 * What a CUDA call does to memory (exporter/trace/calls.h MemOp): bits 44-47 of a runtime or
 * driver call's bpf_cookie. Bits 32-35 give the out-pointer's (or the freed pointer's or
 * handle's) argument position, bits 36-39 the size's, bit 40 says the value is a cuMemCreate
 * handle rather than an address.
 */
#define SW_MEM_NONE 0
#define SW_MEM_ALLOC 1       /* (T **out, size_t size, ...) */
#define SW_MEM_ALLOC_PITCH 2 /* (T **out, size_t *pitch, size_t width, size_t height, ...) */
#define SW_MEM_ALLOC_3D 3    /* cudaMalloc3D(cudaPitchedPtr *out, cudaExtent extent) */
#define SW_MEM_FREE 4        /* (T *ptr, ...) or (handle, ...) */
/* CUDA's out-of-memory return code: cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY. */
#define SW_CUDA_OUT_OF_MEMORY 2
/*
 * A process's start tag: its start time since boot (task->group_leader->start_boottime) in
 * 10 ms units, the low 32 bits. /proc/PID/stat field 22 is the same instant in USER_HZ (100)
 * ticks, so user space tells a live process from an exited one whose PID was reused.
 */
#define SW_START_TAG_NS 10000000ULL

/* Where records or aggregation were lost; index of the events_lost per-CPU array. */
enum sw_lost_source {
	SW_LOST_OUTLIER_RINGBUF = 0, /* outlier record dropped: ring buffer full */
	SW_LOST_DISCOVERY_RINGBUF,   /* library-mapping record dropped: ring buffer full */
	SW_LOST_CALL_MAP,            /* call not aggregated: no call_slots slot left */
	SW_LOST_OFFCPU_MAP,          /* off-CPU time not aggregated: offcpu map full */
	SW_LOST_THREAD_STATE,        /* call not tracked: per-thread storage unavailable */
	SW_LOST_NESTING,             /* call not tracked: nested deeper than SW_MAX_DEPTH */
	SW_LOST_HOST_RINGBUF,        /* host event (OOM kill) dropped: ring buffer full */
	SW_LOST_HOST_MAP,            /* host or NCCL statistic not aggregated: its map is full */
	SW_LOST_WATCHED_CGROUPS,     /* a CUDA cgroup not watched (host hooks blind): map full */
	SW_LOST_ALLOC_MAP,           /* an allocation not remembered (its free unmatched): map full */
	SW_LOST_STACK,               /* an outlier's native stack not kept (stack map full or busy) */
	SW_LOST_MAX,
};

/*
 * The LRU hash maps, which drop their least recently used entry to make room instead of
 * failing an insert: index of the lru_ops per-CPU array. User space derives the entries each
 * one dropped as inserts - deletes - live entries (stallwatch_events_lost_total
 * {source="<map>_evicted"}): a dropped entry is evidence lost (a preemptor's share, an I/O
 * request's or a reclaim's duration, a communicator's rank).
 */
enum sw_lru_map {
	SW_LRU_PREEMPTORS = 0, /* sched.bpf.c preemptors */
	SW_LRU_IO_INFLIGHT,    /* io.bpf.c io_inflight */
	SW_LRU_NCCL_COMMS,     /* nccl.bpf.c nccl_comms */
	SW_LRU_RECLAIM_STARTS, /* host.bpf.c reclaim_starts */
	SW_LRU_MAX,
};

/* Value of lru_ops: new keys inserted and keys deleted by the BPF programs. */
struct sw_lru_ops {
	__u64 inserts;
	__u64 deletes;
};

/*
 * Upper bound in nanoseconds of bucket k (k < SW_HIST_BUCKETS - 1): the largest ns with
 * ns <= 2^(k-30) s, that is floor(1e9 * 2^k / 2^30).
 */
static const __u64 sw_bucket_bound_ns[SW_HIST_BUCKETS - 1] = {
	0ULL, 1ULL, 3ULL, 7ULL, 14ULL, 29ULL, 59ULL, 119ULL, 238ULL, 476ULL, 953ULL, 1907ULL, 3814ULL,
	7629ULL, 15258ULL, 30517ULL, 61035ULL, 122070ULL, 244140ULL, 488281ULL, 976562ULL, 1953125ULL,
	3906250ULL, 7812500ULL, 15625000ULL, 31250000ULL, 62500000ULL, 125000000ULL, 250000000ULL,
	500000000ULL, 1000000000ULL, 2000000000ULL, 4000000000ULL, 8000000000ULL, 16000000000ULL,
	32000000000ULL, 64000000000ULL, 128000000000ULL, 256000000000ULL,
};

/*
 * Bucket index of a duration in nanoseconds: the smallest k with ns <= 2^(k-30) s, clamped
 * to the overflow bucket. Without a division (three 64-bit divisions cost more than the rest
 * of a call's return program): with 2^f <= ns < 2^(f+1), the bound of bucket f is below 2^f
 * (1e9 < 2^30) and that of f+2 above 2^(f+1), so the bucket is f+1 or f+2, one comparison.
 */
static inline __u32 sw_bucket_of_ns(__u64 ns)
{
	__u64 v = ns;
	__u32 f = 0;

	if (!ns)
		return 0;
	if (v >> 32) {
		v >>= 32;
		f += 32;
	}
	if (v >> 16) {
		v >>= 16;
		f += 16;
	}
	if (v >> 8) {
		v >>= 8;
		f += 8;
	}
	if (v >> 4) {
		v >>= 4;
		f += 4;
	}
	if (v >> 2) {
		v >>= 2;
		f += 2;
	}
	if (v >> 1)
		f += 1;
	if (f + 1 >= SW_HIST_BUCKETS - 1)
		return SW_HIST_BUCKETS - 1;
	return ns <= sw_bucket_bound_ns[f + 1] ? f + 1 : f + 2;
}

#endif /* STALLWATCH_H */
