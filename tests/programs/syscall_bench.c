/*
 * syscall_bench MODE N [stop]: N back-to-back syscalls, prints the mean ns per call.
 *   ok   - getppid(), a cheap call that succeeds
 *   fail - close(-1), a cheap call that fails with EBADF
 *   read - read() of one byte from /dev/zero, a call that succeeds
 *   open - openat() of /etc/hostname and its close(), two calls that succeed (ns per pair)
 *   openself - the same with this program's own file (argv[0], an absolute path outside /etc)
 *   fdfail - write() on a file open read-only, a call on an fd that fails with EBADF
 *   stop - stops itself first (SIGSTOP), so that a tracer that targets a pid can
 *          attach before the timed loop; continue it with SIGCONT
 */
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	long n = atol(argv[2]);
	int fail = !strcmp(argv[1], "fail");
	int rd = !strcmp(argv[1], "read");
	int op = !strcmp(argv[1], "open");
	int opself = !strcmp(argv[1], "openself");
	int fdfail = !strcmp(argv[1], "fdfail");
	int zero = open("/dev/zero", O_RDONLY);
	int rdonly = open("/etc/hostname", O_RDONLY);
	char byte;
	if (argc > 3 && !strcmp(argv[3], "stop"))
		raise(SIGSTOP);
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (fail)
			syscall(SYS_close, -1);
		else if (rd)
			syscall(SYS_read, zero, &byte, 1);
		else if (op)
			syscall(SYS_close, syscall(SYS_openat, AT_FDCWD, "/etc/hostname", O_RDONLY));
		else if (opself)
			syscall(SYS_close, syscall(SYS_openat, AT_FDCWD, argv[0], O_RDONLY));
		else if (fdfail)
			syscall(SYS_write, rdonly, &byte, 1);
		else
			syscall(SYS_getppid);
	}
	printf("%.1f\n", (now_ns() - t0) / n);
	return 0;
}
