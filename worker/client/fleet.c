/*
 * fleet.c: what the whole fleet looks like from outside: the consumer
 * group's progress on the tasks topic, and the DLQ's size. Read by
 * `taskbox status`, `taskbox top` and `taskbox view`; changes nothing.
 */
#include "fleet.h"

#include "tb/kafka.h"

#include <string.h>

#define MAX_PARTITIONS 1024

/* The group's lag per partition of the tasks topic, or NULL (why in @p
 * err) when Kafka cannot say. */
json_t *tb_fleet_lag(const tb_config_t *cfg, tb_error_t *err)
{
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_t *c;
	json_t *parts = NULL;

	if (tb_kafka_consumer_new(&c, cfg->kafka.brokers, cfg->kafka.group, NULL, NULL,
				  &cfg->kafka.properties, NULL, NULL, err) < 0)
		return NULL;
	rd_kafka_topic_t *t = rd_kafka_topic_new(c, cfg->kafka.tasks_topic, NULL);
	rd_kafka_resp_err_t e =
	    t ? rd_kafka_metadata(c, 0, t, &md, 10000) : RD_KAFKA_RESP_ERR__INVALID_ARG;
	if (e || md->topic_cnt != 1 || md->topics[0].err) {
		tb_error_set(err, TB_EIO, "kafka: topic %s: %s", cfg->kafka.tasks_topic,
			     e                    ? rd_kafka_err2str(e)
			     : md->topic_cnt != 1 ? "not in the metadata"
						  : rd_kafka_err2str(md->topics[0].err));
		goto out;
	}
	int np = md->topics[0].partition_cnt;
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(np);
	for (int p = 0; p < np && p < MAX_PARTITIONS; p++)
		rd_kafka_topic_partition_list_add(l, cfg->kafka.tasks_topic,
						  md->topics[0].partitions[p].id);
	if ((e = rd_kafka_committed(c, l, 10000))) {
		tb_error_set(err, TB_EIO, "kafka: committed offsets: %s", rd_kafka_err2str(e));
		rd_kafka_topic_partition_list_destroy(l);
		goto out;
	}
	parts = json_array();
	for (int i = 0; i < l->cnt; i++) {
		int64_t lo, hi;
		int32_t p = l->elems[i].partition;
		if (rd_kafka_query_watermark_offsets(c, cfg->kafka.tasks_topic, p, &lo, &hi,
						     10000)) {
			lo = hi = -1;
		}
		int64_t at = l->elems[i].offset >= 0 ? l->elems[i].offset : lo;
		json_array_append_new(
		    parts, json_pack("{s:i,s:I,s:I,s:I}", "partition", (int)p, "committed",
				     (json_int_t)l->elems[i].offset, "end", (json_int_t)hi, "lag",
				     (json_int_t)(hi >= 0 && at >= 0 ? hi - at : -1)));
	}
	rd_kafka_topic_partition_list_destroy(l);
out:
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	rd_kafka_destroy(c);
	return parts;
}

int64_t tb_fleet_dlq_size(const tb_config_t *cfg, rd_kafka_t *rk, tb_error_t *err)
{
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_topic_t *t = rd_kafka_topic_new(rk, cfg->kafka.dlq_topic, NULL);
	rd_kafka_resp_err_t e =
	    t ? rd_kafka_metadata(rk, 0, t, &md, 10000) : RD_KAFKA_RESP_ERR__INVALID_ARG;
	int64_t total = 0;

	if (e || md->topic_cnt != 1 || md->topics[0].err) {
		total = tb_error_set(err, TB_EIO, "kafka: topic %s: %s", cfg->kafka.dlq_topic,
				     e                    ? rd_kafka_err2str(e)
				     : md->topic_cnt != 1 ? "not in the metadata"
							  : rd_kafka_err2str(md->topics[0].err));
		goto out;
	}
	for (int p = 0; p < md->topics[0].partition_cnt && p < MAX_PARTITIONS; p++) {
		int64_t lo, hi;
		if ((e = rd_kafka_query_watermark_offsets(rk, cfg->kafka.dlq_topic,
							  md->topics[0].partitions[p].id, &lo, &hi,
							  10000))) {
			total = tb_error_set(err, TB_EIO, "kafka: %s: %s", cfg->kafka.dlq_topic,
					     rd_kafka_err2str(e));
			goto out;
		}
		total += hi - lo;
	}
out:
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	return total;
}
