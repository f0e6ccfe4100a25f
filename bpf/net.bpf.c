// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * TCP retransmits of watched cgroups. The retransmit timer runs in softirq context on behalf of
 * whatever task it interrupted, so the cgroup is the socket's (sk_cgrp_data, set when the
 * socket was created), never the current task's. IPv4 and IPv6 sockets both pass here.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "host.h"
#include "maps.bpf.h"

#define SW_AF_INET6 10

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct retransmit_stats);
} tcp_retransmits SEC(".maps");

static const struct retransmit_stats zero_retransmit_stats;

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk)
{
	__u64 cgroup_id = BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id);
	struct retransmit_stats *s;

	if (!cgroup_id || !sw_watched(cgroup_id))
		return 0;
	s = sw_lookup_or_init(&tcp_retransmits, &cgroup_id, &zero_retransmit_stats,
			      SW_LOST_HOST_MAP);
	if (!s)
		return 0;
	if (BPF_CORE_READ(sk, __sk_common.skc_family) == SW_AF_INET6)
		__sync_fetch_and_add(&s->ipv6, 1);
	else
		__sync_fetch_and_add(&s->ipv4, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
