/*
 * bbkill: a "production" crash at a precise point, independent of the reproducer: runs a
 * command and kills it with a signal right after its Nth call of one syscall that names a
 * matching path has returned -- before the command runs one more instruction.
 *
 *   bbkill [-o LOG] [-s SIGNAL] -e SYSCALL -n N [-P GLOB] -- CMD [ARG]...
 *
 * SIGNAL defaults to SIGKILL. GLOB is matched (fnmatch without FNM_PATHNAME: '*' matches
 * '/') against the file behind the call's fd argument (fd calls: read, write, fsync, ...)
 * or its path argument made absolute with the caller's cwd (open, openat, ...).
 *
 * How: the command is traced with ptrace; a seccomp filter returning SECCOMP_RET_TRACE for
 * SYSCALL stops it only at that syscall's entry; the Nth matching call is resumed with
 * PTRACE_SYSCALL, so it runs completely and stops again at its exit, where the signal is
 * sent. The kill is real (tracerd records "killed by SIGKILL from pid P (bbkill)") and
 * leaves nothing else behind in a trace.
 *
 * Why not strace -e inject=SYSCALL:signal=SIGKILL:when=N: strace delivers the signal at
 * the syscall's entry, so the call never runs, and the kernel's sys_exit tracepoint reports
 * it as failed with ENOSYS -- tracerd's dump shows a spurious "write(...) = -38 ENOSYS"
 * before the death, and no sender. (Failures injected with -e inject=...:error= are worse:
 * strace sets the syscall number to -1, so tracerd sees no failed call at all.)
 *
 * Limits: the command's other threads and children are not followed (the chosen calls must
 * come from its main thread). Exit status: the command's (128+signal when it was killed).
 * SIGTERM, SIGINT and SIGHUP are forwarded to the command.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

enum arg_kind { ARG_FD, ARG_PATH, ARG_PATH_AT };

struct sysdesc {
	const char *name;
	int nr;
	enum arg_kind kind;
	int index; /* the argument that names the fd or path */
};

static const struct sysdesc syscalls[] = {
	{ "read", SYS_read, ARG_FD, 0 },        { "write", SYS_write, ARG_FD, 0 },
	{ "pread64", SYS_pread64, ARG_FD, 0 },  { "pwrite64", SYS_pwrite64, ARG_FD, 0 },
	{ "readv", SYS_readv, ARG_FD, 0 },      { "writev", SYS_writev, ARG_FD, 0 },
	{ "fsync", SYS_fsync, ARG_FD, 0 },      { "fdatasync", SYS_fdatasync, ARG_FD, 0 },
	{ "ftruncate", SYS_ftruncate, ARG_FD, 0 }, { "close", SYS_close, ARG_FD, 0 },
	{ "open", SYS_open, ARG_PATH, 0 },      { "openat", SYS_openat, ARG_PATH_AT, 1 },
	{ "unlink", SYS_unlink, ARG_PATH, 0 },  { "rename", SYS_rename, ARG_PATH, 0 },
	{ NULL, 0, ARG_FD, 0 },
};

static const struct { const char *name; int value; } signals[] = {
	{ "SIGKILL", SIGKILL }, { "SIGTERM", SIGTERM }, { "SIGSEGV", SIGSEGV },
	{ "SIGABRT", SIGABRT }, { "SIGBUS", SIGBUS },   { NULL, 0 },
};

static FILE *logf;
static pid_t child = -1;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "bbkill: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	fprintf(logf, "bbkill %ld.%03ld: ", (long)ts.tv_sec, ts.tv_nsec / 1000000);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(logf, fmt, ap);
	va_end(ap);
	fprintf(logf, "\n");
	fflush(logf);
}

static int read_string(pid_t pid, unsigned long addr, char *out, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, out, size - 1, (off_t)addr);
	close(fd);
	if (n <= 0)
		return -1;
	out[n] = 0;
	return 0;
}

static int link_of(pid_t pid, const char *what, char *out, size_t size)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/%s", pid, what);
	ssize_t n = readlink(path, out, size - 1);
	if (n < 0)
		return -1;
	out[n] = 0;
	return 0;
}

/* The path the call at a seccomp stop names; 0 on success. */
static int call_path(const struct sysdesc *s, const struct user_regs_struct *regs, char *out, size_t size)
{
	unsigned long args[3] = { regs->rdi, regs->rsi, regs->rdx };
	char what[64], raw[PATH_MAX], base[PATH_MAX];
	if (s->kind == ARG_FD) {
		snprintf(what, sizeof(what), "fd/%d", (int)args[s->index]);
		return link_of(child, what, out, size);
	}
	if (read_string(child, args[s->index], raw, sizeof(raw)) < 0)
		return -1;
	if (raw[0] == '/') {
		snprintf(out, size, "%s", raw);
		return 0;
	}
	if (s->kind == ARG_PATH_AT && (int)args[0] != AT_FDCWD)
		snprintf(what, sizeof(what), "fd/%d", (int)args[0]);
	else
		snprintf(what, sizeof(what), "cwd");
	if (link_of(child, what, base, sizeof(base)) < 0)
		return -1;
	snprintf(out, size, "%s/%s", strcmp(base, "/") ? base : "", strncmp(raw, "./", 2) ? raw : raw + 2);
	return 0;
}

/* In the child: be traced, install the filter, exec. */
static NOINLINE void start_child(const struct sysdesc *s, char **argv)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)s->nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fprog = { sizeof(prog) / sizeof(prog[0]), prog };
	if (ptrace(PTRACE_TRACEME, 0, 0, 0) < 0 || raise(SIGSTOP) != 0) {
		perror("bbkill: ptrace");
		_exit(127);
	}
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) < 0) {
		perror("bbkill: seccomp");
		_exit(127);
	}
	execvp(argv[0], argv);
	fprintf(stderr, "bbkill: exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static void forward(int sig)
{
	if (child > 0)
		kill(child, sig);
}

static void usage(void)
{
	fprintf(stderr, "usage: bbkill [-o LOG] [-s SIGNAL] -e SYSCALL -n N [-P GLOB] -- CMD [ARG]...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const struct sysdesc *sys = NULL;
	const char *glob = NULL, *log_path = NULL;
	unsigned long when = 0;
	int sig = SIGKILL, opt;
	while ((opt = getopt(argc, argv, "+e:n:P:s:o:h")) != -1) {
		switch (opt) {
		case 'e':
			for (const struct sysdesc *s = syscalls; s->name; s++)
				if (strcmp(s->name, optarg) == 0)
					sys = s;
			if (!sys)
				die("unknown syscall '%s' (see the table in bbkill.c)", optarg);
			break;
		case 'n': when = strtoul(optarg, NULL, 10); break;
		case 'P': glob = optarg; break;
		case 's':
			sig = 0;
			for (int i = 0; signals[i].name; i++)
				if (strcmp(signals[i].name, optarg) == 0)
					sig = signals[i].value;
			if (!sig)
				die("unknown signal '%s'", optarg);
			break;
		case 'o': log_path = optarg; break;
		default: usage();
		}
	}
	if (!sys || when == 0 || optind >= argc)
		usage();
	logf = stderr;
	if (log_path && !(logf = fopen(log_path, "ae")))
		die("cannot open log %s", log_path);

	child = fork();
	if (child < 0)
		die("fork: %s", strerror(errno));
	if (child == 0)
		start_child(sys, argv + optind);
	struct sigaction sa = { 0 };
	sa.sa_handler = forward;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	int status;
	if (waitpid(child, &status, 0) != child || !WIFSTOPPED(status))
		die("the command did not stop for tracing");
	ptrace(PTRACE_SETOPTIONS, child, 0,
	       PTRACE_O_TRACESECCOMP | PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL);
	ptrace(PTRACE_CONT, child, 0, 0);
	unsigned long matched = 0;
	for (;;) {
		if (waitpid(child, &status, __WALL) < 0) {
			if (errno == EINTR)
				continue;
			die("waitpid: %s", strerror(errno));
		}
		if (WIFEXITED(status))
			return WEXITSTATUS(status);
		if (WIFSIGNALED(status))
			return 128 + WTERMSIG(status);
		if (!WIFSTOPPED(status))
			continue;
		int stop = WSTOPSIG(status), event = status >> 16;
		if (stop == SIGTRAP && event == PTRACE_EVENT_SECCOMP) {
			struct user_regs_struct regs;
			char path[2 * PATH_MAX + 64];
			ptrace(PTRACE_GETREGS, child, 0, &regs);
			int named = call_path(sys, &regs, path, sizeof(path)) == 0;
			int armed = 0;
			if (!glob || (named && fnmatch(glob, path, 0) == 0))
				armed = ++matched == when;
			if (armed)
				note("%s(%s) call %lu in pid %d: %s when it returns", sys->name, named ? path : "?",
				     matched, child, strsignal(sig));
			/* armed: run this call and stop at its exit; otherwise run freely */
			ptrace(armed ? PTRACE_SYSCALL : PTRACE_CONT, child, 0, 0);
		} else if (stop == (SIGTRAP | 0x80)) {
			/* the exit stop of the armed call: it ran; no instruction of the caller follows */
			kill(child, sig);
			note("sent %s to pid %d after the call returned", strsignal(sig), child);
			ptrace(PTRACE_CONT, child, 0, 0);
		} else if (stop == SIGTRAP && event) {
			ptrace(PTRACE_CONT, child, 0, 0); /* the exec event */
		} else {
			ptrace(PTRACE_CONT, child, 0, stop); /* a signal for the command: deliver it */
		}
	}
}
