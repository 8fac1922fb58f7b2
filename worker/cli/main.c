/*
 * main.c: the taskbox command's entry point: finds the subcommand and hands
 * it the rest of the arguments. Owns nothing else.
 */
#include "cmd.h"
#include "tb/encoding.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "artifacts", tb_cmd_artifacts, "list, download or share a done task's files" },
	{ "config", tb_cmd_config, "the configuration in effect, with sources; check it" },
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
		     "which taskbox this is and the libraries it runs with. --config FILE,\n"
		     "--json and -v may come before the command as well as after it.\n");
}

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* The option @p a is a global one: --config FILE (-c FILE, -cFILE,
 * --config=FILE), --json (-j), -v/--verbose. @return how many arguments
 * it takes (1 or 2), or 0 when it is not one. */
static int global_option(const char *a)
{
	if (!strcmp(a, "--config") || !strcmp(a, "-c"))
		return 2;
	return !strncmp(a, "--config=", 9) || (!strncmp(a, "-c", 2) && a[2]) ||
		       !strcmp(a, "--json") || !strcmp(a, "-j") || !strcmp(a, "-v") ||
		       !strcmp(a, "--verbose")
		   ? 1
		   : 0;
}

/* Global options given before the command are moved after it, and after
 * the word that follows it when that is no option (a verb: "taskbox -j
 * artifacts list T" is "taskbox artifacts list -j T", where a command
 * with verbs reads them; for the others a positional, and options and
 * positionals come in any order). @return 0, or -1 with the reason said. */
static int command_first(int argc, char **argv)
{
	int k = 1;

	while (k < argc && argv[k][0] == '-') {
		int n = global_option(argv[k]);
		if (!n) {
			fprintf(stderr,
				"taskbox: '%s' is not an option to give before the command (those "
				"are --config FILE, --json, -v and their short forms); give it "
				"after the command\n",
				argv[k]);
			return -1;
		}
		if (k + n > argc) {
			fprintf(stderr, "taskbox: %s wants a value\n", argv[k]);
			return -1;
		}
		k += n;
	}
	if (k == 1)
		return 0; /* the command first already */
	if (k >= argc) {
		fprintf(stderr, "taskbox: no command after %s\n", argv[k - 1]);
		return -1;
	}
	int words = k + 1 < argc && argv[k + 1][0] != '-' ? 2 : 1; /* the command, a verb */
	for (int j = 0; j < words; j++) {
		char *w = argv[k + j];
		memmove(argv + 2 + j, argv + 1 + j, (size_t)(k - 1) * sizeof(char *));
		argv[1 + j] = w;
	}
	return 0;
}

/* An unknown command: said, with the nearest one when it is near. */
static int unknown(const char *name)
{
	size_t best = 99, at = 0;

	for (size_t i = 0; i < NCOMMANDS; i++) {
		size_t d = tb_edit_distance(name, commands[i].name);
		if (d < best)
			best = d, at = i;
	}
	fprintf(stderr, "taskbox: unknown command '%s'", name);
	if (best <= 2)
		fprintf(stderr, "; did you mean '%s'?", commands[at].name);
	fprintf(stderr, "\n");
	usage(stderr);
	return TB_EXIT_USAGE;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return TB_EXIT_USAGE;
	}
	int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help");
	int version =
	    !strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version");
	if ((help || version) && argc > 2) {
		fprintf(stderr,
			"taskbox: %s takes nothing after it ('%s'); for a command's own, "
			"'taskbox <command> %s'\n",
			argv[1], argv[2], help ? "--help" : "--version");
		return TB_EXIT_USAGE;
	}
	if (help) {
		usage(stdout);
		return TB_EXIT_OK;
	}
	if (version) {
		tb_cmd_print_version(stdout);
		return TB_EXIT_OK;
	}
	if (command_first(argc, argv) < 0)
		return TB_EXIT_USAGE;
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	return unknown(argv[1]);
}
