/*
 * cmd.h: the taskbox command's subcommands. Each lives in its own
 * cmd_<name>.c, parses its own arguments, and returns the process exit
 * code (see TB_EXIT_* below and the README's "Exit codes").
 */
#ifndef TB_CMD_H
#define TB_CMD_H

#include <string.h>

enum {
	TB_EXIT_OK = 0,
	TB_EXIT_FAILURE = 1,   /* the operation ran and failed */
	TB_EXIT_USAGE = 2,     /* bad arguments */
	TB_EXIT_CONFIG = 3,    /* configuration could not be loaded */
	TB_EXIT_INVALID = 4,   /* an input failed its schema */
	TB_EXIT_NOT_FOUND = 5, /* the thing named does not exist */
	/* --wait (submit) and --until-settled (watch): */
	TB_EXIT_TASK_FAILED = 6, /* the task ended and did not succeed */
	TB_EXIT_DEAD = 7,        /* the task was dead-lettered */
	TB_EXIT_TIMEOUT = 8,     /* gave up waiting, or interrupted */
};

/** The exit code for a settled task's outcome (follow.h). */
static inline int tb_cmd_outcome_exit(const char *outcome)
{
	return !strcmp(outcome, "succeeded")       ? TB_EXIT_OK
	       : !strcmp(outcome, "dead-lettered") ? TB_EXIT_DEAD
						   : TB_EXIT_TASK_FAILED;
}

int tb_cmd_demo(int argc, char **argv);
int tb_cmd_end(int argc, char **argv);
int tb_cmd_send(int argc, char **argv);
int tb_cmd_dlq(int argc, char **argv);
int tb_cmd_schema(int argc, char **argv);
int tb_cmd_status(int argc, char **argv);
int tb_cmd_submit(int argc, char **argv);
int tb_cmd_top(int argc, char **argv);
int tb_cmd_watch(int argc, char **argv);
int tb_cmd_artifacts(int argc, char **argv);
int tb_cmd_worker(int argc, char **argv);

#endif
