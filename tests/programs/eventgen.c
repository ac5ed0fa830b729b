/*
 * eventgen: a small target program for the system tests. Each mode produces one kind of
 * externally visible event, deterministically:
 *
 *   eventgen fail-path PATH        openat(PATH) that fails (ENOENT expected)
 *   eventgen fail-fd PATH          opens PATH read-only, then write()s to it (EBADF)
 *   eventgen marker N              calls tracerd_test_marker() N times
 *   eventgen marker-after FILE N   waits until FILE exists, then calls tracerd_test_marker() N times
 *   eventgen calls N M             calls tracerd_test_marker() N times and getppid() M times
 *   eventgen storm N               N failing syscalls (close(-1)), as fast as possible
 *   eventgen sleep MS              sleeps (to be paused or killed from outside)
 *   eventgen tcp-server PORT       accepts one connection, echoes until EOF
 *   eventgen tcp-client IP PORT SILENCE_MS
 *                                  connects, sends, goes silent for SILENCE_MS, sends again
 *   eventgen fork-fail PATH        a forked child fails openat(PATH)
 *   eventgen threads N             N threads spin, then the main thread exits with 3: all
 *                                  of them end at once
 *   eventgen refused-connect PORT HOLD_MS
 *                                  a non-blocking connect to 127.0.0.1:PORT (nobody listens:
 *                                  EINPROGRESS, then reset), the socket kept open HOLD_MS
 *   eventgen chdir DIR             fails openat("before"), chdir(DIR), a forked child fails
 *                                  openat("child-missing"); then fchdir() into DIR's "sub"
 *                                  and fails openat("fchdir-missing") (all relative)
 *   eventgen crash-handler PATH    fails openat(PATH), then aborts: its SIGABRT handler forks
 *                                  two helpers that each fail two execve()s and exit 1, waits
 *                                  for them, and dies of the SIGABRT (a backtrace printer)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void tracerd_test_marker(int i)
{
	/* keep the call from being optimised away */
	__asm__ volatile("" : : "r"(i) : "memory");
}

__attribute__((noinline)) void tracerd_test_other(int i)
{
	__asm__ volatile("" : : "r"(i) : "memory");
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static int tcp_server(int port)
{
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0), c;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	char buf[256];
	ssize_t n;

	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 4)) {
		perror("bind/listen");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	c = accept(s, NULL, NULL);
	if (c < 0) {
		perror("accept");
		return 1;
	}
	while ((n = read(c, buf, sizeof(buf))) > 0)
		if (write(c, buf, n) != n)
			break;
	return 0;
}

static int refused_connect(int port, long hold_ms)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
		return 1;
	printf("connect: %s\n", strerror(errno));
	fflush(stdout);
	sleep_ms(hold_ms);
	close(s);
	return 0;
}

static int tcp_client(const char *ip, int port, long silence_ms)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	char buf[16];

	inet_pton(AF_INET, ip, &a.sin_addr);
	for (int i = 0; connect(s, (struct sockaddr *)&a, sizeof(a)); i++) {
		if (i > 50) {
			perror("connect");
			return 1;
		}
		close(s);
		s = socket(AF_INET, SOCK_STREAM, 0);
		sleep_ms(100);
	}
	if (write(s, "hello", 5) != 5 || read(s, buf, 5) != 5)
		return 1;
	sleep_ms(silence_ms);
	if (write(s, "again", 5) != 5 || read(s, buf, 5) != 5)
		return 1;
	close(s);
	return 0;
}

static pthread_barrier_t started;

static void *spin(void *arg)
{
	pthread_barrier_wait(&started);
	for (volatile unsigned long i = 0;; i++)
		;
	return arg;
}

static int threads(int n)
{
	pthread_t t;

	pthread_barrier_init(&started, NULL, n + 1);
	for (int i = 0; i < n; i++)
		if (pthread_create(&t, NULL, spin, NULL))
			return 1;
	pthread_barrier_wait(&started);
	exit(3);
}

/* A fatal-signal handler as servers have them: helpers forked to print a backtrace, which
 * fail to find their program and exit 1; then the default action. */
static void crash_handler(int sig)
{
	static char *const none[] = { "helper", NULL };
	for (int i = 0; i < 2; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			execve("/nonexistent-a/eventgen-helper", none, none + 1);
			execve("/nonexistent-b/eventgen-helper", none, none + 1);
			_exit(1);
		}
		waitpid(pid, NULL, 0);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: eventgen MODE ARG...\n");
		return 2;
	}
	const char *mode = argv[1];
	if (!strcmp(mode, "fail-path")) {
		int fd = openat(AT_FDCWD, argv[2], O_RDONLY);
		return fd < 0 ? 0 : 1;
	}
	if (!strcmp(mode, "fail-fd")) {
		int fd = open(argv[2], O_RDONLY);
		if (fd < 0) {
			perror("open");
			return 1;
		}
		return write(fd, "x", 1) < 0 ? 0 : 1;
	}
	if (!strcmp(mode, "marker")) {
		int n = atoi(argv[2]);
		for (int i = 0; i < n; i++)
			tracerd_test_marker(i);
		tracerd_test_other(n);
		return 0;
	}
	if (!strcmp(mode, "marker-after") && argc >= 4) {
		int n = atoi(argv[3]);
		while (access(argv[2], F_OK))
			sleep_ms(50);
		for (int i = 0; i < n; i++)
			tracerd_test_marker(i);
		return 0;
	}
	if (!strcmp(mode, "calls") && argc >= 4) {
		int n = atoi(argv[2]), m = atoi(argv[3]);
		for (int i = 0; i < n; i++)
			tracerd_test_marker(i);
		/* the raw syscall: no libc wrapper may answer from a cache */
		for (int i = 0; i < m; i++)
			syscall(SYS_getppid);
		return 0;
	}
	if (!strcmp(mode, "storm")) {
		long n = atol(argv[2]);
		for (long i = 0; i < n; i++)
			close(-1);
		return 0;
	}
	if (!strcmp(mode, "bad-sleep")) {
		/* a nanosecond count over a second: EINVAL */
		struct timespec bad = { .tv_sec = 0, .tv_nsec = 2000000000L };
		return clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, NULL) == EINVAL ? 0 : 1;
	}
	if (!strcmp(mode, "sleep")) {
		sleep_ms(atol(argv[2]));
		return 0;
	}
	if (!strcmp(mode, "tcp-server"))
		return tcp_server(atoi(argv[2]));
	if (!strcmp(mode, "tcp-client") && argc >= 5)
		return tcp_client(argv[2], atoi(argv[3]), atol(argv[4]));
	if (!strcmp(mode, "refused-connect") && argc >= 4)
		return refused_connect(atoi(argv[2]), atol(argv[3]));
	if (!strcmp(mode, "chdir") && argc >= 3) {
		/* let tracerd read the starting cwd from /proc first */
		sleep_ms(200);
		open("before", O_RDONLY);
		if (chdir(argv[2]))
			return 1;
		pid_t child = fork();
		if (child == 0) {
			open("child-missing", O_RDONLY);
			_exit(0);
		}
		waitpid(child, NULL, 0);
		int dir = open("sub", O_RDONLY | O_DIRECTORY);
		if (dir < 0 || fchdir(dir))
			return 1;
		open("fchdir-missing", O_RDONLY);
		return 0;
	}
	if (!strcmp(mode, "fork-fail")) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(openat(AT_FDCWD, argv[2], O_RDONLY) < 0 ? 0 : 1);
		int status = 0;
		waitpid(pid, &status, 0);
		return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	}
	if (!strcmp(mode, "threads"))
		return threads(atoi(argv[2]));
	if (!strcmp(mode, "crash-handler")) {
		openat(AT_FDCWD, argv[2], O_RDONLY);
		signal(SIGABRT, crash_handler);
		abort();
	}
	fprintf(stderr, "eventgen: unknown mode %s\n", mode);
	return 2;
}
