/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The absolute path of a dentry on a mount, as the kernel's d_path gives it: walked up through
 * the dentries and across mount points to the current task's root (fs->root: a chroot, a
 * container's root), or the root of the mount namespace when the path is not under it (CO-RE
 * reads only),
 * one bpf_loop step per path component or mount, assembled backwards into the per-CPU
 * cwd_scratch buffer (maps.h). Used for the cwd of a target (cwd.h) and for the file behind an
 * fd that a failed call named (fdnames.h).
 */
#ifndef TRACERD_TRACER_PATHS_H
#define TRACERD_TRACER_PATHS_H

#include "maps.h"

/* path components walked at most (deeper paths are not resolved: the caller counts them) */
#define PATH_DEPTH 32

static __always_inline struct mount *mount_of(struct vfsmount *vfsmnt)
{
	return (struct mount *)((void *)vfsmnt - bpf_core_field_offset(struct mount, mnt));
}

/* Where the walk up is. */
struct path_walk_state {
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
	struct path_walk_state *st = ctx;
	struct dentry *dentry = st->dentry;
	struct vfsmount *vfsmnt = st->vfsmnt;
	struct mount *mnt = st->mnt;
	__u32 zero = 0;
	struct cwd_walk *w = bpf_map_lookup_elem(&cwd_scratch, &zero);

	if (!w) {
		st->finished = -1;
		return 1;
	}
	/* the task's root ends the walk (a chroot's, a container's): read here, in the callback's
	 * own frame, as the 6.1 verifier finds the failure path's stack too deep for more */
	if (index == 0) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();

		w->root_dentry = BPF_CORE_READ(task, fs, root.dentry);
		w->root_mnt = BPF_CORE_READ(task, fs, root.mnt);
	}
	if (dentry == w->root_dentry && vfsmnt == w->root_mnt) {
		st->finished = 1;
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
	__u32 len = BPF_CORE_READ(dentry, d_name.len) & (CWD_HALF - 1);
	if (up == dentry && !len) {
		st->finished = 1;
		return 1;
	}
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
	/* a dentry in no directory (a memfd's, a pseudo file's) is named by itself, as d_path does */
	if (up == dentry) {
		st->finished = 1;
		return 1;
	}
	st->dentry = up;
	return 0;
}

/* The absolute path of `dentry` on `vfsmnt` into w (cwd_scratch), NUL-terminated at
 * CWD_HALF - 1; returns where it starts, or -1 when it is deeper than PATH_DEPTH or longer
 * than the buffer. */
static __always_inline int walk_path(struct cwd_walk *w, struct dentry *dentry, struct vfsmount *vfsmnt)
{
	struct path_walk_state st = {};

	st.dentry = dentry;
	st.vfsmnt = vfsmnt;
	st.mnt = mount_of(vfsmnt);
	st.off = CWD_HALF - 1;
	w->buf[CWD_HALF - 1] = 0;
	bpf_loop(PATH_DEPTH, walk_step, &st, 0);
	if (st.finished != 1)
		return -1;
	int off = st.off & (CWD_HALF - 1);
	if (off == CWD_HALF - 1) {
		off -= 1;
		w->buf[off] = '/';
	}
	return off;
}

#endif
