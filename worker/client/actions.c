/*
 * actions.c: the DLQ read and sent back, follow-ups sent (actions.h).
 */
#include "actions.h"
#include "client_int.h"

#include "tb/clock.h"
#include "tb/kafka.h"
#include "tb/ledger.h"
#include "tb/schema_followup.h"
#include "tb/schema_task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The partitions of DLQ topic @p topic to read (@p only, or all when
 * -1), each from @p from (or its oldest record). 0, or TB_EIO. */
static int dlq_partitions(rd_kafka_t *c, const char *topic, int32_t only, int64_t from,
			  rd_kafka_topic_partition_list_t **out, tb_error_t *err)
{
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_topic_t *t = rd_kafka_topic_new(c, topic, NULL);
	rd_kafka_resp_err_t e =
	    t ? rd_kafka_metadata(c, 0, t, &md, 10000) : RD_KAFKA_RESP_ERR__INVALID_ARG;
	int rc = 0;

	if (e || md->topic_cnt != 1 || md->topics[0].err) {
		rc = tb_error_set(err, TB_EIO, "kafka: topic %s: %s", topic,
				  e                    ? rd_kafka_err2str(e)
				  : md->topic_cnt != 1 ? "not in the metadata"
						       : rd_kafka_err2str(md->topics[0].err));
	} else {
		*out = rd_kafka_topic_partition_list_new(8);
		for (int i = 0; i < md->topics[0].partition_cnt; i++) {
			int32_t p = md->topics[0].partitions[i].id;
			if (only < 0 || p == only)
				rd_kafka_topic_partition_list_add(*out, topic, p)->offset =
				    from >= 0 ? from : RD_KAFKA_OFFSET_BEGINNING;
		}
	}
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	return rc;
}

int tb_dlq_each(const tb_config_t *cfg, int32_t only, int64_t from, tb_dlq_fn fn, void *ud,
		tb_error_t *err)
{
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
	rd_kafka_topic_partition_list_t *parts = NULL;
	if ((rc = dlq_partitions(c, cfg->kafka.dlq_topic, only, from, &parts, err)) < 0)
		goto out;
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
			fprintf(stderr, "taskbox: DLQ %d:%lld is not a DLQ record: %s\n",
				(int)m->partition, (long long)m->offset, derr.msg);
		}
		rd_kafka_message_destroy(m);
	}
	if (rc == 0 && ended < want && !stop)
		rc = tb_error_set(err, TB_EIO,
				  "kafka: the DLQ topic was not read to its end in 60 s");
out:
	free(at_end);
	rd_kafka_consumer_close(c);
	rd_kafka_destroy(c);
	return rc;
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

int tb_dlq_send_back(const tb_config_t *cfg, int32_t partition, int64_t offset, char *id,
		     size_t cap, tb_error_t *err)
{
	struct found f = { offset, 0, { 0 } };
	tb_ledger_t *l = NULL;
	tb_task_t task;
	tb_error_t derr;
	int rc;

	if (tb_dlq_each(cfg, partition, offset, take_record, &f, err) < 0)
		return err->code = TB_EIO;
	if (!f.got)
		return tb_error_set(err, TB_ENOTFOUND, "no record at %d:%lld in %s", (int)partition,
				    (long long)offset, cfg->kafka.dlq_topic);
	snprintf(id, cap, "%s", f.rec.task_id ? f.rec.task_id : "");
	if (f.rec.cause == TB_DLQ_MALFORMED || !f.rec.task_id ||
	    tb_msg_decode(&tb_schema_task, &task, f.rec.original.data, f.rec.original.len, &derr) <
		0) {
		rc = tb_error_set(err, TB_EINVAL,
				  "%d:%lld holds no task to send back (%s): fix it at its producer",
				  (int)partition, (long long)offset, tb_dlq_causes[f.rec.cause]);
		goto out;
	}
	tb_msg_free(&tb_schema_task, &task);
	if ((rc = tb_ledger_open(&l, cfg->ledger.url, cfg->ledger.prefix, "dlq", err)) < 0) {
		err->code = rc = TB_EIO;
		goto out;
	}
	/* Only a task the ledger holds dead: a worker writes that marker just
	 * after the DLQ record, and a task sent back before it would be found
	 * done and not run. */
	rc = tb_ledger_revive(l, f.rec.task_id, err);
	if (rc == TB_ENOTFOUND) {
		rc =
		    tb_error_set(err, TB_ERETRY,
				 "the ledger (%s, prefix %s) holds no dead letter for task %s: a "
				 "worker may still be writing it, or it was sent back already; try "
				 "again in a moment",
				 cfg->ledger.url, cfg->ledger.prefix, f.rec.task_id);
		goto out;
	}
	if (rc < 0) {
		err->code = rc = TB_EIO;
		goto out;
	}
	if ((rc = tb_client_produce(cfg, cfg->kafka.tasks_topic, f.rec.task_id, f.rec.original.data,
				    f.rec.original.len, err)) < 0) {
		/* the dead letter is forgotten: a second try says "sent back
		 * already", so say here what to do */
		tb_error_prefix(err,
				"the ledger forgot the dead letter of task %s but it did not "
				"reach %s (submit it again)",
				f.rec.task_id, cfg->kafka.tasks_topic);
		goto out;
	}
out:
	if (l)
		tb_ledger_close(l);
	tb_msg_free(&tb_schema_dlq, &f.rec);
	return rc;
}

int tb_followup_send(const tb_config_t *cfg, const char *task, const char *text, uint64_t given,
		     uint64_t *seq, tb_error_t *err)
{
	tb_followup_t f = { 0 };
	tb_ledger_t *l = NULL;
	msgpack_sbuffer sb;
	int rc;

	f.task_id = (char *)task;
	f.kind = text ? TB_FOLLOWUP_PROMPT : TB_FOLLOWUP_END;
	f.text = (char *)text;
	f.sent_at = tb_wall_ms();
	f.seq = given ? given : 1;
	msgpack_sbuffer_init(&sb);
	/* checked before a number is taken: a refused one leaves no gap */
	if (tb_msg_encode(&sb, &tb_schema_followup, &f, err) < 0) {
		msgpack_sbuffer_destroy(&sb);
		tb_error_prefix(err, "not a valid follow-up");
		return err->code = TB_EINVAL;
	}
	msgpack_sbuffer_clear(&sb);
	rc = 0;
	if (!given && !strcmp(cfg->ledger.url, "memory:"))
		rc = tb_error_set(err, TB_ENOTFOUND,
				  "ledger.url is 'memory:', which lives inside one worker: point "
				  "it at the fleet's Redis (TASKBOX_LEDGER_URL)");
	else if (!given &&
		 ((rc = tb_ledger_open(&l, cfg->ledger.url, cfg->ledger.prefix, "send", err)) < 0 ||
		  (rc = tb_ledger_next_followup(l, task, &f.seq, err)) < 0))
		err->code = rc = TB_EIO;
	if (l)
		tb_ledger_close(l);
	if (rc < 0 || (rc = tb_msg_encode(&sb, &tb_schema_followup, &f, err)) < 0) {
		msgpack_sbuffer_destroy(&sb);
		return rc;
	}
	rc = tb_client_produce(cfg, cfg->kafka.tasks_topic, task, sb.data, sb.size, err);
	msgpack_sbuffer_destroy(&sb);
	*seq = f.seq;
	return rc;
}
