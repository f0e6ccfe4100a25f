/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Records of the block I/O hooks (io.bpf.c), read by exporter/trace/io_source.cpp. */
#ifndef STALLWATCH_IO_H
#define STALLWATCH_IO_H

#include "stallwatch.h"

/* Key of block_io_duration: a process of a cgroup, a whole disk, an operation. */
struct io_key {
	__u64 cgroup_id;
	__u32 dev_major;
	__u32 dev_minor;
	__u32 op; /* REQ_OP_*: 0 read, 1 write, 2 flush, 3 discard, else other */
	__u32 tgid;
	__u32 start_tag; /* sw_start_tag() of the submitting process */
	__u32 pad;
};

struct io_stats {
	__u64 count;
	__u64 bytes;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 buckets[SW_HIST_BUCKETS];
};

#endif /* STALLWATCH_IO_H */
