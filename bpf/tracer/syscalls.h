/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The end of every syscall of interest: failed calls of the targets (with the path, fd or
 * address argument that says what failed, per syscall_args; an fd named from the task's fd
 * table by fdnames.h), short reads and writes of regular files, and the successful calls that
 * keep the connection watch (connects, accepts: network.h), the datagram flows (sends and
 * receives: flows.h) and the cwd (chdir, fchdir: cwd.h) current; with count_syscalls, a count of every call. One sys_exit tracepoint program or one
 * fexit program per syscall of fexit_syscalls.h, both through syscall_exit.
 *
 * Hot paths return as early as they can: sys_exit looks at the return value
 * and the syscall number before anything else, and only failures (plus the
 * few successful calls that maintain the connection watch and the cwd) go on to the target
 * check. A successful open costs one compare once no target is starting (config_opens.h
 * records what targets read under /etc at their start): the file behind an fd is named only
 * when a call on it fails. Short reads and writes of regular files are the other successful calls
 * looked at: read/write/pread64/pwrite64 returning less than their count (in the
 * saved argument registers, no copy) go on to the target check and the fd's inode.
 * Strings are copied only on the failure path (the path argument, the fd's name) and after
 * a chdir (the new cwd, cwd.h).
 */
#ifndef TRACERD_TRACER_SYSCALLS_H
#define TRACERD_TRACER_SYSCALLS_H

#include "maps.h"
#include "output.h"
#include "targets.h"
#include "files.h"
#include "network.h"
#include "flows.h"
#include "cwd.h"
#include "fdnames.h"
#include "config_opens.h"

#define AT_FDCWD -100
#define SOCK_STREAM 1
#define EINPROGRESS 115

/* x86_64 syscall numbers of the successful calls that feed the connection watch and the
 * cwd, and of the reads and writes whose short results are recorded. */
#define NR_read 0
#define NR_write 1
#define NR_pread64 17
#define NR_pwrite64 18
#define NR_connect 42
#define NR_accept 43
#define NR_accept4 288
#define NR_chdir 80
#define NR_fchdir 81

/* The most a read or write transfers in one call (the kernel's MAX_RW_COUNT, INT_MAX
 * rounded down to a page): asking for more is not a short result. */
#define MAX_RW_COUNT 0x7ffff000UL

/* Pseudo filesystems whose regular files report a size they do not hold (sysfs and
 * cgroup attributes say 4096): a short read there is how they are read. */
#define PROC_SUPER_MAGIC 0x9fa0
#define SYSFS_MAGIC 0x62656572
#define CGROUP_SUPER_MAGIC 0x27e0eb
#define CGROUP2_SUPER_MAGIC 0x63677270
#define DEBUGFS_MAGIC 0x64626720
#define TRACEFS_MAGIC 0x74726163
#define SECURITYFS_MAGIC 0x73636673
#define CONFIGFS_MAGIC 0x62656570

static __always_inline unsigned long syscall_arg(struct pt_regs *regs, __u32 index)
{
	switch (index) {
	case 0: return regs->di;
	case 1: return regs->si;
	case 2: return regs->dx;
	case 3: return regs->r10;
	case 4: return regs->r8;
	default: return regs->r9;
	}
}

/* Start watching a TCP connection that a target process connected or accepted. */
static __always_inline int track_socket(long fd)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tracerd_conn c = {};
	struct file *f;
	struct sock *sk;

	if (!is_target(tgid))
		return 0;
	f = fd_file(fd);
	if (!f || !file_is_socket(f))
		return 0;
	sk = file_sock(f);
	if (!sk || BPF_CORE_READ(sk, sk_type) != SOCK_STREAM)
		return 0;
	c.pid = tgid;
	bpf_get_current_comm(c.comm, sizeof(c.comm));
	/* A non-blocking connect refused on loopback is closed before connect returns: its
	 * close was seen before this entry existed, and it would stay "silent" until the dump. */
	if (BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_CLOSE)
		return 0;
	watch_conn(sk, &c);
	if (BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_CLOSE)
		unwatch_conn((__u64)sk); /* closed meanwhile */
	return 0;
}

static __always_inline void read_sockaddr(struct tracerd_syscall_failure *e, const void *uaddr)
{
	__u16 family = 0;

	bpf_probe_read_user(&family, sizeof(family), uaddr);
	if (family == AF_INET) {
		struct sockaddr_in sin = {};
		bpf_probe_read_user(&sin, sizeof(sin), uaddr);
		e->peer.family = AF_INET;
		e->peer.port = bpf_ntohs(sin.sin_port);
		__builtin_memcpy(e->peer.addr, &sin.sin_addr, 4);
	} else if (family == AF_INET6) {
		struct sockaddr_in6 sin6 = {};
		bpf_probe_read_user(&sin6, sizeof(sin6), uaddr);
		e->peer.family = AF_INET6;
		e->peer.port = bpf_ntohs(sin6.sin6_port);
		__builtin_memcpy(e->peer.addr, &sin6.sin6_addr, 16);
	} else if (family == AF_UNIX) {
		long n = bpf_probe_read_user_str(e->path, sizeof(e->path),
						 (const char *)uaddr + 2);
		e->path_len = n > 0 ? n : 0;
	}
}

/* A failed call on an fd: the file behind it, named now (fdnames.h). An fd that is not open
 * has nothing to name. */
static __always_inline void describe_fd(struct tracerd_syscall_failure *e, int fd)
{
	struct file *f = fd_file(fd);

	e->fd = fd;
	if (f)
		name_fd_file(e, f);
}

/* A failed call of a target. */
static __always_inline int record_target_failure(struct pt_regs *regs, long nr, long ret, __u32 tgid)
{
	struct tracerd_syscall_failure *e;
	struct tracerd_syscall_arg *arg;
	__u32 key = nr;
	long n;

	if (nr == NR_connect && ret == -EINPROGRESS)
		track_socket((int)regs->di);
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_SYSCALL);
	if (!e)
		return 0;
	fill_header(&e->h, TRACERD_EV_SYSCALL_FAILURE);
	e->ret = ret;
	e->requested = 0;
	e->syscall_nr = nr;
	e->fd = -1;
	e->open_id = 0;
	e->path_len = 0;
	__builtin_memset(&e->peer, 0, sizeof(e->peer));

	arg = bpf_map_lookup_elem(&syscall_args, &key);
	if (arg) {
		switch (arg->kind) {
		case TRACERD_ARG_PATH_AT:
		case TRACERD_ARG_PATH: {
			int dirfd = arg->kind == TRACERD_ARG_PATH_AT ? (int)regs->di : AT_FDCWD;
			struct file *dir;

			n = bpf_probe_read_user_str(e->path, sizeof(e->path),
						    (const char *)syscall_arg(regs, arg->index));
			if (n > 0)
				e->path_len = n;
			else
				count(TRACERD_CNT_PATH_UNREADABLE);
			if (dirfd != AT_FDCWD)
				e->fd = dirfd;
			if (n <= 0 || e->path[0] == '/')
				break;
			/* relative to a dirfd: made absolute here; to the cwd: name the cwd's
			 * entry when the process changed it */
			dir = dirfd != AT_FDCWD ? fd_file(dirfd) : NULL;
			if (dir)
				join_dir(e, dir, n);
			else if (dirfd == AT_FDCWD)
				e->open_id = cwd_open_id(tgid);
			break;
		}
		case TRACERD_ARG_FD:
			describe_fd(e, (int)syscall_arg(regs, arg->index));
			break;
		case TRACERD_ARG_SOCKADDR:
			e->fd = (int)regs->di;
			read_sockaddr(e, (const void *)syscall_arg(regs, arg->index));
			break;
		}
	}
	submit(e);
	return 0;
}

static __always_inline bool pseudo_fs(unsigned long magic)
{
	return magic == PROC_SUPER_MAGIC || magic == SYSFS_MAGIC || magic == CGROUP_SUPER_MAGIC ||
	       magic == CGROUP2_SUPER_MAGIC || magic == DEBUGFS_MAGIC || magic == TRACEFS_MAGIC ||
	       magic == SECURITYFS_MAGIC || magic == CONFIGFS_MAGIC;
}

/*
 * A read/write/pread64/pwrite64 of a target that did ret bytes, fewer than the `want` it asked
 * for: recorded when the fd is a regular file. A read that stops at the end of the file is how
 * files end, not a short read: only reads that stop before the file's size (as the inode says
 * after the call) are recorded.
 */
static __always_inline int record_short_io(struct pt_regs *regs, long nr, long ret, unsigned long want)
{
	bool reading = nr == NR_read || nr == NR_pread64;
	struct tracerd_syscall_failure *e;
	struct inode *inode;
	struct file *f;
	umode_t mode;
	__s64 end;
	int fd;

	/* a target's short reads are mostly of sockets (a server's every request): the file
	 * type is checked before the target set's cold buckets are */
	fd = (int)regs->di;
	f = fd_file(fd);
	if (!f)
		return 0;
	inode = file_inode_mode(f, &mode);
	if ((mode & S_IFMT) != S_IFREG || !is_target(bpf_get_current_pid_tgid() >> 32))
		return 0;
	if (reading) {
		end = nr == NR_pread64 ? (__s64)regs->r10 + ret : BPF_CORE_READ(f, f_pos);
		if (end >= BPF_CORE_READ(inode, i_size) || pseudo_fs(BPF_CORE_READ(inode, i_sb, s_magic)))
			return 0;
	}
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_SYSCALL);
	if (!e)
		return 0;
	fill_header(&e->h, TRACERD_EV_SYSCALL_FAILURE);
	e->ret = ret;
	e->requested = want;
	e->syscall_nr = nr;
	e->fd = fd;
	e->open_id = 0;
	e->path_len = 0;
	__builtin_memset(&e->peer, 0, sizeof(e->peer));
	name_fd_file(e, f);
	submit(e);
	return 0;
}

/* A subprogram (see syscall_exit); returns 0. */
static __noinline int record_short_io_shared(struct pt_regs *regs, long nr, long ret, unsigned long want)
{
	return record_short_io(regs, nr, ret, want);
}

/* A read/write/pread64/pwrite64 that returned ret >= 0 bytes: looked at further when it did
 * less than it asked (count in rdx) in a process that may be a target; a read returning 0 is
 * end of file by definition. */
static __always_inline int check_short_io(struct pt_regs *regs, long nr, long ret)
{
	unsigned long want = regs->dx;

	if (want > MAX_RW_COUNT)
		want = MAX_RW_COUNT;
	if ((unsigned long)ret >= want || ((nr == NR_read || nr == NR_pread64) && ret == 0))
		return 0;
	if (!maybe_target(bpf_get_current_pid_tgid() >> 32))
		return 0;
	return record_short_io_shared(regs, nr, ret, want);
}

/* One more call of syscall `nr` by the current process (count_syscalls only). A subprogram,
 * not inlined: inlined, clang gave the fexit programs that do not inline check_short_io
 * (readv, lseek, open, ...) a 288-byte frame of their own, which with the failure
 * subprogram's and the path walk callback's frames passed 6.1's 512-byte limit for a chain of
 * calls. Returns 0 (a subprogram must set r0). */
static __noinline int count_syscall(long nr)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tracerd_syscall_key key = { .tgid = tgid, .nr = nr };
	__u64 one = 1, *c;

	if (nr < 0 || !is_target(tgid))
		return 0;
	c = bpf_map_lookup_elem(&syscall_counts, &key);
	if (c) {
		__sync_fetch_and_add(c, 1);
		return 0;
	}
	if (bpf_map_update_elem(&syscall_counts, &key, &one, BPF_NOEXIST) == 0)
		return 0;
	/* another CPU may have inserted the pair meanwhile; otherwise the map is full */
	c = bpf_map_lookup_elem(&syscall_counts, &key);
	if (c)
		__sync_fetch_and_add(c, 1);
	else
		count(TRACERD_CNT_SYSCALL_COUNTS_FULL);
	return 0;
}

/*
 * Every program calls one shared copy (a BPF subprogram) of what syscalls do rarely (record a
 * target's failure or short I/O, track a connection, a cwd, a configuration file): inlined into
 * each of more than a hundred fexit programs, these made the BPF object 3 MB, which the daemon
 * maps and parses at start (4 MiB of its memory); inlined into the sys_exit program, they
 * spread the few instructions every call runs over its whole program (about 2,400 BPF
 * instructions before; 4 bytes of stack and a few dozen instructions on the way now).
 */
static __noinline int track_socket_shared(long fd)
{
	return track_socket(fd);
}

static __noinline int track_datagrams_shared(struct pt_regs *regs, long nr, long ret)
{
	return track_datagrams(regs, nr, ret);
}

static __noinline int track_cwd_shared(void)
{
	return track_cwd();
}

static __noinline int record_target_failure_shared(struct pt_regs *regs, long nr, long ret, __u32 tgid)
{
	return record_target_failure(regs, nr, ret, tgid);
}

/* The end of syscall `nr` with result `ret`: keep the connection watch and the cwd current
 * after successful calls, record failures. Shared by the sys_exit tracepoint (every syscall) and
 * the fexit programs (one per hooked syscall, where `nr` is a constant and the compiler
 * drops the branches of other syscalls). */
static __always_inline int syscall_exit(struct pt_regs *regs, long nr, long ret)
{
	__u32 tgid;

	if (count_syscalls)
		count_syscall(nr);
	if (ret >= 0) {
		if (nr == NR_accept || nr == NR_accept4 || nr == NR_connect)
			return track_socket_shared(nr == NR_connect ? (int)regs->di : ret);
		if (nr == NR_chdir || nr == NR_fchdir)
			return track_cwd_shared();
		if (nr == NR_open || nr == NR_openat || nr == NR_openat2)
			return check_config_open(regs, nr, ret);
		if ((unsigned long)nr <= NR_write || nr == NR_pread64 || nr == NR_pwrite64)
			return check_short_io(regs, nr, ret);
		if (nr == NR_socket)
			return note_socket(regs);
		/* every process's send() and recv() come here, on any socket: all but a target
		 * that may hold a datagram socket leave at the CPU's flag, before any call (a
		 * helper or the subprogram cost each 18-28 ns of BPF on the benchmark machine,
		 * the socket lookup about 80; the build before flows paid nothing) */
		if (datagram_call(nr) && cpu_may_run_datagram_target())
			return track_datagrams_shared(regs, nr, ret);
		return 0;
	}
	if (nr < 0)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_target(tgid))
		return 0;
	return record_target_failure_shared(regs, nr, ret, tgid);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	return syscall_exit(regs, regs->orig_ax, ret);
}

/* One fexit program per syscall of fexit_syscalls.h, on its x86_64 entry point, which gets
 * the caller's registers like the tracepoint does. User space loads either these (when the
 * kernel allows fexit) or on_sys_exit, never both. */
#define X(func, nr)                                                              \
	SEC("fexit/__x64_sys_" #func)                                            \
	int BPF_PROG(fexit_##func, struct pt_regs *regs, long ret)               \
	{                                                                        \
		return syscall_exit(regs, nr, ret);                              \
	}
#include "fexit_syscalls.h"
#undef X

#endif
