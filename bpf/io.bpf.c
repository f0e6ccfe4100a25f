// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Block requests of watched cgroups, from submission to completion, per whole disk and
 * operation. block_io_start fires in the submitting task's context (the DataLoader worker that
 * called read(2)), so the cgroup and process are the submitter's, not a kworker's; block_io_done
 * fires at completion (often in interrupt context) and finds the request in io_inflight.
 * Both tracepoints exist since Linux 6.5 and fire for disks that keep I/O statistics; user space
 * leaves them unloaded where the kernel lacks them.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "io.h"
#include "maps.bpf.h"

#define SW_REQ_OP_MASK 0xff
#define SW_REQ_OP_WRITE 1
#define SW_REQ_OP_FLUSH 2

struct io_start {
	struct io_key key;
	__u64 ts_ns;
	__u64 bytes;
};

/* LRU: a request whose completion we miss (detached meanwhile) must not leak an entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct io_start);
} io_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* preallocated: updated in hooks that must not allocate */
	__uint(max_entries, 4096);
	__type(key, struct io_key);
	__type(value, struct io_stats);
} block_io_duration SEC(".maps");

static const struct io_stats zero_io_stats;

SEC("tp_btf/block_io_start")
int BPF_PROG(block_io_start, struct request *rq)
{
	__u64 cgroup_id = bpf_get_current_cgroup_id();
	struct io_start s = {};
	struct gendisk *disk;
	__u64 key = (__u64)rq;

	if (!sw_watched(cgroup_id))
		return 0;
	disk = BPF_CORE_READ(rq, q, disk);
	s.key.cgroup_id = cgroup_id;
	s.key.dev_major = BPF_CORE_READ(disk, major);
	s.key.dev_minor = BPF_CORE_READ(disk, first_minor);
	s.key.op = BPF_CORE_READ(rq, cmd_flags) & SW_REQ_OP_MASK;
	s.key.tgid = bpf_get_current_pid_tgid() >> 32;
	s.key.start_tag = sw_start_tag(bpf_get_current_task_btf());
	s.bytes = BPF_CORE_READ(rq, __data_len);
	/* fsync's cache flush is an empty write with REQ_PREFLUSH: count it as a flush. */
	if (s.key.op == SW_REQ_OP_WRITE && s.bytes == 0)
		s.key.op = SW_REQ_OP_FLUSH;
	s.ts_ns = bpf_ktime_get_ns();
	sw_lru_update(&io_inflight, &key, &s, SW_LRU_IO_INFLIGHT);
	return 0;
}

SEC("tp_btf/block_io_done")
int BPF_PROG(block_io_done, struct request *rq)
{
	__u64 key = (__u64)rq;
	struct io_start *s = bpf_map_lookup_elem(&io_inflight, &key);
	struct io_stats *st;
	__u64 dur;

	if (!s)
		return 0;
	dur = bpf_ktime_get_ns() - s->ts_ns;
	st = sw_lookup_or_init(&block_io_duration, &s->key, &zero_io_stats, SW_LOST_HOST_MAP);
	if (st) {
		__sync_fetch_and_add(&st->count, 1);
		__sync_fetch_and_add(&st->bytes, s->bytes);
		__sync_fetch_and_add(&st->sum_ns, dur);
		__sync_fetch_and_add(&st->buckets[sw_bucket_of_ns(dur)], 1);
		if (dur > st->max_ns)
			st->max_ns = dur;
	}
	sw_lru_delete(&io_inflight, &key, SW_LRU_IO_INFLIGHT);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
