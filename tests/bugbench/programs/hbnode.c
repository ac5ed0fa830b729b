/*
 * hbnode: primary/replica pair with heartbeat fail-over (bug benchmark case pause-primary,
 * a process pause fault).
 *
 *   hbnode --id N --role primary --peer IP:PORT     the primary connects to the replica
 *   hbnode --id N --role replica --listen PORT      the replica accepts the primary
 *
 * Every primary sends "HB <id> primary <epoch>" every 200 ms on the connection. A replica
 * that has heard a primary and then hears nothing for 1500 ms promotes itself ("promoted
 * to primary") and starts sending heartbeats itself. The bug: promotion never fences the
 * old primary, which after a long pause (a stop, a VM freeze, a GC) simply carries on --
 * and then two primaries hear each other: "split brain" (logged by whichever notices).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static int my_id, is_primary, epoch = 1, split_reported;
static double last_hb_heard = -1, last_hb_sent;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

NOINLINE void send_heartbeat(int c)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "HB %d primary %d\n", my_id, epoch);
	if (c >= 0)
		(void)!write(c, line, n);
	last_hb_sent = now_ms();
}

NOINLINE void report_split_brain(int peer, int peer_epoch)
{
	if (split_reported)
		return;
	split_reported = 1;
	printf("split brain: node %d (epoch %d) and node %d (epoch %d) are both primary\n", my_id, epoch, peer,
	       peer_epoch);
}

NOINLINE void promote(double silent_ms)
{
	is_primary = 1;
	epoch++;
	printf("promoted to primary (epoch %d): no heartbeat from the primary for %.0f ms\n", epoch, silent_ms);
}

NOINLINE void on_heartbeat(int peer, int peer_epoch)
{
	if (is_primary) {
		report_split_brain(peer, peer_epoch);
		return;
	}
	if (last_hb_heard < 0)
		printf("following primary %d (epoch %d)\n", peer, peer_epoch);
	last_hb_heard = now_ms();
}

static int dial(struct sockaddr_in *peer)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (struct sockaddr *)peer, sizeof(*peer)) != 0) {
		close(s);
		return -1;
	}
	return s;
}

int main(int argc, char **argv)
{
	const char *role = NULL, *peer_arg = NULL;
	int listen_port = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--id"))
			my_id = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--role"))
			role = argv[i + 1];
		else if (!strcmp(argv[i], "--peer"))
			peer_arg = argv[i + 1];
		else if (!strcmp(argv[i], "--listen"))
			listen_port = atoi(argv[i + 1]);
	}
	if (!my_id || !role || (!peer_arg == !listen_port)) {
		fprintf(stderr, "usage: hbnode --id N --role primary|replica (--peer IP:PORT | --listen PORT)\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	is_primary = strcmp(role, "primary") == 0;
	printf("node %d starting as %s\n", my_id, role);
	struct sockaddr_in peer = { .sin_family = AF_INET };
	int ls = -1, c = -1;
	if (peer_arg) {
		char host[64];
		snprintf(host, sizeof(host), "%s", peer_arg);
		char *colon = strchr(host, ':');
		if (!colon)
			return 2;
		*colon = 0;
		inet_pton(AF_INET, host, &peer.sin_addr);
		peer.sin_port = htons(atoi(colon + 1));
	} else {
		int one = 1;
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(listen_port) };
		ls = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 4) != 0) {
			printf("cannot listen on %d: %s\n", listen_port, strerror(errno));
			return 1;
		}
		printf("listening on %d\n", listen_port);
	}
	char buf[1024];
	size_t len = 0;
	double last_dial = 0;
	for (;;) {
		double now = now_ms();
		if (peer_arg && c < 0 && now - last_dial >= 200) {
			last_dial = now;
			if ((c = dial(&peer)) >= 0) {
				printf("connected to %s\n", peer_arg);
				len = 0;
				if (is_primary)
					send_heartbeat(c);
			}
		}
		if (is_primary && now - last_hb_sent >= 200)
			send_heartbeat(c);
		if (!is_primary && last_hb_heard >= 0 && now - last_hb_heard > 1500)
			promote(now - last_hb_heard);
		struct pollfd fds[2];
		int n = 0;
		if (c >= 0)
			fds[n++] = (struct pollfd){ c, POLLIN, 0 };
		if (ls >= 0)
			fds[n++] = (struct pollfd){ ls, POLLIN, 0 };
		if (poll(fds, n, 50) <= 0)
			continue;
		for (int i = 0; i < n; i++) {
			if (!fds[i].revents)
				continue;
			if (fds[i].fd == ls) {
				int a = accept(ls, NULL, NULL);
				if (a >= 0) {
					if (c >= 0)
						close(c);
					c = a;
					len = 0;
					printf("accepted a peer connection\n");
				}
				continue;
			}
			ssize_t r = read(c, buf + len, sizeof(buf) - 1 - len);
			if (r <= 0) {
				printf("peer connection closed\n");
				close(c);
				c = -1;
				break;
			}
			len += r;
			buf[len] = 0;
			char *start = buf, *nl;
			while ((nl = strchr(start, '\n'))) {
				*nl = 0;
				int pid, pe;
				if (sscanf(start, "HB %d primary %d", &pid, &pe) == 2)
					on_heartbeat(pid, pe);
				start = nl + 1;
			}
			len -= start - buf;
			memmove(buf, start, len);
		}
	}
}
