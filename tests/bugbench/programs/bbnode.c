/*
 * bbnode: starts a node of a bug benchmark incident: `bbnode CMD [ARG]...` executes CMD.
 *
 * The produce scripts start tracerd with target_comm = ["bbnode"]: tracerd targets a
 * process whose comm matches when it starts, keeps it targeted when it executes CMD, and
 * follows its descendants -- so the production dump holds exactly the nodes of this
 * incident, not the script's helpers (grep, sleep, the workload's clients) and not the
 * processes of the same programs that anyone else runs on the machine at the same time
 * (reproducer runs of the same scenario, for instance).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bbnode CMD [ARG]...\n");
		return 2;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "bbnode: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
