/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Records shared by the injector's BPF programs (injector.bpf.c) and the reproducer
 * (reproducer/src/injector.rs, via the generated skeleton): the schedule as loaded into
 * maps, and the events the injector reports.
 */
#ifndef REPRODUCER_INJECTOR_H
#define REPRODUCER_INJECTOR_H

#define INJ_MAX_FAULTS 64
#define INJ_MAX_FUNCS 8
#define INJ_MAX_PARTITIONS 8
#define INJ_MAX_PEERS 8
#define INJ_NODE_ADDRS 2 /* a node has one address per family (dual-stack: both) */
#define INJ_MAX_PEER_ADDRS (INJ_MAX_PEERS * INJ_NODE_ADDRS)

enum inj_kind {
	INJ_SYSCALL = 1,
	INJ_CRASH = 2,
	INJ_PAUSE = 3,
	INJ_PARTITION = 4,
};

enum inj_direction {
	INJ_BOTH = 0,
	INJ_OUT = 1,
	INJ_IN = 2,
};

enum inj_event_kind {
	INJ_EV_FIRED = 1,   /* a fault was injected by a probe */
	INJ_EV_STEP = 2,    /* a context function of the current fault was entered */
};

/* One fault of the schedule, at index = its position in the schedule. */
struct inj_fault {
	__u32 kind;      /* enum inj_kind */
	__u32 node;      /* node index in the scenario */
	__u32 signal;    /* crash / pause */
	__u32 nfuncs;    /* context probes to see, in order, since the previous fault */
	__u32 probes[INJ_MAX_FUNCS]; /* probe ids (uprobe attach cookies) */
	__u64 duration_ns;           /* partition */
	__u32 partition;             /* slot in `partitions` */
	__u32 reserved;
};

/* An IP address in network order as IPv6 writes it; an IPv4 address as IPv4-mapped IPv6
 * (::ffff:a.b.c.d), so that one comparison serves both families. */
struct inj_addr {
	__u32 words[4];
};

/* A partition rule; active while CLOCK_MONOTONIC < until_ns. A node with one address
 * repeats it in node_addrs[1]. */
struct inj_partition {
	__u64 until_ns;
	__u32 direction; /* enum inj_direction */
	__u32 npeer_addrs;
	struct inj_addr node_addrs[INJ_NODE_ADDRS];
	struct inj_addr peer_addrs[INJ_MAX_PEER_ADDRS]; /* every address of every peer */
};

struct inj_event {
	__u64 ts_ns;   /* CLOCK_BOOTTIME */
	__u32 kind;    /* enum inj_event_kind */
	__u32 fault;   /* index of the fault */
	__u32 pid;
	__u32 tid;
	__u32 probe;
	__u32 step;    /* context functions seen so far (after this one) */
};

#endif
