/*
 * fdholder MODE ARGS: holds fds that tracerd never saw opened, and fails calls on them when
 * told to. Each mode makes its fds, prints "fds FD..." (the fds the test will look up in
 * /proc/PID/fd, with the pid that holds them: "pid PID"), then "ready", then waits for a line
 * on stdin before it fails its calls; prints "done" at the end.
 *   fdholder direct PATH       opens PATH read-only; write() on it and on a dup2 of it (EBADF)
 *   fdholder scm PATH          opens PATH read-only and passes the fd over a Unix socket
 *                              (SCM_RIGHTS) to a forked child, which closes nothing and fails
 *                              write() on the fd it received; the parent closed its own
 *   fdholder many DIR FIRST N  creates and holds DIR/fFIRST.. (N files, read-only; its fd
 *                              limit set to N + 64), then write()s on every 8th of them and
 *                              the last one
 *   fdholder kinds             a pipe, an eventfd and a memfd ("fdtest"): write() on the
 *                              pipe's read end (EBADF), a 1-byte write() on the eventfd
 *                              (EINVAL), lseek() to -1 on the memfd (EINVAL)
 *   fdholder reuse A B C       opens A and B read-only in turn, 10 times each, on the same fd
 *                              number (each closed before the next open, so the kernel may also
 *                              hand the freed struct file to the next open), and write()s on
 *                              each (EBADF); then renames B (still open) to C and fails a
 *                              write on it through the fd it holds, and through a new open
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void ready(void)
{
	char line[16];

	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		exit(3);
}

static int open_or_die(const char *path, int flags)
{
	int fd = open(path, flags, 0600);

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	return fd;
}

static int direct(const char *path)
{
	int fd = open_or_die(path, O_RDONLY);

	printf("pid %d\nfds %d 100\n", getpid(), fd);
	ready();
	if (write(fd, "x", 1) != -1 || dup2(fd, 100) != 100 || write(100, "x", 1) != -1)
		return 1;
	printf("done\n");
	return 0;
}

static void send_fd(int sock, int fd)
{
	char data = 'f';
	struct iovec iov = { .iov_base = &data, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c = {};
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf,
			    .msg_controllen = sizeof(c.buf) };
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);

	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(int));
	if (sendmsg(sock, &m, 0) != 1) {
		perror("sendmsg");
		exit(1);
	}
}

static int recv_fd(int sock)
{
	char data;
	struct iovec iov = { .iov_base = &data, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c = {};
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf,
			    .msg_controllen = sizeof(c.buf) };
	struct cmsghdr *h;
	int fd;

	if (recvmsg(sock, &m, 0) != 1 || !(h = CMSG_FIRSTHDR(&m)) || h->cmsg_type != SCM_RIGHTS) {
		perror("recvmsg");
		exit(1);
	}
	memcpy(&fd, CMSG_DATA(h), sizeof(int));
	return fd;
}

static int scm(const char *path)
{
	int sp[2], status;
	pid_t child;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp)) {
		perror("socketpair");
		return 1;
	}
	fflush(stdout);
	child = fork();
	if (child == 0) {
		close(sp[0]);
		int fd = recv_fd(sp[1]);
		printf("pid %d\nfds %d\n", getpid(), fd);
		ready();
		if (write(fd, "x", 1) != -1)
			return 1;
		printf("done\n");
		return 0;
	}
	close(sp[1]);
	int fd = open_or_die(path, O_RDONLY);
	send_fd(sp[0], fd);
	close(fd);
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status))
		return 1;
	return WEXITSTATUS(status);
}

static int many(const char *dir, long first_i, long n)
{
	char path[4096];
	struct rlimit r = { .rlim_cur = n + 64, .rlim_max = n + 64 };
	int *fds = calloc(n, sizeof(int));

	/* past the default 1024: the test raised the hard limit where it may (or holds fewer
	 * files per holder where it may not) */
	if (!fds || setrlimit(RLIMIT_NOFILE, &r)) {
		perror("setrlimit");
		return 1;
	}
	for (long i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/f%ld", dir, first_i + i);
		fds[i] = open_or_die(path, O_RDONLY | O_CREAT);
	}
	printf("pid %d\nfds %d %d\n", getpid(), fds[0], fds[n - 1]);
	ready();
	for (long i = 0; i < n; i++)
		if ((i % 8 == 0 || i == n - 1) && write(fds[i], "x", 1) != -1)
			return 1;
	printf("done\n");
	return 0;
}

static int kinds(void)
{
	int p[2], efd, mfd;

	if (pipe(p) || (efd = eventfd(0, 0)) < 0 || (mfd = memfd_create("fdtest", 0)) < 0) {
		perror("pipe/eventfd/memfd_create");
		return 1;
	}
	printf("pid %d\nfds %d %d %d\n", getpid(), p[0], efd, mfd);
	ready();
	if (write(p[0], "x", 1) != -1 || write(efd, "x", 1) != -1 || lseek(mfd, -1, SEEK_SET) != -1)
		return 1;
	printf("done\n");
	return 0;
}

static int reuse(const char *a, const char *b, const char *c)
{
	int fd = open_or_die(a, O_RDONLY);

	close(fd);
	printf("pid %d\nfds %d\n", getpid(), fd);
	ready();
	for (int i = 0; i < 20; i++) {
		int again = open_or_die(i % 2 ? b : a, O_RDONLY);

		if (again != fd || write(again, "x", 1) != -1)
			return 1;
		if (i < 19)
			close(again);
	}
	/* fd is b's, still open: renamed under it, then failed on through the fd and a new open */
	if (rename(b, c) || write(fd, "x", 1) != -1)
		return 1;
	close(fd);
	if (open_or_die(c, O_RDONLY) != fd || write(fd, "x", 1) != -1)
		return 1;
	printf("done\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "direct"))
		return direct(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "scm"))
		return scm(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "many"))
		return many(argv[2], atol(argv[3]), atol(argv[4]));
	if (argc == 2 && !strcmp(argv[1], "kinds"))
		return kinds();
	if (argc == 5 && !strcmp(argv[1], "reuse"))
		return reuse(argv[2], argv[3], argv[4]);
	fprintf(stderr, "usage: fdholder direct PATH | scm PATH | many DIR FIRST N | kinds | reuse A B C\n");
	return 2;
}
