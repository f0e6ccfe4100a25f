/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Records of the CUDA call probes (cuda.bpf.c), read by exporter/trace/cuda_source.cpp. */
#ifndef STALLWATCH_CUDA_H
#define STALLWATCH_CUDA_H

#include "stallwatch.h"

/*
 * Call statistics live in the array call_slots, one slot per (cgroup, call, process); the hash
 * call_index maps this key to its slot. A thread keeps the slots of its calls in its task storage
 * (thread_state.slots), so a return usually reaches its statistics without a hash lookup. User
 * space frees the slots of exited processes (zeroed, pushed on free_call_slots).
 */
#define SW_CALL_SLOTS 16384

/* Key of call_index: label fields in label order, then the process. */
struct call_key {
	__u64 cgroup_id;
	__u32 call_id; /* index into exporter/trace/calls.cpp's table; the uprobe's bpf_cookie */
	__u32 tgid;
	__u32 start_tag; /* sw_start_tag(): with tgid, one process even when its PID is reused */
	__u32 pad;
};

/* Cumulative per (cgroup, call, process); never reset, never deleted while the process lives. */
struct call_stats {
	__u64 sum_ns;       /* the count of calls is the sum of the buckets */
	__u64 runnable_ns; /* off-CPU, runnable (waiting for a CPU) during the call */
	__u64 blocked_ns;  /* off-CPU, blocked (sleeping) during the call */
	__u64 max_ns;
	__u64 buckets[SW_HIST_BUCKETS];
	/*
	 * Memory calls (SW_MEM_*): bytes of successful allocations by this call, bytes of them
	 * freed since (by any free call, matched through cuda_allocs), out-of-memory returns, and
	 * the size the latest of those asked for.
	 */
	__u64 alloc_bytes;
	__u64 freed_bytes;
	__u64 alloc_failures;
	__u64 failed_bytes;
};

/* Key of cuda_allocs: an address (or a cuMemCreate handle) a process holds. */
struct cuda_alloc_key {
	__u64 addr;
	__u32 tgid;
	__u32 handle; /* 1: addr is a cuMemCreate handle */
};

/* Which allocation it was: the slot (call_slots) of the call its free credits. */
struct cuda_alloc {
	__u64 bytes;
	__u32 slot;
	__u32 start_tag; /* of the allocating process: its records go when it exits */
};

/*
 * Where a CPython process keeps what python.bpf.h walks: value of py_procs (key: tgid), filled
 * by user space (exporter/trace/python.cpp) from the interpreter's version tables or its
 * _Py_DebugOffsets. Offsets are bytes into the named structure.
 */
#define SW_PY_TID_NATIVE 0  /* PyThreadState.native_thread_id: the thread id in its PID namespace */
#define SW_PY_TID_PTHREAD 1 /* PyThreadState.thread_id: pthread_self(), the thread's fs base (x86-64) */
#define SW_PY_FRAME_OBJECT 0    /* 3.10: tstate->frame, PyFrameObject, f_lasti in code units */
#define SW_PY_FRAME_CFRAME 1    /* 3.11, 3.12: tstate->cframe->current_frame, prev_instr */
#define SW_PY_FRAME_CURRENT 2   /* 3.13+: tstate->current_frame, instr_ptr */
#define SW_PY_NO_OWNER 0xffff
struct py_proc {
	__u64 runtime;     /* address of _PyRuntime in the process */
	__u64 code_mask;   /* f_code/f_executable & code_mask: the code object (3.14 tags the low bits) */
	__u32 start_tag;   /* sw_start_tag() of the process it was made for */
	__u8 tid_kind;     /* SW_PY_TID_* */
	__u8 frame_kind;   /* SW_PY_FRAME_* */
	__u8 owner_cstack; /* frames owned by this value and above are shims (skipped) */
	__u8 pad;
	__u16 rt_interp_head;      /* _PyRuntimeState.interpreters.head */
	__u16 interp_threads_head; /* PyInterpreterState.threads.head (3.10: tstate_head) */
	__u16 ts_next;             /* PyThreadState.next */
	__u16 ts_tid;              /* native_thread_id, or thread_id for SW_PY_TID_PTHREAD */
	__u16 ts_frame;            /* frame, cframe or current_frame */
	__u16 cframe_current;      /* _PyCFrame.current_frame (SW_PY_FRAME_CFRAME) */
	__u16 fr_back;             /* f_back or previous */
	__u16 fr_code;             /* f_code or f_executable */
	__u16 fr_instr;            /* f_lasti (int), prev_instr or instr_ptr */
	__u16 fr_owner;            /* owner (char), SW_PY_NO_OWNER when the version has none */
	__u16 code_adaptive;       /* PyCodeObject.co_code_adaptive (3.11+) */
	__u16 pad2;
};

/* One Python frame: the code object and the byte offset of the instruction executing in it. */
struct py_frame {
	__u64 code;
	__u32 instr;
	__u32 pad;
};

/* Why an outlier has no Python frames (outlier_event.py_status). */
#define SW_PY_OK 0
#define SW_PY_NOT_PYTHON 1 /* no py_procs entry: not CPython, or not supported */
#define SW_PY_NO_THREAD 2  /* the calling thread is not in the interpreter's thread list */
#define SW_PY_READ_FAILED 3

/* A call at or above outlier_threshold_ns; the only per-call record user space sees. */
struct outlier_event {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u64 duration_ns;
	__u64 runnable_ns;
	__u64 blocked_ns;
	__u32 tgid;
	__u32 tid;
	__u32 call_id;
	__u32 preemptions;
	char comm[SW_COMM_LEN];
	__s32 stack_id;  /* user_stacks id of the native stack; negative when none */
	__u16 py_count;  /* frames in py, innermost first */
	__u16 py_status; /* SW_PY_* */
	struct py_frame py[SW_PY_FRAMES];
};

#endif /* STALLWATCH_CUDA_H */
