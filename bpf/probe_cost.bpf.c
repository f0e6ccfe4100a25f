// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The daemon's own measure of what a uprobe costs on this host (exporter/trace/probe_cost.cpp,
 * issue #48): an entry and a return program that count their hits and nothing else, attached to
 * targets of known instruction shapes in the daemon's own binary and hit by a child process of
 * its own. Its own skeleton (probe_cost.skel.h), so `stallwatch check` loads this alone.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} probe_cost_hits SEC(".maps");

static __always_inline void count_hit(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&probe_cost_hits, &slot);

	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("uprobe")
int probe_cost_enter(void *ctx)
{
	count_hit(0);
	return 0;
}

SEC("uretprobe")
int probe_cost_exit(void *ctx)
{
	count_hit(1);
	return 0;
}

/* The same, loaded for multi-uprobe links (Linux 6.6) where the kernel has them. */
SEC("uprobe")
int probe_cost_enter_multi(void *ctx)
{
	count_hit(0);
	return 0;
}

SEC("uretprobe")
int probe_cost_exit_multi(void *ctx)
{
	count_hit(1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
