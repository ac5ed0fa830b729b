/*
 * tierkv: a three-tier key-value service -- a journaling store, an API server in front of
 * it and a client of the API (bug benchmark case store-abort-cascade: a fault on one node
 * travels across two more before anyone sees it).
 *
 *   tierkv --role store  --dir DIR --listen PORT
 *   tierkv --role api    --listen PORT --store IP:PORT
 *   tierkv --role client --api IP:PORT --count N --interval-ms MS
 *
 * The store journals every "SET key value" it is sent into DIR/journal, one 4 KiB block each
 * (write on an O_APPEND file), before it answers "OK". A journal write that fails is fatal
 * to it ("FATAL: journal write failed", exit 1): a store that cannot persist must not
 * acknowledge (fail-stop, like ZooKeeper's or etcd's log writer).
 *
 * The API server connects to the store at start and forwards each client's SET to it,
 * answering the store's reply. When the store connection is lost it reconnects, three
 * times 100 ms apart, and then aborts the whole server ("FATAL: lost the store, aborting",
 * exit 1) -- like an HBase RegionServer that aborts when it loses its storage or its
 * ZooKeeper session, instead of failing the requests of the moment and waiting for the
 * store to come back.
 *
 * The client sends SET key:I val:I for I = 1..N, one every MS milliseconds, each waiting for
 * "OK", and logs "acked I" every tenth; a lost connection is retried three times 100 ms
 * apart, then it gives up ("FATAL: service unavailable", exit 3); after N it logs "done N"
 * and exits 0.
 *
 * The bug is the cascade: one failed write on the store's host (a full disk) takes down
 * the store, then the API server on another node, then its client on a third -- each a
 * separate, externally visible step (an exit, refused connects, an exit, refused connects,
 * an exit). Every role first looks for an optional ./tierkv.conf (absent: a benign ENOENT
 * in every run).
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
#define LINE 256
#define RETRIES 3
#define RETRY_MS 100

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static int parse_addr(const char *spec, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(spec, ':');
	if (!colon || (size_t)(colon - spec) >= sizeof(host))
		return -1;
	memcpy(host, spec, colon - spec);
	host[colon - spec] = 0;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(atoi(colon + 1));
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int connect_to(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
		return fd;
	int e = errno;
	close(fd);
	errno = e;
	return -1;
}

static int listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0) {
		printf("FATAL: cannot listen on port %d: %s\n", port, strerror(errno));
		exit(1);
	}
	return fd;
}

/* One line (without its newline) into buf. Returns its length, or -1 when the connection
 * is gone (end of stream or an error). Requests and replies go in lockstep, one line at a
 * time, so nothing is read beyond the line. */
static int read_line(int fd, char *buf)
{
	int n = 0;
	for (;;) {
		ssize_t r = read(fd, buf + n, 1);
		if (r <= 0)
			return -1;
		if (buf[n] == '\n') {
			buf[n] = 0;
			return n;
		}
		if (n < LINE - 2)
			n++;
	}
}

static int send_line(int fd, const char *line)
{
	size_t len = strlen(line);
	return write(fd, line, len) == (ssize_t)len ? 0 : -1;
}

/* ---- store ---- */

NOINLINE void journal_append(int journal, const char *request)
{
	char block[BLOCK];
	memset(block, ' ', sizeof(block));
	int n = snprintf(block, sizeof(block), "%s\n", request);
	block[n] = ' ';
	block[BLOCK - 1] = '\n';
	ssize_t w = write(journal, block, BLOCK);
	if (w == BLOCK)
		return;
	printf("FATAL: journal write failed: %s\n", w < 0 ? strerror(errno) : "short write");
	exit(1);
}

static int run_store(const char *dir, int port)
{
	char path[4096], line[LINE];
	snprintf(path, sizeof(path), "%s/journal", dir);
	int journal = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (journal < 0) {
		printf("FATAL: cannot open %s: %s\n", path, strerror(errno));
		return 1;
	}
	int lfd = listen_on(port);
	printf("listening on %d\n", port);
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		if (c < 0)
			continue;
		while (read_line(c, line) >= 0) {
			journal_append(journal, line);
			if (send_line(c, "OK\n") < 0)
				break;
		}
		close(c);
	}
}

/* ---- api ---- */

/* The store connection was lost: three connects 100 ms apart, then the whole server
 * aborts (the bug: one store's failure is fatal to the API server and all its clients). */
NOINLINE int reconnect_store(const struct sockaddr_in *store)
{
	for (int i = 1; i <= RETRIES; i++) {
		sleep_ms(RETRY_MS);
		int fd = connect_to(store);
		if (fd >= 0) {
			printf("reconnected to the store\n");
			return fd;
		}
		printf("WARN: store unreachable (%d/%d): %s\n", i, RETRIES, strerror(errno));
	}
	printf("FATAL: lost the store, aborting\n");
	exit(1);
}

NOINLINE void serve_client(int c, int *store_fd, const struct sockaddr_in *store)
{
	char line[LINE], reply[LINE], out[LINE + 1];
	while (read_line(c, line) >= 0) {
		snprintf(out, sizeof(out), "%s\n", line);
		while (send_line(*store_fd, out) < 0 || read_line(*store_fd, reply) < 0) {
			printf("WARN: store connection lost\n");
			close(*store_fd);
			*store_fd = reconnect_store(store);
		}
		snprintf(out, sizeof(out), "%s\n", reply);
		if (send_line(c, out) < 0)
			break;
	}
}

static int run_api(int port, const char *store_spec)
{
	struct sockaddr_in store;
	if (parse_addr(store_spec, &store) < 0) {
		printf("FATAL: bad --store %s\n", store_spec);
		return 2;
	}
	int store_fd = connect_to(&store);
	if (store_fd < 0) {
		printf("FATAL: cannot reach the store %s: %s\n", store_spec, strerror(errno));
		return 1;
	}
	int lfd = listen_on(port);
	printf("ready: store %s, listening on %d\n", store_spec, port);
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		if (c < 0)
			continue;
		serve_client(c, &store_fd, &store);
		close(c);
	}
}

/* ---- client ---- */

/* SET key:i val:i and its "OK"; -1 when the connection is lost. */
NOINLINE int set_key(int fd, int i)
{
	char line[LINE];
	snprintf(line, sizeof(line), "SET key:%d val:%d\n", i, i);
	if (send_line(fd, line) < 0 || read_line(fd, line) < 0)
		return -1;
	return strcmp(line, "OK") == 0 ? 0 : -1;
}

NOINLINE int reconnect_api(const struct sockaddr_in *api, int i)
{
	for (int n = 1; n <= RETRIES; n++) {
		sleep_ms(RETRY_MS);
		int fd = connect_to(api);
		if (fd >= 0)
			return fd;
		printf("WARN: api unreachable (%d/%d): %s\n", n, RETRIES, strerror(errno));
	}
	printf("FATAL: service unavailable at key %d\n", i);
	exit(3);
}

static int run_client(const char *api_spec, int count, int interval_ms)
{
	struct sockaddr_in api;
	if (parse_addr(api_spec, &api) < 0) {
		printf("FATAL: bad --api %s\n", api_spec);
		return 2;
	}
	int fd = connect_to(&api);
	if (fd < 0) {
		printf("FATAL: cannot reach the api %s: %s\n", api_spec, strerror(errno));
		return 1;
	}
	printf("connected to %s\n", api_spec);
	for (int i = 1; i <= count; i++) {
		while (set_key(fd, i) < 0) {
			printf("WARN: api connection lost at key %d\n", i);
			close(fd);
			fd = reconnect_api(&api, i);
		}
		if (i % 10 == 0)
			printf("acked %d\n", i);
		sleep_ms(interval_ms);
	}
	printf("done %d\n", count);
	return 0;
}

int main(int argc, char **argv)
{
	const char *role = NULL, *dir = NULL, *store = NULL, *api = NULL;
	int port = 0, count = 100, interval_ms = 10;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--role"))
			role = argv[i + 1];
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--listen"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--store"))
			store = argv[i + 1];
		else if (!strcmp(argv[i], "--api"))
			api = argv[i + 1];
		else if (!strcmp(argv[i], "--count"))
			count = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--interval-ms"))
			interval_ms = atoi(argv[i + 1]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* an optional configuration file (absent: a benign ENOENT) */
	if (access("tierkv.conf", R_OK) == 0)
		printf("note: tierkv.conf is not read by this build\n");
	if (role && !strcmp(role, "store") && dir && port > 0)
		return run_store(dir, port);
	if (role && !strcmp(role, "api") && port > 0 && store)
		return run_api(port, store);
	if (role && !strcmp(role, "client") && api && count > 0 && interval_ms >= 0)
		return run_client(api, count, interval_ms);
	fprintf(stderr,
		"usage: tierkv --role store --dir DIR --listen PORT\n"
		"       tierkv --role api --listen PORT --store IP:PORT\n"
		"       tierkv --role client --api IP:PORT --count N --interval-ms MS\n");
	return 2;
}
