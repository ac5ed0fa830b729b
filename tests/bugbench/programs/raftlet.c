/*
 * raftlet: a replicated log with a fixed leader and one follower (bug benchmark case
 * partition-crash-crash, after RedisRaft-NEW's "ND + PS(Crash) + PS(Crash)").
 *
 *   raftlet --id N --role leader   --dir DIR --port PORT --follower IP:PORT
 *   raftlet --id N --role follower --dir DIR --port PORT
 *
 * The leader serves clients ("SET key value" -> "OK") on PORT: each SET is appended to
 * DIR/log ("E index term key value", write + fsync) and DIR/meta is updated ("last=N",
 * written to a temporary file and renamed: crash-safe), then it is replicated to the
 * follower ("APPEND ...", answered by "ACK index"; "PING"/"PONG" every 100 ms).
 *
 * When the leader hears nothing from its follower for 1 s it writes a marker file,
 * DIR/degraded (write_degraded_marker), and enters degraded mode (enter_degraded_mode);
 * once the follower has acknowledged every entry again it removes the marker.
 *
 * At start, replay_log() reads the log and checks it against the meta file: a log shorter
 * than meta's last index is fatal ("FATAL: log index mismatch", exit status 1). If the
 * degraded marker is there, the previous run ended in degraded mode, and recover_tail()
 * re-stamps every entry with a new term -- by truncating the log (open O_TRUNC) and
 * rewriting it entry by entry in write_entries() (throttled: 15 ms per entry), and only
 * then removing the marker. Not crash-safe: a crash inside write_entries() leaves a log
 * shorter than meta, and the next start fails.
 *
 * So the bug needs, in this order: a partition (> 1 s: the marker), a crash of the leader
 * while the marker exists, and a second crash while the restarted leader rewrites its log.
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
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define MAX_ENTRIES 20000
#define MAX_CLIENTS 16

struct entry { int term; char key[48]; char val[48]; };

static struct entry log_entries[MAX_ENTRIES + 1]; /* 1-based */
static int last_index, term = 1, acked, degraded, my_id;
static char dir[512];
static double last_contact, started;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void path_of(char *out, size_t size, const char *name)
{
	snprintf(out, size, "%s/%s", dir, name);
}

static int format_entry(char *out, size_t size, int i)
{
	return snprintf(out, size, "E %d %d %s %s\n", i, log_entries[i].term, log_entries[i].key, log_entries[i].val);
}

/* ---- files ---- */

static int read_meta(void)
{
	char p[600], buf[64] = "";
	path_of(p, sizeof(p), "meta");
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	int last = 0;
	if (fgets(buf, sizeof(buf), f))
		sscanf(buf, "last=%d", &last);
	fclose(f);
	return last;
}

NOINLINE void write_meta(void)
{
	char p[600], tmp[620], buf[64];
	path_of(p, sizeof(p), "meta");
	snprintf(tmp, sizeof(tmp), "%s.tmp", p);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return;
	int n = snprintf(buf, sizeof(buf), "last=%d\n", last_index);
	(void)!write(fd, buf, n);
	fsync(fd);
	close(fd);
	rename(tmp, p);
}

NOINLINE int append_entry(const char *key, const char *val)
{
	if (last_index == MAX_ENTRIES)
		return -1;
	int i = ++last_index;
	log_entries[i].term = term;
	snprintf(log_entries[i].key, sizeof(log_entries[i].key), "%s", key);
	snprintf(log_entries[i].val, sizeof(log_entries[i].val), "%s", val);
	char p[600], line[160];
	path_of(p, sizeof(p), "log");
	int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd < 0)
		return -1;
	int n = format_entry(line, sizeof(line), i);
	(void)!write(fd, line, n);
	fsync(fd);
	close(fd);
	write_meta();
	return 0;
}

/* Rewrites entries 1..last_index into fd, one write and fsync each, throttled. */
NOINLINE void write_entries(int fd)
{
	char line[160];
	struct timespec throttle = { 0, 15 * 1000 * 1000 };
	for (int i = 1; i <= last_index; i++) {
		log_entries[i].term = term;
		int n = format_entry(line, sizeof(line), i);
		(void)!write(fd, line, n);
		fsync(fd);
		nanosleep(&throttle, NULL);
	}
}

/* The previous run ended degraded: re-stamp every entry with a new term, in place. */
NOINLINE void recover_tail(const char *marker)
{
	char p[600], m[600];
	path_of(p, sizeof(p), "log");
	path_of(m, sizeof(m), "degraded");
	term++;
	printf("recovery: degraded marker found (%s), re-stamping %d entries with term %d\n", marker, last_index, term);
	int fd = open(p, O_WRONLY | O_TRUNC);
	if (fd < 0) {
		printf("recovery: cannot open the log: %s\n", strerror(errno));
		return;
	}
	printf("recovery: rewriting log (%d entries)\n", last_index);
	write_entries(fd);
	close(fd);
	unlink(m);
	printf("recovery: done\n");
}

NOINLINE void replay_log(void)
{
	char p[600], line[256];
	int meta_last = read_meta();
	path_of(p, sizeof(p), "log");
	FILE *f = fopen(p, "r");
	while (f && fgets(line, sizeof(line), f)) {
		int idx, t;
		char key[48], val[48];
		if (sscanf(line, "E %d %d %47s %47s", &idx, &t, key, val) != 4 || idx != last_index + 1)
			break;
		last_index = idx;
		log_entries[idx].term = t;
		if (t > term)
			term = t;
		snprintf(log_entries[idx].key, sizeof(log_entries[idx].key), "%s", key);
		snprintf(log_entries[idx].val, sizeof(log_entries[idx].val), "%s", val);
	}
	if (f)
		fclose(f);
	if (last_index < meta_last) {
		printf("FATAL: log index mismatch: meta says the last index is %d, the log ends at %d\n", meta_last,
		       last_index);
		exit(1);
	}
	printf("replayed %d entries (term %d)\n", last_index, term);
	path_of(p, sizeof(p), "degraded");
	f = fopen(p, "r");
	if (f) {
		char marker[64] = "";
		if (!fgets(marker, sizeof(marker), f))
			marker[0] = 0;
		fclose(f);
		marker[strcspn(marker, "\n")] = 0;
		recover_tail(marker);
	}
}

NOINLINE void write_degraded_marker(void)
{
	char p[600], buf[64];
	path_of(p, sizeof(p), "degraded");
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return;
	int n = snprintf(buf, sizeof(buf), "from=%d\n", acked + 1);
	(void)!write(fd, buf, n);
	fsync(fd);
	close(fd);
}

NOINLINE void enter_degraded_mode(double silent_ms)
{
	degraded = 1;
	printf("follower unreachable for %.0f ms: degraded mode (entries after %d are not replicated)\n", silent_ms,
	       acked);
}

NOINLINE void leave_degraded_mode(void)
{
	char p[600];
	path_of(p, sizeof(p), "degraded");
	unlink(p);
	degraded = 0;
	printf("follower caught up at %d: leaving degraded mode\n", acked);
}

/* ---- network ---- */

static int listen_on(int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 16) != 0) {
		printf("cannot listen on %d: %s\n", port, strerror(errno));
		exit(1);
	}
	return s;
}

struct conn { int fd; size_t len; char buf[2048]; };

/* Reads what is there; calls on_line for every complete line. -1 when closed. */
static int pump(struct conn *c, void (*on_line)(struct conn *, char *))
{
	ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
	if (r <= 0)
		return -1;
	c->len += r;
	c->buf[c->len] = 0;
	char *start = c->buf, *nl;
	while ((nl = strchr(start, '\n'))) {
		*nl = 0;
		on_line(c, start);
		start = nl + 1;
	}
	c->len -= start - c->buf;
	memmove(c->buf, start, c->len);
	return 0;
}

static void say(int fd, const char *s)
{
	(void)!write(fd, s, strlen(s));
}

/* leader side */
static struct conn follower = { .fd = -1 };
static int next_to_send = 1, connecting;
static double connect_started;

NOINLINE void handle_client(struct conn *c, char *line)
{
	char cmd[16], key[48], val[48];
	if (sscanf(line, "%15s %47s %47s", cmd, key, val) == 3 && strcmp(cmd, "SET") == 0 && append_entry(key, val) == 0)
		say(c->fd, "OK\n");
	else
		say(c->fd, "ERR\n");
}

NOINLINE void handle_follower(struct conn *c, char *line)
{
	(void)c;
	int idx;
	last_contact = now_ms();
	if (sscanf(line, "LAST %d", &idx) == 1) {
		next_to_send = idx + 1;
		acked = idx < acked ? acked : idx;
	} else if (sscanf(line, "ACK %d", &idx) == 1 && idx > acked) {
		acked = idx;
	}
}

static void replicate(void)
{
	char line[200];
	while (follower.fd >= 0 && !connecting && next_to_send <= last_index) {
		int n = snprintf(line, sizeof(line), "APPEND ");
		n += format_entry(line + n, sizeof(line) - n, next_to_send);
		if (write(follower.fd, line, n) != n)
			break;
		next_to_send++;
	}
}

static void dial_follower(struct sockaddr_in *peer)
{
	follower.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	follower.len = 0;
	connecting = 1;
	connect_started = now_ms();
	if (connect(follower.fd, (struct sockaddr *)peer, sizeof(*peer)) == 0 || errno == EINPROGRESS)
		return;
	close(follower.fd);
	follower.fd = -1;
	connecting = 0;
}

static void run_leader(int port, struct sockaddr_in *peer)
{
	int ls = listen_on(port);
	printf("leader %d listening on %d, %d entries\n", my_id, port, last_index);
	struct conn clients[MAX_CLIENTS];
	int nclients = 0;
	double last_ping = 0, last_dial = -1e9;
	for (;;) {
		double now = now_ms();
		if (follower.fd < 0 && now - last_dial >= 200) {
			last_dial = now;
			dial_follower(peer);
		}
		if (connecting && now - connect_started > 500) {
			close(follower.fd); /* no answer (a partition): try again */
			follower.fd = -1;
			connecting = 0;
		}
		if (follower.fd >= 0 && !connecting && now - last_ping >= 100) {
			last_ping = now;
			say(follower.fd, "PING\n");
		}
		if (!degraded && now - last_contact > 1000) {
			write_degraded_marker();
			enter_degraded_mode(now - last_contact);
		}
		if (degraded && follower.fd >= 0 && !connecting && acked == last_index)
			leave_degraded_mode();
		replicate();

		struct pollfd fds[MAX_CLIENTS + 2];
		int n = 0;
		fds[n++] = (struct pollfd){ ls, POLLIN, 0 };
		if (follower.fd >= 0)
			fds[n++] = (struct pollfd){ follower.fd, connecting ? POLLOUT : POLLIN, 0 };
		for (int i = 0; i < nclients; i++)
			fds[n++] = (struct pollfd){ clients[i].fd, POLLIN, 0 };
		if (poll(fds, n, 50) <= 0)
			continue;
		int k = 1, polled_clients = nclients;
		if (follower.fd >= 0) {
			short re = fds[k++].revents;
			if (connecting && re) {
				int err = 0;
				socklen_t l = sizeof(err);
				getsockopt(follower.fd, SOL_SOCKET, SO_ERROR, &err, &l);
				if (err) {
					close(follower.fd);
					follower.fd = -1;
				} else {
					int flags = fcntl(follower.fd, F_GETFL);
					fcntl(follower.fd, F_SETFL, flags & ~O_NONBLOCK);
					printf("connected to follower\n");
					say(follower.fd, "HELLO\n");
				}
				connecting = 0;
			} else if (re && pump(&follower, handle_follower) < 0) {
				printf("follower connection closed\n");
				close(follower.fd);
				follower.fd = -1;
			}
		}
		for (int i = 0; i < polled_clients; i++) {
			if (fds[k + i].revents && pump(&clients[i], handle_client) < 0) {
				close(clients[i].fd);
				clients[i].fd = -1;
			}
		}
		int kept = 0;
		for (int i = 0; i < nclients; i++)
			if (clients[i].fd >= 0)
				clients[kept++] = clients[i];
		nclients = kept;
		if (fds[0].revents & POLLIN) {
			int c = accept(ls, NULL, NULL);
			if (c >= 0 && nclients < MAX_CLIENTS)
				clients[nclients++] = (struct conn){ .fd = c };
			else if (c >= 0)
				close(c);
		}
	}
}

/* follower side */
static int follower_log = -1;

NOINLINE void handle_leader(struct conn *c, char *line)
{
	char reply[64];
	if (strcmp(line, "PING") == 0) {
		say(c->fd, "PONG\n");
		return;
	}
	if (strcmp(line, "HELLO") == 0) {
		snprintf(reply, sizeof(reply), "LAST %d\n", last_index);
		say(c->fd, reply);
		return;
	}
	int idx, t;
	char key[48], val[48];
	if (sscanf(line, "APPEND E %d %d %47s %47s", &idx, &t, key, val) == 4) {
		if (idx == last_index + 1) {
			last_index = idx;
			char entry[160];
			int n = snprintf(entry, sizeof(entry), "E %d %d %s %s\n", idx, t, key, val);
			(void)!write(follower_log, entry, n);
		}
		snprintf(reply, sizeof(reply), "ACK %d\n", last_index);
		say(c->fd, reply);
	}
}

static void run_follower(int port)
{
	char p[600];
	path_of(p, sizeof(p), "log");
	follower_log = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
	int ls = listen_on(port);
	printf("follower %d listening on %d\n", my_id, port);
	struct conn leader = { .fd = -1 };
	for (;;) {
		struct pollfd fds[2] = { { ls, POLLIN, 0 }, { leader.fd, POLLIN, 0 } };
		if (poll(fds, leader.fd >= 0 ? 2 : 1, 200) <= 0)
			continue;
		if (fds[0].revents & POLLIN) {
			int c = accept(ls, NULL, NULL);
			if (c >= 0) {
				if (leader.fd >= 0)
					close(leader.fd);
				leader = (struct conn){ .fd = c };
				printf("leader connected\n");
			}
			continue;
		}
		if (leader.fd >= 0 && fds[1].revents && pump(&leader, handle_leader) < 0) {
			close(leader.fd);
			leader.fd = -1;
		}
	}
}

int main(int argc, char **argv)
{
	const char *role = NULL, *peer_arg = NULL;
	int port = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--id"))
			my_id = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--role"))
			role = argv[i + 1];
		else if (!strcmp(argv[i], "--dir"))
			snprintf(dir, sizeof(dir), "%s", argv[i + 1]);
		else if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--follower"))
			peer_arg = argv[i + 1];
	}
	int leader = role && !strcmp(role, "leader");
	if (!my_id || !role || !dir[0] || !port || (leader && !peer_arg)) {
		fprintf(stderr, "usage: raftlet --id N --role leader|follower --dir DIR --port PORT [--follower IP:PORT]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	printf("raftlet %d starting as %s\n", my_id, role);
	started = last_contact = now_ms();
	(void)started;
	if (!leader) {
		run_follower(port);
		return 0;
	}
	replay_log();
	struct sockaddr_in peer = { .sin_family = AF_INET };
	char host[64];
	snprintf(host, sizeof(host), "%s", peer_arg);
	char *colon = strchr(host, ':');
	if (!colon)
		return 2;
	*colon = 0;
	inet_pton(AF_INET, host, &peer.sin_addr);
	peer.sin_port = htons(atoi(colon + 1));
	last_contact = now_ms();
	run_leader(port, &peer);
	return 0;
}
