/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The call-frame machinery shared by the CUDA (cuda.bpf.c) and NCCL (nccl.bpf.c) probes: an
 * entry pushes a frame on the thread's task storage, sched.bpf.c adds off-CPU time to open
 * frames, a return pops its frame into the per-(cgroup, call, process) histogram and, at or
 * above outlier_threshold_ns, one ring-buffer record.
 */
#ifndef STALLWATCH_CALLS_BPF_H
#define STALLWATCH_CALLS_BPF_H

#include "maps.bpf.h"
#include "python.bpf.h"

#ifdef SW_DEFINE_SHARED_MAPS
const volatile __u64 outlier_threshold_ns = 1000000;
const volatile bool capture_stacks = true; /* --stacks */
/* The kernel has bpf_loop (5.17+), which the Python walk needs: off, the walk is dead code the
 * verifier never visits, so the programs still load (tracer.cpp probes it). */
const volatile bool python_frames = true;
const volatile __u32 cgroup_root_count = 0; /* --cgroup-roots; 0: every cgroup is traced */
__u64 never_used_slots; /* call_slots from here on were never handed out */
#else
extern const volatile __u32 cgroup_root_count;
extern const volatile __u64 outlier_threshold_ns;
extern const volatile bool capture_stacks;
extern const volatile bool python_frames;
extern __u64 never_used_slots;
#endif

/* Whether the current task's cgroup lies at or below one of --cgroup-roots (all, without any). */
static __always_inline bool sw_in_cgroup_roots(void)
{
	if (!cgroup_root_count)
		return true;
	for (__u32 i = 0; i < SW_MAX_CGROUP_ROOTS; i++) {
		if (i >= cgroup_root_count)
			break;
		if (bpf_current_task_under_cgroup(&cgroup_roots, i) == 1)
			return true;
	}
	return false;
}

/*
 * The thread's state, created at its first call; adds a newly seen cgroup to watched_cgroups.
 * NULL for a thread outside --cgroup-roots (judged when its cgroup changes, then cached).
 */
static __always_inline struct thread_state *sw_thread_for_call(__u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_state *t;
	__u64 cgroup_id;
	__u8 one = 1;

	t = bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t) {
		sw_count_lost(SW_LOST_THREAD_STATE);
		return NULL;
	}
	if (!t->tgid) {
		/* First call of this thread: it is on the CPU now. */
		t->tgid = bpf_get_current_pid_tgid() >> 32;
		t->start_tag = sw_start_tag(task);
		t->on_since = now;
	}
	/* Through the task's BTF pointers: plain loads, no helper call (the same id the helper gives). */
	cgroup_id = task->cgroups->dfl_cgrp->kn->id;
	if (t->cgroup_id != cgroup_id) {
		t->cgroup_id = cgroup_id;
		t->excluded = !sw_in_cgroup_roots();
		if (!t->excluded && bpf_map_update_elem(&watched_cgroups, &cgroup_id, &one, BPF_ANY))
			sw_count_lost(SW_LOST_WATCHED_CGROUPS);
	}
	return t->excluded ? NULL : t;
}

/* Pushes a frame for call_id; NULL when the call is not tracked. */
static __always_inline struct call_frame *sw_call_enter(struct pt_regs *ctx, __u32 call_id)
{
	__u64 now = bpf_ktime_get_ns();
	struct thread_state *t = sw_thread_for_call(now);
	struct call_frame *f;
	__u64 sp;
	__u32 d;

	if (!t)
		return NULL;
	d = t->depth;
	sp = PT_REGS_SP(ctx);
	if (d > 0) {
		/*
		 * The same entry seen twice: two probe sets on one function, e.g. while a detached
		 * copy's probes are still being torn down, or one file reached through two inodes.
		 * Count the call once; skip one of the two returns. The two fire back to back: an
		 * older frame at the same place is a call that left without its uretprobe, dropped
		 * below.
		 */
		f = &t->frames[(d - 1) & (SW_MAX_DEPTH - 1)];
		if (f->sp == sp && f->call_id == call_id && now - f->start_ns < SW_DOUBLE_PROBE_NS) {
			t->unmatched++;
			return NULL;
		}
	}
	/*
	 * Frames at or below this entry's stack pointer belong to calls that left without their
	 * uretprobe (a longjmp or an exception across the library, probes detached mid-call): the
	 * stack has unwound past them, since a call nested in another enters lower. Drop them, or
	 * they would stay open for ever and read as a hang (inflight_calls). Open frames enter lower
	 * and lower, so only when the innermost one is at or below this entry is any of them stale:
	 * the common cases (no open frame, or a call nested in the open one) skip the scan.
	 */
	if (d > 0 && t->frames[(d - 1) & (SW_MAX_DEPTH - 1)].sp <= sp) {
		for (int i = 0; i < SW_MAX_DEPTH; i++) {
			/* The outermost such frame: the ones above it entered lower still. */
			if ((__u32)i < d && t->frames[i].sp <= sp) {
				d = i;
				break;
			}
		}
	}
	if (d >= SW_MAX_DEPTH) {
		t->unmatched++;
		sw_count_lost(SW_LOST_NESTING);
		return NULL;
	}
	f = &t->frames[d & (SW_MAX_DEPTH - 1)];
	f->start_ns = now;
	f->sp = sp;
	f->runnable_ns = 0;
	f->blocked_ns = 0;
	f->preemptions = 0;
	f->call_id = call_id;
	f->aux_ptr = 0;
	f->aux_val = 0;
	f->aux_ptr2 = 0;
	f->aux_val2 = 0;
	f->aux_i0 = 0;
	f->aux_i1 = 0;
	f->mem_op = SW_MEM_NONE;
	t->depth = d + 1;
	return f;
}

/*
 * Pops to the frame of call_id and returns it (its memory stays valid until the thread's next
 * call); NULL when the entry was not seen. Frames above it belong to calls that never returned
 * through their uretprobe (a longjmp or a C++ exception across the library); they are dropped.
 */
static __always_inline struct call_frame *sw_call_exit(struct thread_state *t, __u32 call_id)
{
	__u32 d;

	if (!t || !t->depth)
		return NULL; /* entry happened before we attached */
	if (t->unmatched) {
		t->unmatched--;
		return NULL;
	}
	for (int i = 0; i < SW_MAX_DEPTH; i++) {
		d = t->depth;
		if (!d)
			return NULL;
		d = (d - 1) & (SW_MAX_DEPTH - 1);
		t->depth = d;
		if (t->frames[d].call_id == call_id)
			return &t->frames[d];
	}
	return NULL;
}

/*
 * The stack pointer a call entered with, seen from its return: on x86-64 the return has popped
 * the return address the entry saw on the stack; on arm64 the return address is in a register
 * and the stack pointer is the entry's.
 */
static __always_inline __u64 sw_entry_sp_at_return(struct pt_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	return PT_REGS_SP(ctx) - 8;
#else
	return PT_REGS_SP(ctx);
#endif
}

/*
 * The returning call's frame when it is the innermost open one, found by its stack pointer
 * alone: only the call that pushed that frame can return at that stack position (an entry at
 * or above a frame's stack pointer drops it, sw_call_enter), so no cookie is needed. NULL
 * otherwise (a frame of a call that left without its return is above it, a second probe set's
 * return is due, or the entry was not seen): then the caller matches by call id.
 */
static __always_inline struct call_frame *sw_call_exit_innermost(struct pt_regs *ctx,
								  struct thread_state *t)
{
	struct call_frame *f;
	__u32 d;

	if (!t || !t->depth || t->unmatched)
		return NULL;
	d = (t->depth - 1) & (SW_MAX_DEPTH - 1);
	f = &t->frames[d];
	if (f->sp != sw_entry_sp_at_return(ctx))
		return NULL;
	t->depth = d;
	return f;
}

/* A slot for key: a freed one, else a never-used one; SW_CALL_SLOTS when none is left. */
static __always_inline __u32 sw_new_slot(const struct call_key *key)
{
	__u32 slot, *found;

	if (bpf_map_pop_elem(&free_call_slots, &slot)) {
		__u64 fresh = __sync_fetch_and_add(&never_used_slots, 1);

		if (fresh >= SW_CALL_SLOTS)
			return SW_CALL_SLOTS;
		slot = (__u32)fresh;
	}
	if (!bpf_map_update_elem(&call_index, key, &slot, BPF_NOEXIST))
		return slot;
	/* Another thread of the process got there first: give ours back, take its. */
	bpf_map_push_elem(&free_call_slots, &slot, 0);
	found = bpf_map_lookup_elem(&call_index, key);
	return found ? *found : SW_CALL_SLOTS;
}

/*
 * The statistics of the thread's call `call_id` in its current cgroup, and their slot; NULL
 * (and a lost count) when no slot is left. Most returns find the slot in the thread's cache.
 */
static __always_inline struct call_stats *sw_call_stats(struct thread_state *t, __u32 call_id,
							 __u32 *slot_out)
{
	struct slot_cache_entry *c;
	struct call_key key = {};
	struct call_stats *s;
	__u32 slot, *found;

	if (t->slots_cgroup_id != t->cgroup_id) {
		for (int i = 0; i < SW_SLOT_CACHE; i++)
			t->slots[i].call_tag = 0;
		t->slots_cgroup_id = t->cgroup_id;
	}
	c = &t->slots[call_id & (SW_SLOT_CACHE - 1)];
	if (c->call_tag == call_id + 1) {
		slot = c->slot;
	} else {
		key.cgroup_id = t->cgroup_id;
		key.call_id = call_id;
		key.tgid = t->tgid;
		key.start_tag = t->start_tag;
		found = bpf_map_lookup_elem(&call_index, &key);
		slot = found ? *found : sw_new_slot(&key);
		if (slot >= SW_CALL_SLOTS) {
			sw_count_lost(SW_LOST_CALL_MAP);
			return NULL;
		}
		c->call_tag = call_id + 1;
		c->slot = slot;
	}
	s = bpf_map_lookup_elem(&call_slots, &slot);
	if (s)
		*slot_out = slot;
	return s;
}

/*
 * Adds a finished call to its histogram; an outlier also goes to the ring buffer. Returns the
 * call's statistics (NULL when no slot is left) and sets *slot to their slot.
 */
static __always_inline struct call_stats *sw_record_call(struct pt_regs *ctx,
							  struct thread_state *t,
							  struct call_frame *f, __u64 now,
							  __u32 *slot)
{
	struct call_stats *s;
	struct outlier_event *e;
	__u64 dur = now - f->start_ns;

	s = sw_call_stats(t, f->call_id, slot);
	if (s) {
		/* No count: it is the sum of the buckets, one atomic add fewer per call. */
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
		return s;
	e = bpf_ringbuf_reserve(&outliers, sizeof(*e), 0);
	if (!e) {
		sw_count_lost(SW_LOST_OUTLIER_RINGBUF);
		return s;
	}
	e->ts_ns = now;
	e->cgroup_id = t->cgroup_id;
	e->duration_ns = dur;
	e->runnable_ns = f->runnable_ns;
	e->blocked_ns = f->blocked_ns;
	e->tgid = t->tgid;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->call_id = f->call_id;
	e->preemptions = f->preemptions;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->stack_id = -1;
	e->py_count = 0;
	e->py_status = SW_PY_NOT_PYTHON;
	if (capture_stacks) {
		/* At the return: the innermost frame is the caller's, right after the call. */
		e->stack_id = bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
		if (e->stack_id < 0)
			sw_count_lost(SW_LOST_STACK);
		if (python_frames)
			sw_py_walk(e);
	}
	bpf_ringbuf_submit(e, 0);
	return s;
}

/*
 * The probed function's arguments 1..7 (x86-64 SysV or arm64 AAPCS) into args[1..7]. Loaded
 * one by one behind a compiler barrier: indexing pt_regs by a variable compiles to pointer
 * arithmetic on ctx, which the verifier rejects.
 */
static __always_inline void sw_load_args(struct pt_regs *ctx, __u64 args[8])
{
	args[0] = 0;
	args[1] = PT_REGS_PARM1(ctx);
	args[2] = PT_REGS_PARM2(ctx);
	args[3] = PT_REGS_PARM3(ctx);
	args[4] = PT_REGS_PARM4(ctx);
	args[5] = PT_REGS_PARM5(ctx);
#if defined(__TARGET_ARCH_x86)
	args[6] = ctx->r9; /* libbpf 1.1 has no PT_REGS_PARM6 */
	args[7] = 0;
	/* The seventh is on the stack above the return address at entry. */
	bpf_probe_read_user(&args[7], sizeof(args[7]), (void *)(PT_REGS_SP(ctx) + 8));
#else
	args[6] = ((const struct user_pt_regs *)ctx)->regs[5];
	args[7] = ((const struct user_pt_regs *)ctx)->regs[6];
#endif
	asm volatile("" ::: "memory");
}

#endif /* STALLWATCH_CALLS_BPF_H */
