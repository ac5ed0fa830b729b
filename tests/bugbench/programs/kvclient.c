/*
 * kvclient: the workload of the bug benchmark's key-value cases (torn-snapshot,
 * partition-crash-crash).
 *
 *   kvclient [-n COUNT] [-r PER_SECOND] [-t GIVE_UP_MS] HOST PORT
 *
 * Sends "SET key:I val:I" for I = 1..COUNT (default 30), one at a time, each waiting for
 * "OK"; at most PER_SECOND per second (default: as fast as answered). A lost or refused
 * connection is retried every 50 ms and the unacknowledged SET sent again; after GIVE_UP_MS
 * (default 1000) without a connection it gives up. Ends with "client: N/COUNT acknowledged"
 * (exit 0 when all were) or "client: gave up at key:I ..." (exit 1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = { (time_t)(ms / 1000), (long)((ms - (time_t)(ms / 1000) * 1000) * 1e6) };
	nanosleep(&ts, NULL);
}

static struct sockaddr_in server;

static int dial(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = { 2, 0 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(s, (struct sockaddr *)&server, sizeof(server)) != 0) {
		close(s);
		return -1;
	}
	return s;
}

/* One SET and its reply; 0 if acknowledged. */
static int set(int s, int i)
{
	char line[128], reply[64];
	int len = snprintf(line, sizeof(line), "SET key:%d val:%d\n", i, i);
	if (write(s, line, len) != len)
		return -1;
	ssize_t n = 0, r;
	while (n < (ssize_t)sizeof(reply) - 1 && (r = read(s, reply + n, sizeof(reply) - 1 - n)) > 0) {
		n += r;
		if (memchr(reply, '\n', n))
			break;
	}
	return n >= 3 && strncmp(reply, "OK\n", 3) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	int count = 30, opt;
	double rate = 0, give_up = 1000;
	while ((opt = getopt(argc, argv, "n:r:t:")) != -1) {
		switch (opt) {
		case 'n': count = atoi(optarg); break;
		case 'r': rate = atof(optarg); break;
		case 't': give_up = atof(optarg); break;
		default: fprintf(stderr, "usage: kvclient [-n COUNT] [-r PER_SECOND] [-t GIVE_UP_MS] HOST PORT\n"); return 2;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "usage: kvclient [-n COUNT] [-r PER_SECOND] [-t GIVE_UP_MS] HOST PORT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	server.sin_family = AF_INET;
	server.sin_port = htons(atoi(argv[optind + 1]));
	if (inet_pton(AF_INET, argv[optind], &server.sin_addr) != 1) {
		fprintf(stderr, "kvclient: bad address %s\n", argv[optind]);
		return 2;
	}
	int s = -1, acked = 0;
	double start = now_ms();
	for (int i = 1; i <= count; i++) {
		if (rate > 0)
			sleep_ms(start + (i - 1) * 1000.0 / rate - now_ms());
		double down_since = now_ms();
		for (;;) {
			if (s < 0)
				s = dial();
			if (s >= 0 && set(s, i) == 0)
				break;
			if (s >= 0) {
				close(s);
				s = -1;
			}
			if (now_ms() - down_since > give_up) {
				printf("client: gave up at key:%d after %.0f ms without the server (%d/%d acknowledged)\n", i,
				       give_up, acked, count);
				return 1;
			}
			sleep_ms(50);
		}
		acked++;
	}
	printf("client: %d/%d acknowledged\n", acked, count);
	return 0;
}
