/*
 * Datagram heartbeats for tracerd's flow tests: sends a datagram to one peer every period and
 * receives whatever arrives, over UDP or a raw IP socket, with the call family asked for.
 *
 *   heartbeat udp|raw PROTO LOCAL_PORT PEER_ADDR PEER_PORT PERIOD_MS DURATION_MS from|msg|mmsg
 *       PROTO: the raw socket's IP protocol (ignored for udp); ports: ignored for raw;
 *       DURATION_MS 0: until SIGTERM.
 *       from: sendto/recvfrom, msg: sendmsg/recvmsg, mmsg: sendmmsg/recvmmsg.
 *       Prints "ready" once bound, then at the end "sent N received M".
 *   heartbeat spray PEER_ADDR PEER_PORT SOCKETS
 *       Sends one UDP datagram from each of SOCKETS fresh sockets (each its own port).
 *   heartbeat sink LOCAL_PORT COUNT TIMEOUT_MS [fork]
 *       Receives up to COUNT UDP datagrams (recvfrom), prints "received M". With fork, a
 *       child forked after the socket is made receives (the parent only waits for it).
 *   heartbeat errors PEER_ADDR PEER_PORT COUNT
 *       Sends COUNT UDP datagrams 50 ms apart to a port nobody listens on, with IP_RECVERR,
 *       and reads each ICMP error back from the error queue (recvmsg MSG_ERRQUEUE, as knet
 *       does); prints "ready" once bound, then "sent N" and "errors N". Now and then a send
 *       fails (ECONNREFUSED: an error read between its queueing and the socket's marking
 *       leaves the mark to the next send) and is not counted.
 *
 * Addresses are IPv4 or IPv6 (by their form).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
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

static volatile sig_atomic_t stopping;

static void stop(int sig)
{
	(void)sig;
	stopping = 1;
}

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* Fills `sa` with addr:port; returns its length, 0 when addr is neither IPv4 nor IPv6. */
static socklen_t sockaddr_of(const char *addr, int port, struct sockaddr_storage *sa)
{
	struct sockaddr_in *in = (struct sockaddr_in *)sa;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;

	memset(sa, 0, sizeof(*sa));
	if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		return sizeof(*in);
	}
	if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		return sizeof(*in6);
	}
	return 0;
}

static int bound_socket(int family, int type, int proto, int port)
{
	struct sockaddr_storage any;
	int fd = socket(family, type, proto);

	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	if (type == SOCK_DGRAM) {
		sockaddr_of(family == AF_INET ? "0.0.0.0" : "::", port, &any);
		if (bind(fd, (struct sockaddr *)&any, family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6))) {
			perror("bind");
			exit(1);
		}
	}
	return fd;
}

/* Returns whether the datagram was sent. */
static int send_one(int fd, const char *calls, struct sockaddr_storage *peer, socklen_t len)
{
	char payload[] = "heartbeat";
	struct iovec iov = { payload, sizeof(payload) };
	struct mmsghdr m = { .msg_hdr = { .msg_name = peer, .msg_namelen = len, .msg_iov = &iov, .msg_iovlen = 1 } };
	long r;

	if (!strcmp(calls, "from"))
		r = sendto(fd, payload, sizeof(payload), 0, (struct sockaddr *)peer, len);
	else if (!strcmp(calls, "msg"))
		r = sendmsg(fd, &m.msg_hdr, 0);
	else
		r = sendmmsg(fd, &m, 1, 0);
	if (r < 0 && errno != EHOSTUNREACH && errno != ENETUNREACH && errno != ECONNREFUSED)
		perror("send");
	return r >= 0;
}

/* Receives everything queued; returns how many datagrams. */
static int receive_all(int fd, const char *calls)
{
	char buf[4][256];
	struct sockaddr_storage from[4];
	struct iovec iov[4];
	struct mmsghdr m[4];
	int got = 0, i;
	long r;

	for (;;) {
		for (i = 0; i < 4; i++) {
			iov[i] = (struct iovec){ buf[i], sizeof(buf[i]) };
			m[i] = (struct mmsghdr){ .msg_hdr = { .msg_name = &from[i], .msg_namelen = sizeof(from[i]),
							      .msg_iov = &iov[i], .msg_iovlen = 1 } };
		}
		if (!strcmp(calls, "from")) {
			socklen_t len = sizeof(from[0]);
			r = recvfrom(fd, buf[0], sizeof(buf[0]), MSG_DONTWAIT, (struct sockaddr *)&from[0], &len);
			r = r < 0 ? r : 1;
		} else if (!strcmp(calls, "msg")) {
			r = recvmsg(fd, &m[0].msg_hdr, MSG_DONTWAIT);
			r = r < 0 ? r : 1;
		} else {
			r = recvmmsg(fd, m, 4, MSG_DONTWAIT, NULL);
		}
		if (r <= 0)
			return got;
		got += r;
	}
}

static int heartbeat(int argc, char **argv)
{
	struct sockaddr_storage peer;
	long long start, next, end;
	int raw, proto, fd, sent = 0, received = 0;
	const char *calls;
	socklen_t len;

	if (argc != 9) {
		fprintf(stderr, "usage: heartbeat udp|raw PROTO LOCAL_PORT PEER_ADDR PEER_PORT PERIOD_MS DURATION_MS from|msg|mmsg\n");
		return 2;
	}
	raw = !strcmp(argv[1], "raw");
	proto = raw ? atoi(argv[2]) : 0;
	len = sockaddr_of(argv[4], raw ? 0 : atoi(argv[5]), &peer);
	calls = argv[8];
	if (!len) {
		fprintf(stderr, "bad address %s\n", argv[4]);
		return 2;
	}
	fd = bound_socket(peer.ss_family, raw ? SOCK_RAW : SOCK_DGRAM, proto, atoi(argv[3]));
	/* no SA_RESTART: the poll returns at once */
	sigaction(SIGTERM, &(struct sigaction){ .sa_handler = stop }, NULL);
	printf("ready\n");
	fflush(stdout);
	start = now_ms();
	end = atoll(argv[7]) ? start + atoll(argv[7]) : -1;
	for (next = start; !stopping && (end < 0 || now_ms() < end);) {
		struct pollfd p = { fd, POLLIN, 0 };
		long long wait;

		if (now_ms() >= next) {
			send_one(fd, calls, &peer, len);
			sent++;
			next += atoll(argv[6]);
		}
		wait = next - now_ms();
		if (poll(&p, 1, wait > 0 ? (int)wait : 0) > 0)
			received += receive_all(fd, calls);
	}
	printf("sent %d received %d\n", sent, received);
	return 0;
}

static int spray(int argc, char **argv)
{
	struct sockaddr_storage peer;
	socklen_t len;
	int i, n;

	if (argc != 5 || !(len = sockaddr_of(argv[2], atoi(argv[3]), &peer))) {
		fprintf(stderr, "usage: heartbeat spray PEER_ADDR PEER_PORT SOCKETS\n");
		return 2;
	}
	n = atoi(argv[4]);
	for (i = 0; i < n; i++) {
		int fd = bound_socket(peer.ss_family, SOCK_DGRAM, 0, 0);

		send_one(fd, "from", &peer, len);
		close(fd);
	}
	return 0;
}

static int sink(int argc, char **argv)
{
	long long end;
	int fd, want, received = 0;

	if (argc != 5 && !(argc == 6 && !strcmp(argv[5], "fork"))) {
		fprintf(stderr, "usage: heartbeat sink LOCAL_PORT COUNT TIMEOUT_MS [fork]\n");
		return 2;
	}
	want = atoi(argv[3]);
	fd = bound_socket(AF_INET6, SOCK_DGRAM, 0, atoi(argv[2]));
	if (argc == 6) {
		pid_t child = fork();
		int status;

		if (child < 0) {
			perror("fork");
			return 1;
		}
		if (child > 0) {
			close(fd);
			if (waitpid(child, &status, 0) < 0)
				return 1;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	end = now_ms() + atoll(argv[4]);
	while (received < want && now_ms() < end) {
		struct pollfd p = { fd, POLLIN, 0 };

		if (poll(&p, 1, 100) > 0)
			received += receive_all(fd, "from");
	}
	printf("received %d\n", received);
	return 0;
}

static int errors(int argc, char **argv)
{
	struct sockaddr_storage peer, from;
	char buf[64], control[256];
	int fd, i, n, on = 1, got = 0, sent = 0;
	socklen_t len;

	if (argc != 5 || !(len = sockaddr_of(argv[2], atoi(argv[3]), &peer))) {
		fprintf(stderr, "usage: heartbeat errors PEER_ADDR PEER_PORT COUNT\n");
		return 2;
	}
	n = atoi(argv[4]);
	fd = bound_socket(peer.ss_family, SOCK_DGRAM, 0, 0);
	if (peer.ss_family == AF_INET ? setsockopt(fd, SOL_IP, IP_RECVERR, &on, sizeof(on))
				      : setsockopt(fd, SOL_IPV6, IPV6_RECVERR, &on, sizeof(on))) {
		perror("setsockopt RECVERR");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (i = 0; i < n; i++) {
		struct pollfd p = { fd, 0, 0 };
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr m = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov,
				    .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control) };

		sent += send_one(fd, "msg", &peer, len);
		/* POLLERR is reported whatever the events asked */
		if (poll(&p, 1, 200) > 0 && (p.revents & POLLERR) && recvmsg(fd, &m, MSG_ERRQUEUE) >= 0)
			got++;
		usleep(50000);
	}
	printf("sent %d\nerrors %d\n", sent, got);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "errors"))
		return errors(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "spray"))
		return spray(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "sink"))
		return sink(argc, argv);
	if (argc > 1 && (!strcmp(argv[1], "udp") || !strcmp(argv[1], "raw")))
		return heartbeat(argc, argv);
	fprintf(stderr, "usage: heartbeat udp|raw|spray|sink|errors ...\n");
	return 2;
}
