/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The working directory of every traced process that changed it, so that a relative path
 * resolves as the process saw it (a forked backend after its parent's chdir, a server that
 * chdirs into its data directory). After each successful chdir/fchdir the new cwd is read
 * from the kernel (task->fs->pwd, walked up through its dentries and mounts by paths.h)
 * into an open_files entry with the absolute path; `cwds` maps the process to it,
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
#include "paths.h"

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

/* The absolute path of the current task's cwd into the per-CPU cwd_scratch buffer, ending
 * at CWD_HALF - 1; returns where it starts, or -1 when it is deeper than PATH_DEPTH or
 * longer than the buffer. */
static __always_inline int walk_cwd(struct cwd_walk *w)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return walk_path(w, BPF_CORE_READ(task, fs, pwd.dentry), BPF_CORE_READ(task, fs, pwd.mnt));
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
