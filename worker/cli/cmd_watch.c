/*
 * cmd_watch.c: `taskbox watch`: the events topic as it happens, for one
 * task or all of them, readable or as JSON lines for scripts.
 */
#include "cmd.h"
#include "tb/clock.h"
#include "follow.h"

#include "tb/config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: taskbox watch [--config FILE] [--json] [--since SECONDS | --from-beginning]\n"
	    "                     [--follow] [--timeout SECONDS] [TASK_ID]\n\n"
	    "Prints events (schemas/event.md) as they arrive: phases, the conversation,\n"
	    "artifacts, verdicts, errors and egress, one per line.\n"
	    "With TASK_ID: that task's events from the oldest the topic keeps, until\n"
	    "the task is settled (--follow: go on after that, for a replay or a task\n"
	    "sent back from the DLQ). Without: every task's events from now on, until\n"
	    "interrupted.\n"
	    "  --json              one JSON object per event: task_id, attempt, seq,\n"
	    "                      ts, type, payload\n"
	    "  --since SECONDS     start with the events of the last SECONDS\n"
	    "  --from-beginning    start with the oldest event the topic keeps\n"
	    "  --timeout SECONDS   stop after this long\n"
	    "Exit: 0 (with TASK_ID: the task succeeded), 1 Kafka failed, 2 usage,\n"
	    "3 configuration, 6 the task ended without success, 7 dead-lettered,\n"
	    "8 --timeout passed or interrupted before the task was settled.\n");
}

int tb_cmd_watch(int argc, char **argv)
{
	const char *path = NULL, *task = NULL;
	int json = 0, follow = 0, rc = TB_EXIT_OK;
	uint64_t since_s = 0, timeout_s = 0;
	int64_t since = TB_FOLLOW_END;
	int from_beginning = 0;
	tb_ledger_t *l = NULL;
	tb_store_t *store = NULL;
	tb_config_t cfg;
	tb_error_t err;

	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--json", TB_OPT_FLAG, &json, 0, 0, NULL, 'j' },
		{ "--follow", TB_OPT_FLAG, &follow, 0, 0, NULL, 'f' },
		{ "--from-beginning", TB_OPT_FLAG, &from_beginning, 0, 0, NULL, 0 },
		{ "--since", TB_OPT_UINT, &since_s, 1, 366 * 86400, "seconds", 0 },
		{ "--timeout", TB_OPT_UINT, &timeout_s, 1, 366 * 86400, "seconds", 't' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t opt = { "watch", opts, &task, 1, 0 };

	if ((rc = tb_cmd_options(&opt, argc, argv, 1, usage)) >= 0)
		return rc;
	rc = TB_EXIT_OK;
	if (since_s && from_beginning) {
		fprintf(stderr, "taskbox watch: --since or --from-beginning, not both\n");
		return TB_EXIT_USAGE;
	}
	if (from_beginning || (task && !since_s))
		since = TB_FOLLOW_BEGINNING;
	else if (since_s)
		since = (int64_t)tb_wall_ms() - (int64_t)since_s * 1000;
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox watch: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	if (!strcmp(cfg.kafka.brokers, "mock")) {
		fprintf(stderr, "taskbox watch: kafka.brokers is 'mock', which lives inside one "
				"process: point it at the cluster (TASKBOX_KAFKA_BROKERS)\n");
		rc = TB_EXIT_CONFIG;
		goto out;
	}
	/* The ledger tells when a task is settled without an acknowledged
	 * event (see follow.h); watching works without it. */
	if (task && !follow && tb_cmd_open_fleet("watch", &cfg, &l, &store, &err) != TB_EXIT_OK)
		fprintf(stderr, "taskbox watch: %s (going by the events alone)\n", err.msg);
	tb_cmd_stop_on_signals();
	tb_follow_opts_t o = { .task = task,
			       .since_ms = since,
			       .until_settled = task && !follow,
			       .timeout_ms = timeout_s * 1000,
			       .json = json,
			       .out = stdout,
			       .ledger = l,
			       .store = store,
			       .stop = &tb_cmd_stop };
	tb_follow_result_t res;
	int got = tb_follow(&cfg, &o, &res, &err);
	if (got == TB_ETIMEOUT && !o.until_settled) {
		rc = TB_EXIT_OK; /* the time asked for is up */
	} else if (got == TB_ETIMEOUT) {
		fprintf(stderr, "taskbox watch: %s: %s before it was settled\n", task, err.msg);
		rc = TB_EXIT_TIMEOUT;
	} else if (got < 0) {
		fprintf(stderr, "taskbox watch: %s\n", err.msg);
		rc = TB_EXIT_FAILURE;
	} else if (o.until_settled && !res.settled) {
		rc = TB_EXIT_TIMEOUT; /* interrupted */
	} else if (o.until_settled) {
		fprintf(json ? stderr : stdout, "task %s: %s (attempt %llu)%s%s\n", task,
			res.outcome, (unsigned long long)res.attempt, res.reason[0] ? ": " : "",
			res.reason);
		rc = tb_cmd_outcome_exit(res.outcome);
	}
out:
	if (l)
		tb_ledger_close(l);
	tb_store_close(store);
	tb_config_free(&cfg);
	return rc;
}
