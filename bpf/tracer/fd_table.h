/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The current task's struct file of an fd, from its fd table: shared by the tracer (files.h)
 * and the probe that asks the kernel whether the table's slot may be read by a typed load
 * (fd_table_probe.bpf.c). No maps, no globals: the probe object must stay this small.
 */
#ifndef TRACERD_FD_TABLE_H
#define TRACERD_FD_TABLE_H

/*
 * The task, its fd table and the table's size and array are typed loads (tracing programs:
 * tp_btf, fexit). The array's slot, at an index the verifier cannot bound, is a typed load
 * too where the verifier reads a pointer to a non-struct type as untrusted memory (6.18
 * does, 6.12 does not: `typed_slot`, from the probe); else one helper copy, about 50 ns of
 * BPF time per Redis request on a server whose every request is a short socket read.
 */
static __always_inline struct file *fd_table_file(int fd, bool typed_slot)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct files_struct *files = task->files;
	struct fdtable *fdt;
	struct file **fds;
	struct file *f = NULL;

	if (!files)
		return NULL;
	fdt = files->fdt;
	if (!fdt || fd < 0 || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	fds = fdt->fd;
	if (typed_slot)
		return fds[fd];
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

#endif
