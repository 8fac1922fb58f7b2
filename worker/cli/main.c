/*
 * main.c: the taskbox command's entry point: finds the subcommand and hands
 * it the rest of the arguments. Owns nothing else.
 */
#include "cmd.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "artifacts", tb_cmd_artifacts, "list, download or share a done task's files" },
	{ "demo", tb_cmd_demo, "run the embedded demo (no external services)" },
	{ "dlq", tb_cmd_dlq, "list dead letters; send a task back after a fix" },
	{ "end", tb_cmd_end, "end an interactive task's session" },
	{ "schema", tb_cmd_schema, "encode, decode and check wire messages" },
	{ "send", tb_cmd_send, "a further prompt for an interactive task's session" },
	{ "status", tb_cmd_status, "a task's state, or the fleet's workers and lag" },
	{ "submit", tb_cmd_submit, "put a task on the tasks topic (--wait: follow it)" },
	{ "top", tb_cmd_top, "a live view of the fleet: workers, tasks, throughput" },
	{ "view", tb_cmd_view, "a web page of the runs: tasks, conversations, fleet" },
	{ "watch", tb_cmd_watch, "print the events of one task or of all, as they come" },
	{ "worker", tb_cmd_worker, "run a worker (tasks from Kafka, each in a sandbox)" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\n'taskbox <command> --help' describes each one; 'taskbox --version' says\n"
		     "which taskbox this is and the libraries it runs with.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return TB_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return TB_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0 ||
	    strcmp(argv[1], "version") == 0) {
		tb_cmd_print_version(stdout);
		return TB_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "taskbox: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return TB_EXIT_USAGE;
}
