/*
 * balancer: the client of the bug benchmark case nth-connect (after HDFS-15032: "Balancer
 * crashes when it fails to contact an unavailable namenode").
 *
 *   balancer HOST PORT
 *
 * Phase 1 asks the namenode for the cluster report and the datanode list: one connection
 * each, and a refused or failed connection is retried (up to 5 times, 100 ms apart).
 * Phase 2 dispatches the block moves: one connection per move, and there the failure path
 * was never written -- a failed connection ends the balancer with "balancer: unhandled
 * failure" (exit status 1). Without faults the balancer makes 4 connections (2 in phase 1,
 * 2 in phase 2) and ends with "balancer: done".
 *
 * Start-up also looks for optional exclude/include host files (benign ENOENT failures).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static struct sockaddr_in namenode;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* One request on a fresh connection; 0 and the reply in `out`, or -errno. */
NOINLINE int call_namenode(const char *req, char *out, size_t size)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&namenode, sizeof(namenode)) != 0) {
		int e = errno;
		close(s);
		return -e;
	}
	char line[256];
	snprintf(line, sizeof(line), "%s\n", req);
	ssize_t n = write(s, line, strlen(line)), got = 0, r;
	if (n < 0) {
		int e = errno;
		close(s);
		return -e;
	}
	while (got < (ssize_t)size - 1 && (r = read(s, out + got, size - 1 - got)) > 0)
		got += r;
	close(s);
	out[got > 0 ? got : 0] = 0;
	out[strcspn(out, "\n")] = 0;
	return got > 0 ? 0 : -ECONNRESET;
}

/* Phase 1 calls: retried. */
NOINLINE int call_with_retry(const char *req, char *out, size_t size)
{
	for (int attempt = 1;; attempt++) {
		int r = call_namenode(req, out, size);
		if (r == 0)
			return 0;
		printf("namenode call %s failed (%s), retry %d/5\n", req, strerror(-r), attempt);
		if (attempt == 5)
			return r;
		sleep_ms(100);
	}
}

NOINLINE void read_host_lists(void)
{
	static const char *files[] = { "/etc/hadoop/dfs.hosts.exclude", "/etc/hadoop/dfs.hosts.include",
				       "/etc/hadoop/balancer.exclude", "/etc/hadoop/balancer.include" };
	int found = 0;
	for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		found += access(files[i], R_OK) == 0;
	printf("balancer: %d host list files, balancing all datanodes\n", found);
}

NOINLINE int fetch_cluster_state(void)
{
	char reply[256];
	if (call_with_retry("CLUSTER", reply, sizeof(reply)) != 0) {
		printf("balancer: namenode unavailable, nothing to do\n");
		return -1;
	}
	printf("cluster: %s\n", reply);
	if (call_with_retry("DATANODES", reply, sizeof(reply)) != 0) {
		printf("balancer: namenode unavailable, nothing to do\n");
		return -1;
	}
	printf("datanodes: %s\n", reply);
	return 0;
}

NOINLINE void dispatch_moves(void)
{
	static const char *moves[] = { "MOVE blk_1001 dn1 dn3", "MOVE blk_1002 dn2 dn3" };
	char reply[256];
	for (unsigned i = 0; i < sizeof(moves) / sizeof(moves[0]); i++) {
		int r = call_namenode(moves[i], reply, sizeof(reply));
		if (r != 0) {
			/* the path nobody wrote: a failed move ends the balancer */
			printf("balancer: unhandled failure in dispatch_moves: %s: %s\n", moves[i], strerror(-r));
			exit(1);
		}
		printf("%s: %s\n", moves[i], reply);
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: balancer HOST PORT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	namenode.sin_family = AF_INET;
	namenode.sin_port = htons(atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &namenode.sin_addr) != 1) {
		fprintf(stderr, "balancer: bad address %s\n", argv[1]);
		return 2;
	}
	printf("balancer: starting against %s:%s\n", argv[1], argv[2]);
	read_host_lists();
	printf("balancer: phase 1: cluster state\n");
	if (fetch_cluster_state() != 0)
		return 0;
	sleep_ms(100); /* computing the plan */
	printf("balancer: phase 2: dispatching moves\n");
	dispatch_moves();
	printf("balancer: done, 2 blocks moved\n");
	return 0;
}
