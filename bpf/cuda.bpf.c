// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * CUDA runtime and driver calls: one entry and one return program, attached by user space
 * to every traced symbol of every traced library copy with the call's id as bpf_cookie.
 * The entry pushes a frame on the thread's task storage; sched.bpf.c adds off-CPU time to
 * open frames; the return pops it into the per-(cgroup, call, process) histogram. Only calls
 * at or above outlier_threshold_ns reach user space one by one, through a ring buffer.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define SW_DEFINE_SHARED_MAPS
#include "cuda.h"
#include "maps.bpf.h"

const volatile __u64 outlier_threshold_ns = 1000000;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct call_key);
	__type(value, struct call_stats);
} cuda_call_duration SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} outliers SEC(".maps");

static const struct call_stats zero_call_stats;

SEC("uprobe")
int cuda_enter(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_state *t;
	struct call_frame *f;
	__u64 now = bpf_ktime_get_ns();
	__u32 d, call_id;
	__u64 sp;

	t = bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t) {
		sw_count_lost(SW_LOST_THREAD_STATE);
		return 0;
	}
	if (!t->tgid) {
		/* First call of this thread: it is on the CPU now. */
		t->tgid = bpf_get_current_pid_tgid() >> 32;
		t->on_since = now;
	}
	t->cgroup_id = bpf_get_current_cgroup_id();
	d = t->depth;
	call_id = (__u32)bpf_get_attach_cookie(ctx);
	sp = PT_REGS_SP(ctx);
	if (d > 0) {
		/*
		 * The same entry seen twice: two probe sets on one function, e.g. while a detached
		 * copy's probes are still being torn down, or one file reached through two inodes.
		 * Count the call once; skip one of the two returns.
		 */
		f = &t->frames[(d - 1) & (SW_MAX_DEPTH - 1)];
		if (f->sp == sp && f->call_id == call_id) {
			t->unmatched++;
			return 0;
		}
	}
	if (d >= SW_MAX_DEPTH) {
		t->unmatched++;
		sw_count_lost(SW_LOST_NESTING);
		return 0;
	}
	f = &t->frames[d & (SW_MAX_DEPTH - 1)];
	f->start_ns = now;
	f->sp = sp;
	f->runnable_ns = 0;
	f->blocked_ns = 0;
	f->preemptions = 0;
	f->call_id = call_id;
	t->depth = d + 1;
	return 0;
}

static __always_inline void record_call(struct thread_state *t, struct call_frame *f, __u64 now)
{
	struct call_key key = {};
	struct call_stats *s;
	struct outlier_event *e;
	__u64 dur = now - f->start_ns;

	key.cgroup_id = bpf_get_current_cgroup_id();
	key.call_id = f->call_id;
	key.tgid = t->tgid;
	s = sw_lookup_or_init(&cuda_call_duration, &key, &zero_call_stats, SW_LOST_CALL_MAP);
	if (s) {
		__sync_fetch_and_add(&s->count, 1);
		__sync_fetch_and_add(&s->sum_ns, dur);
		if (f->runnable_ns)
			__sync_fetch_and_add(&s->runnable_ns, f->runnable_ns);
		if (f->blocked_ns)
			__sync_fetch_and_add(&s->blocked_ns, f->blocked_ns);
		__sync_fetch_and_add(&s->buckets[sw_bucket_of_ns(dur)], 1);
		if (dur > s->max_ns)
			s->max_ns = dur; /* racy by design: a lost maximum is corrected by the next */
	}
	if (dur < outlier_threshold_ns)
		return;
	e = bpf_ringbuf_reserve(&outliers, sizeof(*e), 0);
	if (!e) {
		sw_count_lost(SW_LOST_OUTLIER_RINGBUF);
		return;
	}
	e->ts_ns = now;
	e->cgroup_id = key.cgroup_id;
	e->duration_ns = dur;
	e->runnable_ns = f->runnable_ns;
	e->blocked_ns = f->blocked_ns;
	e->tgid = t->tgid;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->call_id = f->call_id;
	e->preemptions = f->preemptions;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

SEC("uretprobe")
int cuda_exit(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 call_id = (__u32)bpf_get_attach_cookie(ctx);
	__u64 now = bpf_ktime_get_ns();
	struct thread_state *t;
	__u32 d;

	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (!t || !t->depth)
		return 0; /* entry happened before we attached */
	if (t->unmatched) {
		t->unmatched--;
		return 0;
	}
	/*
	 * Pop to the frame of this call. Frames above it belong to calls that never returned
	 * through their uretprobe (a longjmp or a C++ exception across the library); drop them.
	 */
	for (int i = 0; i < SW_MAX_DEPTH; i++) {
		d = t->depth;
		if (!d)
			return 0;
		d = (d - 1) & (SW_MAX_DEPTH - 1);
		t->depth = d;
		if (t->frames[d].call_id == call_id) {
			record_call(t, &t->frames[d], now);
			return 0;
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
