// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * CUDA runtime and driver calls: one entry and one return program, attached by user space
 * to every traced symbol of every traced library copy with the call's id as bpf_cookie.
 * The frame machinery is in calls.bpf.h; this file also owns the maps shared by all programs.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define SW_DEFINE_SHARED_MAPS
#include "calls.bpf.h"

SEC("uprobe")
int cuda_enter(struct pt_regs *ctx)
{
	sw_call_enter(ctx, (__u32)bpf_get_attach_cookie(ctx));
	return 0;
}

SEC("uretprobe")
int cuda_exit(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct thread_state *t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	struct call_frame *f = sw_call_exit(t, (__u32)bpf_get_attach_cookie(ctx));

	if (f && t)
		sw_record_call(t, f, now);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
