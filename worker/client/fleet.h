/*
 * fleet.h: the fleet as seen from outside (fleet.c).
 */
#ifndef TB_FLEET_H
#define TB_FLEET_H

#include "tb/config.h"
#include "tb/error.h"

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdint.h>

/**
 * The consumer group's lag on each partition of the tasks topic:
 * [{"partition", "committed" (-1: none), "end", "lag"}], or NULL with the
 * reason in @p err when Kafka cannot say.
 */
json_t *tb_fleet_lag(const tb_config_t *cfg, tb_error_t *err);

/** Records the DLQ topic holds now (retention permitting), through @p rk
 * (any client of the cluster); < 0 with the reason in @p err. */
int64_t tb_fleet_dlq_size(const tb_config_t *cfg, rd_kafka_t *rk, tb_error_t *err);

#endif
