/*
 * nameserver: the "namenode" of the bug benchmark case nth-connect (after HDFS-15032).
 *
 *   nameserver PORT
 *
 * A TCP server on every address: one request line per connection, one reply line, close.
 *   CLUSTER          -> "OK blocks=120 datanodes=3"
 *   DATANODES        -> "OK dn1 dn2 dn3"
 *   MOVE <block> ... -> "OK moved"
 * Logs "listening on PORT" when it accepts connections, and one line per request.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void answer(int c)
{
	char req[256];
	ssize_t n = 0, r;
	while (n < (ssize_t)sizeof(req) - 1 && (r = read(c, req + n, sizeof(req) - 1 - n)) > 0) {
		n += r;
		if (memchr(req, '\n', n))
			break;
	}
	if (n <= 0)
		return;
	req[n] = 0;
	req[strcspn(req, "\r\n")] = 0;
	const char *reply = "ERR unknown request\n";
	if (strcmp(req, "CLUSTER") == 0)
		reply = "OK blocks=120 datanodes=3\n";
	else if (strcmp(req, "DATANODES") == 0)
		reply = "OK dn1 dn2 dn3\n";
	else if (strncmp(req, "MOVE ", 5) == 0)
		reply = "OK moved\n";
	printf("request: %s\n", req);
	(void)!write(c, reply, strlen(reply));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: nameserver PORT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 64) != 0) {
		printf("cannot listen on %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	printf("listening on %s\n", argv[1]);
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0)
			continue;
		answer(c);
		close(c);
	}
}
