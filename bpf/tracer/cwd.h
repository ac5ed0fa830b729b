/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The working directory of every traced process that changed it, so that a relative path
 * resolves as the process saw it (a forked backend after its parent's chdir, a server that
 * chdirs into its data directory). After each successful chdir/fchdir the new cwd is read
 * from the kernel (task->fs->pwd, walked up through its dentries and mounts; CO-RE reads
 * only) into an open_files entry with the absolute path; `cwds` maps the process to it,
 * children inherit it at fork. A relative path with no dirfd then names that entry as its
 * base. A process that never changed its cwd has no entry: user space uses the cwd it read
 * from /proc when the process started. Its maps (cwds, cwd_scratch) are in maps.h; the
 * chdir/fchdir exits that call track_cwd are in syscalls.h.
 */
#ifndef TRACERD_TRACER_CWD_H
#define TRACERD_TRACER_CWD_H

#include "maps.h"
#include "output.h"
#include "targets.h"
#include "files.h"

/* path components walked at most (deeper cwds are not resolved: counted as unreadable) */
#define CWD_DEPTH 32

/* The open id naming `tgid`'s cwd, 0 if it never changed it. The lookup of the entry keeps
 * it recently used in the LRU open_files while paths still resolve against it. */
static __always_inline __u64 cwd_open_id(__u32 tgid)
{
	__u64 *id = bpf_map_lookup_elem(&cwds, &tgid);

	if (!id)
		return 0;
	bpf_map_lookup_elem(&open_files, id);
	return *id;
}

static __always_inline struct mount *mount_of(struct vfsmount *vfsmnt)
{
	return (struct mount *)((void *)vfsmnt - bpf_core_field_offset(struct mount, mnt));
}

/* Where the walk up from the cwd is: one bpf_loop step per path component or mount. */
struct cwd_walk_state {
	struct dentry *dentry;
	struct vfsmount *vfsmnt;
	struct mount *mnt;
	int off;      /* where the path assembled so far starts in buf */
	int finished; /* 1 at the root, -1 when the path does not fit */
};

/* One step of the walk: prepend the current dentry's name, or cross to the parent mount.
 * A bpf_loop callback, so the verifier checks one step, not every path through 32. */
static long walk_step(__u32 index, void *ctx)
{
	struct cwd_walk_state *st = ctx;
	struct dentry *dentry = st->dentry;
	struct vfsmount *vfsmnt = st->vfsmnt;
	struct mount *mnt = st->mnt;
	__u32 zero = 0;
	struct cwd_walk *w = bpf_map_lookup_elem(&cwd_scratch, &zero);

	if (!w) {
		st->finished = -1;
		return 1;
	}
	if (dentry == BPF_CORE_READ(vfsmnt, mnt_root)) {
		struct mount *parent = BPF_CORE_READ(mnt, mnt_parent);
		if (parent == mnt) {
			st->finished = 1; /* the root of the mount namespace */
			return 1;
		}
		st->dentry = BPF_CORE_READ(mnt, mnt_mountpoint);
		st->mnt = parent;
		st->vfsmnt = (struct vfsmount *)((void *)parent + bpf_core_field_offset(struct mount, mnt));
		return 0;
	}
	struct dentry *up = BPF_CORE_READ(dentry, d_parent);
	if (up == dentry) {
		st->finished = 1;
		return 1;
	}
	__u32 len = BPF_CORE_READ(dentry, d_name.len) & (CWD_HALF - 1);
	const unsigned char *name = BPF_CORE_READ(dentry, d_name.name);
	int off = st->off & (CWD_HALF - 1);
	if ((int)len + 1 > off) {
		st->finished = -1;
		return 1;
	}
	off -= len;
	bpf_probe_read_kernel(&w->buf[off & (CWD_HALF - 1)], len, name);
	off -= 1;
	w->buf[off & (CWD_HALF - 1)] = '/';
	st->off = off;
	st->dentry = up;
	return 0;
}

/* The absolute path of the current task's cwd into the per-CPU cwd_scratch buffer, ending
 * at CWD_HALF - 1; returns where it starts, or -1 when it is deeper than CWD_DEPTH or
 * longer than the buffer. */
static __always_inline int walk_cwd(struct cwd_walk *w)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct cwd_walk_state st = {};

	st.dentry = BPF_CORE_READ(task, fs, pwd.dentry);
	st.vfsmnt = BPF_CORE_READ(task, fs, pwd.mnt);
	st.mnt = mount_of(st.vfsmnt);
	st.off = CWD_HALF - 1;
	w->buf[CWD_HALF - 1] = 0;
	bpf_loop(CWD_DEPTH, walk_step, &st, 0);
	if (st.finished != 1)
		return -1;
	int off = st.off & (CWD_HALF - 1);
	if (off == CWD_HALF - 1) {
		off -= 1;
		w->buf[off] = '/';
	}
	return off;
}

/* A traced process changed its cwd: record where it is now. */
static __always_inline int track_cwd(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 zero = 0;
	struct cwd_walk *w;
	struct scratch *s;
	int off;

	if (!is_target(tgid))
		return 0;
	w = bpf_map_lookup_elem(&cwd_scratch, &zero);
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!w || !s)
		return 0;
	off = walk_cwd(w);
	if (off < 0) {
		count(TRACERD_CNT_PATH_UNREADABLE);
		bpf_map_delete_elem(&cwds, &tgid);
		return 0;
	}
	off &= CWD_HALF - 1;
	bpf_probe_read_kernel(s->open.path, sizeof(s->open.path), &w->buf[off]);
	s->open.path_len = CWD_HALF - off;
	s->open.open_id = next_open_id(s);
	s->open.dir_open_id = 0;
	s->open.ino = 0;
	s->open.tgid = tgid;
	bpf_map_update_elem(&open_files, &s->open.open_id, &s->open, BPF_ANY);
	bpf_map_update_elem(&cwds, &tgid, &s->open.open_id, BPF_ANY);
	return 0;
}

/* A forked child starts in its parent's cwd. */
static __always_inline void inherit_cwd(__u32 parent, __u32 child)
{
	__u64 *id = bpf_map_lookup_elem(&cwds, &parent);

	if (id) {
		__u64 copy = *id;
		bpf_map_update_elem(&cwds, &child, &copy, BPF_ANY);
	}
}

#endif
