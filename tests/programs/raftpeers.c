/* One node of a Raft-like cluster, for the diagnosis's system test of silences judged per
 * connection: to every peer it keeps two connections on the peer's one port, a stream
 * with a heartbeat every 100 ms (echoed) and a pipeline that carries a request and its
 * reply every 8 s and idles in between. A peer whose heartbeats stop for over 1 s (the
 * election timeout) is logged; after DURATION_S the node prints "done" and exits with
 * status 3 if any peer timed out, 0 otherwise.
 *
 *   raftpeers SELF PORT DURATION_S ADDRESS...   (SELF: this node's index among ADDRESSes)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PEERS 8
#define MAX_FDS 64
#define BEAT_MS 100
#define PIPELINE_MS 8000
#define TIMEOUT_MS 1000

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static struct sockaddr_in address(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "raftpeers: bad address %s\n", ip);
		exit(2);
	}
	return a;
}

/* Connects to ip:port, retrying for up to 10 s while the peer starts; sends the hello
 * (kind and own index). */
static int dial(const char *ip, int port, char kind, int self)
{
	struct sockaddr_in a = address(ip, port);
	char hello[2] = { kind, (char)('0' + self) };
	int one = 1;

	for (int i = 0; i < 200; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			if (write(fd, hello, 2) != 2)
				break;
			fcntl(fd, F_SETFL, O_NONBLOCK);
			return fd;
		}
		if (fd >= 0)
			close(fd);
		usleep(50000);
	}
	fprintf(stderr, "raftpeers: cannot reach %s:%d\n", ip, port);
	exit(2);
}

struct conn {
	int fd;
	char kind; /* 'S' stream, 'P' pipeline, 0 = hello not read yet */
	int peer;  /* -1 = unknown yet */
};

static struct conn conns[MAX_FDS];
static int nconns;
static long heard[MAX_PEERS];
static int silent[MAX_PEERS];
static int timeouts;

static void add_conn(int fd, char kind, int peer)
{
	if (nconns == MAX_FDS) {
		close(fd);
		return;
	}
	conns[nconns++] = (struct conn){ .fd = fd, .kind = kind, .peer = peer };
}

/* Bytes from a connection: the hello, then heartbeats (echoed) or requests (answered). */
static void on_bytes(struct conn *c, const char *buf, long n, long now)
{
	for (long i = 0; i < n; i++) {
		if (!c->kind) {
			c->kind = buf[i];
		} else if (c->peer < 0) {
			c->peer = buf[i] - '0';
		} else if (buf[i] == 'h' && c->peer < MAX_PEERS) {
			heard[c->peer] = now;
			if (silent[c->peer])
				printf("heartbeats from node %d again\n", c->peer);
			silent[c->peer] = 0;
			if (write(c->fd, "a", 1) < 0 && errno != EAGAIN)
				perror("raftpeers: echo");
		} else if (buf[i] == 'q') {
			if (write(c->fd, "r", 1) < 0 && errno != EAGAIN)
				perror("raftpeers: reply");
		}
	}
}

static void send_all(char kind, char byte)
{
	for (int i = 0; i < nconns; i++)
		if (conns[i].kind == kind && conns[i].peer == -2)
			if (write(conns[i].fd, &byte, 1) < 0 && errno != EAGAIN)
				perror("raftpeers: send");
}

static void check_timeouts(int self, int npeers, long now)
{
	for (int p = 0; p < npeers; p++) {
		if (p == self || !heard[p] || silent[p] || now - heard[p] <= TIMEOUT_MS)
			continue;
		silent[p] = 1;
		timeouts++;
		printf("node %d: no heartbeat from node %d for %ld ms: election\n", self, p, now - heard[p]);
	}
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: raftpeers SELF PORT DURATION_S ADDRESS...\n");
		return 2;
	}
	int self = atoi(argv[1]), port = atoi(argv[2]), npeers = argc - 4;
	long end = now_ms() + atol(argv[3]) * 1000;
	char **addrs = argv + 4;
	struct sockaddr_in own = address(addrs[self], port);
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (npeers > MAX_PEERS || self < 0 || self >= npeers) {
		fprintf(stderr, "raftpeers: SELF out of range\n");
		return 2;
	}
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&own, sizeof(own)) || listen(lfd, 16)) {
		perror("raftpeers: listen");
		return 2;
	}
	fcntl(lfd, F_SETFL, O_NONBLOCK);
	printf("node %d listening on %s:%d\n", self, addrs[self], port);
	/* outgoing connections are marked peer -2: ours, to send on */
	for (int p = 0; p < npeers; p++) {
		if (p == self)
			continue;
		add_conn(dial(addrs[p], port, 'S', self), 'S', -2);
		add_conn(dial(addrs[p], port, 'P', self), 'P', -2);
	}
	printf("node %d connected\n", self);
	long next_beat = now_ms(), next_request = now_ms() + 200;
	while (now_ms() < end) {
		struct pollfd pfd[MAX_FDS + 1];
		char buf[512];
		long now = now_ms();

		if (now >= next_beat) {
			send_all('S', 'h');
			next_beat += BEAT_MS;
		}
		if (now >= next_request) {
			send_all('P', 'q');
			next_request += PIPELINE_MS;
		}
		pfd[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < nconns; i++)
			pfd[i + 1] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
		poll(pfd, nconns + 1, 20);
		now = now_ms();
		if (pfd[0].revents & POLLIN) {
			int fd = accept(lfd, NULL, NULL);
			if (fd >= 0) {
				fcntl(fd, F_SETFL, O_NONBLOCK);
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				add_conn(fd, 0, -1);
			}
		}
		for (int i = 0; i < nconns; i++) {
			if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			long n = read(conns[i].fd, buf, sizeof(buf));
			if (n > 0 && conns[i].peer != -2)
				on_bytes(&conns[i], buf, n, now);
			if (n == 0) { /* the peer closed: poll no more */
				close(conns[i].fd);
				conns[i].fd = -1;
				conns[i].kind = 'X';
			}
		}
		check_timeouts(self, npeers, now);
	}
	printf("done: %d timeout(s)\n", timeouts);
	return timeouts ? 3 : 0;
}
