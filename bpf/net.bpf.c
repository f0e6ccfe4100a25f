// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * TCP retransmitted segments of watched cgroups. The retransmit timer runs in softirq context on behalf of
 * whatever task it interrupted, so the cgroup is the socket's (sk_cgrp_data, set when the
 * socket was created), never the current task's. IPv4 and IPv6 sockets both pass here.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "net.h"
#include "maps.bpf.h"

#define SW_AF_INET6 10

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct retransmit_stats);
} tcp_retransmits SEC(".maps");

static const struct retransmit_stats zero_retransmit_stats;

/* Set by user space when this kernel's tracepoint passes the result (6.x: `int err`): the
 * tracepoint fires for failed attempts too, which retransmitted nothing. */
const volatile bool retransmit_has_err = false;

/* Segments in the retransmitted skb (tcp_skb_pcount): a GSO packet carries several, and the
 * kernel's own counters (TCP_MIB_RETRANSSEGS, tcpi_total_retrans) count segments. */
static __always_inline __u64 segments_of(const struct sk_buff *skb)
{
	const struct tcp_skb_cb *cb =
		(const void *)skb + bpf_core_field_offset(struct sk_buff, cb);
	__u16 segs = BPF_CORE_READ(cb, tcp_gso_segs);

	return segs ? segs : 1;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk, const struct sk_buff *skb)
{
	__u64 cgroup_id = BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id);
	struct retransmit_stats *s;
	__u64 segs;

	/* `int err` is a third argument only on newer kernels: read it only behind the flag user
	 * space sets from BTF (read-only data, so the verifier drops the branch where it is 0).
	 * Declared as a BPF_PROG argument, it was loaded at entry, and Debian 12's 6.1 refused the
	 * whole object ("doesn't have 3-th argument"; found by make test-kernels). */
	if (retransmit_has_err && (int)ctx[2])
		return 0;
	if (!cgroup_id || !sw_watched(cgroup_id))
		return 0;
	s = sw_lookup_or_init(&tcp_retransmits, &cgroup_id, &zero_retransmit_stats,
			      SW_LOST_HOST_MAP);
	if (!s)
		return 0;
	segs = segments_of(skb);
	if (BPF_CORE_READ(sk, __sk_common.skc_family) == SW_AF_INET6)
		__sync_fetch_and_add(&s->ipv6, segs);
	else
		__sync_fetch_and_add(&s->ipv4, segs);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
