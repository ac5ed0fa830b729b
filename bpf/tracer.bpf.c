// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * tracerd's kernel half: records failed syscalls, uprobe hits, TCP silences
 * and process states of the target processes into one ring buffer.
 *
 * Hot paths return as early as they can: sys_exit looks at the return value
 * and the syscall number before anything else, and only failures (plus the
 * few successful calls that maintain the fd table) go on to the target
 * check. Short reads and writes of regular files are the other successful calls
 * looked at: read/write/pread64/pwrite64 returning less than their count (in the
 * saved argument registers, no copy) go on to the target check and the fd's inode.
 * Strings are copied only where they cannot be recovered later: the
 * path argument of a failed call, the path of a successful open and the new
 * cwd after a chdir (cwd.h).
 *
 * Network gaps cost nothing per packet: no program runs on the receive path.
 * User space runs look_connections every few tens of milliseconds, which reads
 * each watched socket's own receive counter and time stamp (segs_in, the
 * jiffies of the last received ACK or data); the close hook does the same
 * look once more.
 *
 * Counting (for profiles): every uprobe hit of a target bumps its function's
 * per-CPU counter; with count_syscalls set, every syscall of a target bumps a
 * (process, syscall) counter. Both switches are read-only data, so the
 * verifier drops the code that is switched off.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "events.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define AT_FDCWD -100
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define S_IFREG 0100000
#define SOCK_STREAM 1
#define TCP_CLOSE 7
#define EINPROGRESS 115
#define EEXIST 17

#define TASK_UNINTERRUPTIBLE 0x0002
#define __TASK_STOPPED 0x0004
#define __TASK_TRACED 0x0008
#define TASK_NOLOAD 0x0400
#define TASK_FROZEN 0x8000

/* x86_64 syscall numbers of the successful calls that feed the fd table, and of the
 * reads and writes whose short results are recorded. */
#define NR_read 0
#define NR_write 1
#define NR_pread64 17
#define NR_pwrite64 18
#define NR_open 2
#define NR_connect 42
#define NR_accept 43
#define NR_creat 85
#define NR_openat 257
#define NR_accept4 288
#define NR_openat2 437

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

/* Set by user space before load. */
const volatile __u32 filter_targets = 0; /* 0 = every process but ours */
const volatile __u32 self_tgid = 0;
const volatile __u64 gap_ns = 5000000000ULL;
const volatile __u64 pause_ns = 3000000000ULL;
const volatile __u64 wakeup_bytes = 1 << 20;
const volatile __u32 count_syscalls = 0;  /* count every syscall of the targets */
const volatile __u32 function_events = 1; /* 0 = uprobe hits are only counted */

/* Threads currently in `pauses`; lets sched_switch skip the lookup when 0. */
__u64 pending_pauses = 0;

/* jiffies and monotonic time at the first look: the tick rate measured since then
 * converts the sockets' jiffies time stamps without needing the kernel's HZ. */
__u64 calib_jiffies = 0;
__u64 calib_mono_ns = 0;

/* Anchors so that the skeleton emits Rust types for every record. */
struct tracerd_syscall_failure _sf = {};
struct tracerd_function_hit _fh = {};
struct tracerd_network_gap _ng = {};
struct tracerd_process_state_event _ps = {};
struct tracerd_process_start _pst = {};
struct tracerd_syscall_key _sk = {};
enum tracerd_event_kind _kind = 0;
enum tracerd_process_state _state = 0;
enum tracerd_pause_cause _cause = 0;
enum tracerd_arg_kind _arg_kind = 0;
enum tracerd_counter _counter = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, char[TRACERD_COMM_LEN]);
	__type(value, __u8);
} target_comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct tracerd_exe_key);
	__type(value, __u8);
} target_exes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, char[TRACERD_UNIT_LEN]);
	__type(value, __u8);
} target_units SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACERD_MAX_SYSCALL);
	__type(key, __u32);
	__type(value, struct tracerd_syscall_arg);
} syscall_args SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct tracerd_file_open);
} file_opens SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct tracerd_open_file);
} open_files SEC(".maps");

/* A plain hash: LRU bookkeeping on every packet's lookup cost more than the lookup. Full
 * means new connections go unwatched (counted); closed ones are removed. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct tracerd_conn);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tracerd_pause);
} pauses SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tracerd_signal_sender);
} last_signal SEC(".maps");

/* Processes whose end was reported (see ends_process); old ones age out. */
struct tracerd_exited_key {
	__u32 tgid;
	__u32 reserved;
	__u64 start_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct tracerd_exited_key);
	__type(value, __u8);
} exited SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRACERD_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Calls per function id (the uprobe's cookie); sized to the function table before load. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} function_calls SEC(".maps");

/* Calls per (process, syscall) when count_syscalls is set; sized by config before load. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct tracerd_syscall_key);
	__type(value, __u64);
} syscall_counts SEC(".maps");

/* Scratch space too large for the 512-byte BPF stack, and the open-id sequence. */
struct scratch {
	struct tracerd_open_file open;
	char unit[TRACERD_UNIT_LEN];
	__u64 open_seq;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		*c += 1;
}

/*
 * In front of the target set, a count of targets per slot (tgid modulo TARGET_SLOTS): the
 * set's bucket array (1 MiB) is cold in the cache on most syscalls, and a lookup there cost
 * about 100 ns per short read or failed call of every process on a busy host; a process
 * whose slot holds no target stops at this 16 KiB array. Only add_target and forget_target
 * change the set, so the counts stay exact: user space adds through register_target.
 */
#define TARGET_SLOTS 4096
__u32 target_slots[TARGET_SLOTS];

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

static __always_inline struct file *fd_file(int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *f = NULL;

	if (fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
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

static __always_inline __u64 open_id_of(struct file *f)
{
	__u64 key = (__u64)f;
	struct tracerd_file_open *o;

	if (!f)
		return 0;
	o = bpf_map_lookup_elem(&file_opens, &key);
	/* a recycled struct file must not inherit the old path */
	if (!o || o->ino != BPF_CORE_READ(f, f_inode, i_ino))
		return 0;
	return o->open_id;
}

#include "cwd.h"

static __always_inline int track_open(struct pt_regs *regs, long nr, long fd)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 zero = 0;
	struct scratch *s;
	struct file *f;
	const char *path;
	int dirfd = AT_FDCWD;
	long n;

	if (!is_target(tgid))
		return 0;
	s = bpf_map_lookup_elem(&scratch, &zero);
	f = fd_file(fd);
	if (!s || !f)
		return 0;
	if (nr == NR_openat || nr == NR_openat2) {
		dirfd = (int)regs->di;
		path = (const char *)regs->si;
	} else {
		path = (const char *)regs->di;
	}
	n = bpf_probe_read_user_str(s->open.path, sizeof(s->open.path), path);
	if (n <= 0) {
		count(TRACERD_CNT_PATH_UNREADABLE);
		return 0;
	}
	s->open.path_len = n;
	s->open.open_id = next_open_id(s);
	s->open.dir_open_id = 0;
	if (dirfd != AT_FDCWD && s->open.path[0] != '/')
		s->open.dir_open_id = open_id_of(fd_file(dirfd));
	else if (s->open.path[0] != '/')
		s->open.dir_open_id = cwd_open_id(tgid);
	s->open.ino = BPF_CORE_READ(f, f_inode, i_ino);
	s->open.tgid = tgid;
	struct tracerd_file_open fo = { .open_id = s->open.open_id, .ino = s->open.ino };
	__u64 key = (__u64)f;
	bpf_map_update_elem(&file_opens, &key, &fo, BPF_ANY);
	bpf_map_update_elem(&open_files, &fo.open_id, &s->open, BPF_ANY);
	return 0;
}

/* Start watching a connection (c carries pid and comm): its silence is measured from now. */
static __always_inline void watch_conn(struct sock *sk, struct tracerd_conn *c)
{
	__u64 key = (__u64)sk;

	sock_endpoints(sk, &c->local, &c->peer);
	if (!c->peer.family)
		return;
	c->last_ns = bpf_ktime_get_boot_ns();
	c->checked_ns = c->last_ns;
	c->segs_in = BPF_CORE_READ((struct tcp_sock *)sk, segs_in);
	c->rx_ack_j = BPF_CORE_READ((struct tcp_sock *)sk, rcv_tstamp);
	c->rx_data_j = BPF_CORE_READ((struct tcp_sock *)sk, inet_conn.icsk_ack.lrcvtime);
	c->packets = c->segs_in;
	if (bpf_map_update_elem(&conns, &key, c, BPF_ANY))
		count(TRACERD_CNT_CONNS_FULL);
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
	if (BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_CLOSE) {
		__u64 key = (__u64)sk;

		bpf_map_delete_elem(&conns, &key); /* closed meanwhile */
	}
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

static __always_inline void describe_fd(struct tracerd_syscall_failure *e, int fd)
{
	struct file *f = fd_file(fd);

	e->fd = fd;
	if (!f)
		return;
	if (file_is_socket(f)) {
		struct sock *sk = file_sock(f);
		if (sk)
			sock_endpoints(sk, NULL, &e->peer);
		return;
	}
	e->open_id = open_id_of(f);
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
		case TRACERD_ARG_PATH_AT: {
			int dirfd = (int)regs->di;
			if (dirfd != AT_FDCWD) {
				e->fd = dirfd;
				e->open_id = open_id_of(fd_file(dirfd));
			}
		}
			/* fall through */
		case TRACERD_ARG_PATH:
			n = bpf_probe_read_user_str(e->path, sizeof(e->path),
						    (const char *)syscall_arg(regs, arg->index));
			if (n > 0)
				e->path_len = n;
			else
				count(TRACERD_CNT_PATH_UNREADABLE);
			/* relative to the cwd: name the cwd's open when the process changed it */
			if (n > 0 && !e->open_id && e->path[0] != '/')
				e->open_id = cwd_open_id(tgid);
			break;
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
 * A read/write/pread64/pwrite64 that returned ret >= 0 bytes: recorded when it did less
 * than it asked (count in rdx) on a regular file of a target. A read that stops at the
 * end of the file is how files end, not a short read: only reads that stop before the
 * file's size (as the inode says after the call) are recorded, and a read returning 0 is
 * end of file by definition.
 */
static __always_inline int check_short_io(struct pt_regs *regs, long nr, long ret)
{
	unsigned long want = regs->dx;
	bool reading = nr == NR_read || nr == NR_pread64;
	struct tracerd_syscall_failure *e;
	struct inode *inode;
	struct file *f;
	__s64 end;
	int fd;

	if (want > MAX_RW_COUNT)
		want = MAX_RW_COUNT;
	if ((unsigned long)ret >= want || (reading && ret == 0))
		return 0;
	if (!is_target(bpf_get_current_pid_tgid() >> 32))
		return 0;
	fd = (int)regs->di;
	f = fd_file(fd);
	if (!f)
		return 0;
	inode = BPF_CORE_READ(f, f_inode);
	if ((BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFREG)
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
	e->open_id = open_id_of(f);
	e->path_len = 0;
	__builtin_memset(&e->peer, 0, sizeof(e->peer));
	submit(e);
	return 0;
}

/* One more call of syscall `nr` by the current process (count_syscalls only). */
static __always_inline void count_syscall(long nr)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tracerd_syscall_key key = { .tgid = tgid, .nr = nr };
	__u64 one = 1, *c;

	if (nr < 0 || !is_target(tgid))
		return;
	c = bpf_map_lookup_elem(&syscall_counts, &key);
	if (c) {
		__sync_fetch_and_add(c, 1);
		return;
	}
	if (bpf_map_update_elem(&syscall_counts, &key, &one, BPF_NOEXIST) == 0)
		return;
	/* another CPU may have inserted the pair meanwhile; otherwise the map is full */
	c = bpf_map_lookup_elem(&syscall_counts, &key);
	if (c)
		__sync_fetch_and_add(c, 1);
	else
		count(TRACERD_CNT_SYSCALL_COUNTS_FULL);
}

/*
 * The fexit programs call one shared copy (a BPF subprogram) of what their syscalls do rarely
 * (record a target's failure, track an open, a connection, a cwd): inlined into each of more
 * than a hundred programs, these made the BPF object 3 MB, which the daemon maps and parses at
 * start (4 MiB of its memory). The sys_exit program keeps them inline: it is one program,
 * and a call would only add to each of its recorded failures.
 */
static __noinline int track_open_shared(struct pt_regs *regs, long nr, long fd)
{
	return track_open(regs, nr, fd);
}

static __noinline int track_socket_shared(long fd)
{
	return track_socket(fd);
}

static __noinline int track_cwd_shared(void)
{
	return track_cwd();
}

static __noinline int record_target_failure_shared(struct pt_regs *regs, long nr, long ret, __u32 tgid)
{
	return record_target_failure(regs, nr, ret, tgid);
}

/* The end of syscall `nr` with result `ret`: keep the fd table and the cwd current after
 * successful calls, record failures. Shared by the sys_exit tracepoint (every syscall) and
 * the fexit programs (one per hooked syscall, where `nr` is a constant and the compiler
 * drops the branches of other syscalls); `shared`: call the subprograms above. */
static __always_inline int syscall_exit(struct pt_regs *regs, long nr, long ret, bool shared)
{
	__u32 tgid;

	if (count_syscalls)
		count_syscall(nr);
	if (ret >= 0) {
		if (nr == NR_openat || nr == NR_open || nr == NR_creat || nr == NR_openat2)
			return shared ? track_open_shared(regs, nr, ret) : track_open(regs, nr, ret);
		if (nr == NR_accept || nr == NR_accept4 || nr == NR_connect) {
			long fd = nr == NR_connect ? (int)regs->di : ret;
			return shared ? track_socket_shared(fd) : track_socket(fd);
		}
		if (nr == NR_chdir || nr == NR_fchdir)
			return shared ? track_cwd_shared() : track_cwd();
		if ((unsigned long)nr <= NR_write || nr == NR_pread64 || nr == NR_pwrite64)
			return check_short_io(regs, nr, ret);
		return 0;
	}
	if (nr < 0)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_target(tgid))
		return 0;
	return shared ? record_target_failure_shared(regs, nr, ret, tgid)
		      : record_target_failure(regs, nr, ret, tgid);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	return syscall_exit(regs, regs->orig_ax, ret, false);
}

/* One fexit program per syscall of fexit_syscalls.h, on its x86_64 entry point, which gets
 * the caller's registers like the tracepoint does. User space loads either these (when the
 * kernel allows fexit) or on_sys_exit, never both. */
#define X(func, nr)                                                              \
	SEC("fexit/__x64_sys_" #func)                                            \
	int BPF_PROG(fexit_##func, struct pt_regs *regs, long ret)               \
	{                                                                        \
		return syscall_exit(regs, nr, ret, true);                        \
	}
#include "fexit_syscalls.h"
#undef X

/* A call of function `cookie` (its index in the function table): count it, then record it. */
static __always_inline int on_function(struct pt_regs *ctx)
{
	struct tracerd_function_hit *e;
	__u32 id;
	__u64 *calls;

	if (!is_target(bpf_get_current_pid_tgid() >> 32))
		return 0;
	id = bpf_get_attach_cookie(ctx);
	calls = bpf_map_lookup_elem(&function_calls, &id);
	if (calls)
		__sync_fetch_and_add(calls, 1);
	if (!function_events)
		return 0;
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_FUNCTION);
	if (!e)
		return 0;
	fill_header(&e->h, TRACERD_EV_FUNCTION);
	e->function_id = id;
	submit(e);
	return 0;
}

/* One link per function (the fallback, and binaries with one function). */
SEC("uprobe")
int function_hit(struct pt_regs *ctx)
{
	return on_function(ctx);
}

/* One link for all the functions of a binary. */
SEC("uprobe.multi")
int function_hit_multi(struct pt_regs *ctx)
{
	return on_function(ctx);
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
	e->reserved = 0;
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
	__u32 segs = BPF_CORE_READ(tp, segs_in);
	__u32 ack_j = BPF_CORE_READ(tp, rcv_tstamp);
	/* the fast path takes data without updating rcv_tstamp; lrcvtime has it */
	__u32 data_j = BPF_CORE_READ(tp, inet_conn.icsk_ack.lrcvtime);
	__u32 fresh = segs - c->segs_in;
	__u64 first = (__u64)-1, last = c->checked_ns, t;

	if (!fresh) {
		c->checked_ns = now;
		return;
	}
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
	if (first > c->last_ns && first - c->last_ns > gap_ns)
		emit_gap(c, first, 0);
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

static long look_one(struct bpf_map *map, __u64 *key, struct tracerd_conn *c, struct look_ctx *ctx)
{
	look((struct sock *)*key, c, ctx->now, ctx->now_j, ctx->per_jiffy);
	return 0;
}

/* Run by user space (BPF_PROG_TEST_RUN), never attached: one look at every watched socket. */
SEC("raw_tp")
int look_connections(void *ctx)
{
	struct look_ctx lc = { .now_j = bpf_jiffies64() };

	if (!calib_mono_ns) {
		calib_jiffies = lc.now_j;
		calib_mono_ns = bpf_ktime_get_ns();
	}
	lc.per_jiffy = ns_per_jiffy(lc.now_j);
	lc.now = bpf_ktime_get_boot_ns();
	bpf_for_each_map_elem(&conns, look_one, &lc, 0);
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
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return 0;
	now = bpf_ktime_get_boot_ns();
	if (newstate == TCP_ESTABLISHED) {
		/* a non-blocking connect completing: silence is counted from here */
		c->last_ns = now;
		return 0;
	}
	now_j = bpf_jiffies64();
	look(sk, c, now, now_j, ns_per_jiffy(now_j));
	/* A connection that dies silent never sees the segment that ends its gap; one that
	 * never got established (a refused or timed-out connect) was never silent: its
	 * connect failed, and that failure is the event. */
	if (oldstate != TCP_SYN_SENT && now - c->last_ns > gap_ns)
		emit_gap(c, now, 1);
	bpf_map_delete_elem(&conns, &key);
	return 0;
}

static __always_inline void sender_of(__u32 tgid, __u32 signal, struct tracerd_process_state_event *e)
{
	struct tracerd_signal_sender *s = bpf_map_lookup_elem(&last_signal, &tgid);

	e->sender_pid = 0;
	__builtin_memset(e->sender_comm, 0, sizeof(e->sender_comm));
	if (!s || (signal && s->signal != signal))
		return;
	e->signal = s->signal;
	e->sender_pid = s->pid;
	__builtin_memcpy(e->sender_comm, s->comm, sizeof(e->sender_comm));
}

static __always_inline void end_pause(struct task_struct *next, __u64 now)
{
	__u32 tid = BPF_CORE_READ(next, pid);
	struct tracerd_pause *p = bpf_map_lookup_elem(&pauses, &tid);
	struct tracerd_process_state_event *e;

	if (!p)
		return;
	if (now - p->start_ns >= pause_ns) {
		e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_PROCESS);
		if (e) {
			e->h.ts_ns = p->start_ns;
			e->h.pid = p->tgid;
			e->h.tid = tid;
			e->h.kind = TRACERD_EV_PROCESS_STATE;
			e->h.reserved = 0;
			__builtin_memcpy(e->h.comm, p->comm, sizeof(e->h.comm));
			e->duration_ns = now - p->start_ns;
			e->exit_code = 0;
			e->state = TRACERD_PS_PAUSED;
			e->cause = p->cause;
			e->signal = 0;
			e->core_dumped = 0;
			if (p->cause == TRACERD_PAUSE_STOPPED)
				sender_of(p->tgid, 0, e);
			else
				sender_of(0, 0xffffffff, e);
			submit(e);
		}
	}
	bpf_map_delete_elem(&pauses, &tid);
	__sync_fetch_and_add(&pending_pauses, -1);
}

static __always_inline void begin_pause(struct task_struct *prev, unsigned int state, __u64 now)
{
	struct tracerd_pause p = {};
	__u32 tid = BPF_CORE_READ(prev, pid);

	p.tgid = BPF_CORE_READ(prev, tgid);
	if (!is_target(p.tgid))
		return;
	if (state & (__TASK_STOPPED | __TASK_TRACED))
		p.cause = TRACERD_PAUSE_STOPPED;
	else if (state & TASK_FROZEN)
		p.cause = TRACERD_PAUSE_FROZEN;
	else
		p.cause = TRACERD_PAUSE_UNINTERRUPTIBLE;
	/* a stopped or frozen process is one pause, recorded on its leader */
	if (p.cause != TRACERD_PAUSE_UNINTERRUPTIBLE && tid != p.tgid)
		return;
	p.start_ns = now;
	BPF_CORE_READ_STR_INTO(&p.comm, prev, comm);
	if (bpf_map_update_elem(&pauses, &tid, &p, BPF_NOEXIST) == 0)
		__sync_fetch_and_add(&pending_pauses, 1);
	else
		count(TRACERD_CNT_PAUSES_FULL);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = 0;

	if (pending_pauses) {
		now = bpf_ktime_get_boot_ns();
		end_pause(next, now);
	}
	if ((prev_state & (TASK_UNINTERRUPTIBLE | __TASK_STOPPED | __TASK_TRACED | TASK_FROZEN)) &&
	    !(prev_state & TASK_NOLOAD)) {
		if (!now)
			now = bpf_ktime_get_boot_ns();
		begin_pause(prev, prev_state, now);
	}
	return 0;
}

SEC("tp_btf/signal_generate")
int BPF_PROG(on_signal_generate, int sig, struct kernel_siginfo *info, struct task_struct *task,
	     int type, int result)
{
	struct tracerd_signal_sender s = {};
	__u32 tgid;
	bool from_user;

	/* signals whose default action terminates or stops the process */
	const __u64 interesting = (1ULL << 1) | (1ULL << 2) | (1ULL << 3) | (1ULL << 4) |
				  (1ULL << 5) | (1ULL << 6) | (1ULL << 7) | (1ULL << 8) |
				  (1ULL << 9) | (1ULL << 10) | (1ULL << 11) | (1ULL << 12) |
				  (1ULL << 13) | (1ULL << 14) | (1ULL << 15) | (1ULL << 19) |
				  (1ULL << 20) | (1ULL << 21) | (1ULL << 22) | (1ULL << 24) |
				  (1ULL << 25) | (1ULL << 31);
	if (sig <= 0 || sig >= 64 || !(interesting & (1ULL << sig)))
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	if (!is_target(tgid))
		return 0;
	/* SEND_SIG_NOINFO (0) is a user send, SEND_SIG_PRIV (1) the kernel's */
	if ((unsigned long)info == 0)
		from_user = true;
	else if ((unsigned long)info == 1)
		from_user = false;
	else
		from_user = BPF_CORE_READ(info, si_code) <= 0;
	s.signal = sig;
	if (from_user) {
		s.pid = bpf_get_current_pid_tgid() >> 32;
		bpf_get_current_comm(s.comm, sizeof(s.comm));
	}
	bpf_map_update_elem(&last_signal, &tgid, &s, BPF_ANY);
	return 0;
}

/*
 * Whether `p`, at sched_process_exit, is the thread that ends its process. The tracepoint's
 * group_dead argument exists only since 6.16, so this reads what it is computed from: the
 * thread that ends the group has dropped signal->live to 0 just before the tracepoint. Threads
 * of the group exiting at the same time can all see 0; the first to claim the process in
 * `exited` (keyed by the leader's start time, so a reused pid is a new key) is the one.
 */
static __always_inline bool ends_process(struct task_struct *p, __u32 tgid)
{
	struct tracerd_exited_key key = { .tgid = tgid };
	__u8 one = 1;

	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return false;
	key.start_ns = BPF_CORE_READ(p, group_leader, start_time);
	return bpf_map_update_elem(&exited, &key, &one, BPF_NOEXIST) == 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_process_exit, struct task_struct *p)
{
	struct tracerd_process_state_event *e;
	__u32 tgid;
	int code;

	tgid = BPF_CORE_READ(p, tgid);
	if (!is_target(tgid) || !ends_process(p, tgid))
		return 0;
	code = BPF_CORE_READ(p, exit_code);
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_PROCESS);
	if (e) {
		fill_header(&e->h, TRACERD_EV_PROCESS_STATE);
		e->duration_ns = 0;
		e->cause = 0;
		e->core_dumped = (code & 0x80) != 0;
		if (code & 0x7f) {
			e->state = TRACERD_PS_KILLED;
			e->exit_code = 0;
			e->signal = code & 0x7f;
			sender_of(tgid, code & 0x7f, e);
		} else {
			e->state = TRACERD_PS_EXITED;
			e->exit_code = (code >> 8) & 0xff;
			e->signal = 0;
			e->sender_pid = 0;
			__builtin_memset(e->sender_comm, 0, sizeof(e->sender_comm));
		}
		submit(e);
	}
	bpf_map_delete_elem(&last_signal, &tgid);
	bpf_map_delete_elem(&cwds, &tgid);
	if (filter_targets)
		forget_target(tgid);
	return 0;
}

static __always_inline void emit_start(__u32 pid, __u32 ppid, struct task_struct *p, struct linux_binprm *bprm)
{
	struct tracerd_process_start *e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_START);

	if (!e)
		return;
	fill_header(&e->h, TRACERD_EV_PROCESS_START);
	e->h.pid = pid;
	e->h.tid = pid;
	e->ppid = ppid;
	e->is_exec = bprm != 0;
	e->args_len = 0;
	e->exe[0] = 0;
	if (bprm) {
		unsigned long start = BPF_CORE_READ(p, mm, arg_start);
		unsigned long end = BPF_CORE_READ(p, mm, arg_end);
		__u32 len = end > start ? end - start : 0;

		if (len > TRACERD_ARGS_LEN)
			len = TRACERD_ARGS_LEN;
		if (len && !bpf_probe_read_user(e->args, len & (TRACERD_ARGS_LEN - 1) ?: TRACERD_ARGS_LEN, (void *)start))
			e->args_len = len;
		bpf_probe_read_kernel_str(e->exe, sizeof(e->exe), BPF_CORE_READ(bprm, filename));
	}
	submit(e);
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

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 cpid = BPF_CORE_READ(child, pid);

	if (cpid != BPF_CORE_READ(child, tgid))
		return 0; /* a new thread, not a new process */
	if (!is_target(ptgid))
		return 0;
	if (filter_targets)
		add_target(cpid);
	inherit_cwd(ptgid, cpid);
	emit_start(cpid, ptgid, 0, 0);
	return 0;
}

static __always_inline bool exec_matches(struct task_struct *p, struct linux_binprm *bprm)
{
	char comm[TRACERD_COMM_LEN] = {};
	struct tracerd_exe_key exe = {};
	__u32 zero = 0;
	struct scratch *s;
	struct inode *inode;
	const char *unit;

	bpf_get_current_comm(comm, sizeof(comm));
	if (bpf_map_lookup_elem(&target_comms, comm))
		return true;
	inode = BPF_CORE_READ(bprm, file, f_inode);
	exe.ino = BPF_CORE_READ(inode, i_ino);
	exe.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	if (bpf_map_lookup_elem(&target_exes, &exe))
		return true;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return false;
	__builtin_memset(s->unit, 0, sizeof(s->unit));
	unit = BPF_CORE_READ(p, cgroups, dfl_cgrp, kn, name);
	bpf_probe_read_kernel_str(s->unit, sizeof(s->unit), unit);
	return bpf_map_lookup_elem(&target_units, s->unit) != NULL;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	if (!is_target(tgid)) {
		if (!filter_targets || !exec_matches(p, bprm))
			return 0;
		add_target(tgid);
	}
	emit_start(tgid, BPF_CORE_READ(p, real_parent, tgid), p, bprm);
	return 0;
}
