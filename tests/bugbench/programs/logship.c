/*
 * logship: a primary that journals records and ships them to a replica on another host
 * (bug benchmark case journal-gap-two-hosts: the cause on one host, the symptom on the other).
 *
 *   logship --role primary --dir DIR --replica IP:PORT --count N --interval-ms MS
 *   logship --role replica --dir DIR --listen PORT
 *
 * The primary appends record 1..N to DIR/journal, one 4 KiB block each (write on an
 * O_APPEND file), and ships every record it journaled to the replica ("REC <seq>"), one
 * every MS milliseconds; then it logs "done N records" and idles until SIGTERM. The replica
 * journals what it receives into its own DIR/journal and insists on an unbroken sequence:
 * a record that skips one is fatal ("FATAL: replication gap ...", exit 1), because its
 * journal could never be made equal to the primary's.
 *
 * The bug (on the primary): the record's sequence number is taken before the journal write
 * and not given back when the write fails -- the record is logged as skipped, and the next
 * one is shipped with the next number. So a single failed journal write on the primary's
 * host (a full disk, a disk error) kills the replica on the other host, while the primary
 * itself carries on as if nothing happened.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define BLOCK 4096

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR && !stop)
		;
}

static int open_journal(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/journal", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (fd < 0) {
		printf("FATAL: cannot open %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return fd;
}

/* One record as a journal block. Returns 0 when the whole block was written. */
NOINLINE int append_record(int journal, int seq)
{
	char block[BLOCK];
	memset(block, ' ', sizeof(block));
	int n = snprintf(block, sizeof(block), "record %d\n", seq);
	block[n] = ' ';
	block[BLOCK - 1] = '\n';
	ssize_t w = write(journal, block, BLOCK);
	if (w == BLOCK)
		return 0;
	printf("WARN: journal write of record %d failed: %s (record skipped)\n", seq,
	       w < 0 ? strerror(errno) : "short write");
	return -1;
}

NOINLINE int ship_record(int link, int seq)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "REC %d\n", seq);
	return send(link, line, n, MSG_NOSIGNAL) == n ? 0 : -1;
}

static int dial(const char *peer)
{
	char host[64];
	const char *colon = strrchr(peer, ':');
	if (!colon || colon - peer >= (long)sizeof(host)) {
		fprintf(stderr, "bad --replica %s (IP:PORT)\n", peer);
		exit(2);
	}
	memcpy(host, peer, colon - peer);
	host[colon - peer] = 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(colon + 1)) };
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
		fprintf(stderr, "bad --replica %s (IP:PORT)\n", peer);
		exit(2);
	}
	for (int i = 0; i < 100 && !stop; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
			return s;
		close(s);
		sleep_ms(50);
	}
	printf("FATAL: cannot reach the replica at %s\n", peer);
	exit(1);
}

static int run_primary(const char *dir, const char *replica, int count, long interval_ms)
{
	int journal = open_journal(dir);
	int link = dial(replica);
	printf("connected to replica %s\n", replica);
	int seq = 0;
	for (int i = 0; i < count && !stop; i++) {
		seq++; /* the bug: taken before the write, not given back when it fails */
		if (append_record(journal, seq) == 0 && link >= 0 && ship_record(link, seq) != 0) {
			printf("replica link lost at record %d: %s\n", seq, strerror(errno));
			close(link);
			link = -1;
		}
		sleep_ms(interval_ms);
	}
	printf("done %d records\n", count);
	while (!stop)
		sleep_ms(100);
	return 0;
}

/* A received record: journaled when it is the next one, fatal when one is missing. */
NOINLINE void apply_record(int journal, int seq, int *expected)
{
	if (seq != *expected) {
		printf("FATAL: replication gap: expected record %d, got %d\n", *expected, seq);
		exit(1);
	}
	char line[64];
	int n = snprintf(line, sizeof(line), "record %d\n", seq);
	if (write(journal, line, n) != n)
		printf("WARN: replica journal write failed: %s\n", strerror(errno));
	if (seq % 10 == 0)
		printf("caught up to record %d\n", seq);
	(*expected)++;
}

static int run_replica(const char *dir, int port)
{
	int journal = open_journal(dir);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 4) != 0) {
		printf("FATAL: cannot listen on %d: %s\n", port, strerror(errno));
		return 1;
	}
	printf("listening on %d\n", port);
	int expected = 1;
	while (!stop) {
		int c = accept(l, NULL, NULL);
		if (c < 0)
			continue;
		printf("primary connected\n");
		FILE *in = fdopen(c, "r");
		char line[128];
		int seq;
		while (!stop && fgets(line, sizeof(line), in))
			if (sscanf(line, "REC %d", &seq) == 1)
				apply_record(journal, seq, &expected);
		printf("primary closed the link\n");
		fclose(in);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *role = NULL, *dir = NULL, *replica = NULL;
	int count = 100, port = 0;
	long interval_ms = 10;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--role"))
			role = argv[i + 1];
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--replica"))
			replica = argv[i + 1];
		else if (!strcmp(argv[i], "--count"))
			count = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--interval-ms"))
			interval_ms = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--listen"))
			port = atoi(argv[i + 1]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sigaction sa = { .sa_handler = on_term };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (role && dir && !strcmp(role, "primary") && replica)
		return run_primary(dir, replica, count, interval_ms);
	if (role && dir && !strcmp(role, "replica") && port > 0)
		return run_replica(dir, port);
	fprintf(stderr, "usage: logship --role primary --dir DIR --replica IP:PORT [--count N] [--interval-ms MS]\n"
			"       logship --role replica --dir DIR --listen PORT\n");
	return 2;
}
