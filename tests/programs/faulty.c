/*
 * faulty: target program for the reproducer's precision tests. Every step logs a line to
 * stdout (unbuffered) so a test can see from the node's log how far it got.
 *
 *   faulty writes DIR          5 writes to DIR/a interleaved with 5 to DIR/b; logs each result
 *   faulty open-after DIR      opens DIR/x, calls stage_f(), opens DIR/x again
 *   faulty crash-order         calls stage_h() then stage_g(), logging around each
 *   faulty offset              calls stage_k(): logs "k first half", then "k second half"
 *   faulty ticks MS            logs a CLOCK_MONOTONIC tick every 100 ms for MS, calling stage_p() at 1 s
 *   faulty fork-write DIR      a forked child writes DIR/c 3 times
 *   faulty thread-write DIR    a second thread writes DIR/t twice
 *   faulty serve PORT          TCP echo server (one client at a time, forever)
 *   faulty ping IP PORT MS     connects, calls stage_c(), sends a line every 100 ms for MS, logging each round-trip time
 *   faulty two-faults DIR      calls stage_h(), stage_g(), then writes DIR/a twice
 *   faulty records DIR N       N writes of a 100-byte record to DIR/log, each followed by a
 *                              write to DIR/other (its own open); then 3 pwrites of a record
 *                              to DIR/plog at offsets 0, 100, 200; logs every result, how
 *                              many failed, both sizes and the zero bytes of plog
 *   faulty profile DIR MS      fails to open DIR/optional-100.conf .. -102.conf (ENOENT),
 *                              calls stage_once() once and stage_hot() 20000 times, sleeps
 *                              MS, logs "profile done"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

NOINLINE void stage_f(void) { printf("f entered\n"); }
NOINLINE void stage_g(void) { printf("g entered\n"); }
NOINLINE void stage_h(void) { printf("h entered\n"); }
NOINLINE void stage_p(void) { printf("p entered\n"); }
NOINLINE void stage_c(void) { printf("connected\n"); }

NOINLINE void stage_once(void) { printf("once entered\n"); }

NOINLINE int stage_hot(int i)
{
	__asm__ volatile("" : : "r"(i) : "memory");
	return i;
}

NOINLINE void stage_k(void)
{
	printf("k first half\n");
	__asm__ volatile(".globl stage_k_mid\nstage_k_mid:\n" ::: "memory");
	printf("k second half\n");
}

static int write_to(const char *dir, const char *name, int i)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd < 0)
		return -errno;
	int r = write(fd, "x\n", 2) < 0 ? -errno : 0;
	close(fd);
	printf("write %d to %s: %s\n", i, name, r ? strerror(-r) : "ok");
	return r;
}

static long file_size(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 ? (long)st.st_size : -1;
}

/* Each result as the program sees it: a byte count (short ones included) or the error. */
static int records(const char *dir, int n)
{
	char path[512], rec[100], back[300];
	int failed = 0, zeros = 0;
	memset(rec, 'r', sizeof(rec));
	snprintf(path, sizeof(path), "%s/log", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	snprintf(path, sizeof(path), "%s/plog", dir);
	int pfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || pfd < 0)
		return 1;
	for (int i = 1; i <= n; i++) {
		long r = write(fd, rec, sizeof(rec));
		if (r < 0) {
			failed++;
			printf("record %d: %s\n", i, strerror(errno));
		} else {
			printf("record %d: %ld\n", i, r);
		}
		write_to(dir, "other", i);
	}
	for (int i = 1; i <= 3; i++) {
		long r = pwrite(pfd, rec, sizeof(rec), (i - 1) * 100);
		printf("precord %d: %ld\n", i, r);
	}
	long got = pread(pfd, back, sizeof(back), 0);
	for (long i = 0; i < got; i++)
		zeros += back[i] == 0;
	printf("failed %d of %d\nlog size %ld\nplog size %ld, %d zero bytes\nrecords done\n", failed, n,
	       file_size(fd), file_size(pfd), zeros);
	return 0;
}

static void *thread_writes(void *dir)
{
	for (int i = 1; i <= 2; i++)
		write_to(dir, "t", i);
	return NULL;
}

static int open_x(const char *dir, const char *when)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/x", dir);
	int fd = open(path, O_RDONLY | O_CREAT, 0644);
	printf("open %s: %s\n", when, fd < 0 ? strerror(errno) : "ok");
	if (fd >= 0)
		close(fd);
	return 0;
}

static int serve(int port)
{
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 8))
		return 1;
	printf("listening\n");
	for (;;) {
		int c = accept(s, NULL, NULL);
		char buf[256];
		ssize_t n;
		while (c >= 0 && (n = read(c, buf, sizeof(buf))) > 0)
			if (write(c, buf, n) != n)
				break;
		close(c);
	}
}

static int ping(const char *ip, int port, long ms)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	char buf[8];
	inet_pton(AF_INET, ip, &a.sin_addr);
	if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
		printf("connect: %s\n", strerror(errno));
		return 1;
	}
	stage_c();
	double end = now_ms() + ms, worst = 0;
	while (now_ms() < end) {
		double t0 = now_ms();
		if (write(s, "ping\n", 5) != 5 || read(s, buf, 5) != 5)
			return 1;
		double rtt = now_ms() - t0;
		if (rtt > worst)
			worst = rtt;
		printf("rtt %.0f ms\n", rtt);
		sleep_ms(100);
	}
	printf("worst rtt %.0f ms\n", worst);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 2)
		return 2;
	const char *mode = argv[1];
	if (!strcmp(mode, "writes") && argc > 2) {
		for (int i = 1; i <= 5; i++) {
			write_to(argv[2], "a", i);
			write_to(argv[2], "b", i);
		}
		return 0;
	}
	if (!strcmp(mode, "records") && argc > 3)
		return records(argv[2], atoi(argv[3]));
	if (!strcmp(mode, "open-after") && argc > 2) {
		open_x(argv[2], "before f");
		stage_f();
		open_x(argv[2], "after f");
		return 0;
	}
	if (!strcmp(mode, "crash-order")) {
		stage_h();
		printf("h done\n");
		stage_g();
		printf("g done\n");
		return 0;
	}
	if (!strcmp(mode, "offset")) {
		stage_k();
		printf("k done\n");
		return 0;
	}
	if (!strcmp(mode, "ticks") && argc > 2) {
		double start = now_ms(), last = start, worst = 0;
		long ms = atol(argv[2]);
		int called = 0;
		while (now_ms() - start < ms) {
			sleep_ms(100);
			double t = now_ms();
			if (t - last > worst)
				worst = t - last;
			last = t;
			if (!called && t - start >= 1000) {
				stage_p();
				called = 1;
			}
		}
		printf("longest tick gap %.0f ms\n", worst);
		return 0;
	}
	if (!strcmp(mode, "fork-write") && argc > 2) {
		pid_t pid = fork();
		if (pid == 0) {
			for (int i = 1; i <= 3; i++)
				write_to(argv[2], "c", i);
			_exit(0);
		}
		waitpid(pid, NULL, 0);
		return 0;
	}
	if (!strcmp(mode, "thread-write") && argc > 2) {
		pthread_t t;
		if (pthread_create(&t, NULL, thread_writes, argv[2]))
			return 1;
		pthread_join(t, NULL);
		return 0;
	}
	if (!strcmp(mode, "serve") && argc > 2)
		return serve(atoi(argv[2]));
	if (!strcmp(mode, "ping") && argc > 4)
		return ping(argv[2], atoi(argv[3]), atol(argv[4]));
	if (!strcmp(mode, "profile") && argc > 3) {
		char path[512];
		for (int i = 100; i < 103; i++) {
			snprintf(path, sizeof(path), "%s/optional-%d.conf", argv[2], i);
			int fd = open(path, O_RDONLY);
			if (fd >= 0)
				close(fd);
		}
		stage_once();
		for (int i = 0; i < 20000; i++)
			stage_hot(i);
		sleep_ms(atol(argv[3]));
		printf("profile done\n");
		return 0;
	}
	if (!strcmp(mode, "two-faults") && argc > 2) {
		stage_h();
		stage_g();
		write_to(argv[2], "a", 1);
		write_to(argv[2], "a", 2);
		return 0;
	}
	return 2;
}
