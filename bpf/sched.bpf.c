// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Off-CPU time of CUDA-issuing threads, joined in the kernel to their in-flight calls.
 *
 * A thread that leaves the CPU while runnable was preempted: everything until it runs again
 * is `runnable` time. A thread that leaves the CPU blocked is `blocked` until sched_wakeup,
 * then `runnable` until it runs. Runnable time is charged to what ran on the thread's CPU
 * meanwhile, each task by the CPU it took inside the wait (cpu_run_log, not who preempted:
 * a light task that wakes often preempts often and takes little). Both add to every open
 * call frame of the thread and
 * to the thread's tally in its task storage; the task iterator fold_offcpu moves the tallies
 * into the per-(cgroup, process) map offcpu when user space reads a window, and an exiting
 * thread folds its own at its last switch. So a traced switch updates no map unless it blames
 * a preemptor. Untraced user tasks cost one task-storage lookup each way and no clock read;
 * kernel threads (idle included) cost a flag test.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "maps.bpf.h"
#include "sched.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* preallocated: updated in hooks that must not allocate */
	__uint(max_entries, 16384);
	__type(key, struct offcpu_key);
	__type(value, struct offcpu_stats);
} offcpu SEC(".maps");

/* LRU: the preemptor list of a long-lived job must not fill up and stop recording. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct preemptor_key);
	__type(value, struct preemptor_stats);
} preemptors SEC(".maps");

/* How many traced threads wait in each CPU's run queue; a CPU logs its switches while > 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SW_MAX_CPUS);
	__type(key, __u32);
	__type(value, __s32);
} cpu_waiters SEC(".maps");

/* Each CPU's own log of who ran on it, written and read only by that CPU's switches. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_run_log);
} cpu_runs SEC(".maps");

static const struct offcpu_stats zero_offcpu_stats;

#define PF_EXITING 0x00000004 /* include/linux/sched.h: getting shut down */
#define PF_KTHREAD 0x00200000 /* include/linux/sched.h: I am a kernel thread */

/* Kernels before 5.14 call the field `state`. */
struct task_struct___pre514 {
	volatile long state;
} __attribute__((preserve_access_index));

/*
 * The task pointers of tp_btf/sched_switch are BTF-typed: their fields are read with direct
 * loads (CO-RE relocated), not bpf_probe_read_kernel calls, on the per-switch path.
 */
static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

static __always_inline __u64 task_cgroup_id(struct task_struct *t)
{
	return t->cgroups->dfl_cgrp->kn->id;
}

static __always_inline struct offcpu_stats *offcpu_of(struct thread_state *t)
{
	struct offcpu_key key = {};

	key.cgroup_id = t->cgroup_id;
	key.tgid = t->tgid;
	key.start_tag = t->start_tag;
	return sw_lookup_or_init(&offcpu, &key, &zero_offcpu_stats, SW_LOST_OFFCPU_MAP);
}

/*
 * Moves the thread's tally into offcpu. Each field is exchanged for 0 atomically: the thread
 * may be adding to it on another CPU meanwhile, and every nanosecond lands once.
 */
static __always_inline void fold_tally(struct thread_state *t)
{
	__u64 runnable, blocked, oncpu, preemptions;
	struct offcpu_stats *s;

	if (!t->tally.runnable_ns && !t->tally.blocked_ns && !t->tally.oncpu_ns &&
	    !t->tally.preemptions)
		return;
	runnable = __sync_lock_test_and_set(&t->tally.runnable_ns, 0);
	blocked = __sync_lock_test_and_set(&t->tally.blocked_ns, 0);
	oncpu = __sync_lock_test_and_set(&t->tally.oncpu_ns, 0);
	preemptions = __sync_lock_test_and_set(&t->tally.preemptions, 0);
	s = offcpu_of(t);
	if (!s)
		return;
	__sync_fetch_and_add(&s->runnable_ns, runnable);
	__sync_fetch_and_add(&s->blocked_ns, blocked);
	__sync_fetch_and_add(&s->oncpu_ns, oncpu);
	__sync_fetch_and_add(&s->preemptions, preemptions);
}

/* Who `task` is; the pointers of tp_btf are BTF-typed, so these are direct loads. */
static __always_inline void identify(struct preemptor_id *id, struct task_struct *task)
{
	struct task_struct *leader = task->group_leader;

	id->cgroup_id = task_cgroup_id(task);
	id->tgid = task->tgid;
	id->tid = task->pid;
	id->ppid = task->real_parent->tgid;
	id->flags = (task->flags & PF_KTHREAD) ? SW_PREEMPTOR_KTHREAD : 0;
	__builtin_memcpy(id->comm, task->comm, SW_COMM_LEN);
	if (leader)
		__builtin_memcpy(id->process_comm, leader->comm, SW_COMM_LEN);
}

static __always_inline void blame(struct thread_state *t, const struct preemptor_id *id,
				  __u64 runnable)
{
	struct preemptor_key key = {};
	struct preemptor_stats *p, fresh = {};

	if (!id->tid || !runnable)
		return; /* the idle task: the CPU was free, the wait was wakeup latency */
	key.victim_cgroup_id = t->cgroup_id;
	key.victim_tgid = t->tgid;
	key.victim_start_tag = t->start_tag;
	key.preemptor_tid = id->tid;
	p = bpf_map_lookup_elem(&preemptors, &key);
	if (!p) {
		fresh.id = *id;
		sw_lru_update(&preemptors, &key, &fresh, SW_LRU_PREEMPTORS);
		p = bpf_map_lookup_elem(&preemptors, &key);
		if (!p)
			return;
	} else {
		p->id = *id; /* names as they are now: a wrapper (taskset, sh -c) exec'ed its target */
	}
	__sync_fetch_and_add(&p->runnable_ns, runnable);
	__sync_fetch_and_add(&p->count, 1);
}

static __always_inline __s32 *waiters_of(__u32 cpu)
{
	return bpf_map_lookup_elem(&cpu_waiters, &cpu);
}

/* The thread waits in `cpu`'s run queue from `since`: that CPU logs its switches until it runs. */
static __always_inline void start_wait(struct thread_state *t, __u32 cpu, __u64 since)
{
	__s32 *n = waiters_of(cpu);

	if (!n || t->wait_cpu)
		return;
	__sync_fetch_and_add(n, 1);
	t->wait_cpu = cpu + 1;
	t->wait_since = since;
}

/*
 * Logs the stretch of `prev` on this CPU, which ends now, while some traced thread waits here.
 * Returns the CPU's log (NULL when nobody waits: nothing is read or written).
 */
static __always_inline struct cpu_run_log *log_switch(struct task_struct *prev, __u64 *now)
{
	__u32 cpu = bpf_get_smp_processor_id(), zero = 0;
	__s32 *n = waiters_of(cpu);
	struct cpu_run_log *log;
	struct run_segment *seg;

	if (!n || *n <= 0)
		return NULL;
	log = bpf_map_lookup_elem(&cpu_runs, &zero);
	if (!log)
		return NULL;
	if (!*now)
		*now = bpf_ktime_get_ns();
	if (prev->pid) { /* the idle task took nothing from anyone */
		seg = &log->seg[log->head & (SW_RUN_LOG - 1)];
		seg->start_ns = log->seg_start;
		seg->end_ns = *now;
		identify(&seg->id, prev);
		log->head++;
	}
	log->seg_start = *now;
	return log;
}

#define SW_BLAMED 4 /* tasks charged per wait: the heaviest stretches of a wait are few */

/*
 * The thread ran again after waiting since t->wait_since: each task in this CPU's log is
 * charged the part of its stretches inside the wait. A wait longer than the log (SW_RUN_LOG
 * stretches) or spent in another CPU's queue (migrated meanwhile) is charged in the part the
 * log covers; with no stretch at all, to the task that ran last (prev).
 */
static __always_inline void charge_wait(struct thread_state *t, struct task_struct *prev,
					__u64 runnable, __u64 now)
{
	__u32 zero = 0, tid[SW_BLAMED] = {}, last[SW_BLAMED] = {};
	__u64 ns[SW_BLAMED] = {}, since = now - runnable, charged = 0;
	struct preemptor_id woke = {};
	struct cpu_run_log *log;
	__s32 *n;

	if (t->wait_cpu) {
		n = waiters_of(t->wait_cpu - 1);
		if (n)
			__sync_fetch_and_add(n, -1);
		if (t->wait_since > since)
			since = t->wait_since;
		t->wait_cpu = 0;
	}
	log = bpf_map_lookup_elem(&cpu_runs, &zero);
	if (log) {
		__u32 head = log->head;

		for (int i = 0; i < SW_RUN_LOG; i++) {
			struct run_segment *seg = &log->seg[(head - 1 - i) & (SW_RUN_LOG - 1)];
			__u64 from, took;
			int k;

			if (seg->end_ns <= since || seg->end_ns > now)
				break;
			from = seg->start_ns > since ? seg->start_ns : since;
			took = seg->end_ns - from;
			for (k = 0; k < SW_BLAMED; k++) {
				if (!tid[k] || tid[k] == seg->id.tid)
					break;
			}
			if (k == SW_BLAMED)
				continue; /* a fifth task: its share goes uncharged */
			if (!tid[k]) {
				tid[k] = seg->id.tid;
				last[k] = (head - 1 - i) & (SW_RUN_LOG - 1);
			}
			ns[k] += took;
			if (seg->start_ns <= since)
				break;
		}
		for (int k = 0; k < SW_BLAMED; k++) {
			if (!tid[k])
				break;
			blame(t, &log->seg[last[k] & (SW_RUN_LOG - 1)].id, ns[k]);
			charged += ns[k];
		}
	}
	if (!charged && prev->pid) {
		identify(&woke, prev);
		blame(t, &woke, runnable);
	}
}

static __always_inline void switch_out(struct thread_state *t, struct task_struct *prev,
				       bool preempt, __u64 now, struct cpu_run_log *log)
{
	__u64 since = __sync_lock_test_and_set(&t->on_since, 0);
	__u32 cpu, zero = 0;

	/* Exchanged, not read then cleared: fold_offcpu may move it forward meanwhile. */
	if (since && now > since)
		__sync_fetch_and_add(&t->tally.oncpu_ns, now - since);
	t->off_since = now;
	t->woken_at = 0;
	t->off_runnable = preempt || task_state(prev) == 0 /* TASK_RUNNING */;
	if (t->off_runnable) {
		/* Waits here: what runs next is logged from now (the log's clock starts now too). */
		cpu = bpf_get_smp_processor_id();
		start_wait(t, cpu, now);
		if (!log)
			log = bpf_map_lookup_elem(&cpu_runs, &zero);
		if (log)
			log->seg_start = now;
	}
	if (prev->flags & PF_EXITING)
		fold_tally(t); /* its storage goes with it; each later switch out folds again */
}

static __always_inline void switch_in(struct thread_state *t, struct task_struct *prev,
				      __u64 now)
{
	__u64 runnable = 0, blocked = 0;

	t->on_since = now;
	if (!t->off_since)
		return; /* first switch seen since the thread's first call */
	if (t->off_runnable) {
		runnable = now - t->off_since;
	} else if (t->woken_at >= t->off_since) {
		blocked = t->woken_at - t->off_since;
		runnable = now - t->woken_at;
	} else {
		blocked = now - t->off_since; /* wakeup not seen (attached meanwhile) */
	}
	t->off_since = 0;

	if (runnable)
		__sync_fetch_and_add(&t->tally.runnable_ns, runnable);
	if (blocked)
		__sync_fetch_and_add(&t->tally.blocked_ns, blocked);
	if (t->off_runnable)
		__sync_fetch_and_add(&t->tally.preemptions, 1);
	for (int i = 0; i < SW_MAX_DEPTH; i++) {
		if (i >= t->depth)
			break;
		t->frames[i].runnable_ns += runnable;
		t->frames[i].blocked_ns += blocked;
		if (t->off_runnable)
			t->frames[i].preemptions++;
	}
	if (runnable)
		charge_wait(t, prev, runnable, now);
	else if (t->wait_cpu)
		charge_wait(t, prev, 0, now); /* unregisters */
}

/*
 * The thread state of a task, NULL for tasks that never made a CUDA call. Kernel threads (the
 * idle task included, half of all switches on a quiet CPU) never have one: a flag test read
 * straight from the BTF-typed pointer skips their storage lookup.
 */
static __always_inline struct thread_state *state_of(struct task_struct *t)
{
	struct thread_state *s;

	if (t->flags & PF_KTHREAD)
		return NULL;
	s = bpf_task_storage_get(&threads, t, 0, 0);
	return s && !s->excluded ? s : NULL; /* outside --cgroup-roots: not traced */
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct thread_state *out = state_of(prev), *in = state_of(next);
	__u64 now = 0; /* the clock is read only for a traced switch or a logging CPU */
	struct cpu_run_log *log = log_switch(prev, &now);

	/* Two tests, not `if (!out && !in)`: clang folds that into an OR of the two pointers,
	 * which the verifier refuses. */
	if (out) {
		if (!now)
			now = bpf_ktime_get_ns();
		switch_out(out, prev, preempt, now, log);
	}
	if (in) {
		if (!now)
			now = bpf_ktime_get_ns();
		switch_in(in, prev, now);
	}
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	struct thread_state *t = state_of(p);

	if (t && t->off_since && !t->off_runnable && !t->woken_at) {
		t->woken_at = bpf_ktime_get_ns();
		start_wait(t, p->wake_cpu, t->woken_at); /* the run queue it was put on */
	}
	return 0;
}

/*
 * Folds every traced thread's tally into offcpu (fold_tally); user space runs it before it
 * reads offcpu each window (trace/sched_source.cpp). It writes nothing to the seq file.
 */
SEC("iter/task")
int fold_offcpu(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct thread_state *t;
	__u64 since, now;

	if (!task || (task->flags & PF_KTHREAD))
		return 0;
	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (!t || t->excluded)
		return 0;
	/*
	 * A thread on a CPU now: its stretch so far counts in this window, not all at its next
	 * switch (a busy thread alone on its CPU may run for seconds without one, and its windows
	 * would read 0 then all of it). Moved forward only if switch_out has not taken it since.
	 */
	since = t->on_since;
	now = bpf_ktime_get_ns();
	if (since && now > since && __sync_val_compare_and_swap(&t->on_since, since, now) == since)
		__sync_fetch_and_add(&t->tally.oncpu_ns, now - since);
	fold_tally(t);
	return 0;
}

/*
 * Every open call of every traced thread, one struct inflight_call each, for user space to read
 * each window (trace/inflight_source.cpp): a call that never returns never reaches the
 * histograms, so it is looked for while it is open.
 */
SEC("iter/task")
int inflight_calls(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct inflight_call r = {};
	struct thread_state *t;
	__u64 now, off_from, woke;

	if (!task || (task->flags & PF_KTHREAD))
		return 0;
	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (!t || t->excluded || !t->depth)
		return 0;
	now = bpf_ktime_get_ns();
	r.cgroup_id = t->cgroup_id;
	r.now_ns = now;
	r.tgid = t->tgid;
	r.tid = task->pid;
	r.start_tag = t->start_tag;
	r.on_cpu = t->on_since != 0;
	__builtin_memcpy(r.comm, task->comm, SW_COMM_LEN);
	for (int i = 0; i < SW_MAX_DEPTH; i++) {
		struct call_frame *f;

		if (i >= t->depth)
			break;
		f = &t->frames[i];
		r.start_ns = f->start_ns;
		r.call_id = f->call_id;
		r.preemptions = f->preemptions;
		r.runnable_ns = f->runnable_ns;
		r.blocked_ns = f->blocked_ns;
		r.nccl_comm = f->aux_ptr;
		r.depth = i;
		/* The off-CPU period in progress, as switch_in will count it, from the call's entry. */
		if (t->off_since && !t->on_since) {
			off_from = t->off_since > f->start_ns ? t->off_since : f->start_ns;
			woke = t->woken_at > off_from ? t->woken_at : off_from;
			if (t->off_runnable) {
				r.runnable_ns += now - off_from;
			} else if (t->woken_at >= t->off_since) {
				r.blocked_ns += woke - off_from;
				r.runnable_ns += now - woke;
			} else {
				r.blocked_ns += now - off_from;
			}
		}
		bpf_seq_write(seq, &r, sizeof(r));
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
