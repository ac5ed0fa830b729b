/*
 * walstore: a message store that appends 1064-byte records to its log with pwrite64 (bug
 * benchmark case wal-disk-full, after a Go message server whose store filled up).
 *
 *   walstore DIR STATUS COUNT
 *
 * Start-up: looks for an optional DIR/walstore.conf (absent: a benign ENOENT), opens
 * DIR/store.log, starts a flusher thread that every 50 ms takes the store lock, fsyncs the
 * log and rewrites STATUS ("seq N tail T": N counts the flushes, so a frozen N is a store
 * that no longer flushes). Then it appends COUNT records, 0.5 ms apart, logs "done COUNT
 * records" and idles until SIGTERM.
 *
 * Appending a record holds the store lock. A write that fails whole is logged and the
 * record dropped ("WARN: append failed ... (record dropped)"): that is handled. A short
 * write is retried for the rest; when the retry fails too, the log is truncated back to
 * the record's start and the whole record tried once more (a disk that had a moment of
 * trouble has recovered by then). The bug: when that last try does not write the whole
 * record either, the store logs "ERROR: store full, compacting the log" and calls
 * compact_log(), which takes the store lock the append already holds -- the store hangs
 * on its own lock, and the flusher with it.
 *
 * So only a short write followed by failures from then on -- a disk that filled up and
 * stays full -- hangs the store: a single failed write is dropped, a short write alone or
 * followed by one failure recovers.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define RECORD 1064

static pthread_mutex_t store_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1, status_fd = -1;
static long tail, flushes;
static volatile sig_atomic_t stop;

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR && !stop)
		;
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* Rewrites the log without dropped records: needs the store to itself. */
NOINLINE void compact_log(void)
{
	pthread_mutex_lock(&store_lock);
	printf("compacted the log at tail %ld\n", tail);
	pthread_mutex_unlock(&store_lock);
}

/* After a short write whose rest could not be written: back to the record's start, one
 * more try of the whole record. Returns 0 when it was written. */
NOINLINE int recover_tail(const char *rec)
{
	printf("WARN: truncating the log back to %ld\n", tail);
	if (ftruncate(log_fd, tail) != 0)
		printf("WARN: truncate failed: %s\n", strerror(errno));
	long n = pwrite(log_fd, rec, RECORD, tail);
	if (n == RECORD) {
		tail += RECORD;
		printf("recovered at tail %ld\n", tail);
		return 0;
	}
	return -1;
}

NOINLINE void append_record(const char *rec, int i)
{
	pthread_mutex_lock(&store_lock);
	long n = pwrite(log_fd, rec, RECORD, tail);
	if (n == RECORD) {
		tail += RECORD;
	} else if (n < 0) {
		printf("WARN: append of record %d failed: %s (record dropped)\n", i, strerror(errno));
	} else {
		printf("WARN: short write of record %d: %ld of %d bytes, retrying the rest\n", i, n, RECORD);
		long m = pwrite(log_fd, rec + n, RECORD - n, tail + n);
		if (m == RECORD - n) {
			tail += RECORD;
		} else {
			printf("WARN: retry failed: %s\n", m < 0 ? strerror(errno) : "short again");
			if (recover_tail(rec) != 0) {
				printf("ERROR: store full, compacting the log\n");
				compact_log(); /* the bug: the store lock is ours already */
			}
		}
	}
	pthread_mutex_unlock(&store_lock);
}

static void *flusher(void *arg)
{
	(void)arg;
	char line[64];
	while (!stop) {
		pthread_mutex_lock(&store_lock);
		fsync(log_fd);
		flushes++;
		int len = snprintf(line, sizeof(line), "seq %ld tail %ld\n", flushes, tail);
		if (pwrite(status_fd, line, len, 0) == len)
			(void)!ftruncate(status_fd, len);
		pthread_mutex_unlock(&store_lock);
		sleep_us(50000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char path[1024], rec[RECORD];
	pthread_t t;

	if (argc != 4) {
		fprintf(stderr, "usage: walstore DIR STATUS COUNT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGTERM, on_term);
	int count = atoi(argv[3]);
	snprintf(path, sizeof(path), "%s/walstore.conf", argv[1]);
	if (access(path, R_OK) != 0)
		printf("no %s, using defaults\n", path);
	snprintf(path, sizeof(path), "%s/store.log", argv[1]);
	log_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	status_fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (log_fd < 0 || status_fd < 0) {
		printf("FATAL: cannot open the store: %s\n", strerror(errno));
		return 1;
	}
	if (pthread_create(&t, NULL, flusher, NULL) != 0)
		return 1;
	printf("store open, appending %d records\n", count);
	for (int i = 1; i <= count && !stop; i++) {
		memset(rec, 'a' + i % 26, sizeof(rec));
		append_record(rec, i);
		sleep_us(500);
	}
	printf("done %d records, tail %ld\n", count, tail);
	while (!stop)
		sleep_us(100000);
	pthread_join(t, NULL);
	return 0;
}
