/*
 * udpbeat: UDP heartbeats between nodes, IPv4 or IPv6, and what arrived -- the test that a
 * partition drops a pair's datagrams both ways and nothing else.
 *
 *   udpbeat MS PORT PEER...
 *
 * One socket bound to [::]:PORT (dual-stack: IPv4 peers arrive as IPv4-mapped) sends a
 * datagram to every PEER (an IPv4 or IPv6 address) at PORT every 100 ms for MS ms. Logs
 * "listening" once bound; "silence from PEER: N ms" when a datagram ends a silence of over
 * 1 s; calls steady() (a context for a schedule) and logs "steady" once every peer has been
 * heard for STEADY_MS, the moment from which every pair is known to be talking both ways; at
 * the end one line per peer, "from PEER: N beats, longest silence M ms" (between two arrivals
 * from that peer; before the first none), then "done".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PEERS 16
#define PERIOD_MS 100
#define REPORTED_SILENCE_MS 1000
#define STEADY_MS 1000
#define NOINLINE __attribute__((noinline))

struct peer {
	const char *name;
	struct in6_addr addr;
	long beats;
	double first_ms, last_ms, longest_ms;
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int parse_peer(const char *text, struct in6_addr *out)
{
	struct in_addr v4;

	if (inet_pton(AF_INET6, text, out) == 1)
		return 0;
	if (inet_pton(AF_INET, text, &v4) != 1)
		return -1;
	memset(out, 0, sizeof(*out));
	out->s6_addr[10] = out->s6_addr[11] = 0xff;
	memcpy(&out->s6_addr[12], &v4, 4);
	return 0;
}

NOINLINE void steady(void)
{
	printf("steady\n");
}

/* every peer heard for STEADY_MS (once) */
static void check_steady(struct peer *peers, int npeers)
{
	static int done;
	double latest = 0;

	if (done)
		return;
	for (int i = 0; i < npeers; i++) {
		if (!peers[i].beats)
			return;
		if (peers[i].first_ms > latest)
			latest = peers[i].first_ms;
	}
	if (now_ms() - latest >= STEADY_MS) {
		done = 1;
		steady();
	}
}

static void receive(int s, struct peer *peers, int npeers)
{
	struct sockaddr_in6 from;
	socklen_t len = sizeof(from);
	char buf[64];

	while (recvfrom(s, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &len) >= 0) {
		double t = now_ms();
		for (int i = 0; i < npeers; i++) {
			struct peer *p = &peers[i];
			if (memcmp(&from.sin6_addr, &p->addr, sizeof(p->addr)))
				continue;
			if (p->beats > 0) {
				double gap = t - p->last_ms;
				if (gap > p->longest_ms)
					p->longest_ms = gap;
				if (gap > REPORTED_SILENCE_MS)
					printf("silence from %s: %.0f ms\n", p->name, gap);
			} else {
				p->first_ms = t;
			}
			p->beats++;
			p->last_ms = t;
		}
		len = sizeof(from);
	}
}

int main(int argc, char **argv)
{
	struct peer peers[MAX_PEERS] = { 0 };
	struct sockaddr_in6 self = { .sin6_family = AF_INET6, .sin6_addr = in6addr_any };
	int npeers = argc - 3, off = 0, s;
	double end, next;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 4 || npeers > MAX_PEERS) {
		fprintf(stderr, "usage: udpbeat MS PORT PEER... (at most %d peers)\n", MAX_PEERS);
		return 2;
	}
	for (int i = 0; i < npeers; i++) {
		peers[i].name = argv[3 + i];
		if (parse_peer(peers[i].name, &peers[i].addr)) {
			fprintf(stderr, "udpbeat: '%s' is not an IPv4 or IPv6 address\n", peers[i].name);
			return 2;
		}
	}
	self.sin6_port = htons(atoi(argv[2]));
	s = socket(AF_INET6, SOCK_DGRAM, 0);
	if (s < 0 || setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) ||
	    bind(s, (struct sockaddr *)&self, sizeof(self))) {
		perror("udpbeat: socket");
		return 1;
	}
	printf("listening\n");
	end = now_ms() + atol(argv[1]);
	next = now_ms();
	while (now_ms() < end) {
		struct pollfd pfd = { .fd = s, .events = POLLIN };
		double t = now_ms();
		if (t >= next) {
			for (int i = 0; i < npeers; i++) {
				struct sockaddr_in6 to = self;
				to.sin6_addr = peers[i].addr;
				/* a peer not up yet or cut off: the datagram is lost, as on a wire */
				sendto(s, "beat", 4, 0, (struct sockaddr *)&to, sizeof(to));
			}
			next += PERIOD_MS;
			continue;
		}
		if (poll(&pfd, 1, (int)(next - t) + 1) > 0)
			receive(s, peers, npeers);
		check_steady(peers, npeers);
	}
	receive(s, peers, npeers);
	for (int i = 0; i < npeers; i++)
		printf("from %s: %ld beats, longest silence %.0f ms\n", peers[i].name, peers[i].beats,
		       peers[i].longest_ms);
	printf("done\n");
	return 0;
}
