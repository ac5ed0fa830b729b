/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The life of a target process: pauses (a thread off the CPU in an uninterruptible, stopped,
 * traced or frozen state for pause_ns or longer, measured in sched_switch), the last
 * terminating or stopping signal sent to it and by whom, its exit (exit code, or the killing
 * signal and its sender), and its start: a fork of a target makes the child a target (with its
 * parent's cwd), an exec whose comm, executable, systemd unit or cgroup matches makes the
 * process one, and so does a move into a target cgroup (cgroup.procs written, no exec); and its
 * renames: a new name of its main thread, with the argv it then shows.
 */
#ifndef TRACERD_TRACER_PROCESS_H
#define TRACERD_TRACER_PROCESS_H

#include "maps.h"
#include "output.h"
#include "targets.h"
#include "cwd.h"
#include "config_opens.h"

#define TASK_UNINTERRUPTIBLE 0x0002
#define __TASK_STOPPED 0x0004
#define __TASK_TRACED 0x0008
#define TASK_NOLOAD 0x0400
#define TASK_FROZEN 0x8000

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

	set_cpu_runs_datagram_target(may_be_datagram_target(next->tgid));
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
	if (may_hold_datagrams(tgid) && BPF_CORE_READ(p, signal, live.counter) == 0)
		forget_datagram_process(tgid);
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
	struct tracerd_process_start *e;

	open_config_window();
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_START);
	if (!e)
		return;
	fill_header(&e->h, TRACERD_EV_PROCESS_START);
	e->h.pid = pid;
	e->h.tid = pid;
	e->ppid = ppid;
	e->is_exec = bprm != 0;
	e->args_len = 0;
	e->exe[0] = 0;
	if (p && !bprm) /* moved into a target cgroup by another task: the header has its comm */
		BPF_CORE_READ_STR_INTO(&e->h.comm, p, comm);
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

#define PF_KTHREAD 0x00200000

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 cpid = BPF_CORE_READ(child, pid);

	if (cpid != BPF_CORE_READ(child, tgid))
		return 0; /* a new thread, not a new process */
	/* CLONE_FILES: either one's new socket is the other's (kthreadd makes every kernel
	 * thread so, and they make no send or recv calls) */
	if (BPF_CORE_READ(child, files) == BPF_CORE_READ(parent, files) &&
	    !(BPF_CORE_READ(child, flags) & PF_KTHREAD))
		add_datagram_process(ptgid);
	if (holds_datagrams(ptgid))
		add_datagram_process(cpid);
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
	if (bpf_map_lookup_elem(&target_units, s->unit))
		return true;
	return target_cgroup_count && in_target_cgroup(p);
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

/* A process moved into a cgroup (the leader, for a whole thread group): fired after the
 * move, so `task`'s css_set is already the new one. Only loaded with target cgroups. */
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(on_cgroup_attach, struct cgroup *dst, const char *path, struct task_struct *task, bool threadgroup)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);

	if (!filter_targets || is_target(tgid) || !in_target_cgroup(task))
		return 0;
	if (add_target(tgid))
		return 0;
	emit_start(tgid, BPF_CORE_READ(task, real_parent, tgid), task, 0);
	return 0;
}

/*
 * A target's main thread renamed (prctl(PR_SET_NAME), a write to /proc/PID/comm): what ps
 * shows changed without an exec, as when a forked child names its role (redis-rdb-bgsave).
 * Left out: other threads (their names are not the process's), kernel threads (no mm), a
 * rename by another process (its argv is not readable from here: comm_write allows only the
 * own thread group anyway), and an exec's own rename, which comes before the new mm has its
 * argv (arg_start still 0) and is followed by the exec's record.
 */
SEC("tp_btf/task_rename")
int BPF_PROG(on_task_rename, struct task_struct *task, const char *comm)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	struct tracerd_process_rename *e;
	unsigned long start, end;
	struct mm_struct *mm;
	__u32 len;

	if (BPF_CORE_READ(task, pid) != tgid || (bpf_get_current_pid_tgid() >> 32) != tgid)
		return 0;
	if (!is_target(tgid))
		return 0;
	mm = BPF_CORE_READ(task, mm);
	if (!mm)
		return 0;
	start = BPF_CORE_READ(mm, arg_start);
	end = BPF_CORE_READ(mm, arg_end);
	if (!start)
		return 0;
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_START);
	if (!e)
		return 0;
	fill_header(&e->h, TRACERD_EV_PROCESS_RENAME);
	e->h.tid = tgid;
	bpf_probe_read_kernel_str(e->h.comm, sizeof(e->h.comm), comm);
	e->args_len = 0;
	e->reserved = 0;
	len = end > start ? end - start : 0;
	if (len > TRACERD_ARGS_LEN)
		len = TRACERD_ARGS_LEN;
	if (len && !bpf_probe_read_user(e->args, len & (TRACERD_ARGS_LEN - 1) ?: TRACERD_ARGS_LEN, (void *)start))
		e->args_len = len;
	submit(e);
	return 0;
}

#endif
