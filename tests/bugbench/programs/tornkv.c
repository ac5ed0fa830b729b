/*
 * tornkv: a key-value server that snapshots its data once (bug benchmark case
 * torn-snapshot, after RedisRaft-NEW: "Redis itself crashes due to an inconsistent
 * snapshot file").
 *
 *   tornkv DIR PORT SNAP_AFTER
 *
 * Serves "SET key value" (reply "OK") and "GET key" (reply "VAL value" or "NIL"), one
 * command per line, on 127.0.0.1:PORT. When it holds SNAP_AFTER keys it calls
 * store_snapshot() once: open(DIR/snapshot, O_TRUNC), write the header, write the body,
 * fsync, close -- in place, without a temporary file and rename. At start load_snapshot()
 * reads DIR/snapshot: a missing or empty file means no snapshot (a crash before the header
 * was written is harmless); a header whose byte count the body does not match is fatal:
 * "FATAL: corrupt snapshot", exit status 1. So only a crash between the two writes -- after
 * the header, before the body -- makes the node unable to start again.
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
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define MAX_KEYS 4096
#define MAX_CLIENTS 32

struct kv { char key[64]; char val[64]; };

static struct kv table[MAX_KEYS];
static int nkeys;
static int snapshot_done;
static char snap_path[1024];

static int find(const char *key)
{
	for (int i = 0; i < nkeys; i++)
		if (strcmp(table[i].key, key) == 0)
			return i;
	return -1;
}

static void put(const char *key, const char *val)
{
	int i = find(key);
	if (i < 0) {
		if (nkeys == MAX_KEYS)
			return;
		i = nkeys++;
		snprintf(table[i].key, sizeof(table[i].key), "%s", key);
	}
	snprintf(table[i].val, sizeof(table[i].val), "%s", val);
}

/* Rewrites the snapshot in place: header, then body. Not crash-safe. */
NOINLINE int store_snapshot(void)
{
	static char body[MAX_KEYS * 130];
	size_t blen = 0;
	for (int i = 0; i < nkeys; i++)
		blen += snprintf(body + blen, sizeof(body) - blen, "%s %s\n", table[i].key, table[i].val);
	char header[128];
	int hlen = snprintf(header, sizeof(header), "TKV1 keys=%d bytes=%zu\n", nkeys, blen);
	int fd = open(snap_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		printf("snapshot: cannot open %s: %s\n", snap_path, strerror(errno));
		return -1;
	}
	if (write(fd, header, hlen) != hlen) {
		printf("snapshot: header write failed: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	if (write(fd, body, blen) != (ssize_t)blen) {
		printf("snapshot: body write failed: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	fsync(fd);
	close(fd);
	printf("snapshot stored: %d keys, %zu bytes\n", nkeys, blen);
	return 0;
}

NOINLINE void load_snapshot(void)
{
	static char buf[MAX_KEYS * 130 + 256];
	int fd = open(snap_path, O_RDONLY);
	if (fd < 0) {
		printf("no snapshot (%s), starting empty\n", strerror(errno));
		return;
	}
	ssize_t n = 0, r;
	while (n < (ssize_t)sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += r;
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	if (n <= 0) {
		printf("empty snapshot (an interrupted snapshot), starting empty\n");
		return;
	}
	int keys;
	size_t bytes;
	char *nl = strchr(buf, '\n');
	if (!nl || sscanf(buf, "TKV1 keys=%d bytes=%zu", &keys, &bytes) != 2 || (size_t)(n - (nl + 1 - buf)) != bytes) {
		printf("FATAL: corrupt snapshot %s: header says %zu bytes, file has %zd after it\n", snap_path,
		       nl ? bytes : 0, nl ? n - (nl + 1 - buf) : n);
		exit(1);
	}
	char *line = nl + 1, key[64], val[64];
	while (*line) {
		if (sscanf(line, "%63s %63s", key, val) == 2)
			put(key, val);
		line = strchr(line, '\n');
		if (!line)
			break;
		line++;
	}
	snapshot_done = 1;
	printf("loaded snapshot: %d keys\n", nkeys);
}

NOINLINE void handle_command(int c, char *line, int snap_after)
{
	char cmd[16], key[64], val[64];
	int n = sscanf(line, "%15s %63s %63s", cmd, key, val);
	if (n == 3 && strcmp(cmd, "SET") == 0) {
		put(key, val);
		if (!snapshot_done && nkeys >= snap_after) {
			snapshot_done = 1;
			store_snapshot();
		}
		(void)!write(c, "OK\n", 3);
	} else if (n == 2 && strcmp(cmd, "GET") == 0) {
		int i = find(key);
		char out[96];
		int len = i < 0 ? snprintf(out, sizeof(out), "NIL\n") : snprintf(out, sizeof(out), "VAL %s\n", table[i].val);
		(void)!write(c, out, len);
	} else {
		(void)!write(c, "ERR\n", 4);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: tornkv DIR PORT SNAP_AFTER\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	snprintf(snap_path, sizeof(snap_path), "%s/snapshot", argv[1]);
	int snap_after = atoi(argv[3]);
	printf("tornkv starting, snapshot after %d keys\n", snap_after);
	load_snapshot();
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 16) != 0) {
		printf("cannot listen on %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	printf("listening on %s\n", argv[2]);
	struct pollfd fds[MAX_CLIENTS + 1];
	static char bufs[MAX_CLIENTS + 1][512];
	size_t lens[MAX_CLIENTS + 1] = { 0 };
	int nfds = 1;
	fds[0] = (struct pollfd){ s, POLLIN, 0 };
	for (;;) {
		if (poll(fds, nfds, -1) < 0)
			continue;
		if ((fds[0].revents & POLLIN) && nfds <= MAX_CLIENTS) {
			int c = accept(s, NULL, NULL);
			if (c >= 0) {
				fds[nfds] = (struct pollfd){ c, POLLIN, 0 };
				lens[nfds++] = 0;
			}
		}
		for (int i = 1; i < nfds; i++) {
			if (!fds[i].revents)
				continue;
			ssize_t r = read(fds[i].fd, bufs[i] + lens[i], sizeof(bufs[i]) - 1 - lens[i]);
			if (r <= 0) {
				close(fds[i].fd);
				fds[i] = fds[nfds - 1];
				memcpy(bufs[i], bufs[nfds - 1], lens[nfds - 1]);
				lens[i] = lens[nfds - 1];
				nfds--;
				i--;
				continue;
			}
			lens[i] += r;
			bufs[i][lens[i]] = 0;
			char *start = bufs[i], *nl;
			while ((nl = strchr(start, '\n'))) {
				*nl = 0;
				handle_command(fds[i].fd, start, snap_after);
				start = nl + 1;
			}
			lens[i] -= start - bufs[i];
			memmove(bufs[i], start, lens[i]);
		}
	}
}
