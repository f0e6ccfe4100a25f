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

/*
 * When the task's reclaim began; only tasks of watched cgroups get an entry, removed at its
 * end. An LRU hash by thread id, not task storage: creating task storage allocates, and the
 * reclaim path is where memory is short (issue #15); LRU entries are preallocated, and one left
 * by a thread that died mid-reclaim is recycled.
 */
struct reclaim_start {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u32 kind;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
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
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct reclaim_start r = {};

	if (!sw_watched(cgroup_id))
		return;
	r.ts_ns = bpf_ktime_get_ns();
	r.cgroup_id = cgroup_id;
	r.kind = kind;
	if (sw_lru_update(&reclaim_starts, &tid, &r, SW_LRU_RECLAIM_STARTS))
		sw_count_lost(SW_LOST_HOST_MAP);
}

static __always_inline void reclaim_end(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct reclaim_start *p = bpf_map_lookup_elem(&reclaim_starts, &tid);
	struct reclaim_start r;
	struct reclaim_stats *s;
	struct thread_state *t;
	__u64 dur;

	if (!p)
		return;
	r = *p;
	sw_lru_delete(&reclaim_starts, &tid, SW_LRU_RECLAIM_STARTS);
	if (!r.ts_ns)
		return;
	dur = bpf_ktime_get_ns() - r.ts_ns;
	s = sw_lookup_or_init(&memory_reclaim, &r.cgroup_id, &zero_reclaim_stats,
			      SW_LOST_HOST_MAP);
	if (!s)
		return;
	if (r.kind == SW_RECLAIM_DIRECT) {
		__sync_fetch_and_add(&s->direct_ns, dur);
		__sync_fetch_and_add(&s->direct_count, 1);
	} else {
		__sync_fetch_and_add(&s->memcg_ns, dur);
		__sync_fetch_and_add(&s->memcg_count, 1);
	}
	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (t && !t->excluded)
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
	struct thread_state *t;
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
	t = bpf_task_storage_get(&threads, task, 0, 0);
	e->cuda = t && !t->excluded;
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	BPF_CORE_READ_STR_INTO(&e->comm, task, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
