/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The calling thread's Python frames, walked from its own interpreter state at the return of
 * an outlier call (calls.bpf.h). The thread making a CUDA call has usually released the GIL, so
 * its PyThreadState is found by thread id in the interpreter's thread list, never as "the
 * current" one. Each frame is kept as (code object, instruction byte offset); user space reads
 * the code object's names and decodes its line table (exporter/trace/python.cpp).
 * Both walks run under bpf_loop (Linux 5.17+): the verifier checks one step, not every path
 * through 64 unrolled ones.
 */
#ifndef STALLWATCH_PYTHON_BPF_H
#define STALLWATCH_PYTHON_BPF_H

#include "maps.bpf.h"

static __always_inline __u64 sw_py_read_ptr(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr))
		return 0;
	return v;
}

/* The thread's id as the process sees it: gettid() in its own PID namespace. */
static __always_inline __u64 sw_ns_tid(struct task_struct *task)
{
	struct pid *pid = BPF_CORE_READ(task, thread_pid);
	unsigned int level = BPF_CORE_READ(pid, level);
	struct upid up = {};

	bpf_probe_read_kernel(&up, sizeof(up),
			      (const char *)pid + bpf_core_field_offset(struct pid, numbers) +
				      (__u64)(level & 31) * bpf_core_type_size(struct upid));
	return (__u64)up.nr;
}

static __always_inline __u64 sw_py_thread_id(struct task_struct *task, const struct py_proc *p)
{
#if defined(__TARGET_ARCH_x86)
	if (p->tid_kind == SW_PY_TID_PTHREAD)
		return BPF_CORE_READ(task, thread.fsbase); /* glibc and musl: pthread_self() */
#endif
	if (p->tid_kind == SW_PY_TID_PTHREAD)
		return ~0ULL; /* not supported here: matches no thread */
	return sw_ns_tid(task);
}

struct sw_py_walk {
	struct py_proc p; /* a copy: the steps read only the stack */
	__u64 want;       /* the thread id searched for */
	__u64 at;         /* the thread state, then the frame, being looked at */
	__u32 n;          /* frames kept */
	__u32 found;
	struct py_scratch *s; /* this CPU's scratch, looked up once */
};

/* One PyThreadState of the interpreter's list: stop at the calling thread's. */
static long sw_py_thread_step(__u64 i, void *arg)
{
	struct sw_py_walk *w = arg;
	__u64 id = 0;

	if (!w->at)
		return 1;
	if (w->p.tid_kind == SW_PY_TID_PTHREAD)
		id = sw_py_read_ptr(w->at + w->p.ts_tid);
	else
		bpf_probe_read_user(&id, sizeof(__u32), (const void *)(w->at + w->p.ts_tid));
	if (id == w->want) {
		w->found = 1;
		return 1;
	}
	w->at = sw_py_read_ptr(w->at + w->p.ts_next);
	return 0;
}

/* A field of the frame block read into s->frame (offsets < SW_PY_FRAME_BLOCK, user space checks). */
static __always_inline __u64 sw_py_field(struct py_scratch *s, __u16 off)
{
	__u64 v;

	__builtin_memcpy(&v, &s->frame[off & 127], sizeof(v));
	return v;
}

/*
 * One frame, innermost first: keep it unless it is a shim; then its caller. The frame's first
 * SW_PY_FRAME_BLOCK bytes come in one read (one fault check instead of four).
 */
static long sw_py_frame_step(__u64 i, void *arg)
{
	struct sw_py_walk *w = arg;
	struct py_scratch *s = w->s;
	__u64 code, instr;
	__u8 owner = 0;

	if (!w->at || w->n >= SW_PY_FRAMES || !s)
		return 1;
	if (bpf_probe_read_user(s->frame, SW_PY_FRAME_BLOCK, (const void *)w->at))
		return 1;
	code = sw_py_field(s, w->p.fr_code) & w->p.code_mask;
	if (w->p.fr_owner != SW_PY_NO_OWNER)
		owner = s->frame[w->p.fr_owner & 127];
	if (code && !(w->p.fr_owner != SW_PY_NO_OWNER && owner >= w->p.owner_cstack)) {
		if (w->p.frame_kind == SW_PY_FRAME_OBJECT) {
			int lasti = (int)sw_py_field(s, w->p.fr_instr);

			instr = lasti < 0 ? 0 : (__u64)lasti * 2; /* code units of 2 bytes */
		} else {
			instr = sw_py_field(s, w->p.fr_instr) - (code + w->p.code_adaptive);
		}
		s->py[w->n & (SW_PY_FRAMES - 1)].code = code;
		s->py[w->n & (SW_PY_FRAMES - 1)].instr = (__u32)instr;
		s->py[w->n & (SW_PY_FRAMES - 1)].pad = 0;
		w->n++;
	}
	w->at = sw_py_field(s, w->p.fr_back);
	return 0;
}

/* Fills e->py and e->py_count (innermost first) and e->py_status. */
static __always_inline void sw_py_walk(struct outlier_event *e)
{
	struct task_struct *task = bpf_get_current_task_btf();
	/* The key on the stack: before Linux 6.2 (or so) the verifier refuses a map key that points
	 * into ring buffer memory ("R2 type=alloc_mem expected=fp, ..."), found on Debian 12's 6.1
	 * by make test-kernels. */
	__u32 tgid = e->tgid;
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);
	struct sw_py_walk w = {};
	struct py_scratch *s;
	__u32 zero = 0;
	__u64 interp;

	e->py_count = 0;
	if (!p || p->start_tag != sw_start_tag(task)) {
		e->py_status = SW_PY_NOT_PYTHON; /* or a reused PID, until user space updates it */
		return;
	}
	w.p = *p;
	interp = sw_py_read_ptr(w.p.runtime + w.p.rt_interp_head);
	if (!interp) {
		e->py_status = SW_PY_READ_FAILED;
		return;
	}
	w.at = sw_py_read_ptr(interp + w.p.interp_threads_head);
	w.want = sw_py_thread_id(task, &w.p);
	bpf_loop(SW_PY_THREADS, sw_py_thread_step, &w, 0);
	if (!w.found) {
		e->py_status = SW_PY_NO_THREAD;
		return;
	}
	e->py_status = SW_PY_OK;
	w.at = sw_py_read_ptr(w.at + w.p.ts_frame);
	if (w.p.frame_kind == SW_PY_FRAME_CFRAME && w.at)
		w.at = sw_py_read_ptr(w.at + w.p.cframe_current);
	w.s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!w.s)
		return;
	bpf_loop(SW_PY_FRAMES * 2, sw_py_frame_step, &w, 0);
	s = w.s;
	if (!s || !w.n)
		return;
	__builtin_memcpy(e->py, s->py, sizeof(e->py));
	e->py_count = (__u16)(w.n > SW_PY_FRAMES ? SW_PY_FRAMES : w.n);
}

#endif /* STALLWATCH_PYTHON_BPF_H */
