/*
 * cmd_send.c: `taskbox send` and `taskbox end`, the two kinds of follow-up
 * (schemas/followup.md) for an interactive task's session: a further
 * prompt, or the end of the session. One file: one message, two kinds.
 * Follow-ups go on the tasks topic keyed by the task id, so they reach the
 * worker holding the session. Their numbers come from --seq, or from the
 * ledger's count for the task (so every `send` of one task numbers after
 * the last).
 */
#include "cmd.h"

#include "tb/clock.h"
#include "tb/config.h"
#include "tb/kafka.h"
#include "tb/ledger.h"
#include "tb/schema_followup.h"
#include "tb/schema_task.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* The follow-up's number: @p given, else the ledger's next. */
static int number(const tb_config_t *cfg, const char *cmd, const char *task, uint64_t given,
		  uint64_t *seq)
{
	tb_ledger_t *l;
	tb_error_t err;

	if (given) {
		*seq = given;
		return TB_EXIT_OK;
	}
	int rc = tb_cmd_open_fleet(cmd, cfg, &l, NULL, &err);
	if (rc != TB_EXIT_OK) {
		fprintf(stderr, "taskbox %s: %s%s\n", cmd, err.msg,
			rc == TB_EXIT_CONFIG ? "; or number it with --seq" : "");
		return rc;
	}
	rc = tb_ledger_next_followup(l, task, seq, &err);
	tb_ledger_close(l);
	if (rc < 0) {
		fprintf(stderr, "taskbox %s: %s\n", cmd, err.msg);
		return TB_EXIT_FAILURE;
	}
	return TB_EXIT_OK;
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
	if (!task || (!is_end && !text == !file)) {
		usage(stderr, cmd);
		return TB_EXIT_USAGE;
	}
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
	tb_followup_t f = { 0 };
	f.task_id = (char *)task;
	f.kind = is_end ? TB_FOLLOWUP_END : TB_FOLLOWUP_PROMPT;
	f.text = is_end ? NULL : (char *)text;
	f.sent_at = tb_wall_ms();
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	/* checked before a number is taken: a refused one leaves no gap */
	f.seq = given ? given : 1;
	if (tb_msg_encode(&sb, &tb_schema_followup, &f, &err) < 0) {
		fprintf(stderr, "taskbox %s: not a valid follow-up: %s\n", cmd, err.msg);
		msgpack_sbuffer_destroy(&sb);
		rc = TB_EXIT_INVALID;
		goto out;
	}
	msgpack_sbuffer_clear(&sb);
	if ((rc = number(&cfg, cmd, task, given, &f.seq)) != TB_EXIT_OK ||
	    tb_msg_encode(&sb, &tb_schema_followup, &f, &err) < 0) {
		if (rc == TB_EXIT_OK) {
			fprintf(stderr, "taskbox %s: %s\n", cmd, err.msg);
			rc = TB_EXIT_INVALID;
		}
		msgpack_sbuffer_destroy(&sb);
		goto out;
	}
	rd_kafka_t *p;
	rc = TB_EXIT_FAILURE;
	if (tb_kafka_producer_new(&p, cfg.kafka.brokers, &cfg.kafka.properties, &err) == 0) {
		uint64_t since = tb_kafka_undelivered();
		if (tb_kafka_produce(p, cfg.kafka.tasks_topic, task, sb.data, sb.size, &err) == 0 &&
		    tb_kafka_flush(p, 30000, since, &err) == 0)
			rc = TB_EXIT_OK;
		rd_kafka_destroy(p);
	}
	msgpack_sbuffer_destroy(&sb);
	if (rc == TB_EXIT_OK)
		printf("%s %llu to %s\n", is_end ? "end" : "follow-up", (unsigned long long)f.seq,
		       task);
	else
		fprintf(stderr, "taskbox %s: %s\n", cmd, err.msg);
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
