/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Maps more than one program file uses. The .bpf.c files are linked into one object by
 * `bpftool gen object`; exactly one of them (cuda.bpf.c) defines SW_DEFINE_SHARED_MAPS and
 * owns the definitions, the others see extern declarations of the same maps.
 */
#ifndef STALLWATCH_MAPS_BPF_H
#define STALLWATCH_MAPS_BPF_H

#include <bpf/bpf_core_read.h>

#include "cuda.h"
#include "sched.h"
#include "stallwatch.h"

#ifdef SW_DEFINE_SHARED_MAPS
#define SW_SHARED
#else
#define SW_SHARED extern
#endif

/* In-flight calls and on/off-CPU bookkeeping of CUDA-issuing threads; freed with the task. */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

/*
 * Per (cgroup, call, process) call histograms (cuda.bpf.c and nccl.bpf.c fill them), by slot
 * (cuda.h SW_CALL_SLOTS): an array, so a return whose thread has the slot cached reaches its
 * statistics without a hash lookup, and user space reads them through a mapping of the array,
 * without a copy per entry. 16,384 slots of 384 bytes: ~6 MiB, for ~40 calls of ~400 live
 * CUDA processes; past it, calls are counted as lost (SW_LOST_CALL_MAP).
 */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, SW_CALL_SLOTS);
	__type(key, __u32);
	__type(value, struct call_stats);
} call_slots SEC(".maps");

/* The slot of each (cgroup, call, process). Preallocated, like every hash map updated from a
 * uprobe or the scheduler: an insert never calls the allocator there (issue #15). */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SW_CALL_SLOTS);
	__type(key, struct call_key);
	__type(value, __u32);
} call_index SEC(".maps");

/* Slots user space freed (of exited processes), zeroed; taken before never-used ones. */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, SW_CALL_SLOTS);
	__uint(key_size, 0);
	__uint(value_size, sizeof(__u32));
} free_call_slots SEC(".maps");

/* Calls at or above outlier_threshold_ns, one record (~600 bytes with Python frames) each. */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} outliers SEC(".maps");

/*
 * Native user stacks of outlier calls, by stack id. User space reads and deletes each id as its
 * record arrives, so the map holds only the stacks of records in flight; an id whose bucket is
 * taken by another stack is lost (SW_LOST_STACK). 4,096 x 512 bytes: 2 MiB.
 */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 4096);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, SW_STACK_DEPTH * sizeof(__u64));
} user_stacks SEC(".maps");

/* Python frames being walked (python.bpf.h), copied into the outlier record after the walk. */
struct py_scratch {
	struct py_frame py[SW_PY_FRAMES];
	__u8 frame[128 + 8]; /* one frame's first SW_PY_FRAME_BLOCK bytes; an offset & 127 stays inside */
};
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_scratch);
} py_scratch SEC(".maps");

/* CPython processes whose frames outliers carry (python.bpf.h), filled by user space. */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/*
 * Cgroups with CUDA-issuing threads: the host hooks (reclaim, OOM, block I/O, TCP) work only
 * for these. A thread's first call (or first call after moving) adds its cgroup; user space
 * removes cgroups that no longer exist.
 */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} watched_cgroups SEC(".maps");

/*
 * --cgroup-roots: the cgroup directories whose subtrees alone are traced (user space puts their
 * fds at 0..cgroup_root_count-1 before any probe is attached). A thread outside them is marked
 * excluded at its first call (or first after it moved) and costs a flag test from then on.
 */
#define SW_MAX_CGROUP_ROOTS 8
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, SW_MAX_CGROUP_ROOTS);
	__type(key, __u32);
	__type(value, __u32);
} cgroup_roots SEC(".maps");

static __always_inline bool sw_watched(__u64 cgroup_id)
{
	return bpf_map_lookup_elem(&watched_cgroups, &cgroup_id) != NULL;
}

/* Records or aggregations lost, per enum sw_lost_source. */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SW_LOST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} events_lost SEC(".maps");

static __always_inline void sw_count_lost(__u32 source)
{
	__u64 *v = bpf_map_lookup_elem(&events_lost, &source);

	if (v)
		*v += 1;
}

/* Inserts and deletes of the LRU maps, per enum sw_lru_map. */
SW_SHARED struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SW_LRU_MAX);
	__type(key, __u32);
	__type(value, struct sw_lru_ops);
} lru_ops SEC(".maps");

/*
 * Inserts or replaces an LRU map's entry, counting a new key in lru_ops. BPF_NOEXIST first:
 * only a new key is an insert (and only an insert can evict).
 */
static __always_inline long sw_lru_update(void *map, const void *key, const void *value,
					  __u32 lru)
{
	long err = bpf_map_update_elem(map, key, value, BPF_NOEXIST);
	struct sw_lru_ops *ops;

	if (err == -17 /* EEXIST */)
		return bpf_map_update_elem(map, key, value, BPF_ANY);
	if (err)
		return err;
	ops = bpf_map_lookup_elem(&lru_ops, &lru);
	if (ops)
		ops->inserts += 1;
	return 0;
}

/* Deletes an LRU map's entry, counting it in lru_ops when it was there. */
static __always_inline void sw_lru_delete(void *map, const void *key, __u32 lru)
{
	struct sw_lru_ops *ops;

	if (bpf_map_delete_elem(map, key))
		return;
	ops = bpf_map_lookup_elem(&lru_ops, &lru);
	if (ops)
		ops->deletes += 1;
}

/* The current process's start tag (SW_START_TAG_NS). */
static __always_inline __u32 sw_start_tag(struct task_struct *task)
{
	return (__u32)(BPF_CORE_READ(task, group_leader, start_boottime) / SW_START_TAG_NS);
}

/* Look a key up, inserting a zero value first when absent; NULL (and a lost count) if full. */
static __always_inline void *sw_lookup_or_init(void *map, const void *key, const void *zero,
					       __u32 lost_source)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, key);
	if (!v)
		sw_count_lost(lost_source);
	return v;
}

#endif /* STALLWATCH_MAPS_BPF_H */
