/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The name of the file behind an fd, read when a call on it fails (never on success: a
 * successful open costs nothing here). Whatever made the fd — an open before tracerd
 * started, inheritance, dup2, SCM_RIGHTS, pidfd_getfd, accept — the task's fd table has its
 * struct file, and the file says what it is, named as /proc/PID/fd shows it: a file by its
 * absolute path (f_path walked up by paths.h), a pipe as pipe:[ino], an anonymous file by its
 * kind (anon_inode:[eventfd]), a socket without an IP peer as socket:[ino]; a memfd walks to
 * /memfd:NAME. A file that cannot be named (a path deeper or longer than the buffer) is
 * counted in TRACERD_CNT_FD_UNNAMED, never left silently empty. A walked path is kept in
 * fd_names (maps.h, where its key says what a cached name can and cannot go stale on), so
 * a file failing again is not walked again.
 */
#ifndef TRACERD_TRACER_FDNAMES_H
#define TRACERD_TRACER_FDNAMES_H

#include "maps.h"
#include "output.h"
#include "files.h"
#include "paths.h"

#define PIPEFS_MAGIC 0x50495045
#define ANON_INODE_FS_MAGIC 0x09041934
#define PIDFS_MAGIC 0x50494446 /* pidfds since 6.9 */

/* bpf_snprintf wants its format in read-only data */
static const char pipe_fmt[] = "pipe:[%lu]";
static const char socket_fmt[] = "socket:[%lu]";
static const char anon_fmt[] = "anon_inode:%s";
static const char pidfd_fmt[] = "anon_inode:[pidfd]";

/* The path of `dentry` on `vfsmnt` into out (TRACERD_PATH_LEN bytes); its length with the
 * NUL, 0 when it does not fit. Walked once per name: the result is kept in fd_names
 * (maps.h), keyed by what it is made of, so a file failing again costs a lookup and a copy. */
static __always_inline __u32 path_name(struct dentry *dentry, struct vfsmount *vfsmnt, char *out)
{
	struct fs_struct *fs = bpf_get_current_task_btf()->fs;
	__u32 zero = 0;
	struct cwd_walk *w = bpf_map_lookup_elem(&cwd_scratch, &zero);
	struct fd_name *cached;
	int off;

	if (!w || !fs)
		return 0;
	w->name_key.dentry = dentry;
	w->name_key.mnt = vfsmnt;
	w->name_key.parent = BPF_CORE_READ(dentry, d_parent);
	w->name_key.name_hash_len = BPF_CORE_READ(dentry, d_name.hash_len);
	w->name_key.root = fs->root.dentry;
	cached = bpf_map_lookup_elem(&fd_names, &w->name_key);
	if (cached) {
		bpf_probe_read_kernel(out, TRACERD_PATH_LEN, cached->path);
		return cached->len;
	}
	off = walk_path(w, dentry, vfsmnt);
	if (off < 0)
		return 0;
	off &= CWD_HALF - 1;
	bpf_probe_read_kernel(w->name.path, TRACERD_PATH_LEN, &w->buf[off]);
	w->name.len = CWD_HALF - off;
	bpf_map_update_elem(&fd_names, &w->name_key, &w->name, BPF_ANY);
	bpf_probe_read_kernel(out, TRACERD_PATH_LEN, w->name.path);
	return w->name.len;
}

/* The name of file f (its inode, mode and filesystem given) into out (TRACERD_PATH_LEN
 * bytes); its length with the NUL, 0 when it cannot be named. */
static __always_inline __u32 file_name(struct file *f, struct inode *inode, umode_t mode,
				       unsigned long magic, char *out)
{
	struct path path = {};
	__u64 arg;
	long n;

	if ((mode & S_IFMT) == S_IFSOCK) {
		arg = BPF_CORE_READ(inode, i_ino);
		n = bpf_snprintf(out, TRACERD_PATH_LEN, socket_fmt, &arg, sizeof(arg));
	} else if (magic == PIPEFS_MAGIC) {
		arg = BPF_CORE_READ(inode, i_ino);
		n = bpf_snprintf(out, TRACERD_PATH_LEN, pipe_fmt, &arg, sizeof(arg));
	} else if (magic == ANON_INODE_FS_MAGIC) {
		arg = (__u64)BPF_CORE_READ(f, f_path.dentry, d_name.name);
		n = bpf_snprintf(out, TRACERD_PATH_LEN, anon_fmt, &arg, sizeof(arg));
	} else if (magic == PIDFS_MAGIC) {
		n = bpf_snprintf(out, TRACERD_PATH_LEN, pidfd_fmt, NULL, 0);
	} else {
		/* mnt and dentry in one read */
		bpf_core_read(&path, sizeof(path), &f->f_path);
		return path_name(path.dentry, path.mnt, out);
	}
	return n > 0 && n <= TRACERD_PATH_LEN ? n : 0;
}

/* The file behind a failed call's fd, into its record: a socket with an IP peer by the
 * peer (e->peer), anything else by its name (e->path). */
static __always_inline void name_fd_file(struct tracerd_syscall_failure *e, struct file *f)
{
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	umode_t mode = BPF_CORE_READ(inode, i_mode);
	__u32 n;

	if ((mode & S_IFMT) == S_IFSOCK) {
		struct sock *sk = file_sock(f);
		if (sk)
			sock_endpoints(sk, NULL, &e->peer);
		if (e->peer.family)
			return;
	}
	n = file_name(f, inode, mode, BPF_CORE_READ(inode, i_sb, s_magic), e->path);
	if (n)
		e->path_len = n;
	else
		count(TRACERD_CNT_FD_UNNAMED);
}

/* e->path holds the relative path argument (n bytes with the NUL) of a call on the directory
 * `dir` (its dirfd): make it absolute, dir's path + "/" + the argument, assembled in the
 * second half of the walk buffer. A result longer than the path field keeps the argument
 * as it was, and is counted. */
static __always_inline void join_dir(struct tracerd_syscall_failure *e, struct file *dir, long n)
{
	__u32 zero = 0;
	struct cwd_walk *w = bpf_map_lookup_elem(&cwd_scratch, &zero);
	int off;

	if (!w || n <= 0 || n > TRACERD_PATH_LEN)
		return;
	off = walk_path(w, BPF_CORE_READ(dir, f_path.dentry), BPF_CORE_READ(dir, f_path.mnt));
	if (off < 0) {
		count(TRACERD_CNT_FD_UNNAMED);
		return;
	}
	if (off == CWD_HALF - 2)
		off = CWD_HALF - 1; /* the root: "/" and the argument */
	if (CWD_HALF - off + n > TRACERD_PATH_LEN) {
		count(TRACERD_CNT_FD_UNNAMED);
		return;
	}
	w->buf[CWD_HALF - 1] = '/';
	bpf_probe_read_kernel(&w->buf[CWD_HALF], CWD_HALF, e->path);
	bpf_probe_read_kernel(e->path, TRACERD_PATH_LEN, &w->buf[off & (CWD_HALF - 1)]);
	e->path_len = CWD_HALF - off + n;
}

#endif
