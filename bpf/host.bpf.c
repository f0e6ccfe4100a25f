// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Memory evidence of watched cgroups: time their tasks spend in direct and memcg reclaim
 * (vmscan tracepoints, begin/end in the reclaiming task's context) and OOM kills of their
 * processes (oom/mark_victim, one ring-buffer record each). Page-fault stall time is not
 * measured: it needs fentry/fexit on the fault handler, which kernels under lockdown refuse;
 * the cgroup's PSI memory.pressure (read in user space) covers fault stalls instead.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "host.h"
#include "maps.bpf.h"

#define SW_RECLAIM_DIRECT 1
#define SW_RECLAIM_MEMCG 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct reclaim_stats);
} memory_reclaim SEC(".maps");

/* When the task's reclaim began; only tasks of watched cgroups get an entry. */
struct reclaim_start {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u32 kind;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct reclaim_start);
} reclaim_starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024);
} host_events SEC(".maps");

static const struct reclaim_stats zero_reclaim_stats;

static __always_inline void reclaim_begin(__u32 kind)
{
	__u64 cgroup_id = bpf_get_current_cgroup_id();
	struct reclaim_start *r;

	if (!sw_watched(cgroup_id))
		return;
	r = bpf_task_storage_get(&reclaim_starts, bpf_get_current_task_btf(), 0,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r)
		return;
	r->ts_ns = bpf_ktime_get_ns();
	r->cgroup_id = cgroup_id;
	r->kind = kind;
}

static __always_inline void reclaim_end(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct reclaim_start *r = bpf_task_storage_get(&reclaim_starts, task, 0, 0);
	struct reclaim_stats *s;
	__u64 dur;

	if (!r || !r->ts_ns)
		return;
	dur = bpf_ktime_get_ns() - r->ts_ns;
	r->ts_ns = 0;
	s = sw_lookup_or_init(&memory_reclaim, &r->cgroup_id, &zero_reclaim_stats,
			      SW_LOST_HOST_MAP);
	if (!s)
		return;
	if (r->kind == SW_RECLAIM_DIRECT) {
		__sync_fetch_and_add(&s->direct_ns, dur);
		__sync_fetch_and_add(&s->direct_count, 1);
	} else {
		__sync_fetch_and_add(&s->memcg_ns, dur);
		__sync_fetch_and_add(&s->memcg_count, 1);
	}
	if (bpf_task_storage_get(&threads, task, 0, 0))
		__sync_fetch_and_add(&s->cuda_ns, dur);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(direct_reclaim_begin)
{
	reclaim_begin(SW_RECLAIM_DIRECT);
	return 0;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(direct_reclaim_end)
{
	reclaim_end();
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(memcg_reclaim_begin)
{
	reclaim_begin(SW_RECLAIM_MEMCG);
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(memcg_reclaim_end)
{
	reclaim_end();
	return 0;
}

SEC("tp_btf/mark_victim")
int BPF_PROG(oom_mark_victim, struct task_struct *task)
{
	__u64 cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	struct host_event *e;

	if (!sw_watched(cgroup_id))
		return 0;
	e = bpf_ringbuf_reserve(&host_events, sizeof(*e), 0);
	if (!e) {
		sw_count_lost(SW_LOST_HOST_RINGBUF);
		return 0;
	}
	e->ts_ns = bpf_ktime_get_ns();
	e->cgroup_id = cgroup_id;
	e->kind = SW_HOST_OOM_KILL;
	e->tgid = BPF_CORE_READ(task, tgid);
	e->cuda = bpf_task_storage_get(&threads, task, 0, 0) != NULL;
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	BPF_CORE_READ_STR_INTO(&e->comm, task, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
