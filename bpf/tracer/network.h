/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * TCP connections of the targets and the silences on them. A connection is watched (an entry
 * in `conns`) from the connect or accept of a target that syscalls.h sees, or, without a
 * target filter, from every connection reaching ESTABLISHED; a silence longer than gap_ns
 * becomes a network-gap record, when the segment that ends it arrives or when the connection
 * closes still silent.
 *
 * Network gaps cost nothing per packet: no program runs on the receive path.
 * User space runs look_connections every few tens of milliseconds, which reads
 * each watched socket's own receive counter and time stamp (segs_in, the
 * jiffies of the last received ACK or data); the close hook does the same
 * look once more. A look visits the slots of conn_slots ever used, so its cost follows the
 * most connections watched at once, not the size of the map. Each look also keeps the
 * connection's busy stretch (since its last recorded silence: when it began, how many
 * segments it carried), which a gap record carries so that the diagnosis can compare a
 * silence with the connection's own traffic.
 */
#ifndef TRACERD_TRACER_NETWORK_H
#define TRACERD_TRACER_NETWORK_H

#include "maps.h"
#include "output.h"
#include "files.h"
#include "targets.h" /* EEXIST */

#define TCP_CLOSE 7

/* A free slot of conn_slots, the lowest never used first (fill_conn_slots stacked them);
 * false when all are taken. Raises conn_slots_used past it: by an add, since clang has no
 * atomic max, and an add of what this CPU saw missing can only overshoot, never undershoot. */
static __always_inline bool take_conn_slot(__u32 *slot)
{
	__u32 used;

	if (bpf_map_pop_elem(&free_conn_slots, slot))
		return false;
	used = conn_slots_used;
	if (*slot >= used)
		__sync_fetch_and_add(&conn_slots_used, *slot + 1 - used);
	return true;
}

/* The watched connection of socket `key`, or NULL. */
static __always_inline struct tracerd_conn *watched_conn(__u64 key)
{
	__u32 *slot = bpf_map_lookup_elem(&conns, &key);

	return slot ? bpf_map_lookup_elem(&conn_slots, slot) : NULL;
}

/* Start watching a connection (c carries pid and comm): its silence is measured from now.
 * Watched again, it keeps its slot. */
static __always_inline void watch_conn(struct sock *sk, struct tracerd_conn *c)
{
	__u64 key = (__u64)sk;
	struct tracerd_conn *dst;
	__u32 slot, *had;
	long err;

	sock_endpoints(sk, &c->local, &c->peer);
	if (!c->peer.family)
		return;
	c->last_ns = bpf_ktime_get_boot_ns();
	c->checked_ns = c->last_ns;
	c->segs_in = BPF_CORE_READ((struct tcp_sock *)sk, segs_in);
	c->rx_ack_j = BPF_CORE_READ((struct tcp_sock *)sk, rcv_tstamp);
	c->rx_data_j = BPF_CORE_READ((struct tcp_sock *)sk, inet_conn.icsk_ack.lrcvtime);
	c->packets = c->segs_in;
	c->busy_ns = c->last_ns;
	c->busy_packets = 0;
	c->reserved = 0;
	c->sock = key;
	had = bpf_map_lookup_elem(&conns, &key);
	if (had) {
		slot = *had;
		dst = bpf_map_lookup_elem(&conn_slots, &slot);
		if (dst)
			*dst = *c;
		return;
	}
	if (!take_conn_slot(&slot)) {
		count(TRACERD_CNT_CONNS_FULL);
		return;
	}
	dst = bpf_map_lookup_elem(&conn_slots, &slot);
	if (!dst)
		return;
	/* the slot first: a look may see it before conns does, never a slot conns gave back */
	*dst = *c;
	err = bpf_map_update_elem(&conns, &key, &slot, BPF_NOEXIST);
	if (err == 0)
		return;
	/* watched by another CPU meanwhile (EEXIST), or conns full */
	if (err != -EEXIST)
		count(TRACERD_CNT_CONNS_FULL);
	dst->sock = 0;
	bpf_map_push_elem(&free_conn_slots, &slot, 0);
}

/* Stop watching: the caller that removes the socket from conns frees its slot. */
static __always_inline void unwatch_conn(__u64 key)
{
	__u32 *had = bpf_map_lookup_elem(&conns, &key);
	struct tracerd_conn *c;
	__u32 slot;

	if (!had)
		return;
	slot = *had;
	if (bpf_map_delete_elem(&conns, &key))
		return;
	c = bpf_map_lookup_elem(&conn_slots, &slot);
	if (c)
		c->sock = 0;
	bpf_map_push_elem(&free_conn_slots, &slot, 0);
}

static __always_inline void emit_gap(struct tracerd_conn *c, __u64 now, __u32 ongoing)
{
	struct tracerd_network_gap *e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_GAP);

	if (!e)
		return;
	e->h.ts_ns = c->last_ns;
	e->h.pid = c->pid;
	e->h.tid = c->pid;
	e->h.kind = TRACERD_EV_NETWORK_GAP;
	e->h.reserved = 0;
	__builtin_memcpy(e->h.comm, c->comm, sizeof(e->h.comm));
	e->gap_ns = now - c->last_ns;
	e->packets = c->packets;
	e->local = c->local;
	e->peer = c->peer;
	e->ongoing = ongoing;
	e->busy_packets = c->busy_packets;
	e->busy_ns = c->last_ns > c->busy_ns ? c->last_ns - c->busy_ns : 0;
	e->protocol = IPPROTO_TCP;
	e->sent = 0;
	submit(e);
}

/* Nanoseconds per jiffy, measured since the first look (0 before a tick has passed). */
static __always_inline __u64 ns_per_jiffy(__u64 now_j)
{
	if (!calib_mono_ns || now_j <= calib_jiffies)
		return 0;
	return (bpf_ktime_get_ns() - calib_mono_ns) / (now_j - calib_jiffies);
}

/* Boot time of a jiffies time stamp of the socket. A segment that arrived after the look
 * read the jiffies (another CPU, a tick later) has a stamp ahead of now_j: it arrived now.
 * Unsigned, that difference wrapped to 2^32 - 1 jiffies, and the silence before the segment
 * came out at minus 198 days (a profile took it for a fault-free silence of 584 years). */
static __always_inline __u64 stamp_ns(__u32 stamp, __u64 now, __u64 now_j, __u64 per_jiffy)
{
	__s32 ago = (__s32)((__u32)now_j - stamp);
	__u64 back;

	if (ago <= 0)
		return now;
	back = (__u64)ago * per_jiffy;
	return back < now ? now - back : 0;
}

/* Reads the socket's own receive state into c. Segments that arrived since the previous
 * look end the silence before them; when it lasted longer than gap_ns it is recorded. The
 * first of them arrived after checked_ns, and at the latest when the earlier of the two
 * time stamps that moved says (exactly, when it is the only segment or a reply's ACK
 * follows the data that ended the silence). */
static __always_inline void look(struct sock *sk, struct tracerd_conn *c, __u64 now, __u64 now_j,
				 __u64 per_jiffy)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 segs, ack_j, data_j, fresh;
	__u64 first = (__u64)-1, last = c->checked_ns, t;

	/* typed loads where the kernel has bpf_rdonly_cast (6.2 on), a few times cheaper than
	 * helper copies; the time stamps only when segments arrived */
	if (bpf_ksym_exists(bpf_rdonly_cast))
		segs = bpf_core_cast(tp, struct tcp_sock)->segs_in;
	else
		segs = BPF_CORE_READ(tp, segs_in);
	fresh = segs - c->segs_in;
	if (!fresh) {
		c->checked_ns = now;
		return;
	}
	ack_j = BPF_CORE_READ(tp, rcv_tstamp);
	/* the fast path takes data without updating rcv_tstamp; lrcvtime has it */
	data_j = BPF_CORE_READ(tp, inet_conn.icsk_ack.lrcvtime);
	if (ack_j != c->rx_ack_j) {
		t = stamp_ns(ack_j, now, now_j, per_jiffy);
		first = t < first ? t : first;
		last = t > last ? t : last;
	}
	if (data_j != c->rx_data_j) {
		t = stamp_ns(data_j, now, now_j, per_jiffy);
		first = t < first ? t : first;
		last = t > last ? t : last;
	}
	if (first == (__u64)-1 || first < c->checked_ns)
		first = c->checked_ns;
	if (first > c->last_ns && first - c->last_ns > gap_ns) {
		emit_gap(c, first, 0);
		/* a new busy stretch: the diagnosis compares the next silence with it */
		c->busy_ns = first;
		c->busy_packets = 0;
	}
	c->busy_packets += fresh;
	c->last_ns = last;
	c->packets += fresh;
	c->segs_in = segs;
	c->rx_ack_j = ack_j;
	c->rx_data_j = data_j;
	c->checked_ns = now;
}

struct look_ctx {
	__u64 now;
	__u64 now_j;
	__u64 per_jiffy;
};

static long look_slot(__u32 slot, struct look_ctx *ctx)
{
	struct tracerd_conn *c = bpf_map_lookup_elem(&conn_slots, &slot);

	if (c && c->sock)
		look((struct sock *)c->sock, c, ctx->now, ctx->now_j, ctx->per_jiffy);
	return 0;
}

static long stack_conn_slot(__u32 i, void *ctx)
{
	__u32 slot = conn_capacity - 1 - i;

	bpf_map_push_elem(&free_conn_slots, &slot, 0);
	return 0;
}

/* Run once by user space before anything attaches: every slot free, slot 0 on top. */
SEC("raw_tp")
int fill_conn_slots(void *ctx)
{
	bpf_loop(conn_capacity, stack_conn_slot, NULL, 0);
	return 0;
}

/* Run by user space (BPF_PROG_TEST_RUN), never attached: one look at every watched socket.
 * It walks the slots ever used rather than the hash's buckets: for_each over a 16,384-entry
 * hash took 380 us a look here with nothing in it. */
SEC("raw_tp")
int look_connections(void *ctx)
{
	struct look_ctx lc = { .now_j = bpf_jiffies64() };
	__u32 used = conn_slots_used;

	if (!calib_mono_ns) {
		calib_jiffies = lc.now_j;
		calib_mono_ns = bpf_ktime_get_ns();
	}
	lc.per_jiffy = ns_per_jiffy(lc.now_j);
	lc.now = bpf_ktime_get_boot_ns();
	bpf_loop(used < conn_capacity ? used : conn_capacity, look_slot, &lc, 0);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_sock_state, struct sock *sk, const int oldstate, const int newstate)
{
	__u64 key = (__u64)sk;
	struct tracerd_conn *c;
	__u64 now, now_j;

	if (newstate == TCP_ESTABLISHED && !filter_targets) {
		struct tracerd_conn fresh = {};
		watch_conn(sk, &fresh);
		return 0;
	}
	if (newstate != TCP_CLOSE && newstate != TCP_ESTABLISHED)
		return 0;
	c = watched_conn(key);
	if (!c)
		return 0;
	now = bpf_ktime_get_boot_ns();
	if (newstate == TCP_ESTABLISHED) {
		/* a non-blocking connect completing: silence is counted from here */
		c->last_ns = now;
		c->busy_ns = now;
		return 0;
	}
	now_j = bpf_jiffies64();
	look(sk, c, now, now_j, ns_per_jiffy(now_j));
	/* A connection that dies silent never sees the segment that ends its gap; one that
	 * never got established (a refused or timed-out connect) was never silent: its
	 * connect failed, and that failure is the event. */
	if (oldstate != TCP_SYN_SENT && now - c->last_ns > gap_ns)
		emit_gap(c, now, 1);
	unwatch_conn(key);
	return 0;
}

#endif
