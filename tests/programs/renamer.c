/*
 * renamer MODE TITLE [COMM]: forks a child that gives itself a new command line, as Redis's
 * redis-rdb-bgsave and PostgreSQL's "postgres: checkpointer" do: it overwrites its argv
 * area with TITLE (setproctitle-style: no syscall), then, with COMM, renames itself
 * (prctl(PR_SET_NAME)). The parent prints "child PID" once the child has done so, then
 * waits to be killed; the child dies with it (PR_SET_PDEATHSIG).
 *   renamer stay TITLE [COMM]   the child stays alive
 *   renamer exit TITLE [COMM]   the child exits at once; the parent reaps it before printing
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes `title` over the argv area (argv[0] to the end of the last argument), NUL-padded. */
static void set_title(int argc, char **argv, const char *title)
{
	char *start = argv[0];
	char *end = argv[argc - 1] + strlen(argv[argc - 1]);
	size_t room = (size_t)(end - start);
	char copy[256];

	snprintf(copy, sizeof(copy), "%s", title); /* title is in the area it overwrites */
	memset(start, 0, room + 1);
	strncpy(start, copy, room);
}

int main(int argc, char **argv)
{
	int ready[2];
	pid_t child;
	char c;

	if (argc < 3 || (strcmp(argv[1], "stay") && strcmp(argv[1], "exit"))) {
		fprintf(stderr, "usage: renamer stay|exit TITLE [COMM]\n");
		return 2;
	}
	if (pipe(ready))
		return 1;
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		int stay = !strcmp(argv[1], "stay");
		const char *comm = argc > 3 ? argv[3] : NULL;
		char name[16] = "";

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (comm)
			snprintf(name, sizeof(name), "%s", comm);
		set_title(argc, argv, argv[2]);
		if (comm && prctl(PR_SET_NAME, name))
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		if (!stay)
			_exit(0);
		for (;;)
			pause();
	}
	if (read(ready[0], &c, 1) != 1)
		return 1;
	if (!strcmp(argv[1], "exit") && waitpid(child, NULL, 0) != child)
		return 1;
	printf("child %d\n", (int)child);
	fflush(stdout);
	for (;;)
		pause();
}
