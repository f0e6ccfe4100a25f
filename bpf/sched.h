/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Per-thread call state and off-CPU records of sched.bpf.c, read by exporter/trace/sched_source.cpp. */
#ifndef STALLWATCH_SCHED_H
#define STALLWATCH_SCHED_H

#include "stallwatch.h"

/* One in-flight CUDA call of a thread; off-CPU time is added while it is open. */
struct call_frame {
	__u64 start_ns;
	__u64 sp; /* stack pointer at entry: tells a second probe on the same entry from a call */
	__u64 runnable_ns;
	__u64 blocked_ns;
	__u32 call_id;
	__u32 preemptions;
	/*
	 * Arguments the return needs: an NCCL call's communicator or out-pointer (nccl.bpf.c); a
	 * memory call's out-pointer or freed address (aux_ptr), requested bytes (aux_val), where
	 * the pitch is (aux_ptr2) and its rows (aux_val2) (calls.bpf.h sw_mem_enter).
	 */
	__u64 aux_ptr;
	__u64 aux_val;
	__u64 aux_ptr2;
	__u64 aux_val2;
	__s32 aux_i0;
	__s32 aux_i1;
	__u32 mem_op; /* SW_MEM_*: a nested memory call inside this one is not counted again */
	__u32 pad;
};

#define SW_PREEMPTOR_KTHREAD 1u /* preemptor_id.flags: a kernel thread (PF_KTHREAD) */

/* Who a task is, as the preemptor tables keep it: read from its task_struct at the switch. */
struct preemptor_id {
	__u64 cgroup_id;
	__u32 tgid;
	__u32 tid;
	__u32 ppid;  /* real parent's tgid: tells the job's own children (DataLoader workers) */
	__u32 flags; /* SW_PREEMPTOR_* */
	char comm[SW_COMM_LEN];         /* the thread's name, as it is now (follows exec, prctl) */
	char process_comm[SW_COMM_LEN]; /* its thread-group leader's name */
};

/* Cumulative time of the CUDA-issuing threads of one process. */
struct offcpu_stats {
	__u64 runnable_ns;
	__u64 blocked_ns;
	__u64 oncpu_ns;
	__u64 preemptions;
};

/*
 * A thread's cached call slots (cuda.h SW_CALL_SLOTS), direct-mapped by call id: call_tag is
 * the call id + 1 (0: empty), valid for the cgroup in thread_state.slots_cgroup_id.
 */
#define SW_SLOT_CACHE 32
struct slot_cache_entry {
	__u32 call_tag;
	__u32 slot;
};

/* Task-local storage of a CUDA-issuing thread (created at its first traced call). */
struct thread_state {
	__u64 cgroup_id;      /* cgroup at the thread's latest call */
	__u64 on_since;       /* when it last got a CPU; 0 while off-CPU */
	__u64 off_since;      /* when it last left the CPU; 0 while on-CPU */
	__u64 woken_at;       /* when a blocked thread was woken (then runnable); 0 if not yet */
	__u32 tgid;
	__u32 start_tag;      /* sw_start_tag() of its process: tells a reused PID apart */
	__u64 wait_since;     /* runnable (waiting for a CPU) since; see cpu_run_log */
	__u32 wait_cpu;       /* the CPU whose run queue it waits on, + 1 (0: not registered) */
	__u8 excluded;        /* its cgroup is outside --cgroup-roots: nothing of it is traced */
	__u8 off_runnable;    /* left the CPU while runnable (preempted) */
	__u8 depth;           /* open frames */
	__u16 unmatched;      /* returns to skip: entries dropped for nesting */
	struct call_frame frames[SW_MAX_DEPTH];
	/*
	 * The thread's off-CPU and on-CPU time not yet folded into the map offcpu: a switch adds
	 * here, with no map update; the task iterator fold_offcpu moves it to the map each window
	 * and the thread's last switch when it exits (sched.bpf.c).
	 */
	struct offcpu_stats tally;
	__u64 slots_cgroup_id; /* the cgroup the cached slots are of */
	struct slot_cache_entry slots[SW_SLOT_CACHE];
};

/*
 * One open call of a thread, as the task iterator inflight_calls reads it each window: calls
 * that have not returned (a hung synchronize or collective) are seen while they hang. Off-CPU
 * time includes the current off-CPU period up to the read.
 */
struct inflight_call {
	__u64 cgroup_id;
	__u64 start_ns;    /* bpf_ktime_get_ns() at entry */
	__u64 now_ns;      /* when it was read */
	__u64 runnable_ns; /* off-CPU inside the call so far, waiting for a CPU */
	__u64 blocked_ns;  /* off-CPU inside the call so far, sleeping */
	__u64 nccl_comm;   /* an NCCL op's communicator (nccl_comms key), else 0 */
	__u32 tgid;
	__u32 tid;
	__u32 start_tag;
	__u32 call_id;
	__u32 preemptions;
	__u32 depth;       /* 0: the thread's outermost open call */
	__u32 on_cpu;      /* the thread holds a CPU now (spinning or running) */
	__u32 pad;
	char comm[SW_COMM_LEN]; /* the thread's name */
};

/* Key of offcpu: a CUDA-issuing process in its cgroup. */
struct offcpu_key {
	__u64 cgroup_id;
	__u32 tgid;
	__u32 start_tag;
};


/*
 * What ran on one CPU while CUDA-issuing threads waited in its run queue (sched.bpf.c). A CPU
 * logs its switches only while cpu_waiters counts a thread waiting there: each entry is one
 * task's stretch on the CPU. A waiter, once it runs again, charges each task the part of its
 * stretches that fell inside the wait: the CPU that task took while the job waited, whoever
 * preempted it (a light task that wakes often preempts often and takes little).
 */
#define SW_RUN_LOG 32 /* a power of two */
struct run_segment {
	__u64 start_ns;
	__u64 end_ns;
	struct preemptor_id id;
};

struct cpu_run_log {
	__u64 seg_start; /* when the task on the CPU now got it (as of the last logged switch) */
	__u32 head;      /* next entry to write */
	__u32 pad;
	struct run_segment seg[SW_RUN_LOG];
};

#define SW_MAX_CPUS 8192 /* cpu_waiters entries: NR_CPUS's largest x86-64 and arm64 setting */

/* Key of preemptors: which thread kept a CUDA-issuing process of a cgroup off the CPU. */
struct preemptor_key {
	__u64 victim_cgroup_id;
	__u32 victim_tgid;
	__u32 preemptor_tid;
	__u32 victim_start_tag;
	__u32 pad;
};

/* The identity is rewritten at every blame, so names follow exec and prctl(PR_SET_NAME). */
struct preemptor_stats {
	__u64 runnable_ns; /* CPU this task took on the victim's CPU while the victim waited there */
	__u64 count;       /* waits it took part of */
	struct preemptor_id id;
};

#endif /* STALLWATCH_SCHED_H */
