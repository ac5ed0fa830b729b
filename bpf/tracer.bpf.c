// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * tracerd's kernel half: records failed syscalls, uprobe hits, TCP and datagram silences
 * and process states of the target processes into one ring buffer.
 *
 * Counting (for profiles): every uprobe hit of a target bumps its function's
 * per-CPU counter; with count_syscalls set, every syscall of a target bumps a
 * (process, syscall) counter. Both switches are read-only data, so the
 * verifier drops the code that is switched off.
 *
 * One header of tracer/ per concern, each with the programs (the skeleton's names) it owns:
 *   maps.h       every map, the configuration set before load, the global variables
 *   output.h     the ring buffer and the drop counters
 *   targets.h    the target set: register_target
 *   files.h      an fd's file or socket (the fd table: fd_table.h), open ids
 *   paths.h      the absolute path of a dentry on a mount, walked up
 *   network.h    connections and their silences: look_connections, on_sock_state
 *   flows.h      datagram flows (UDP, raw IP) and their silences, from the targets' sends and receives
 *   cwd.h        the cwd of the targets
 *   fdnames.h    the name of the file behind a failed call's fd
 *   config_opens.h  the files under /etc a target opens read-only at its start
 *   syscalls.h   failed syscalls, short I/O, fd/connection/cwd tracking: on_sys_exit, fexit_*
 *   functions.h  uprobes: function_hit, function_hit_multi
 *   process.h    pauses, signals, exits, forks, execs and renames: on_sched_switch,
 *                on_signal_generate, on_process_exit, on_process_fork, on_process_exec,
 *                on_task_rename
 * Each includes the ones it uses; the order below is that order.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "events.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "tracer/maps.h"
#include "tracer/output.h"
#include "tracer/targets.h"
#include "tracer/files.h"
#include "tracer/network.h"
#include "tracer/flows.h"
#include "tracer/paths.h"
#include "tracer/cwd.h"
#include "tracer/fdnames.h"
#include "tracer/config_opens.h"
#include "tracer/syscalls.h"
#include "tracer/functions.h"
#include "tracer/process.h"
