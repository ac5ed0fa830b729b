/*
 * confreader: a server's start-up in miniature, for the testbed-vs-production tests. It
 * reads the configuration file its first argument names (read-only, as a server does),
 * logs the file's first line, then runs for MS milliseconds.
 *
 *   confreader CONF MS
 *
 * The tests build it twice with different BUILD_TAGs: two builds of one program, with
 * different ELF build ids.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifndef BUILD_TAG
#define BUILD_TAG "a"
#endif

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: confreader CONF MS\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	char buf[256];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = '\0';
	printf("confreader build %s: %s\n", BUILD_TAG, buf);
	fflush(stdout);
	long ms = atol(argv[2]);
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
	return 0;
}
