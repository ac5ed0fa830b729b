/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Datagram flows of the targets and the silences on them. A flow is a target process's
 * datagram traffic with one peer: a UDP socket's (protocol 17), or a raw IP socket's with its
 * IP protocol (VRRP is 112). A flow starts at the first datagram the process sends to the peer
 * or receives from it; both directions are kept on it.
 *
 * A silence is found on the process's own receive calls, as TCP's is on the socket's own
 * counters: a datagram arriving more than gap_ns after the one before, on a flow that had a
 * steady stream (at least STEADY_PACKETS since its previous silence), is a network-gap record
 * with the datagrams the process sent to that peer meanwhile (it kept talking while it heard
 * nothing: the other side lost it, or the way back was cut). A flow still silent when a dump is
 * taken is read from the map by user space (tracerd/src/flows.rs), which also removes the
 * flows of ended processes and those idle for long, and writes every flow into the dump: since
 * when each direction has been steady (no pause longer than gap_ns), so that a peer's dump can
 * say it kept sending while the other end heard nothing.
 *
 * Cost: nothing on the kernel's packet path. A successful recvfrom, recvmsg, recvmmsg,
 * sendto, sendmsg or sendmmsg of a target that may hold a datagram socket (one it made or
 * inherited: targets.h) reads the fd's socket type; on a datagram socket it reads the peer's
 * address (the call's own sockaddr, else the connected socket's) and looks the flow up once
 * per datagram (at most FLOW_BATCH of a recvmmsg or sendmmsg). These calls of any other
 * process read a per-CPU flag; other syscalls pay a compare of the syscall number, socket()
 * a check of its arguments. Not seen: read(2) and write(2) on a
 * connected UDP socket. Not arrivals: reads of the socket's error queue (MSG_ERRQUEUE, with
 * IP_RECVERR: an ICMP error or a local one about a datagram the process sent, named by that
 * datagram's destination; knet reads them), which say the peer did not take a datagram.
 *
 * Bounded: flows_per_process flows a process and the `flows` map's size in all; a flow that
 * does not fit is counted (TRACERD_CNT_FLOWS_FULL).
 */
#ifndef TRACERD_TRACER_FLOWS_H
#define TRACERD_TRACER_FLOWS_H

#include "maps.h"
#include "output.h"
#include "targets.h"
#include "files.h"

#define SOCK_DGRAM 2
#define SOCK_RAW 3
#define SOCK_TYPE_MASK 0xf
#define NR_socket 41
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
#define NR_recvmmsg 299
#define NR_sendmmsg 307
#define MSG_ERRQUEUE 0x2000

/* Datagrams received since a flow's previous silence before the next silence is a gap: one
 * datagram gives no cadence (a request's answer, a lone query), two do. */
#define STEADY_PACKETS 2
/* The messages of one recvmmsg or sendmmsg looked at. */
#define FLOW_BATCH 8

static __always_inline bool datagram_call(long nr)
{
	return (unsigned long)(nr - NR_sendto) <= NR_recvmsg - NR_sendto || nr == NR_recvmmsg ||
	       nr == NR_sendmmsg;
}

/* flow_datagram's flags */
#define FLOW_RECEIVED 1
#define FLOW_RAW 2

/* The IPv4 or IPv6 datagram socket (UDP, raw IP) behind fd, its IP protocol into *protocol and
 * FLOW_RAW into *flags for a raw socket; NULL for any other file or socket. Typed loads where
 * the kernel has bpf_rdonly_cast. */
static __always_inline struct sock *datagram_sock(int fd, __u32 *protocol, __u32 *flags)
{
	struct file *f = fd_file(fd);
	struct socket *sock;
	struct sock *sk;
	umode_t mode;
	__u16 type;

	if (!f)
		return NULL;
	file_inode_mode(f, &mode);
	if ((mode & S_IFMT) != S_IFSOCK)
		return NULL;
	if (bpf_ksym_exists(bpf_rdonly_cast)) {
		sock = bpf_core_cast(f, struct file)->private_data;
		sk = sock ? bpf_core_cast(sock, struct socket)->sk : NULL;
		if (!sk)
			return NULL;
		type = bpf_core_cast(sk, struct sock)->sk_type;
	} else {
		sk = file_sock(f);
		if (!sk)
			return NULL;
		type = BPF_CORE_READ(sk, sk_type);
	}
	if (type != SOCK_DGRAM && type != SOCK_RAW)
		return NULL;
	switch (BPF_CORE_READ(sk, __sk_common.skc_family)) {
	case AF_INET:
	case AF_INET6:
		*protocol = BPF_CORE_READ(sk, sk_protocol);
		if (type == SOCK_RAW)
			*flags |= FLOW_RAW;
		return sk;
	}
	return NULL;
}

/* The peer a datagram came from or went to: the sockaddr the call names in user memory, else
 * (NULL: a connected socket) the socket's own peer. False when neither names one. */
static __always_inline bool datagram_peer(struct sock *sk, const void *uaddr, struct tracerd_addr *peer)
{
	struct sockaddr_in6 sa = {};

	__u64 a[2];

	if (!uaddr) {
		sock_endpoints(sk, NULL, peer);
		__builtin_memcpy(a, peer->addr, sizeof(a));
		return peer->family && (peer->port || a[0] || a[1]);
	}
	/* an IPv4 sockaddr may end where its page does */
	if (bpf_probe_read_user(&sa, sizeof(sa), uaddr) &&
	    bpf_probe_read_user(&sa, sizeof(struct sockaddr_in), uaddr))
		return false;
	peer->family = sa.sin6_family;
	peer->port = bpf_ntohs(sa.sin6_port);
	if (sa.sin6_family == AF_INET) {
		__builtin_memcpy(peer->addr, &((struct sockaddr_in *)&sa)->sin_addr, 4);
		return true;
	}
	if (sa.sin6_family == AF_INET6) {
		__builtin_memcpy(peer->addr, &sa.sin6_addr, 16);
		return true;
	}
	return false;
}

static __always_inline void emit_flow_gap(const struct tracerd_flow_key *key, const struct tracerd_flow *f,
					  __u64 now)
{
	struct tracerd_network_gap *e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_GAP);

	if (!e)
		return;
	e->h.ts_ns = f->last_rx_ns;
	e->h.pid = key->tgid;
	e->h.tid = key->tgid;
	e->h.kind = TRACERD_EV_NETWORK_GAP;
	e->h.reserved = 0;
	__builtin_memcpy(e->h.comm, f->comm, sizeof(e->h.comm));
	e->gap_ns = now - f->last_rx_ns;
	e->packets = f->packets;
	e->local = f->local;
	e->peer = key->peer;
	e->ongoing = 0;
	e->busy_packets = f->busy_packets;
	e->busy_ns = f->last_rx_ns - f->busy_ns;
	e->protocol = key->protocol;
	e->sent = f->sent_since_rx;
	e->sent_before = f->sent - f->sent_since_rx;
	submit(e);
}

/* A new flow of key's process with its first datagram (received or sent), when the process and
 * the map have room. */
static __always_inline void start_flow(const struct tracerd_flow_key *key, struct sock *sk, __u64 now,
				       bool received)
{
	struct tracerd_flow f = {};
	struct tracerd_addr peer;
	__u32 one = 1, *held = bpf_map_lookup_elem(&flow_counts, &key->tgid);
	long err;

	if (held && *held >= flows_per_process) {
		count(TRACERD_CNT_FLOWS_FULL);
		return;
	}
	if (received) {
		f.last_rx_ns = now;
		f.busy_ns = now;
		f.packets = 1;
		f.busy_packets = 1;
	} else {
		f.last_tx_ns = now;
		f.tx_busy_ns = now;
		f.sent = 1;
		f.sent_since_rx = 1;
	}
	bpf_get_current_comm(f.comm, sizeof(f.comm));
	sock_endpoints(sk, &f.local, &peer);
	err = bpf_map_update_elem(&flows, key, &f, BPF_NOEXIST);
	if (err) {
		/* started by another thread meanwhile (EEXIST), or the map is full */
		if (err != -EEXIST)
			count(TRACERD_CNT_FLOWS_FULL);
		return;
	}
	if (held)
		__sync_fetch_and_add(held, 1);
	else if (bpf_map_update_elem(&flow_counts, &key->tgid, &one, BPF_NOEXIST)) {
		held = bpf_map_lookup_elem(&flow_counts, &key->tgid);
		if (held)
			__sync_fetch_and_add(held, 1);
	}
}

/* A datagram of key's flow received now: ends a silence longer than gap_ns (a gap record when
 * the stream before it was steady) and starts the next busy stretch. Threads of one process
 * receiving on one flow at once may lose a count; nothing else. */
static __always_inline void flow_received(const struct tracerd_flow_key *key, struct sock *sk, __u64 now)
{
	struct tracerd_flow *f = bpf_map_lookup_elem(&flows, key);

	if (!f) {
		start_flow(key, sk, now, true);
		return;
	}
	if (now - f->last_rx_ns > gap_ns) {
		if (f->busy_packets >= STEADY_PACKETS)
			emit_flow_gap(key, f, now);
		f->busy_ns = now;
		f->busy_packets = 0;
	}
	f->busy_packets += 1;
	f->packets += 1;
	f->last_rx_ns = now;
	f->sent_since_rx = 0;
}

/* A datagram of key's flow sent now: a pause in sending longer than gap_ns starts the next steady
 * stretch of sends. */
static __always_inline void flow_sent(const struct tracerd_flow_key *key, struct sock *sk, __u64 now)
{
	struct tracerd_flow *f = bpf_map_lookup_elem(&flows, key);

	if (!f) {
		start_flow(key, sk, now, false);
		return;
	}
	if (now - f->last_tx_ns > gap_ns)
		f->tx_busy_ns = now;
	f->sent += 1;
	f->sent_since_rx += 1;
	f->last_tx_ns = now;
}

/* One datagram with the peer at uaddr (NULL: the socket's own). A subprogram: recvmmsg and
 * sendmmsg call it once per message. Returns 0. */
static __noinline int flow_datagram(struct tracerd_flow_key *key, struct sock *sk, const void *uaddr,
				    __u32 flags, __u64 now)
{
	__builtin_memset(&key->peer, 0, sizeof(key->peer));
	if (!datagram_peer(sk, uaddr, &key->peer))
		return 0;
	/* a raw socket has no ports: what a sender puts in sin_port names nothing */
	if (flags & FLOW_RAW)
		key->peer.port = 0;
	if (flags & FLOW_RECEIVED)
		flow_received(key, sk, now);
	else
		flow_sent(key, sk, now);
	return 0;
}

/* A successful socket(): one that made an IPv4 or IPv6 datagram socket (UDP, UDP-Lite, ping,
 * raw IP) puts its process among those whose send and recv calls are looked at (targets.h). */
static __always_inline int note_socket(struct pt_regs *regs)
{
	long family = regs->di, type = regs->si & SOCK_TYPE_MASK;
	__u32 tgid;

	if ((family != AF_INET && family != AF_INET6) || (type != SOCK_DGRAM && type != SOCK_RAW))
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (tgid == self_tgid)
		return 0;
	add_datagram_process(tgid);
	raise_cpu_runs_datagram_target(tgid);
	return 0;
}

/* A successful datagram call `nr` (datagram_call) of the current process that returned ret. */
static __always_inline int track_datagrams(struct pt_regs *regs, long nr, long ret)
{
	struct tracerd_flow_key key = {};
	__u32 flags = nr == NR_recvfrom || nr == NR_recvmsg || nr == NR_recvmmsg ? FLOW_RECEIVED : 0;
	struct mmsghdr *msgs;
	const void *uaddr = NULL;
	struct sock *sk;
	__u64 now;
	long i;

	/* the flags are recvmsg's third argument, recvfrom's and recvmmsg's fourth */
	if ((flags & FLOW_RECEIVED) && ((nr == NR_recvmsg ? regs->dx : regs->r10) & MSG_ERRQUEUE))
		return 0;
	key.tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_target(key.tgid))
		return 0;
	sk = datagram_sock((int)regs->di, &key.protocol, &flags);
	if (!sk)
		return 0;
	now = bpf_ktime_get_boot_ns();
	if (nr == NR_recvfrom || nr == NR_sendto)
		return flow_datagram(&key, sk, (const void *)regs->r8, flags, now);
	if (nr == NR_recvmsg || nr == NR_sendmsg) {
		bpf_probe_read_user(&uaddr, sizeof(uaddr), &((struct user_msghdr *)regs->si)->msg_name);
		return flow_datagram(&key, sk, uaddr, flags, now);
	}
	/* recvmmsg, sendmmsg: ret messages at regs->si */
	msgs = (struct mmsghdr *)regs->si;
	for (i = 0; i < FLOW_BATCH && i < ret; i++) {
		uaddr = NULL;
		bpf_probe_read_user(&uaddr, sizeof(uaddr), &msgs[i].msg_hdr.msg_name);
		flow_datagram(&key, sk, uaddr, flags, now);
	}
	return 0;
}

#endif
