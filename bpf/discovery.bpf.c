// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Library discovery: every executable file mapping whose file name starts with "libcuda"
 * (libcuda, libcudart) or "libnccl" is reported to user space, which attaches the call
 * probes to that file before the process gets to its first call. The syscall tracepoint
 * runs only on mmap(2), so the rest of the system pays nothing; kprobes and fentry are not
 * needed (and are not available on every kernel, e.g. under lockdown).
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "discovery.h"
#include "maps.bpf.h"

#define SW_PROT_EXEC 0x4

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} lib_maps SEC(".maps");

static __always_inline bool has_prefix(const char *name, const char *prefix, int len)
{
	for (int i = 0; i < len; i++)
		if (name[i] != prefix[i])
			return false;
	return true;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int discovery_mmap(struct trace_event_raw_sys_enter *ctx)
{
	long fd = (long)ctx->args[4];
	struct task_struct *task;
	struct file **fds, *file;
	struct lib_map_event *e;
	char name[SW_LIB_NAME_LEN];
	const unsigned char *dname;
	unsigned int max_fds;

	if (fd < 0 || !(ctx->args[2] & SW_PROT_EXEC))
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	max_fds = BPF_CORE_READ(task, files, fdt, max_fds);
	if ((unsigned long)fd >= max_fds)
		return 0;
	fds = BPF_CORE_READ(task, files, fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return 0;
	dname = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (bpf_probe_read_kernel_str(name, sizeof(name), dname) < 0)
		return 0;
	if (!has_prefix(name, "libcuda", 7) && !has_prefix(name, "libnccl", 7))
		return 0;

	e = bpf_ringbuf_reserve(&lib_maps, sizeof(*e), 0);
	if (!e) {
		sw_count_lost(SW_LOST_DISCOVERY_RINGBUF);
		return 0;
	}
	e->ino = BPF_CORE_READ(file, f_inode, i_ino);
	e->dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	e->tgid = bpf_get_current_pid_tgid() >> 32;
	__builtin_memcpy(e->name, name, sizeof(name));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
