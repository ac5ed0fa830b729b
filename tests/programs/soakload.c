/*
 * soakload: the steady, mixed load of scripts/bench-soak, one kind per process, each at a
 * fixed rate until killed:
 *
 *   soakload fail RATE          RATE failed calls a second: openat() of a missing file (a new
 *                               name each time, so paths are not all one blob) and close(-1)
 *   soakload churn RATE         RATE short-lived processes a second: fork, exec of this
 *                               program as `child` (one failed openat, then exit)
 *   soakload tcp PORT CONNS     CONNS loopback TCP connections open at any time, each
 *                               connected, one request and its echo, idle 1 to 8 s (some past
 *                               the default gap_ms), closed; the server is a forked child
 *   soakload pauses PERIOD_S STOP_MS
 *                               a sleeping child stopped (SIGSTOP) for STOP_MS every PERIOD_S
 *   soakload child              what churn execs
 *
 * Counts go to stdout every 10 s ("fail 10000", "churn 2000", ...), so the driver can say
 * what load ran.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char self[4096];

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(long long t)
{
	struct timespec ts = { t / 1000000000LL, t % 1000000000LL };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void sleep_ms(long ms)
{
	sleep_until(now_ns() + ms * 1000000LL);
}

static void report(const char *what, long long *count, long long *next)
{
	if (now_ns() < *next)
		return;
	printf("%s %lld\n", what, *count);
	fflush(stdout);
	*next += 10000000000LL;
}

/* Calls `one` RATE times a second, in 10 ms steps. */
static int at_rate(const char *what, long rate, void (*one)(long long))
{
	long long count = 0, next_report = now_ns() + 10000000000LL, t = now_ns();
	long per_step = rate / 100 > 0 ? rate / 100 : 1;
	long long step = rate >= 100 ? 10000000LL : 1000000000LL / rate;

	for (;;) {
		for (long i = 0; i < per_step; i++)
			one(count++);
		report(what, &count, &next_report);
		t += step;
		sleep_until(t);
	}
}

static void fail_one(long long i)
{
	char path[64];

	if (i % 2) {
		close(-1);
		return;
	}
	snprintf(path, sizeof(path), "/nonexistent/soak/%lld", i % 100000);
	open(path, O_RDONLY);
}

static void churn_one(long long i)
{
	(void)i;
	pid_t p = fork();
	if (p == 0) {
		char *argv[] = { "soakload", "child", NULL };
		execv(self, argv);
		_exit(127);
	}
}

static int tcp_server(int port)
{
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 128)) {
		perror("soakload tcp: bind/listen");
		return 1;
	}
	/* one forked echo child per connection, reaped automatically */
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0)
			continue;
		if (fork() == 0) {
			char buf[64];
			ssize_t n;
			close(s);
			while ((n = read(c, buf, sizeof(buf))) > 0)
				if (write(c, buf, n) != n)
					break;
			_exit(0);
		}
		close(c);
	}
}

struct conn {
	int fd;
	long long close_at;
};

static int tcp_open(int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	char buf[8];

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) || write(s, "ping", 4) != 4 || read(s, buf, 4) != 4) {
		close(s);
		return -1;
	}
	return s;
}

static int tcp(int port, int conns)
{
	struct conn *c = calloc(conns, sizeof(*c));
	long long opened = 0, next_report = now_ns() + 10000000000LL;

	if (fork() == 0)
		return tcp_server(port);
	sleep_ms(300);
	for (int i = 0; i < conns; i++)
		c[i].fd = -1;
	srand(getpid());
	for (;;) {
		long long t = now_ns();
		for (int i = 0; i < conns; i++) {
			if (c[i].fd >= 0 && t < c[i].close_at)
				continue;
			if (c[i].fd >= 0)
				close(c[i].fd);
			c[i].fd = tcp_open(port);
			c[i].close_at = t + (1000 + rand() % 7000) * 1000000LL;
			opened += c[i].fd >= 0;
		}
		report("tcp", &opened, &next_report);
		sleep_ms(50);
	}
}

static int pauses(long period_s, long stop_ms)
{
	long long stopped = 0, next_report = now_ns() + 10000000000LL;
	pid_t p = fork();

	if (p == 0) {
		for (;;)
			sleep_ms(1000);
	}
	for (;;) {
		for (long i = 0; i < period_s * 10; i++) {
			sleep_ms(100);
			report("pauses", &stopped, &next_report);
		}
		kill(p, SIGSTOP);
		sleep_ms(stop_ms);
		kill(p, SIGCONT);
		stopped++;
	}
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0 || argc < 2) {
		fprintf(stderr, "usage: soakload fail RATE | churn RATE | tcp PORT CONNS | pauses PERIOD_S STOP_MS\n");
		return 2;
	}
	self[n] = 0;
	/* children end on their own (churn, the echo server's); nobody waits for them */
	signal(SIGCHLD, SIG_IGN);
	if (!strcmp(argv[1], "child"))
		return open("/nonexistent/soak/child", O_RDONLY) < 0 ? 0 : 1;
	if (!strcmp(argv[1], "fail") && argc >= 3)
		return at_rate("fail", atol(argv[2]), fail_one);
	if (!strcmp(argv[1], "churn") && argc >= 3)
		return at_rate("churn", atol(argv[2]), churn_one);
	if (!strcmp(argv[1], "tcp") && argc >= 4)
		return tcp(atoi(argv[2]), atoi(argv[3]));
	if (!strcmp(argv[1], "pauses") && argc >= 4)
		return pauses(atol(argv[2]), atol(argv[3]));
	fprintf(stderr, "soakload: unknown mode %s\n", argv[1]);
	return 2;
}
