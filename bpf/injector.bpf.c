// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The reproducer's injector: tracks each fault's context (functions entered, in order,
 * since the previous fault) in the target's own thread and injects process faults right
 * there with bpf_send_signal, so nothing can run between "context reached" and "fault
 * injected". Partitions are switched on here and enforced by a TC program on the nodes'
 * veths; syscall faults are decided by the user-space seccomp supervisor, which reads the
 * same state.
 *
 * State is one u64, (current fault << 32) | (context probes seen), advanced with
 * compare-and-swap: faults fire strictly in schedule order.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "injector.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_ICMPV6 58
/* neighbour discovery: router solicitation .. redirect */
#define ND_FIRST_TYPE 133
#define ND_LAST_TYPE 137

const volatile __u32 nfaults = 0;

struct inj_fault _fault_anchor = {};
struct inj_partition _partition_anchor = {};
struct inj_event _event_anchor = {};
enum inj_kind _kind_anchor = 0;
enum inj_direction _direction_anchor = 0;
enum inj_event_kind _event_kind_anchor = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INJ_MAX_FAULTS);
	__type(key, __u32);
	__type(value, struct inj_fault);
} faults SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INJ_MAX_PARTITIONS);
	__type(key, __u32);
	__type(value, struct inj_partition);
} partitions SEC(".maps");

/* process -> node index; children inherit their parent's node */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} node_of SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

static __always_inline void report(__u32 kind, __u32 fault, __u32 probe, __u32 step)
{
	struct inj_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	__u64 id = bpf_get_current_pid_tgid();

	if (!e)
		return;
	e->ts_ns = bpf_ktime_get_boot_ns();
	e->kind = kind;
	e->fault = fault;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->probe = probe;
	e->step = step;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline void fire(struct inj_fault *f)
{
	if (f->kind == INJ_CRASH || f->kind == INJ_PAUSE) {
		bpf_send_signal(f->signal);
	} else if (f->kind == INJ_PARTITION) {
		__u32 slot = f->partition;
		struct inj_partition *p = bpf_map_lookup_elem(&partitions, &slot);
		if (p)
			p->until_ns = bpf_ktime_get_ns() + f->duration_ns;
	}
}

SEC("uprobe")
int context_probe(struct pt_regs *ctx)
{
	__u32 probe = bpf_get_attach_cookie(ctx);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 zero = 0, index, seen;
	__u32 *node = bpf_map_lookup_elem(&node_of, &tgid);
	__u64 *st, cur, next;
	struct inj_fault *f;

	if (!node)
		return 0;
	st = bpf_map_lookup_elem(&state, &zero);
	if (!st)
		return 0;
	cur = *st;
	index = cur >> 32;
	seen = (__u32)cur;
	if (index >= nfaults)
		return 0;
	f = bpf_map_lookup_elem(&faults, &index);
	if (!f || f->node != *node || seen >= f->nfuncs || seen >= INJ_MAX_FUNCS)
		return 0;
	if (f->probes[seen & (INJ_MAX_FUNCS - 1)] != probe)
		return 0;
	if (seen + 1 == f->nfuncs && f->kind != INJ_SYSCALL)
		next = (__u64)(index + 1) << 32; /* complete: fire and move to the next fault */
	else
		next = cur + 1;
	if (__sync_val_compare_and_swap(st, cur, next) != cur)
		return 0; /* another thread advanced first */
	report(INJ_EV_STEP, index, probe, seen + 1);
	if (next >> 32 != index) {
		fire(f);
		report(INJ_EV_FIRED, index, probe, seen + 1);
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(inherit_node, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 cpid = BPF_CORE_READ(child, pid);
	__u32 *node;

	if (cpid != BPF_CORE_READ(child, tgid))
		return 0;
	node = bpf_map_lookup_elem(&node_of, &ptgid);
	if (node) {
		__u32 n = *node;
		bpf_map_update_elem(&node_of, &cpid, &n, BPF_ANY);
	}
	return 0;
}

/* The thread that ends a process dropped signal->live to 0 (group_dead, an argument of this
 * tracepoint only since 6.16); a late sibling deleting again is harmless. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(forget_node, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	if (BPF_CORE_READ(p, signal, live.counter) == 0)
		bpf_map_delete_elem(&node_of, &tgid);
	return 0;
}

static __always_inline bool same_addr(const struct inj_addr *a, const struct inj_addr *b)
{
	return a->words[0] == b->words[0] && a->words[1] == b->words[1] &&
	       a->words[2] == b->words[2] && a->words[3] == b->words[3];
}

static __always_inline bool is_node(struct inj_partition *p, const struct inj_addr *a)
{
	return same_addr(&p->node_addrs[0], a) || same_addr(&p->node_addrs[1], a);
}

static __always_inline bool in_peers(struct inj_partition *p, const struct inj_addr *a)
{
	for (int i = 0; i < INJ_MAX_PEER_ADDRS; i++)
		if (i < p->npeer_addrs && same_addr(&p->peer_addrs[i], a))
			return true;
	return false;
}

/* The packet's IP source and destination, IPv4 ones mapped into IPv6; false for what no
 * partition drops: other protocols (ARP), and IPv6 neighbour discovery, ARP's counterpart,
 * which finds a peer's link address and is not the nodes' own traffic. Both families are
 * then cut alike, and the same way whether the kernel solicits from a node's address or
 * from its link-local one. */
static __always_inline bool ip_endpoints(struct __sk_buff *skb, struct inj_addr *src,
					 struct inj_addr *dst)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return false;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end)
			return false;
		src->words[0] = dst->words[0] = 0;
		src->words[1] = dst->words[1] = 0;
		src->words[2] = dst->words[2] = bpf_htonl(0xffff);
		src->words[3] = ip->saddr;
		dst->words[3] = ip->daddr;
		return true;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u8 *icmp_type = (void *)(ip6 + 1);

		if ((void *)(ip6 + 1) > end)
			return false;
		if (ip6->nexthdr == IPPROTO_ICMPV6 && (void *)(icmp_type + 1) <= end &&
		    *icmp_type >= ND_FIRST_TYPE && *icmp_type <= ND_LAST_TYPE)
			return false;
		__builtin_memcpy(src->words, ip6->saddr.in6_u.u6_addr32, 16);
		__builtin_memcpy(dst->words, ip6->daddr.in6_u.u6_addr32, 16);
		return true;
	}
	return false;
}

/* On the bridge side of every node's veth, ingress: sees every packet a node sends. */
SEC("tc")
int partition_filter(struct __sk_buff *skb)
{
	struct inj_addr src, dst;
	__u64 now;

	if (!ip_endpoints(skb, &src, &dst))
		return TC_ACT_OK;
	now = bpf_ktime_get_ns();
	for (__u32 i = 0; i < INJ_MAX_PARTITIONS; i++) {
		__u32 slot = i;
		struct inj_partition *p = bpf_map_lookup_elem(&partitions, &slot);
		if (!p || now >= p->until_ns)
			continue;
		if (p->direction != INJ_IN && is_node(p, &src) && in_peers(p, &dst))
			return TC_ACT_SHOT;
		if (p->direction != INJ_OUT && is_node(p, &dst) && in_peers(p, &src))
			return TC_ACT_SHOT;
	}
	return TC_ACT_OK;
}
