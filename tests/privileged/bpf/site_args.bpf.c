// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * nvidia_binaries_test: what a probe sees at the site the daemon chose (issue #48). The entry program
 * keeps the six argument registers, the stack pointer and the five stack words above the return
 * address (arguments 7-11 on x86-64), and counts its hits; the return program keeps the return
 * value and counts its hits. A moved site must see exactly what +0 sees.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct site_args {
	__u64 args[11];
	__u64 sp;
	__u64 ret_addr;
	__u64 rc;
	__u64 entries;
	__u64 returns;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct site_args);
} site_args SEC(".maps");

SEC("uprobe")
int site_args_enter(struct pt_regs *ctx)
{
	__u32 zero = 0;
	struct site_args *a = bpf_map_lookup_elem(&site_args, &zero);
	__u64 stack[6] = {};

	if (!a)
		return 0;
#if defined(__TARGET_ARCH_x86)
	/* x86-64 SysV argument registers; libbpf 1.1 has no PT_REGS_PARM6. */
	a->args[0] = ctx->di;
	a->args[1] = ctx->si;
	a->args[2] = ctx->dx;
	a->args[3] = ctx->cx;
	a->args[4] = ctx->r8;
	a->args[5] = ctx->r9;
#endif
	a->sp = PT_REGS_SP(ctx);
	bpf_probe_read_user(stack, sizeof(stack), (void *)a->sp);
	a->ret_addr = stack[0];
	for (int i = 0; i < 5; i++)
		a->args[6 + i] = stack[1 + i];
	__sync_fetch_and_add(&a->entries, 1);
	return 0;
}

SEC("uretprobe")
int site_args_exit(struct pt_regs *ctx)
{
	__u32 zero = 0;
	struct site_args *a = bpf_map_lookup_elem(&site_args, &zero);

	if (!a)
		return 0;
	a->rc = PT_REGS_RC(ctx);
	__sync_fetch_and_add(&a->returns, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
