#!/usr/bin/env python3
"""Run time of a process's BPF programs (kernel.bpf_stats_enabled=1), by program name.

prog_stats.py PID            prints {"name:id": {run_cnt, run_time_ns}} as JSON
prog_stats.py PID BEFORE     prints runs and ns per run of each program since BEFORE (that JSON)

Reads /proc/PID/fdinfo for the counters and takes each program's name with pidfd_getfd and
BPF_OBJ_GET_INFO_BY_FD (x86-64 syscall numbers), as bpftool would; no bpftool needed.
"""
import ctypes, json, os, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF, SYS_PIDFD_OPEN, SYS_PIDFD_GETFD, BPF_OBJ_GET_INFO_BY_FD = 321, 434, 438, 15

def prog_name(pidfd, fd):
    local = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
    if local < 0:
        return "?"
    try:
        info = ctypes.create_string_buffer(256)
        attr = struct.pack("IIQ", local, 256, ctypes.addressof(info)) + bytes(104)
        buf = ctypes.create_string_buffer(attr, len(attr))
        if libc.syscall(SYS_BPF, BPF_OBJ_GET_INFO_BY_FD, buf, len(attr)) != 0:
            return "?"
        return info.raw[64:80].split(b"\0")[0].decode(errors="replace")  # bpf_prog_info.name
    finally:
        os.close(local)

def read(pid):
    out = {}
    pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        info = dict(l.split(":", 1) for l in text.splitlines() if ":" in l)
        if link != "anon_inode:bpf-prog" or "run_cnt" not in info:
            continue
        name = prog_name(pidfd, int(fd)) if pidfd >= 0 else "?"
        out[f"{name}:{info.get('prog_id', fd).strip()}"] = {
            "run_cnt": int(info["run_cnt"]), "run_time_ns": int(info["run_time_ns"])}
    return out

now = read(int(sys.argv[1]))
if len(sys.argv) < 3:
    print(json.dumps(now)); sys.exit(0)
before = json.load(open(sys.argv[2]))
rows = []
for k, v in now.items():
    b = before.get(k, {"run_cnt": 0, "run_time_ns": 0})
    n = v["run_cnt"] - b["run_cnt"]
    if n > 0:
        rows.append((k, n, (v["run_time_ns"] - b["run_time_ns"]) / n))
for k, n, ns in sorted(rows, key=lambda r: -r[1]):
    print(f"prog {k}: {n} runs, {ns:.0f} ns/run")
