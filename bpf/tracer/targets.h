/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The target set: which processes are traced. With filter_targets off every process but the
 * daemon is a target; with it on, a process is a target when it is in `targets`, in front of
 * which the per-slot counts of target_slots (maps.h) answer "no" for most processes without
 * touching the set's cold buckets. A process enters through register_target (user space's
 * seeds), a fork of a target or a matching exec (process.h), and leaves at its exit.
 */
#ifndef TRACERD_TRACER_TARGETS_H
#define TRACERD_TRACER_TARGETS_H

#include "maps.h"
#include "output.h"

#define EEXIST 17

static __always_inline bool is_target(__u32 tgid)
{
	if (!filter_targets)
		return tgid != self_tgid;
	if (!target_slots[tgid & (TARGET_SLOTS - 1)])
		return false;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline void forget_target(__u32 tgid)
{
	if (bpf_map_delete_elem(&targets, &tgid) == 0)
		/* an add of -1: clang without -mcpu=v3 has no atomic subtract for BPF */
		__sync_fetch_and_add(&target_slots[tgid & (TARGET_SLOTS - 1)], -1);
}

/* Returns 1 when the set is full (counted), 0 when tgid is (now or already) a target. */
static __always_inline int add_target(__u32 tgid)
{
	__u8 one = 1;
	long err = bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST);

	if (!err) {
		__sync_fetch_and_add(&target_slots[tgid & (TARGET_SLOTS - 1)], 1);
		return 0;
	}
	if (err == -EEXIST)
		return 0;
	count(TRACERD_CNT_TARGETS_FULL);
	return 1;
}

/* Run by user space (BPF_PROG_TEST_RUN with the tgid as the first argument), never
 * attached: the daemon's and the reproducer's way into the target set. */
SEC("raw_tp")
int register_target(__u64 *args)
{
	return add_target((__u32)args[0]);
}

#endif
