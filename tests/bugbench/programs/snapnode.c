/*
 * snapnode: a node that loads its snapshot at start (bug benchmark case snapshot-read,
 * after ZOOKEEPER-3006).
 *
 *   snapnode DIR
 *
 * Start-up: looks for optional configuration files and plugins (none exist: a dozen benign
 * ENOENT failures on every start), drains its wake-up pipe (a benign EAGAIN), reads its
 * node id from DIR/myid (written on the first start), writes an initial snapshot
 * DIR/snapshot.0 if there is none, and loads it. Then it logs "serving" and idles until
 * SIGTERM.
 *
 * The bug: a failed read of the snapshot is "handled" -- logged, the database starts empty
 * -- but the snapshot digest stays NULL, and computing the snapshot size for the status
 * line dereferences it: SIGSEGV. The SIGSEGV handler logs "FATAL: SIGSEGV" and lets the
 * node die by the signal.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

struct database {
	long entries;
	char *digest; /* NULL until a snapshot was loaded */
	char myid[32];
};

static struct database db;
static volatile sig_atomic_t stop;
static char dir[512];

static void on_segv(int sig)
{
	static const char msg[] = "FATAL: SIGSEGV (null pointer dereference) in snapnode\n";
	(void)!write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	signal(sig, SIG_DFL); /* the faulting instruction runs again and kills us */
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* Optional configuration: every candidate is stat()ed; none exists. */
NOINLINE void load_config(void)
{
	static const char *names[] = { "snapnode.conf", "conf.d/00-defaults.conf", "conf.d/10-local.conf",
				       "conf.d/20-cluster.conf", "log4c.conf", "jaas.conf" };
	char path[1024];
	struct stat st;
	int found = 0;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		found += stat(path, &st) == 0;
		snprintf(path, sizeof(path), "/etc/snapnode/%s", names[i]);
		found += stat(path, &st) == 0;
	}
	printf("config: %d optional files found, using defaults\n", found);
}

NOINLINE void probe_plugins(void)
{
	char path[1024];
	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "/usr/lib/snapnode/plugins/auth%d.so", i);
		if (access(path, R_OK) == 0)
			printf("plugin %s available\n", path);
	}
}

/* A non-blocking wake-up pipe, drained at start: read() fails with EAGAIN when empty. */
NOINLINE void drain_wakeup_pipe(void)
{
	int p[2];
	char buf[64];
	if (pipe(p) != 0)
		return;
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	while (read(p[0], buf, sizeof(buf)) > 0)
		;
	close(p[0]);
	close(p[1]);
}

NOINLINE int read_myid(void)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/myid", dir);
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, "1\n", 2) != 2) {
			printf("cannot write %s: %s\n", path, strerror(errno));
			return -1;
		}
		close(fd);
		fd = open(path, O_RDONLY);
	}
	ssize_t n = fd < 0 ? -1 : read(fd, db.myid, sizeof(db.myid) - 1);
	if (n <= 0) {
		printf("cannot read node id from %s: %s\n", path, n < 0 ? strerror(errno) : "empty");
		return -1;
	}
	db.myid[strcspn(db.myid, "\n")] = 0;
	close(fd);
	return 0;
}

NOINLINE void write_initial_snapshot(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		printf("cannot create %s: %s\n", path, strerror(errno));
		return;
	}
	fprintf(f, "SNAPSHOT v1 entries=3\n/config\n/zookeeper\n/zookeeper/quota\ndigest=9f3a51c07be2\n");
	fclose(f);
	printf("created initial snapshot %s\n", path);
}

/* Loads the snapshot; a read failure is "handled": the database starts empty. */
NOINLINE void load_snapshot(const char *path)
{
	char buf[4096];
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		printf("WARN: cannot open snapshot %s: %s; starting with an empty database\n", path, strerror(errno));
		return;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0) {
		printf("WARN: could not read snapshot %s: %s; starting with an empty database\n", path, strerror(errno));
		db.entries = 0;
		return; /* db.digest stays NULL */
	}
	buf[n] = 0;
	char *d = strstr(buf, "digest=");
	db.entries = strtol(strstr(buf, "entries=") ? strstr(buf, "entries=") + 8 : "0", NULL, 10);
	db.digest = strndup(d ? d + 7 : "none", 12);
	printf("loaded snapshot %s: %ld entries\n", path, db.entries);
}

/* Bytes the snapshot takes in the status report: uses the digest unconditionally. */
NOINLINE size_t snapshot_size(void)
{
	return strlen(db.digest) + (size_t)db.entries * 16;
}

NOINLINE void serve(void)
{
	printf("serving as node %s: %ld entries, snapshot digest %.12s (%zu bytes)\n", db.myid, db.entries,
	       db.digest ? db.digest : "-", snapshot_size());
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	while (!stop)
		nanosleep(&ts, NULL);
	printf("stopped\n");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: snapnode DIR\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(dir, sizeof(dir), "%s", argv[1]);
	signal(SIGSEGV, on_segv);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	printf("snapnode starting in %s\n", dir);
	load_config();
	probe_plugins();
	drain_wakeup_pipe();
	if (read_myid() != 0)
		return 1;
	char snap[1024];
	snprintf(snap, sizeof(snap), "%s/snapshot.0", dir);
	if (access(snap, F_OK) != 0)
		write_initial_snapshot(snap);
	load_snapshot(snap);
	serve();
	return 0;
}
