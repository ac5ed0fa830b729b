/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The target set: which processes are traced. With filter_targets off every process but the
 * daemon is a target; with it on, a process is a target when it is in `targets`, in front of
 * which the per-slot counts of target_slots (maps.h) answer "no" for most processes without
 * touching the set's cold buckets. A process enters through register_target (user space's
 * seeds), a fork of a target, a matching exec or a move into a target cgroup (process.h), and
 * leaves at its exit. Beside it, the processes that may hold a datagram socket.
 */
#ifndef TRACERD_TRACER_TARGETS_H
#define TRACERD_TRACER_TARGETS_H

#include "maps.h"
#include "output.h"

#define EEXIST 17

/* Whether tgid may be a target: false for most non-targets without touching the set (its
 * slot holds none); true for every target. */
static __always_inline bool maybe_target(__u32 tgid)
{
	if (!filter_targets)
		return tgid != self_tgid;
	return target_slots[tgid & (TARGET_SLOTS - 1)] != 0;
}

static __always_inline bool is_target(__u32 tgid)
{
	if (!maybe_target(tgid))
		return false;
	return !filter_targets || bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline void forget_target(__u32 tgid)
{
	if (bpf_map_delete_elem(&targets, &tgid) == 0)
		/* an add of -1: clang without -mcpu=v3 has no atomic subtract for BPF */
		__sync_fetch_and_add(&target_slots[tgid & (TARGET_SLOTS - 1)], -1);
}

/*
 * Which processes may hold a datagram socket (datagram_procs, maps.h): flows.h looks at a
 * target's send and recv calls only in those, so a target that talks TCP over send/recv does
 * not pay the socket lookup (about 80 ns a call on the benchmark machine). A process enters
 * where it makes such a socket (flows.h, note_socket), at a fork of one (or of a process that
 * shares its fd table with the child: either one's socket is the other's), and from user
 * space's scan at start; it leaves at its end. An exec keeps it (fds outlive exec). Not seen:
 * a datagram socket received from another process (SCM_RIGHTS, pidfd_getfd) by one that
 * never made nor inherited one.
 */
static __always_inline bool may_hold_datagrams(__u32 tgid)
{
	return datagram_procs_full || datagram_slots[tgid & (TARGET_SLOTS - 1)] != 0;
}

static __always_inline bool holds_datagrams(__u32 tgid)
{
	if (datagram_procs_full)
		return true;
	return may_hold_datagrams(tgid) && bpf_map_lookup_elem(&datagram_procs, &tgid) != NULL;
}

static __always_inline void add_datagram_process(__u32 tgid)
{
	__u8 one = 1;
	long err = bpf_map_update_elem(&datagram_procs, &tgid, &one, BPF_NOEXIST);

	if (!err)
		__sync_fetch_and_add(&datagram_slots[tgid & (TARGET_SLOTS - 1)], 1);
	else if (err != -EEXIST)
		datagram_procs_full = 1;
}

static __always_inline void forget_datagram_process(__u32 tgid)
{
	if (bpf_map_delete_elem(&datagram_procs, &tgid) == 0)
		__sync_fetch_and_add(&datagram_slots[tgid & (TARGET_SLOTS - 1)], -1);
}

/*
 * Whether the task this CPU runs may be a target that holds a datagram socket, without a
 * helper call: a per-CPU flag that sched_switch sets for the task it switches in, and that
 * is raised on the CPU where a process becomes a target or a datagram holder (an exec into a
 * target, a socket() runs there). It is false for such a task only while one that user
 * space added has not yet been switched in again (docs/tracerd.md). The per-CPU array's
 * lookup is inlined from 6.10 on; before, it is a helper call, as bpf_get_current_pid_tgid
 * was. For the calls every process makes and a target rarely needs (send() and recv() on
 * any socket, for the datagram flows).
 */
static __always_inline bool cpu_may_run_datagram_target(void)
{
	__u32 zero = 0, *flag = bpf_map_lookup_elem(&cpu_runs_datagram_target, &zero);

	return !flag || *flag;
}

static __always_inline void set_cpu_runs_datagram_target(__u32 may)
{
	__u32 zero = 0, *flag = bpf_map_lookup_elem(&cpu_runs_datagram_target, &zero);

	if (flag && *flag != may)
		*flag = may;
}

/* The flag for tgid's task, switched in now. */
static __always_inline bool may_be_datagram_target(__u32 tgid)
{
	return maybe_target(tgid) && may_hold_datagrams(tgid);
}

/* Only ever raised here: the next switch sets it exactly. */
static __always_inline void raise_cpu_runs_datagram_target(__u32 tgid)
{
	if (may_be_datagram_target(tgid))
		set_cpu_runs_datagram_target(1);
}

/* Returns 1 when the set is full (counted), 0 when tgid is (now or already) a target. */
static __always_inline int add_target(__u32 tgid)
{
	__u8 one = 1;
	long err = bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST);

	if (!err) {
		__sync_fetch_and_add(&target_slots[tgid & (TARGET_SLOTS - 1)], 1);
		raise_cpu_runs_datagram_target(tgid);
		return 0;
	}
	if (err == -EEXIST)
		return 0;
	count(TRACERD_CNT_TARGETS_FULL);
	return 1;
}

/* Deepest cgroup level looked at; deeper targets are refused by user space. */
#define MAX_CGROUP_LEVEL 32

/*
 * Whether `p`'s cgroup v2 (the default hierarchy's cgroup of its css_set) is in one of the
 * target_cgroups subtrees: its ancestor at each level where a target is, by id. cgroup's
 * ancestors[] (one pointer per level, the cgroup itself last) exists since 6.0, so the
 * walk reads at most cgroup_level_max - cgroup_level_min + 1 pointers and never the parent
 * chain. Run at exec and at a move between cgroups, never per syscall.
 */
static __always_inline bool in_target_cgroup(struct task_struct *p)
{
	struct cgroup *cg = BPF_CORE_READ(p, cgroups, dfl_cgrp);
	unsigned long ancestors = bpf_core_field_offset(struct cgroup, ancestors);
	struct cgroup *up;
	__u32 level, i, l;
	__u64 id;

	if (!cg)
		return false;
	level = BPF_CORE_READ(cg, level);
	for (i = 0; i < MAX_CGROUP_LEVEL; i++) {
		l = cgroup_level_min + i;
		if (l > cgroup_level_max || l > level)
			break;
		up = NULL;
		if (bpf_probe_read_kernel(&up, sizeof(up), (void *)cg + ancestors + l * sizeof(up)) || !up)
			continue;
		id = BPF_CORE_READ(up, kn, id);
		if (bpf_map_lookup_elem(&target_cgroups, &id))
			return true;
	}
	return false;
}

/* Run by user space (BPF_PROG_TEST_RUN with the tgid as the first argument), never
 * attached: the daemon's and the reproducer's way into the target set. */
SEC("raw_tp")
int register_target(__u64 *args)
{
	return add_target((__u32)args[0]);
}

/* Run by user space like register_target, for each process its scan at start found holding
 * a datagram socket. */
SEC("raw_tp")
int register_datagram_process(__u64 *args)
{
	add_datagram_process((__u32)args[0]);
	return 0;
}

#endif
