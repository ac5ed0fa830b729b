/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one definition of every record that crosses the kernel/user boundary.
 *
 * The BPF programs include this header; the Rust side gets the same structs
 * from the skeleton that libbpf-cargo generates out of the object's BTF
 * (tracerd/src/bpf.rs), so a field added here shows up in Rust or the build
 * fails. Keep every struct free of implicit padding: the Rust decoder reads
 * them field by field.
 */
#ifndef TRACERD_EVENTS_H
#define TRACERD_EVENTS_H

#define TRACERD_COMM_LEN 16
#define TRACERD_PATH_LEN 256
#define TRACERD_UNIT_LEN 64
#define TRACERD_MAX_SYSCALL 512
#define TRACERD_ARGS_LEN 256 /* power of two: masks bound the copy */
#define TRACERD_EXE_LEN 128

/* Kinds of records in the events ring buffer. */
enum tracerd_event_kind {
	TRACERD_EV_SYSCALL_FAILURE = 1,
	TRACERD_EV_FUNCTION = 2,
	TRACERD_EV_NETWORK_GAP = 3,
	TRACERD_EV_PROCESS_STATE = 4,
	/* exec or fork of a traced process: feeds the process table, not the ring */
	TRACERD_EV_PROCESS_START = 5,
	/* a target opened a regular file under /etc read-only during its start: feeds the
	 * process's environment (tracerd/src/environment), not the ring */
	TRACERD_EV_CONFIG_OPEN = 6,
	/* a traced process renamed itself (prctl PR_SET_NAME, a write to /proc/PID/comm):
	 * feeds the process table, not the ring */
	TRACERD_EV_PROCESS_RENAME = 7,
};

enum tracerd_process_state {
	TRACERD_PS_PAUSED = 1,
	TRACERD_PS_EXITED = 2,
	TRACERD_PS_KILLED = 3,
};

enum tracerd_pause_cause {
	TRACERD_PAUSE_STOPPED = 1,        /* SIGSTOP / ptrace stop */
	TRACERD_PAUSE_UNINTERRUPTIBLE = 2, /* D state */
	TRACERD_PAUSE_FROZEN = 3,          /* cgroup freezer */
};

/* How a syscall's arguments name what it works on (syscall_args map). */
enum tracerd_arg_kind {
	TRACERD_ARG_NONE = 0,
	TRACERD_ARG_PATH = 1,     /* a path string in arg `index` */
	TRACERD_ARG_PATH_AT = 2,  /* dirfd in arg0, path string in arg `index` */
	TRACERD_ARG_FD = 3,       /* a file descriptor in arg `index` */
	TRACERD_ARG_SOCKADDR = 4, /* socket fd in arg0, struct sockaddr * in arg `index` */
};

/* Drop and health counters (per-CPU array `counters`). */
enum tracerd_counter {
	TRACERD_CNT_RINGBUF_FULL_SYSCALL = 0,
	TRACERD_CNT_RINGBUF_FULL_FUNCTION = 1,
	TRACERD_CNT_RINGBUF_FULL_GAP = 2,
	TRACERD_CNT_RINGBUF_FULL_PROCESS = 3,
	TRACERD_CNT_RINGBUF_FULL_START = 4, /* process_start and process_rename records */
	TRACERD_CNT_PATH_UNREADABLE = 5,   /* a path in user memory was not readable, or a cwd too deep or long (tracer/cwd.h) */
	TRACERD_CNT_TARGETS_FULL = 6,      /* a new descendant did not fit in `targets` */
	TRACERD_CNT_PAUSES_FULL = 7,
	TRACERD_CNT_CONNS_FULL = 8,        /* a connection went unwatched: `conns` full */
	TRACERD_CNT_SYSCALL_COUNTS_FULL = 9, /* a (process, syscall) pair went uncounted */
	TRACERD_CNT_FD_UNNAMED = 10,       /* the file behind a failed call's fd could not be named (tracer/fdnames.h) */
	TRACERD_CNT_RINGBUF_FULL_CONFIG = 11, /* a configuration file's open went unrecorded (tracer/config_opens.h) */
	TRACERD_CNT_FLOWS_FULL = 12,       /* a datagram whose flow found no room: its process's share or `flows` full (tracer/flows.h) */
	TRACERD_CNT_MAX = 13,
};

/* Key of syscall_counts: one counter per (process, syscall number). */
struct tracerd_syscall_key {
	__u32 tgid;
	__u32 nr;
};

struct tracerd_syscall_arg {
	__u8 kind;  /* enum tracerd_arg_kind */
	__u8 index; /* which argument */
	__u8 reserved[2];
};

/* An endpoint. family is AF_INET or AF_INET6 (0 = none); port in host order. */
struct tracerd_addr {
	__u16 family;
	__u16 port;
	__u8 addr[16];
};

struct tracerd_header {
	__u64 ts_ns; /* CLOCK_BOOTTIME; for intervals, when the interval began */
	__u32 pid;   /* thread group id */
	__u32 tid;
	__u32 kind;  /* enum tracerd_event_kind */
	__u32 reserved;
	char comm[TRACERD_COMM_LEN];
};

/* A failed syscall, or (requested != 0) a short read or write on a regular file: the call
 * succeeded with ret bytes of the requested ones. */
struct tracerd_syscall_failure {
	struct tracerd_header h;
	__s64 ret;
	__u64 open_id;   /* the cwd (open_files entry) a relative path is relative to; 0 = none */
	__u64 requested; /* short I/O: the byte count the call asked for; 0 = a failed call */
	__s32 fd;        /* -1 when the call takes no fd */
	__u32 syscall_nr;
	struct tracerd_addr peer; /* socket peer or sockaddr argument */
	__u32 path_len;  /* bytes of path including the NUL; 0 = none */
	char path[TRACERD_PATH_LEN];
};

struct tracerd_function_hit {
	struct tracerd_header h;
	__u64 function_id; /* the uprobe's attach cookie: index into the function table */
};

/* A silence of a TCP connection (protocol 6) or of a datagram flow (tracer/flows.h: a UDP
 * socket's traffic with one peer, protocol 17, or a raw IP socket's, its IP protocol). */
struct tracerd_network_gap {
	struct tracerd_header h; /* pid/comm: the process that opened the connection, if known */
	__u64 gap_ns;
	__u64 packets;           /* packets received on the connection before the gap */
	struct tracerd_addr local;
	struct tracerd_addr peer;
	__u32 ongoing;           /* the connection closed while silent */
	__u32 busy_packets;      /* packets received in the busy stretch before the gap */
	__u64 busy_ns;           /* how long that stretch lasted: from the connection's first
				  * packet after its previous gap (or from when it was
				  * watched) to its last packet before this one */
	__u32 protocol;          /* IP protocol: 6 TCP, 17 UDP, a raw socket's own */
	__u32 sent;              /* datagram flows: packets the process sent to the peer during
				  * the silence (it kept talking while it heard nothing); 0 for TCP */
	__u64 sent_before;       /* datagram flows: packets it sent to the peer before the
				  * silence (0: it only listens, as a VRRP backup does) */
};

struct tracerd_process_state_event {
	struct tracerd_header h;
	__u64 duration_ns;   /* pauses */
	__s32 exit_code;     /* exited: status passed to exit */
	__u32 state;         /* enum tracerd_process_state */
	__u32 cause;         /* enum tracerd_pause_cause, for pauses */
	__u32 signal;        /* killed: the fatal signal; paused: the stop signal, if known */
	__u32 sender_pid;    /* who sent the signal; 0 = the kernel or unknown */
	__u32 core_dumped;
	char sender_comm[TRACERD_COMM_LEN];
};

struct tracerd_process_start {
	struct tracerd_header h;
	__u32 ppid;
	__u32 is_exec;
	/* exec only, read in the kernel because a short-lived process is gone from /proc
	 * before user space could look: the file exec'd, and the first TRACERD_ARGS_LEN bytes
	 * of its argv (NUL-separated) */
	__u32 args_len;
	char exe[TRACERD_EXE_LEN];
	char args[TRACERD_ARGS_LEN];
};

/* A regular file under /etc that a target opened read-only in the first config_window_ns
 * of its life (tracer/config_opens.h): the path as the process named it. */
struct tracerd_config_open {
	struct tracerd_header h;
	__s32 fd;        /* the fd the open returned */
	__u32 path_len;  /* bytes of path including the NUL */
	char path[TRACERD_PATH_LEN];
};

/* A rename of a target's main thread: h.comm is the new name (what ps and /proc/PID/comm
 * show), args the first TRACERD_ARGS_LEN bytes of its argv area at that moment (NUL-separated;
 * a process that rewrote its argv, setproctitle-style, shows its new title there). */
struct tracerd_process_rename {
	struct tracerd_header h;
	__u32 args_len;
	__u32 reserved;
	char args[TRACERD_ARGS_LEN];
};

/* Value of open_files, keyed by open id: a target's cwd (tracer/cwd.h). Outlives the
 * process's next chdir: events refer to it. */
struct tracerd_open_file {
	__u64 open_id;
	__u64 dir_open_id; /* relative path opened against this dirfd's open; 0 = cwd */
	__u64 ino;
	__u32 tgid;
	__u32 path_len;
	char path[TRACERD_PATH_LEN];
};

/* A watched connection: a slot of conn_slots (conns gives a socket's slot). Kept current by
 * periodic looks at the socket's own receive counters, not per packet. */
struct tracerd_conn {
	__u64 last_ns;    /* boot time of the last segment received, as of the last look */
	__u64 packets;    /* segments received by then */
	__u64 checked_ns; /* the last look: nothing arrived between last_ns and this */
	__u32 pid;
	__u32 segs_in;    /* the socket's own segment counter at the last look (wraps) */
	__u32 rx_ack_j;   /* its jiffies of the last ACK and the last data received, then */
	__u32 rx_data_j;
	char comm[TRACERD_COMM_LEN];
	struct tracerd_addr local;
	struct tracerd_addr peer;
	__u64 busy_ns;       /* start of the busy stretch: the first segment after the last
			      * silence longer than gap_ns, or when watching began */
	__u32 busy_packets;  /* segments received from busy_ns to last_ns */
	__u32 reserved;
	__u64 sock;          /* the struct sock watched; 0 = a free slot */
};

/* Key of flows: a target process's datagram traffic with one peer and IP protocol. The
 * process, not the socket: a socket closed and opened again to the same peer (a resolver's
 * fresh port per query) continues its flow. port 0 for raw IP sockets. */
struct tracerd_flow_key {
	__u32 tgid;
	__u32 protocol;
	struct tracerd_addr peer;
};

/* Value of flows (tracer/flows.h): kept current by the process's own sends and receives. */
struct tracerd_flow {
	__u64 last_rx_ns;   /* boot time of the last datagram received; 0 = none yet */
	__u64 busy_ns;      /* start of the busy stretch: the first datagram after the last
			     * silence longer than gap_ns, or the flow's first */
	__u64 packets;      /* datagrams received */
	__u64 sent;         /* datagrams sent */
	__u64 last_tx_ns;   /* boot time of the last one sent; 0 = none yet */
	__u64 tx_busy_ns;   /* the first send after the last pause in sending longer than
			     * gap_ns, or the first send: it sent steadily from then to last_tx_ns */
	__u32 busy_packets; /* datagrams received from busy_ns to last_rx_ns */
	__u32 sent_since_rx; /* sent since the last one received */
	char comm[TRACERD_COMM_LEN];
	struct tracerd_addr local; /* the socket's own address, as bound (0.0.0.0 when wildcard) */
	__u32 reserved;
};

/* Value of pauses, keyed by thread id. */
struct tracerd_pause {
	__u64 start_ns;
	__u32 tgid;
	__u32 cause;
	char comm[TRACERD_COMM_LEN];
};

/* Value of last_signal, keyed by the receiving thread group id. */
struct tracerd_signal_sender {
	__u32 signal;
	__u32 pid;
	char comm[TRACERD_COMM_LEN];
};

struct tracerd_exe_key {
	__u64 dev; /* kernel dev_t encoding: major << 20 | minor */
	__u64 ino;
};

#endif
