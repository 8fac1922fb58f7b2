/*
 * cmd_send.c: `taskbox send` and `taskbox end`, the two kinds of follow-up
 * (schemas/followup.md) for an interactive task's session: a further
 * prompt, or the end of the session. One file: one message, two kinds.
 * Follow-ups go on the tasks topic keyed by the task id, so they reach the
 * worker holding the session. Their numbers come from --seq, or from the
 * ledger's count for the task (so every `send` of one task numbers after
 * the last).
 */
#include "actions.h"
#include "cmd.h"

#include "tb/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out, const char *cmd)
{
	if (!strcmp(cmd, "end"))
		fprintf(out, "usage: taskbox end [--config FILE] [--seq N] TASK_ID\n\n"
			     "Ends an interactive task's session: the agent gets the end of its\n"
			     "input once it has answered every prompt sent before; then the\n"
			     "task settles, is judged and recorded.\n");
	else
		fprintf(out,
			"usage: taskbox send [--config FILE] [--seq N] TASK_ID (TEXT | --file "
			"FILE)\n\n"
			"Sends a further prompt to an interactive task's session (--file: the\n"
			"prompt from a file, - for stdin). The agent gets it as its next turn.\n");
	fprintf(out, "  --seq N   the follow-up's number (1, 2, 3 ... per task, none skipped);\n"
		     "            default: the next from the ledger's count for the task\n"
		     "Prints the number sent. `taskbox watch TASK_ID --follow` shows the turns.\n"
		     "Exit: 0 sent, 1 Kafka or the ledger failed, 2 usage, 3 configuration,\n"
		     "4 the follow-up is invalid (the field is named).\n");
}

static void usage_send(FILE *out)
{
	usage(out, "send");
}

static void usage_end(FILE *out)
{
	usage(out, "end");
}

static int send_followup(int argc, char **argv, const char *cmd)
{
	const char *path = NULL, *task = NULL, *text = NULL, *file = NULL;
	uint64_t given = 0;
	int is_end = !strcmp(cmd, "end"), rc;
	char *loaded = NULL;
	tb_config_t cfg;
	tb_error_t err;

	const char *pos[2] = { NULL, NULL };
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--seq", TB_OPT_UINT, &given, 1, 1000000, NULL, 0 },
		/* not for end: its NULL name ends the table here */
		{ is_end ? NULL : "--file", TB_OPT_STRING, &file, 0, 0, NULL, 'f' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { cmd, opts, pos, is_end ? 1 : 2, 0 };

	if ((rc = tb_cmd_options(&o, argc, argv, 1, is_end ? usage_end : usage_send)) >= 0)
		return rc;
	task = pos[0], text = pos[1];
	if (!task || (!is_end && !text == !file))
		return tb_cmd_usage_error(cmd, is_end ? usage_end : usage_send, "%s",
					  !task ? "name the task (TASK_ID)"
					  : text
					      ? "give the prompt as TEXT or --file FILE, not both"
					      : "give the prompt: TEXT, or --file FILE");
	if (file && !(text = loaded = tb_cmd_read_prompt(cmd, file)))
		return TB_EXIT_FAILURE;
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox %s: %s\n", cmd, err.msg);
		free(loaded);
		return TB_EXIT_CONFIG;
	}
	if (!strcmp(cfg.kafka.brokers, "mock")) {
		fprintf(stderr,
			"taskbox %s: kafka.brokers is 'mock', which lives inside one "
			"process: point it at the cluster (TASKBOX_KAFKA_BROKERS)\n",
			cmd);
		rc = TB_EXIT_CONFIG;
		goto out;
	}
	uint64_t seq = 0;
	int got = tb_followup_send(&cfg, task, is_end ? NULL : text, given, &seq, &err);
	if (got == 0) {
		printf("%s %llu to %s\n", is_end ? "end" : "follow-up", (unsigned long long)seq,
		       task);
		rc = TB_EXIT_OK;
	} else {
		fprintf(stderr, "taskbox %s: %s%s\n", cmd, err.msg,
			got == TB_ENOTFOUND ? "; or number it with --seq" : "");
		rc = got == TB_EINVAL      ? TB_EXIT_INVALID
		     : got == TB_ENOTFOUND ? TB_EXIT_CONFIG
					   : TB_EXIT_FAILURE;
	}
out:
	free(loaded);
	tb_config_free(&cfg);
	return rc;
}

int tb_cmd_send(int argc, char **argv)
{
	return send_followup(argc, argv, "send");
}

int tb_cmd_end(int argc, char **argv)
{
	return send_followup(argc, argv, "end");
}
