/*
 * produce.c: one message onto a topic of the fleet, its delivery awaited
 * (client_int.h): what a submit, a follow-up and a DLQ send-back share.
 */
#include "client_int.h"

#include "tb/kafka.h"

int tb_client_produce(const tb_config_t *cfg, const char *topic, const char *key, const void *data,
		      size_t len, tb_error_t *err)
{
	tb_kafka_tracker_t *t = tb_kafka_tracker_new();
	rd_kafka_t *p = NULL;
	int rc = TB_EIO;

	if (!t)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (tb_kafka_producer_new(&p, cfg->kafka.brokers, &cfg->kafka.properties, err) == 0 &&
	    tb_kafka_produce_tracked(p, topic, key, data, len, t, err) == 0 &&
	    tb_kafka_await(p, t, 30000, err) == 0)
		rc = 0;
	if (p)
		rd_kafka_destroy(p);
	tb_kafka_tracker_release(t);
	if (rc < 0)
		err->code = TB_EIO;
	return rc;
}
