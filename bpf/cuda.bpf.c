// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * CUDA runtime and driver calls: one entry and one return program, attached by user space
 * to every traced symbol of every traced library copy with the call's id as bpf_cookie.
 * The frame machinery is in calls.bpf.h; this file also owns the maps shared by all programs.
 *
 * Memory calls (cookie bits 44-47, SW_MEM_* of stallwatch.h) also count bytes: a successful
 * allocation adds its size to its call's statistics and is remembered in cuda_allocs by address
 * (or cuMemCreate handle) per process; a successful free looks it up there and credits the bytes
 * to the allocating call. A memory call nested in another (cudaMalloc reaching cuMemAlloc_v2
 * underneath) is left to the outer one, so an allocation is counted once.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define SW_DEFINE_SHARED_MAPS
#include "calls.bpf.h"

/*
 * Live allocations of traced processes. Preallocated (updated from uprobes); an exited
 * process's entries are deleted by user space (cuda_source.cpp). PyTorch's caching allocator
 * holds hundreds of segments, expandable segments a few thousand handles.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct cuda_alloc_key);
	__type(value, struct cuda_alloc);
} cuda_allocs SEC(".maps");

static __always_inline void mem_enter(struct pt_regs *ctx, struct call_frame *f, __u64 cookie,
				      __u32 op)
{
	__u64 args[8];
	__u64 extent[3] = {};

	sw_load_args(ctx, args);
	f->mem_op = op;
	switch (op) {
	case SW_MEM_ALLOC:
		f->aux_ptr = args[(cookie >> 32) & 7];
		f->aux_val = args[(cookie >> 36) & 7];
		break;
	case SW_MEM_ALLOC_PITCH: /* (out, size_t *pitch, width, height): pitch × height */
		f->aux_ptr = args[1];
		f->aux_ptr2 = args[2];
		f->aux_val = args[3] * args[4];
		f->aux_val2 = args[4];
		break;
	case SW_MEM_ALLOC_3D:
		/*
		 * (cudaPitchedPtr *out, cudaExtent extent): the 24-byte extent {width, height,
		 * depth} goes on the stack above the return address on x86-64, by reference in the
		 * second register on arm64. The pitch comes back in out->pitch (offset 8).
		 */
#if defined(__TARGET_ARCH_x86)
		bpf_probe_read_user(extent, sizeof(extent), (void *)(PT_REGS_SP(ctx) + 8));
#else
		bpf_probe_read_user(extent, sizeof(extent), (void *)args[2]);
#endif
		f->aux_ptr = args[1];
		f->aux_ptr2 = args[1] + 8;
		f->aux_val = extent[0] * extent[1] * extent[2];
		f->aux_val2 = extent[1] * extent[2];
		break;
	case SW_MEM_FREE:
		f->aux_ptr = args[(cookie >> 32) & 7];
		break;
	}
}

/* A memory call inside another one of the same thread: the outer one counts the bytes. */
static __always_inline bool nested_in_memory_call(struct thread_state *t)
{
	for (int i = 0; i < SW_MAX_DEPTH; i++) {
		if ((__u32)i < t->depth && t->frames[i].mem_op != SW_MEM_NONE)
			return true;
	}
	return false;
}

/* An allocation is gone: its bytes are credited to the call that made it. */
static __always_inline void credit_free(const struct cuda_alloc *rec)
{
	__u32 slot = rec->slot;
	struct call_stats *s = bpf_map_lookup_elem(&call_slots, &slot);

	if (s)
		__sync_fetch_and_add(&s->freed_bytes, rec->bytes);
}

static __always_inline void mem_alloc_exit(struct thread_state *t, struct call_frame *f,
					   struct call_stats *s, __u32 slot, __u64 cookie)
{
	struct cuda_alloc_key key = {};
	struct cuda_alloc rec = {}, *old;
	__u64 addr = 0, pitch = 0, bytes = f->aux_val;

	if (bpf_probe_read_user(&addr, sizeof(addr), (void *)f->aux_ptr) || !addr)
		return;
	if (f->mem_op != SW_MEM_ALLOC) {
		if (bpf_probe_read_user(&pitch, sizeof(pitch), (void *)f->aux_ptr2))
			return;
		bytes = pitch * f->aux_val2;
	}
	if (!bytes)
		return;
	__sync_fetch_and_add(&s->alloc_bytes, bytes);
	key.addr = addr;
	key.tgid = t->tgid;
	key.handle = (cookie >> 40) & 1;
	old = bpf_map_lookup_elem(&cuda_allocs, &key);
	if (old)
		credit_free(old); /* its free went unseen (an untraced library copy) */
	rec.bytes = bytes;
	rec.slot = slot;
	rec.start_tag = t->start_tag;
	if (bpf_map_update_elem(&cuda_allocs, &key, &rec, BPF_ANY))
		sw_count_lost(SW_LOST_ALLOC_MAP);
}

static __always_inline void mem_free_exit(struct thread_state *t, struct call_frame *f,
					  __u64 cookie)
{
	struct cuda_alloc_key key = {};
	struct cuda_alloc *rec;

	if (!f->aux_ptr)
		return;
	key.addr = f->aux_ptr;
	key.tgid = t->tgid;
	key.handle = (cookie >> 40) & 1;
	rec = bpf_map_lookup_elem(&cuda_allocs, &key);
	if (!rec)
		return; /* allocated before tracing began, or never by a traced call */
	credit_free(rec);
	bpf_map_delete_elem(&cuda_allocs, &key);
}

static __always_inline void mem_exit(struct pt_regs *ctx, struct thread_state *t,
				     struct call_frame *f, struct call_stats *s, __u32 slot,
				     __u64 cookie)
{
	int rc = (int)PT_REGS_RC(ctx);

	if (nested_in_memory_call(t))
		return;
	if (f->mem_op == SW_MEM_FREE) {
		if (rc == 0)
			mem_free_exit(t, f, cookie);
		return;
	}
	if (!s)
		return;
	if (rc == 0) {
		mem_alloc_exit(t, f, s, slot, cookie);
	} else if (rc == SW_CUDA_OUT_OF_MEMORY) {
		__sync_fetch_and_add(&s->alloc_failures, 1);
		s->failed_bytes = f->aux_val;
	}
}

static __always_inline int cuda_enter_body(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 op = (cookie >> 44) & 0xf;
	struct call_frame *f = sw_call_enter(ctx, (__u32)cookie);

	if (f && op != SW_MEM_NONE)
		mem_enter(ctx, f, cookie, op);
	return 0;
}

static __always_inline int cuda_exit_body(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct thread_state *t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	/* Most returns are the innermost open call's: found by stack pointer, no cookie read. */
	struct call_frame *f = sw_call_exit_innermost(ctx, t);
	struct call_stats *s;
	__u64 cookie = 0;
	__u32 slot = 0;

	if (!f) {
		cookie = bpf_get_attach_cookie(ctx);
		f = sw_call_exit(t, (__u32)cookie);
	}
	if (!f || !t)
		return 0;
	s = sw_record_call(ctx, t, f, now, &slot);
	if (f->mem_op != SW_MEM_NONE) {
		if (!cookie)
			cookie = bpf_get_attach_cookie(ctx);
		mem_exit(ctx, t, f, s, slot, cookie);
	}
	return 0;
}

/*
 * The *_multi copies are the same programs for multi-uprobe links (one link per library file
 * and direction, trace/attach.cpp): user space loads them with the expected attach type
 * BPF_TRACE_UPROBE_MULTI where the kernel has it (Linux 6.6), and does not load them elsewhere.
 */
SEC("uprobe")
int cuda_enter(struct pt_regs *ctx)
{
	return cuda_enter_body(ctx);
}

SEC("uretprobe")
int cuda_exit(struct pt_regs *ctx)
{
	return cuda_exit_body(ctx);
}

SEC("uprobe")
int cuda_enter_multi(struct pt_regs *ctx)
{
	return cuda_enter_body(ctx);
}

SEC("uretprobe")
int cuda_exit_multi(struct pt_regs *ctx)
{
	return cuda_exit_body(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
