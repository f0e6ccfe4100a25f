// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// The kernel's floor for bench/run.sh: an entry and a return program that do nothing. Attached
// where stallwatch attaches cuda_enter/cuda_exit, they cost exactly the uprobe + uretprobe
// machinery (breakpoint, return-address hijack, BPF dispatch) and nothing of stallwatch's own.
// Empty scheduler programs likewise give the floor of sched_switch/sched_wakeup (below).
#include <linux/bpf.h>
// After the UAPI header: bpf_helpers.h uses its types without including it.
#include <bpf/bpf_helpers.h>

SEC("uprobe")
int empty_enter(void* ctx) { return 0; }

SEC("uretprobe")
int empty_exit(void* ctx) { return 0; }

// The floor of the scheduler hooks (empty_probe --sched): tp_btf programs on the tracepoints
// sched.bpf.c uses, so bpf_stats' own cost per run (the two clock reads around every program,
// ~70 ns on the development VM) can be told apart from what stallwatch's programs do.
SEC("tp_btf/sched_switch")
int empty_switch(void* ctx) { return 0; }

SEC("tp_btf/sched_wakeup")
int empty_wakeup(void* ctx) { return 0; }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
