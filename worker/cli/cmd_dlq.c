/*
 * cmd_dlq.c: `taskbox dlq`: the dead-letter topic for operators. `list`
 * shows every record with its cause and reason; `send` puts a dead-lettered
 * task back on the tasks topic after a fix (a runtime added, a commit
 * pushed), with its attempt budget started afresh in the ledger.
 */
#include "actions.h"
#include "cmd.h"

#include "tb/config.h"
#include "tb/schema_dlq.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox dlq list [--config FILE] [--json]\n"
		     "       taskbox dlq send [--config FILE] PARTITION:OFFSET\n\n"
		     "list: every record of the DLQ topic, oldest first, with where it is\n"
		     "(PARTITION:OFFSET), its cause, task and reason.\n"
		     "send: the task in the record at PARTITION:OFFSET goes back to the tasks\n"
		     "topic, unchanged, after a fix; the ledger forgets its dead letter and\n"
		     "counts its attempts afresh. A malformed message cannot be sent back\n"
		     "(fix it at its producer), nor a task that is done with a record or\n"
		     "that the ledger does not hold dead (sent back already, or not yet).\n"
		     "Configuration as for `taskbox worker` (schemas/config.md).\n"
		     "Exit: 0 done, 1 a service failed or the record cannot be sent, 2 usage,\n"
		     "3 configuration, 5 no record there.\n");
}

static int print_record(void *ud, int32_t partition, int64_t offset, const tb_dlq_t *rec)
{
	int as_json = *(int *)ud;

	if (as_json) {
		json_t *o = json_pack("{s:i,s:I,s:s,s:s,s:s,s:I,s:I}", "partition", (int)partition,
				      "offset", (json_int_t)offset, "task",
				      rec->task_id ? rec->task_id : "", "cause",
				      tb_dlq_causes[rec->cause], "reason", rec->reason, "attempts",
				      (json_int_t)rec->attempts.n, "ts", (json_int_t)rec->ts);
		char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		printf("%s\n", text ? text : "{}");
		free(text);
		json_decref(o);
	} else {
		printf("%d:%-8lld %-12s %-24s %s", (int)partition, (long long)offset,
		       tb_dlq_causes[rec->cause], rec->task_id ? rec->task_id : "(no id)",
		       rec->reason);
		if (rec->attempts.n)
			printf(" (%zu attempts)", rec->attempts.n);
		printf("\n");
	}
	return 0;
}

/* Sends the task of the record at @p partition:@p offset back. */
static int send_back(const tb_config_t *cfg, int32_t partition, int64_t offset)
{
	char task[200];
	tb_error_t err;
	int rc = tb_dlq_send_back(cfg, partition, offset, task, sizeof(task), &err);

	if (rc < 0) {
		fprintf(stderr, "taskbox dlq: %s\n", err.msg);
		return rc == TB_ENOTFOUND ? TB_EXIT_NOT_FOUND : TB_EXIT_FAILURE;
	}
	printf("task %s sent back to %s; its attempts count afresh\n", task,
	       cfg->kafka.tasks_topic);
	return TB_EXIT_OK;
}

int tb_cmd_dlq(int argc, char **argv)
{
	const char *path = NULL, *pos[2] = { NULL, NULL };
	int as_json = 0, rc;
	tb_config_t cfg;
	tb_error_t err;
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--json", TB_OPT_FLAG, &as_json, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { "dlq", opts, pos, 2, 0 };

	if ((rc = tb_cmd_options(&o, argc, argv, 1, usage)) >= 0)
		return rc;
	rc = TB_EXIT_OK;
	const char *what = pos[0], *where = pos[1];
	int partition = -1;
	long long offset = -1;
	int n = 0;
	static const char *const verbs[] = { "list", "send" };
	if (!what)
		return tb_cmd_usage_error("dlq", usage, "say list or send");
	if (strcmp(what, "list") && strcmp(what, "send"))
		return tb_cmd_unknown_verb("dlq", usage, what, verbs, 2);
	if (!strcmp(what, "list") && where)
		return tb_cmd_usage_error("dlq", usage, "list takes no argument ('%s')", where);
	if (!strcmp(what, "send") &&
	    (!where || sscanf(where, "%d:%lld%n", &partition, &offset, &n) != 2 || where[n] ||
	     partition < 0 || offset < 0))
		return tb_cmd_usage_error("dlq", usage,
					  "send wants the dead letter's PARTITION:OFFSET, as `dlq "
					  "list` prints it%s%s%s",
					  where ? " (not '" : "", where ? where : "",
					  where ? "')" : "");
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox dlq: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	if (!strcmp(cfg.kafka.brokers, "mock")) {
		fprintf(stderr, "taskbox dlq: kafka.brokers is 'mock', a cluster inside one "
				"process: set kafka.brokers (TASKBOX_KAFKA_BROKERS)\n");
		rc = TB_EXIT_CONFIG;
	} else if (!strcmp(what, "send") && !strcmp(cfg.ledger.url, "memory:")) {
		fprintf(stderr,
			"taskbox dlq: ledger.url is 'memory:', which lives inside one "
			"worker: point it at the fleet's Redis (TASKBOX_LEDGER_URL), or the "
			"task would be found done and not run\n");
		rc = TB_EXIT_CONFIG;
	} else if (!strcmp(what, "list")) {
		if (tb_dlq_each(&cfg, -1, -1, print_record, &as_json, &err) < 0) {
			fprintf(stderr, "taskbox dlq: %s\n", err.msg);
			rc = TB_EXIT_FAILURE;
		}
	} else {
		rc = send_back(&cfg, partition, offset);
	}
	tb_config_free(&cfg);
	return rc;
}
