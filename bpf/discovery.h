/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Library-mapping records of discovery.bpf.c, read by exporter/trace/discovery.cpp. */
#ifndef STALLWATCH_DISCOVERY_H
#define STALLWATCH_DISCOVERY_H

#include "stallwatch.h"

#define SW_LIB_NAME_LEN 32

/* An executable mapping of a file whose name starts with libcuda or libnccl. */
struct lib_map_event {
	__u64 ino;
	__u32 dev;
	__u32 tgid;
	char name[SW_LIB_NAME_LEN];
};

#endif /* STALLWATCH_DISCOVERY_H */
