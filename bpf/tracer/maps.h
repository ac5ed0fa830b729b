/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * All the state of the tracer's programs, in one place: the read-only configuration user space
 * sets before load (.rodata), the few global variables (.bss), the anchors that make the
 * skeleton emit a Rust type for every record, and every map (.maps), with the structs that are
 * only map values. The other headers own the logic that reads and writes them; user space sees
 * all of it through the skeleton under these names. Definitions keep their order: it is the
 * order of the object's sections.
 */
#ifndef TRACERD_TRACER_MAPS_H
#define TRACERD_TRACER_MAPS_H

#include "events.h"

/* Set by user space before load. */
const volatile __u32 filter_targets = 0; /* 0 = every process but ours */
const volatile __u32 self_tgid = 0;
const volatile __u64 wakeup_bytes = 1 << 20;
const volatile __u32 count_syscalls = 0;  /* count every syscall of the targets */
const volatile __u32 function_events = 1; /* 0 = uprobe hits are only counted */
/* Set by user space before load and again at a reload (SIGHUP, `tracerd reload`): in .data,
 * not .rodata, so that a running daemon can change them. */
volatile __u64 gap_ns = 5000000000ULL;
volatile __u64 pause_ns = 3000000000ULL;
/* How long after its start a target's read-only opens under /etc are recorded as its
 * configuration (config_opens.h); 0 = never, and the verifier drops that code. */
const volatile __u64 config_window_ns = 0;
/* Entries in target_cgroups, and the least and greatest level (depth below the cgroup v2
 * root) among them: a task's ancestors are looked up only at those levels. */
const volatile __u32 target_cgroup_count = 0;
const volatile __u32 cgroup_level_min = 0;
const volatile __u32 cgroup_level_max = 0;
/* Entries of conn_slots, free_conn_slots and conns. */
const volatile __u32 conn_capacity = 65536;
/* Datagram flows (flows.h): entries of `flows` in all, and per process. */
const volatile __u32 flows_per_process = 256;
/* Whether the kernel reads an fd table's slot by a typed load (fd_table.h, probed at start). */
const volatile bool typed_fd_slot = false;

/* Threads currently in `pauses`; lets sched_switch skip the lookup when 0. */
__u64 pending_pauses = 0;

/* Boot time until which some target may still be in its start window (set at each target's
 * fork or exec, config_opens.h): past it, a successful open costs one compare. */
__u64 config_window_until = 0;

/* jiffies and monotonic time at the first look: the tick rate measured since then
 * converts the sockets' jiffies time stamps without needing the kernel's HZ. */
__u64 calib_jiffies = 0;
__u64 calib_mono_ns = 0;

/* One past the highest slot of conn_slots ever taken (at most conn_capacity): looks stop there. */
__u32 conn_slots_used = 0;

/* Anchors so that the skeleton emits Rust types for every record. */
struct tracerd_syscall_failure _sf = {};
struct tracerd_function_hit _fh = {};
struct tracerd_network_gap _ng = {};
struct tracerd_process_state_event _ps = {};
struct tracerd_process_start _pst = {};
struct tracerd_config_open _co = {};
struct tracerd_process_rename _prn = {};
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

/* cgroup v2 ids (the kernfs node id, the cgroup directory's inode number) of subtrees
 * whose processes are targets */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u8);
} target_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACERD_MAX_SYSCALL);
	__type(key, __u32);
	__type(value, struct tracerd_syscall_arg);
} syscall_args SEC(".maps");

/* The cwds of the targets that changed theirs (cwd.h), by open id. Files behind fds are not
 * kept here: they are named from the fd table when a call fails (fdnames.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct tracerd_open_file);
} open_files SEC(".maps");

/* Watched connections, in slots: a look walks the slots ever used (network.h), not every
 * bucket of a hash. Full means new connections go unwatched (counted); closed ones give
 * their slot back to free_conn_slots. conns finds a socket's slot: a plain hash (LRU
 * bookkeeping on every lookup cost more than the lookup when packets looked it up). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct tracerd_conn);
} conn_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK);
	__uint(max_entries, 65536);
	__type(value, __u32);
} free_conn_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} conns SEC(".maps");

/* The targets' datagram flows (flows.h), and how many each process holds: both bounded, a
 * flow that does not fit is counted. User space removes those of ended processes and those
 * idle for long (tracerd/src/flows.rs). Sized by configuration before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tracerd_flow_key);
	__type(value, struct tracerd_flow);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* its entries in flows */
} flow_counts SEC(".maps");

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

/* Per CPU: whether the task it runs may be a target that holds a datagram socket (targets.h,
 * cpu_may_run_datagram_target). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cpu_runs_datagram_target SEC(".maps");

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

/*
 * In front of the target set, a count of targets per slot (tgid modulo TARGET_SLOTS): the
 * set's bucket array (1 MiB) is cold in the cache on most syscalls, and a lookup there cost
 * about 100 ns per short read or failed call of every process on a busy host; a process
 * whose slot holds no target stops at this 16 KiB array. Only add_target and forget_target
 * change the set, so the counts stay exact: user space adds through register_target.
 */
#define TARGET_SLOTS 4096
__u32 target_slots[TARGET_SLOTS];

/*
 * The processes that may hold an IPv4 or IPv6 datagram socket (targets.h): those that made
 * one, their descendants, and those user space found holding one at start; any process, not
 * only targets, so that one that becomes a target later is known. The same count per slot
 * in front as for the targets. A full set is not counted (nothing is lost): from then on
 * every process may hold one, as if there were no set.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} datagram_procs SEC(".maps");

__u32 datagram_slots[TARGET_SLOTS];
__u32 datagram_procs_full;

/* The path walk (paths.h; for cwd.h and fdnames.h): the path is assembled backwards in the first half of a buffer twice
 * its size, so every masked write stays inside the buffer. */
#define CWD_HALF TRACERD_PATH_LEN

/*
 * The names of files that calls failed on, walked once (fdnames.h): keyed by what the name is
 * a function of, so another file (a closed fd's number reused, a struct file or dentry freed
 * and reallocated) or a rename of the file itself (a new parent or a new name hash) misses.
 * What the key does not see: a rename of one of the file's ancestor directories, or a mount
 * moved, keeps the old name until the entry is evicted.
 */
struct fd_name_key {
	struct dentry *dentry;
	struct vfsmount *mnt;
	struct dentry *parent;  /* d_parent */
	__u64 name_hash_len;    /* d_name.hash_len: the name's hash and length */
	struct dentry *root;    /* the task's root (a chroot, a container): where the walk ends */
};

struct fd_name {
	__u32 len; /* with the NUL */
	char path[TRACERD_PATH_LEN];
};

/* 4,096 names, about 1.4 MiB: the files failing at once on a host are far fewer than the files
 * open (a full disk, a read-only mount: a handful of logs and data files), and a miss costs
 * only one walk (about 700 ns). */
#define FD_NAME_CACHE_ENTRIES 4096

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FD_NAME_CACHE_ENTRIES);
	__type(key, struct fd_name_key);
	__type(value, struct fd_name);
} fd_names SEC(".maps");

struct cwd_walk {
	char buf[2 * CWD_HALF];
	struct dentry *root_dentry; /* the task's root, where the walk ends (paths.h) */
	struct vfsmount *root_mnt;
	/* fdnames.h's cache key and new entry: here, not on the stack, which 6.1 limits to
	 * 512 bytes across the failure path's calls */
	struct fd_name_key name_key;
	struct fd_name name;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cwd_walk);
} cwd_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);   /* tgid */
	__type(value, __u64); /* open id of its cwd's open_files entry */
} cwds SEC(".maps");

/*
 * The configuration files each process has reported (config_opens.h): a process that opens
 * the same file again in its start window (glibc reads /etc/hosts at every lookup) sends
 * it once. Keyed by the process's start time too, so a reused pid is a new process; an
 * evicted entry only sends the file again, which user space ignores.
 */
struct config_seen_key {
	__u64 start_ns; /* the process's start (its leader's start_boottime) */
	__u64 ino;
	__u32 tgid;
	__u32 dev;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096); /* processes in their start window at once, times their files */
	__type(key, struct config_seen_key);
	__type(value, __u8);
} config_seen SEC(".maps");

#endif
