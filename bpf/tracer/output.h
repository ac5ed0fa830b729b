/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * How records leave the kernel: reserve a record in the `events` ring buffer (a full buffer is
 * counted per kind of record in `counters`, never waited for), fill the header every record
 * starts with, and submit it, waking the reader only when a batch of wakeup_bytes is waiting.
 * count() is also how every other header reports what it had to drop.
 */
#ifndef TRACERD_TRACER_OUTPUT_H
#define TRACERD_TRACER_OUTPUT_H

#include "maps.h"

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		*c += 1;
}

static __always_inline void *reserve(__u64 size, __u32 drop_counter)
{
	void *e = bpf_ringbuf_reserve(&events, size, 0);
	if (!e)
		count(drop_counter);
	return e;
}

/* Wake the reader only when a batch is waiting: saves a wakeup per event. */
static __always_inline void submit(void *e)
{
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

static __always_inline void fill_header(struct tracerd_header *h, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	h->ts_ns = bpf_ktime_get_boot_ns();
	h->pid = id >> 32;
	h->tid = (__u32)id;
	h->kind = kind;
	h->reserved = 0;
	bpf_get_current_comm(h->comm, sizeof(h->comm));
}

#endif
