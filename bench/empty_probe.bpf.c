// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// The kernel's floor for bench/run.sh: an entry and a return program that do nothing. Attached
// where stallwatch attaches cuda_enter/cuda_exit, they cost exactly the uprobe + uretprobe
// machinery (breakpoint, return-address hijack, BPF dispatch) and nothing of stallwatch's own.
// Empty scheduler programs likewise give the floor of sched_switch/sched_wakeup, and the timer
// pair the floor of any per-thread call timer (below).
#include <linux/bpf.h>
// After the UAPI header: bpf_helpers.h uses its types without including it.
#include <bpf/bpf_helpers.h>

SEC("uprobe")
int empty_enter(void* ctx) { return 0; }

SEC("uretprobe")
int empty_exit(void* ctx) { return 0; }

// The floor of any per-thread call timer (empty_probe --timer, instead of the empty pair): an entry
// that reads the clock into the thread's task storage and a return that reads the clock and that
// storage again. Two clock reads and two storage lookups per call are the least a design that
// times calls per thread in the kernel can do; cuda_enter/cuda_exit above this pair are
// stallwatch's own work. Measure it alone: beside another program that touches the thread's task
// storage on the same probe, whichever runs second finds those cache lines warm (on the
// development VM the timer's return read 121 ns beside cuda_exit and 165 ns alone).
struct timer_start {
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct timer_start);
} timer_threads SEC(".maps");

__u64 timer_total_ns; /* read by nobody: keeps the return's work from being optimised away */

SEC("uprobe")
int timer_enter(void* ctx)
{
	struct timer_start *t = bpf_task_storage_get(&timer_threads, bpf_get_current_task_btf(), 0,
						     BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (t)
		t->ns = bpf_ktime_get_ns();
	return 0;
}

SEC("uretprobe")
int timer_exit(void* ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct timer_start *t = bpf_task_storage_get(&timer_threads, bpf_get_current_task_btf(), 0, 0);

	if (t && t->ns)
		timer_total_ns += now - t->ns;
	return 0;
}

// The floor of the scheduler hooks (empty_probe --sched): tp_btf programs on the tracepoints
// sched.bpf.c uses, so bpf_stats' own cost per run (the two clock reads around every program,
// ~70 ns on the development VM) can be told apart from what stallwatch's programs do.
SEC("tp_btf/sched_switch")
int empty_switch(void* ctx) { return 0; }

SEC("tp_btf/sched_wakeup")
int empty_wakeup(void* ctx) { return 0; }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
