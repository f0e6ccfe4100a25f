// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * NCCL calls: the same frames as CUDA calls (so NCCL ops are timed and joined to off-CPU time
 * like any call), plus what only NCCL has: bytes per op and the communicator's rank and size.
 *
 * The bpf_cookie carries the call id (bits 0-31) and how to read the call's arguments (bits
 * 32-47, see exporter/trace/calls.h): argument positions of count, data type and communicator,
 * and the kind of call. Communicator setup calls (ncclCommInitRank*, InitAll, Split, UserRank,
 * Count) fill nccl_comms at their return, with NCCL's commHash of the communicator where it can
 * be computed; ops look their communicator up there.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "calls.bpf.h"
#include "nccl.h"

/* Kinds of exporter/trace/calls.h NcclKind. */
#define SW_NCCL_NONE 0
#define SW_NCCL_OP 1
#define SW_NCCL_INIT_RANK 2
#define SW_NCCL_INIT_ALL 3
#define SW_NCCL_SPLIT 4
#define SW_NCCL_USER_RANK 5
#define SW_NCCL_COUNT 6
#define SW_NCCL_DESTROY 7
#define SW_NCCL_INIT_SCALABLE 8

#define SW_NCCL_MAX_INIT_ALL 16

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* preallocated: updated in hooks that must not allocate */
	__uint(max_entries, 4096);
	__type(key, struct nccl_key);
	__type(value, struct nccl_stats);
} nccl_op_duration SEC(".maps");

/* LRU: communicators of processes that exit without ncclCommDestroy age out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nccl_comm_key);
	__type(value, struct nccl_comm_info);
} nccl_comms SEC(".maps");

static const struct nccl_stats zero_nccl_stats;

/* Size of ncclDataType_t values 0..11 (nccl.h); 0 for unknown types. */
static __always_inline __u64 dtype_size(__u64 dtype)
{
	switch (dtype) {
	case 0: /* ncclInt8 */
	case 1: /* ncclUint8 */
	case 10: /* ncclFloat8e4m3 */
	case 11: /* ncclFloat8e5m2 */
		return 1;
	case 6: /* ncclFloat16 */
	case 9: /* ncclBfloat16 */
		return 2;
	case 2: /* ncclInt32 */
	case 3: /* ncclUint32 */
	case 7: /* ncclFloat32 */
		return 4;
	case 4: /* ncclInt64 */
	case 5: /* ncclUint64 */
	case 8: /* ncclFloat64 */
		return 8;
	}
	return 0;
}

/*
 * A communicator made from a unique id hashes the id's 128 bytes (the first id of
 * ncclCommInitRankScalable); a split hashes its parent's hash, the parent's split count after
 * this split and the colour (nccl.h sw_nccl_hash_chunk; exporter/trace/nccl_ranks.cpp is the
 * same in C++, and the tests hold both to one vector).
 *
 * unique_id_hash: the hash of the 128-byte ncclUniqueId at user address `id`; 0 when it cannot
 * be read.
 */
static __always_inline __u64 unique_id_hash(__u64 id)
{
	__u64 bytes[16];
	__u64 acc[2] = {1, 1};

	if (!id || bpf_probe_read_user(bytes, sizeof(bytes), (void *)id))
		return 0;
	acc[0] ^= sizeof(bytes);
	for (int i = 0; i < 16; i++)
		sw_nccl_hash_chunk(acc, bytes[i]);
	return sw_nccl_hash_digest(acc);
}

static __always_inline __u64 split_hash(__u64 parent, __u32 splits, __s32 color)
{
	__u64 acc[2] = {1, 1};

	acc[0] ^= sizeof(parent);
	sw_nccl_hash_chunk(acc, parent);
	acc[0] ^= sizeof(splits);
	sw_nccl_hash_chunk(acc, splits);
	acc[0] ^= sizeof(color);
	sw_nccl_hash_chunk(acc, (__u32)color);
	return sw_nccl_hash_digest(acc);
}

static __always_inline void set_comm(__u32 tgid, __u64 comm, __s32 rank, __s32 world_size,
				     __u64 comm_hash)
{
	struct nccl_comm_key key = {};
	struct nccl_comm_info info = {};

	if (!comm)
		return;
	key.comm = comm;
	key.tgid = tgid;
	info.rank = rank;
	info.world_size = world_size;
	info.comm_hash = comm_hash;
	sw_lru_update(&nccl_comms, &key, &info, SW_LRU_NCCL_COMMS);
}

static __always_inline int nccl_enter_body(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 kind = (cookie >> 44) & 0xf;
	__u32 comm_arg = (cookie >> 40) & 0xf;
	struct nccl_comm_key key = {};
	struct nccl_comm_info *parent;
	struct call_frame *f;
	__u64 args[8];

	if (kind == SW_NCCL_NONE) {
		sw_call_enter(ctx, (__u32)cookie);
		return 0;
	}
	sw_load_args(ctx, args);
	if (kind == SW_NCCL_DESTROY) {
		key.comm = args[comm_arg & 7];
		key.tgid = bpf_get_current_pid_tgid() >> 32;
		sw_lru_delete(&nccl_comms, &key, SW_LRU_NCCL_COMMS);
	}
	f = sw_call_enter(ctx, (__u32)cookie);
	if (!f)
		return 0;
	switch (kind) {
	case SW_NCCL_OP:
		f->aux_ptr = args[comm_arg & 7];
		f->aux_val = args[(cookie >> 32) & 7] * dtype_size(args[(cookie >> 36) & 7]);
		break;
	case SW_NCCL_INIT_RANK: /* (ncclComm_t *out, int nranks, [id,] int rank, ...) */
		f->aux_ptr = args[1];
		f->aux_i1 = (__s32)args[2];
		f->aux_i0 = (__s32)args[3];
#if defined(__TARGET_ARCH_x86)
		/*
		 * The 128-byte ncclUniqueId is passed by value: in memory, right above the return
		 * address (the probe site keeps the entry's stack pointer, trace/probe_sites.h).
		 */
		f->aux_val = unique_id_hash(PT_REGS_SP(ctx) + 8);
#else
		f->aux_val = 0; /* arm64 passes it by reference: the arm64 issue reads it there */
#endif
		break;
	case SW_NCCL_INIT_SCALABLE: /* (ncclComm_t *out, int nranks, int rank, int nId, ids, config) */
		f->aux_ptr = args[1];
		f->aux_i1 = (__s32)args[2];
		f->aux_i0 = (__s32)args[3];
		f->aux_val = unique_id_hash(args[(cookie >> 32) & 7]); /* NCCL hashes the first id */
		break;
	case SW_NCCL_INIT_ALL: /* (ncclComm_t *out, int ndev, const int *devlist) */
		f->aux_ptr = args[1];
		f->aux_i1 = (__s32)args[2];
		break;
	case SW_NCCL_SPLIT: /* (comm, color, key, ncclComm_t *newcomm, config) */
		f->aux_ptr = args[comm_arg & 7];
		f->aux_val = 0;
		/* NCCL counts the split on its parent (splitCount), whatever the colour. */
		key.comm = args[1];
		key.tgid = bpf_get_current_pid_tgid() >> 32;
		parent = bpf_map_lookup_elem(&nccl_comms, &key);
		if (parent) {
			/* One thread splits a communicator at a time (NCCL requires it). */
			__u32 splits = parent->splits + 1;

			parent->splits = splits;

			if (parent->comm_hash)
				f->aux_val = split_hash(parent->comm_hash, splits, (__s32)args[2]);
		}
		break;
	case SW_NCCL_USER_RANK: /* (comm, int *out) */
	case SW_NCCL_COUNT:
		f->aux_ptr = args[1];
		f->aux_val = args[2];
		break;
	}
	return 0;
}

static __always_inline void record_op(struct thread_state *t, struct call_frame *f, __u64 now)
{
	struct nccl_comm_key ckey = {};
	struct nccl_comm_info *info;
	struct nccl_key key = {};
	struct nccl_stats *s;
	__u64 dur = now - f->start_ns;

	ckey.comm = f->aux_ptr;
	ckey.tgid = t->tgid;
	info = bpf_map_lookup_elem(&nccl_comms, &ckey);
	key.cgroup_id = t->cgroup_id;
	key.tgid = t->tgid;
	key.start_tag = t->start_tag;
	key.call_id = f->call_id;
	key.rank = info ? info->rank : -1;
	key.world_size = info ? info->world_size : -1;
	s = sw_lookup_or_init(&nccl_op_duration, &key, &zero_nccl_stats, SW_LOST_HOST_MAP);
	if (!s)
		return;
	__sync_fetch_and_add(&s->count, 1);
	__sync_fetch_and_add(&s->bytes, f->aux_val);
	__sync_fetch_and_add(&s->sum_ns, dur);
	__sync_fetch_and_add(&s->buckets[sw_bucket_of_ns(dur)], 1);
	if (dur > s->max_ns)
		s->max_ns = dur;
}

/* At a setup call's successful return: what it wrote to its out-arguments. */
static __always_inline void learn_comm(struct thread_state *t, struct call_frame *f, __u32 kind)
{
	struct nccl_comm_key key = {};
	struct nccl_comm_info *info, fresh = {-1, -1, 0, 0, 0};
	__u64 comm = 0;
	__s32 value = 0;

	switch (kind) {
	case SW_NCCL_INIT_RANK:
	case SW_NCCL_INIT_SCALABLE:
	case SW_NCCL_SPLIT:
		bpf_probe_read_user(&comm, sizeof(comm), (void *)f->aux_ptr);
		if (kind != SW_NCCL_SPLIT)
			set_comm(t->tgid, comm, f->aux_i0, f->aux_i1, f->aux_val);
		else /* rank and size come with UserRank/Count */
			set_comm(t->tgid, comm, -1, -1, f->aux_val);
		return;
	case SW_NCCL_INIT_ALL:
		for (int i = 0; i < SW_NCCL_MAX_INIT_ALL; i++) {
			if (i >= f->aux_i1)
				break;
			comm = 0;
			bpf_probe_read_user(&comm, sizeof(comm), (void *)(f->aux_ptr + i * 8));
			set_comm(t->tgid, comm, i, f->aux_i1, 0); /* its unique id stays inside NCCL */
		}
		return;
	case SW_NCCL_USER_RANK:
	case SW_NCCL_COUNT:
		if (bpf_probe_read_user(&value, sizeof(value), (void *)f->aux_val))
			return;
		key.comm = f->aux_ptr;
		key.tgid = t->tgid;
		info = bpf_map_lookup_elem(&nccl_comms, &key);
		if (!info) {
			sw_lru_update(&nccl_comms, &key, &fresh, SW_LRU_NCCL_COMMS);
			info = bpf_map_lookup_elem(&nccl_comms, &key);
			if (!info)
				return;
		}
		if (kind == SW_NCCL_USER_RANK)
			info->rank = value;
		else
			info->world_size = value;
		return;
	}
}

static __always_inline int nccl_exit_body(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 kind = (cookie >> 44) & 0xf;
	struct thread_state *t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	struct call_frame *f = sw_call_exit(t, (__u32)cookie);
	__u32 slot;

	if (!f || !t)
		return 0;
	sw_record_call(ctx, t, f, now, &slot);
	if (kind == SW_NCCL_OP)
		record_op(t, f, now);
	else if (((kind >= SW_NCCL_INIT_RANK && kind <= SW_NCCL_COUNT) ||
		  kind == SW_NCCL_INIT_SCALABLE) &&
		 (int)PT_REGS_RC(ctx) == 0)
		learn_comm(t, f, kind); /* ncclSuccess only: a failed init wrote nothing */
	return 0;
}

/*
 * The *_multi copies are the same programs for multi-uprobe links (one link per library file
 * and direction, trace/attach.cpp): user space loads them with the expected attach type
 * BPF_TRACE_UPROBE_MULTI where the kernel has it (Linux 6.6), and does not load them elsewhere.
 */
SEC("uprobe")
int nccl_enter(struct pt_regs *ctx)
{
	return nccl_enter_body(ctx);
}

SEC("uretprobe")
int nccl_exit(struct pt_regs *ctx)
{
	return nccl_exit_body(ctx);
}

SEC("uprobe")
int nccl_enter_multi(struct pt_regs *ctx)
{
	return nccl_enter_body(ctx);
}

SEC("uretprobe")
int nccl_exit_multi(struct pt_regs *ctx)
{
	return nccl_exit_body(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
