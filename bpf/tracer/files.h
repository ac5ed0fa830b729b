/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What an fd of the current task refers to, read through CO-RE: its struct file, whether that
 * is a socket and the socket's two endpoints; and the open ids of open_files entries (the
 * cwds, cwd.h). Shared by the syscall hooks, the cwd tracking and the connection watch.
 */
#ifndef TRACERD_TRACER_FILES_H
#define TRACERD_TRACER_FILES_H

#include "maps.h"
#include "fd_table.h"

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define S_IFREG 0100000

/* The current task's struct file of fd, NULL when fd is not open (fd_table.h). */
static __always_inline struct file *fd_file(int fd)
{
	return fd_table_file(fd, typed_fd_slot);
}

/*
 * The inode of file f (from fd_file) and its mode, into *mode. Where the kernel has
 * bpf_rdonly_cast (6.2 on) these are two typed loads; without it (6.1) two helper copies,
 * which on a server's every short socket read were most of what a request cost in BPF.
 * libbpf resolves the kfunc at load; on 6.1 the verifier drops the branch that calls it.
 */
static __always_inline struct inode *file_inode_mode(struct file *f, umode_t *mode)
{
	struct inode *inode;

	if (bpf_ksym_exists(bpf_rdonly_cast)) {
		inode = bpf_core_cast(f, struct file)->f_inode;
		*mode = inode ? inode->i_mode : 0;
		return inode;
	}
	inode = BPF_CORE_READ(f, f_inode);
	*mode = BPF_CORE_READ(inode, i_mode);
	return inode;
}

/* The inode's number and its filesystem's device, typed loads where file_inode_mode's are. */
static __always_inline void inode_ino_dev(struct inode *inode, __u64 *ino, __u32 *dev)
{
	if (bpf_ksym_exists(bpf_rdonly_cast)) {
		struct inode *i = bpf_core_cast(inode, struct inode);

		*ino = i->i_ino;
		*dev = i->i_sb->s_dev;
		return;
	}
	*ino = BPF_CORE_READ(inode, i_ino);
	*dev = BPF_CORE_READ(inode, i_sb, s_dev);
}

static __always_inline bool file_is_socket(struct file *f)
{
	umode_t mode = BPF_CORE_READ(f, f_inode, i_mode);
	return (mode & S_IFMT) == S_IFSOCK;
}

static __always_inline struct sock *file_sock(struct file *f)
{
	struct socket *sock = BPF_CORE_READ(f, private_data);
	return BPF_CORE_READ(sock, sk);
}

static __always_inline void sock_endpoints(struct sock *sk, struct tracerd_addr *local,
					   struct tracerd_addr *peer)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);

	peer->family = family;
	peer->port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (local) {
		local->family = family;
		local->port = BPF_CORE_READ(sk, __sk_common.skc_num);
	}
	if (family == AF_INET) {
		bpf_core_read(peer->addr, 4, &sk->__sk_common.skc_daddr);
		if (local)
			bpf_core_read(local->addr, 4, &sk->__sk_common.skc_rcv_saddr);
	} else if (family == AF_INET6) {
		bpf_core_read(peer->addr, 16, &sk->__sk_common.skc_v6_daddr);
		if (local)
			bpf_core_read(local->addr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
	} else {
		peer->family = 0;
		if (local)
			local->family = 0;
	}
}

static __always_inline __u64 next_open_id(struct scratch *s)
{
	/* per-CPU sequence tagged with the CPU: unique without a shared atomic */
	s->open_seq += 1;
	return (s->open_seq << 12) | (bpf_get_smp_processor_id() & 0xfff);
}

#endif
