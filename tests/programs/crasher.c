/*
 * crasher: ends in the way a trigger test needs.
 *
 *   crasher segv            dereferences NULL (SIGSEGV from the kernel)
 *   crasher abort           abort() (SIGABRT sent to itself)
 *   crasher exit CODE       exits with CODE
 *   crasher oom             allocates and touches memory until killed
 *   crasher fail PATH       an openat(PATH) that fails, then exit 0
 *   crasher sleep MS        sleeps, then exit 0
 *   crasher argv ARG...     sleeps 300 ms (a command line to redact), then exit 0
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "segv"))
		*(volatile int *)0 = 1;
	if (!strcmp(argv[1], "abort"))
		abort();
	if (!strcmp(argv[1], "exit") && argc >= 3)
		return atoi(argv[2]);
	if (!strcmp(argv[1], "oom"))
		for (;;) {
			char *p = malloc(1 << 20);
			if (p)
				memset(p, 1, 1 << 20);
		}
	if (!strcmp(argv[1], "fail") && argc >= 3)
		return open(argv[2], O_RDONLY) >= 0;
	if (!strcmp(argv[1], "sleep") && argc >= 3) {
		long ms = atol(argv[2]);
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
		return 0;
	}
	if (!strcmp(argv[1], "argv")) {
		struct timespec ts = { 0, 300 * 1000000L };
		nanosleep(&ts, NULL);
		return 0;
	}
	return 2;
}
