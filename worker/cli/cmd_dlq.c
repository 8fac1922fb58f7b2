/*
 * cmd_dlq.c: `taskbox dlq`: the dead-letter topic for operators. `list`
 * shows every record with its cause and reason; `send` puts a dead-lettered
 * task back on the tasks topic after a fix (a runtime added, a commit
 * pushed), with its attempt budget started afresh in the ledger.
 */
#include "cmd.h"

#include "tb/clock.h"
#include "tb/config.h"
#include "tb/kafka.h"
#include "tb/ledger.h"
#include "tb/schema_dlq.h"
#include "tb/schema_task.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

typedef int (*record_fn)(void *ud, int32_t partition, int64_t offset, const tb_dlq_t *rec);

/*
 * Calls @p fn for each record of the DLQ topic from @p from (partition
 * @p only, or every partition when it is -1) to the end, oldest first per
 * partition; @p fn returning non-zero stops. 0, or TB_EIO naming why.
 */
static int each_record(const tb_config_t *cfg, int32_t only, int64_t from, record_fn fn, void *ud,
		       tb_error_t *err)
{
	const rd_kafka_metadata_t *md = NULL;
	size_t np = cfg->kafka.properties.n;
	tb_kv_t *kv = calloc(np + 1, sizeof(*kv));
	unsigned char *at_end = NULL;
	rd_kafka_t *c;
	int rc = 0;

	if (!kv)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	/* the fleet's settings (security ...), and an end-of-partition event */
	if (np)
		memcpy(kv, cfg->kafka.properties.items, np * sizeof(*kv));
	kv[np].key = (char *)"enable.partition.eof", kv[np].value = (char *)"true";
	tb_strmap_t props = { np + 1, kv };
	rc = tb_kafka_consumer_new(&c, cfg->kafka.brokers, "taskbox-dlq-reader", NULL, NULL, &props,
				   NULL, NULL, err);
	free(kv);
	if (rc < 0)
		return rc;
	rd_kafka_topic_t *t = rd_kafka_topic_new(c, cfg->kafka.dlq_topic, NULL);
	rd_kafka_resp_err_t e =
	    t ? rd_kafka_metadata(c, 0, t, &md, 10000) : RD_KAFKA_RESP_ERR__INVALID_ARG;
	if (e || md->topic_cnt != 1 || md->topics[0].err) {
		rc = tb_error_set(err, TB_EIO, "kafka: topic %s: %s", cfg->kafka.dlq_topic,
				  e                    ? rd_kafka_err2str(e)
				  : md->topic_cnt != 1 ? "not in the metadata"
						       : rd_kafka_err2str(md->topics[0].err));
		goto out;
	}
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(8);
	for (int i = 0; i < md->topics[0].partition_cnt; i++) {
		int32_t p = md->topics[0].partitions[i].id;
		if (only < 0 || p == only)
			rd_kafka_topic_partition_list_add(parts, cfg->kafka.dlq_topic, p)->offset =
			    from >= 0 ? from : RD_KAFKA_OFFSET_BEGINNING;
	}
	/* one flag per partition: a partition may report its end twice */
	int want = parts->cnt, ended = 0, stop = 0;
	if (!(at_end = calloc(1024, 1))) {
		rd_kafka_topic_partition_list_destroy(parts);
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto out;
	}
	rd_kafka_assign(c, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	for (uint64_t until = tb_mono_ms() + 60000;
	     ended < want && !stop && tb_mono_ms() < until;) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 500);
		tb_dlq_t rec;
		tb_error_t derr;
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			if (m->partition >= 0 && m->partition < 1024 && !at_end[m->partition]++)
				ended++;
		} else if (m->err) {
			rc = tb_error_set(err, TB_EIO, "kafka: %s", rd_kafka_message_errstr(m));
			stop = 1;
		} else if (tb_msg_decode(&tb_schema_dlq, &rec, m->payload, m->len, &derr) == 0) {
			stop = fn(ud, m->partition, m->offset, &rec);
			tb_msg_free(&tb_schema_dlq, &rec);
		} else {
			fprintf(stderr, "taskbox dlq: %d:%lld is not a DLQ record: %s\n",
				(int)m->partition, (long long)m->offset, derr.msg);
		}
		rd_kafka_message_destroy(m);
	}
	if (rc == 0 && ended < want && !stop)
		rc = tb_error_set(err, TB_EIO,
				  "kafka: the DLQ topic was not read to its end in 60 s");
out:
	free(at_end);
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	return rc;
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

struct found {
	int64_t offset;
	int got;
	tb_dlq_t rec; /* owned when got */
};

static int take_record(void *ud, int32_t partition, int64_t offset, const tb_dlq_t *rec)
{
	struct found *f = ud;
	(void)partition;
	if (offset != f->offset)
		return 1; /* the record at the offset is gone (retention): stop */
	/* copy by re-encoding: rec is freed after this call */
	msgpack_sbuffer sb;
	tb_error_t err;
	msgpack_sbuffer_init(&sb);
	if (tb_msg_encode(&sb, &tb_schema_dlq, rec, &err) == 0 &&
	    tb_msg_decode(&tb_schema_dlq, &f->rec, sb.data, sb.size, &err) == 0)
		f->got = 1;
	msgpack_sbuffer_destroy(&sb);
	return 1;
}

/* Sends the task of the record at @p partition:@p offset back. */
static int send_back(const tb_config_t *cfg, int32_t partition, int64_t offset)
{
	struct found f = { offset, 0, { 0 } };
	tb_ledger_t *l = NULL;
	rd_kafka_t *p = NULL;
	tb_task_t task;
	tb_error_t err;
	int rc = TB_EXIT_FAILURE;

	if (each_record(cfg, partition, offset, take_record, &f, &err) < 0) {
		fprintf(stderr, "taskbox dlq: %s\n", err.msg);
		return TB_EXIT_FAILURE;
	}
	if (!f.got) {
		fprintf(stderr, "taskbox dlq: no record at %d:%lld in %s\n", (int)partition,
			(long long)offset, cfg->kafka.dlq_topic);
		return TB_EXIT_NOT_FOUND;
	}
	if (f.rec.cause == TB_DLQ_MALFORMED || !f.rec.task_id ||
	    tb_msg_decode(&tb_schema_task, &task, f.rec.original.data, f.rec.original.len, &err) <
		0) {
		fprintf(stderr,
			"taskbox dlq: %d:%lld holds no task to send back (%s): fix it at its "
			"producer\n",
			(int)partition, (long long)offset, tb_dlq_causes[f.rec.cause]);
		goto out;
	}
	tb_msg_free(&tb_schema_task, &task);
	if (tb_ledger_open(&l, cfg->ledger.url, cfg->ledger.prefix, "dlq", &err) < 0) {
		fprintf(stderr, "taskbox dlq: %s\n", err.msg);
		goto out;
	}
	/* Only a task the ledger holds dead: a worker writes that marker just
	 * after the DLQ record, and a task sent back before it would be found
	 * done and not run. */
	int rv = tb_ledger_revive(l, f.rec.task_id, &err);
	if (rv == TB_ENOTFOUND) {
		fprintf(stderr,
			"taskbox dlq: the ledger (%s, prefix %s) holds no dead letter for task %s: "
			"a worker may still be writing it, or it was sent back already; try again "
			"in a moment\n",
			cfg->ledger.url, cfg->ledger.prefix, f.rec.task_id);
		goto out;
	}
	if (rv < 0) {
		fprintf(stderr, "taskbox dlq: %s\n", err.msg);
		goto out;
	}
	if (tb_kafka_producer_new(&p, cfg->kafka.brokers, &cfg->kafka.properties, &err) < 0 ||
	    tb_kafka_produce(p, cfg->kafka.tasks_topic, f.rec.task_id, f.rec.original.data,
			     f.rec.original.len, &err) < 0 ||
	    tb_kafka_flush(p, 30000, tb_kafka_undelivered(), &err) < 0) {
		fprintf(stderr, "taskbox dlq: %s\n", err.msg);
		goto out;
	}
	printf("task %s sent back to %s; its attempts count afresh\n", f.rec.task_id,
	       cfg->kafka.tasks_topic);
	rc = TB_EXIT_OK;
out:
	if (p)
		rd_kafka_destroy(p);
	if (l)
		tb_ledger_close(l);
	tb_msg_free(&tb_schema_dlq, &f.rec);
	return rc;
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
	if (!what || (strcmp(what, "list") && strcmp(what, "send")) ||
	    (!strcmp(what, "list") && where) ||
	    (!strcmp(what, "send") &&
	     (!where || sscanf(where, "%d:%lld%n", &partition, &offset, &n) != 2 || where[n] ||
	      partition < 0 || offset < 0))) {
		usage(stderr);
		return TB_EXIT_USAGE;
	}
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
		if (each_record(&cfg, -1, -1, print_record, &as_json, &err) < 0) {
			fprintf(stderr, "taskbox dlq: %s\n", err.msg);
			rc = TB_EXIT_FAILURE;
		}
	} else {
		rc = send_back(&cfg, partition, offset);
	}
	tb_config_free(&cfg);
	return rc;
}
