/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Records of the TCP retransmit hook (net.bpf.c), read by exporter/trace/net_source.cpp. */
#ifndef STALLWATCH_NET_H
#define STALLWATCH_NET_H

#include "stallwatch.h"

/* Value of tcp_retransmits, keyed by the socket's cgroup id: retransmitted segments. */
struct retransmit_stats {
	__u64 ipv4;
	__u64 ipv6;
};

#endif /* STALLWATCH_NET_H */
