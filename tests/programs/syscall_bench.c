/*
 * syscall_bench MODE N: N back-to-back syscalls, prints the mean ns per call.
 *   ok   - getppid(), a cheap call that succeeds
 *   fail - close(-1), a cheap call that fails with EBADF
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (fail)
			syscall(SYS_close, -1);
		else
			syscall(SYS_getppid);
	}
	printf("%.1f\n", (now_ns() - t0) / n);
	return 0;
}
