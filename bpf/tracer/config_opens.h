/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The configuration a target read at its start: a successful open, openat or openat2 of a
 * regular file under /etc, read-only, in the first config_window_ns of the process's life (from
 * its fork: services exec right after it), is sent to user space (TRACERD_EV_CONFIG_OPEN) with
 * the path as the process named it; user space identifies, hashes and (if asked) copies the file
 * off the event path (tracerd/src/environment). A relative path is named from the fd table
 * (fdnames.h) and kept when that name is under /etc.
 *
 * The cost stays near zero: every successful open compares the time with config_window_until
 * (the end of the latest target's window) and stops there once no target is starting; inside,
 * the process's own start, the flags (read-only, not O_PATH) and the target slots are checked
 * before anything is read, then the path's first five bytes (an absolute path outside /etc ends
 * there), and only then the target set, the fd table, the inode and whether the process
 * reported this file already (config_seen). A record that does not fit in
 * the ring is counted (TRACERD_CNT_RINGBUF_FULL_CONFIG), an unreadable path too
 * (TRACERD_CNT_PATH_UNREADABLE).
 */
#ifndef TRACERD_TRACER_CONFIG_OPENS_H
#define TRACERD_TRACER_CONFIG_OPENS_H

#include "maps.h"
#include "output.h"
#include "targets.h"
#include "files.h"
#include "fdnames.h"

#define NR_open 2
#define NR_openat 257
#define NR_openat2 437
#define O_ACCMODE 00000003
#define O_PATH 010000000

/* "/etc/" as the first five bytes of a path, little-endian */
#define ETC_PREFIX 0x2f6374652fULL
#define ETC_PREFIX_MASK 0xffffffffffULL

/* A target's start began a window: opens until now + config_window_ns may be its configuration. */
static __always_inline void open_config_window(void)
{
	__u64 until;

	if (!config_window_ns)
		return;
	until = bpf_ktime_get_boot_ns() + config_window_ns;
	if (until > config_window_until)
		config_window_until = until;
}

/* The open's flags: in a register for open and openat, in user memory (struct open_how) for openat2. */
static __always_inline __u64 open_flags(struct pt_regs *regs, long nr)
{
	__u64 flags = 0;

	if (nr == NR_open)
		return regs->si;
	if (nr == NR_openat)
		return regs->dx;
	bpf_probe_read_user(&flags, sizeof(flags), (void *)regs->dx);
	/* loaded here: merged with the register loads above, one instruction would read
	 * through both the stack and pt_regs, which the verifier refuses */
	asm volatile("" : "+r"(flags));
	return flags;
}

static __always_inline bool under_etc(const char *path)
{
	__u64 head = 0;

	bpf_probe_read_kernel(&head, 5, path);
	return (head & ETC_PREFIX_MASK) == ETC_PREFIX;
}

/* A target inside its window opened fd read-only: record it if it is a regular file under /etc. */
static __always_inline int record_config_open(struct pt_regs *regs, long nr, long fd, __u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	const char *upath = (const char *)(nr == NR_open ? regs->di : regs->si);
	struct config_seen_key seen = {};
	struct tracerd_config_open *e;
	__u64 head = 0;
	struct inode *inode;
	struct file *f;
	umode_t mode;
	__u8 one = 1;
	long n;

	/* typed loads (every open in a window asks): two helper copies cost more than the rest */
	seen.start_ns = task->group_leader->start_boottime;
	if (seen.start_ns + config_window_ns <= now)
		return 0;
	if (open_flags(regs, nr) & (O_ACCMODE | O_PATH))
		return 0;
	seen.tgid = bpf_get_current_pid_tgid() >> 32;
	if (!maybe_target(seen.tgid))
		return 0;
	/* an absolute path elsewhere (libraries, data, /proc: most opens at a start) is not
	 * configuration: one read of the caller's memory ends it before the target set's
	 * lookup and the fd table */
	if (bpf_probe_read_user(&head, 5, upath)) {
		if (is_target(seen.tgid))
			count(TRACERD_CNT_PATH_UNREADABLE);
		return 0;
	}
	if ((head & 0xff) == '/' && (head & ETC_PREFIX_MASK) != ETC_PREFIX)
		return 0;
	if (!is_target(seen.tgid))
		return 0;
	f = fd_file(fd);
	if (!f)
		return 0;
	inode = file_inode_mode(f, &mode);
	if (!inode || (mode & S_IFMT) != S_IFREG)
		return 0;
	/* a file this process reported already (or one that just reported it on another
	 * thread) ends here */
	inode_ino_dev(inode, &seen.ino, &seen.dev);
	if (bpf_map_update_elem(&config_seen, &seen, &one, BPF_NOEXIST))
		return 0;
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_CONFIG);
	if (!e) {
		bpf_map_delete_elem(&config_seen, &seen);
		return 0;
	}
	fill_header(&e->h, TRACERD_EV_CONFIG_OPEN);
	e->fd = fd;
	if ((head & 0xff) == '/') {
		n = bpf_probe_read_user_str(e->path, sizeof(e->path), upath);
	} else {
		/* relative to the cwd or a dirfd: the file's own name says where it is (a
		 * regular file: named by its path, so no inode or filesystem is needed) */
		n = file_name(f, NULL, S_IFREG, 0, e->path);
		if (n > 0 && !under_etc(e->path)) {
			bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
			return 0;
		}
	}
	if (n <= 0) {
		count(TRACERD_CNT_PATH_UNREADABLE);
		bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
		bpf_map_delete_elem(&config_seen, &seen);
		return 0;
	}
	e->path_len = n;
	submit(e);
	return 0;
}

/* One shared copy for the programs of open, openat and openat2 (see syscalls.h). */
static __noinline int record_config_open_shared(struct pt_regs *regs, long nr, long fd, __u64 now)
{
	return record_config_open(regs, nr, fd, now);
}

/* A successful open, openat or openat2 returned fd: while some target is in its start window,
 * look further (record_config_open); else this compare is the whole cost. */
static __always_inline int check_config_open(struct pt_regs *regs, long nr, long fd)
{
	__u64 now;

	if (!config_window_ns)
		return 0;
	now = bpf_ktime_get_boot_ns();
	if (now >= config_window_until)
		return 0;
	return record_config_open_shared(regs, nr, fd, now);
}

#endif
