/*
 * fillmaps: fills one of tracerd's kernel tables far beyond one read batch, then waits to be
 * killed (the test kills its process group). Prints what it created, then "ready".
 *
 *   fillmaps conns N       N TCP connections over 127.0.0.1 (both ends kept open, silent)
 *   fillmaps cycle N R     R rounds of N such connections, each closed before the next
 *                          round but the last, which is kept open
 *   (both: on SIGUSR1, one byte is sent from each end of the open connections)
 *   fillmaps stop N        N children that stop themselves (SIGSTOP); prints their pids
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void want_fds(long n)
{
	struct rlimit r;

	/* only the soft limit: raising the hard one needs CAP_SYS_RESOURCE */
	getrlimit(RLIMIT_NOFILE, &r);
	r.rlim_cur = r.rlim_max;
	if ((long)r.rlim_cur < n + 64 || setrlimit(RLIMIT_NOFILE, &r)) {
		perror("setrlimit");
		exit(1);
	}
}

/* The open connections' fds (both ends), for SIGUSR1 */
static int *fds;
static long nfds;

static void send_a_byte(int sig)
{
	(void)sig;
	for (long i = 0; i < nfds; i++)
		if (write(fds[i], "x", 1) != 1)
			_exit(3);
}

static int conns(long n, long rounds)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM, 0);

	fds = calloc(2 * n, sizeof(int));

	want_fds(2 * n + 1);
	if (!fds || bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 128) ||
	    getsockname(s, (struct sockaddr *)&a, &len)) {
		perror("listen");
		return 1;
	}
	for (long r = 0; r < rounds; r++) {
		for (long i = 0; i < n; i++) {
			fds[2 * i] = socket(AF_INET, SOCK_STREAM, 0);
			if (connect(fds[2 * i], (struct sockaddr *)&a, sizeof(a)) ||
			    (fds[2 * i + 1] = accept(s, NULL, NULL)) < 0) {
				perror("connect/accept");
				return 1;
			}
		}
		if (r + 1 == rounds) {
			nfds = 2 * n;
			signal(SIGUSR1, send_a_byte);
			break;
		}
		for (long i = 0; i < 2 * n; i++)
			close(fds[i]);
		/* both ends reach CLOSE: the active one through TIME_WAIT, the other on its ACK */
		usleep(200000);
	}
	return 0;
}

static int stop(long n)
{
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();
		int status;

		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			raise(SIGSTOP);
			_exit(0);
		}
		if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) {
			fprintf(stderr, "child %d did not stop\n", pid);
			return 1;
		}
		printf("%d\n", pid);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc >= 3 && !strcmp(argv[1], "conns"))
		rc = conns(atol(argv[2]), 1);
	else if (argc >= 4 && !strcmp(argv[1], "cycle"))
		rc = conns(atol(argv[2]), atol(argv[3]));
	else if (argc >= 3 && !strcmp(argv[1], "stop"))
		rc = stop(atol(argv[2]));
	else {
		fprintf(stderr, "usage: fillmaps conns N | cycle N R | stop N\n");
		return 2;
	}
	if (rc)
		return rc;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
