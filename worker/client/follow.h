/*
 * follow.h: reading the events topic as a person or a script does: every
 * task's events from some point on, or one task's until it is settled.
 * Used by `taskbox watch`, `taskbox submit --wait`, the demo and
 * `taskbox view` (its feed, a task's history read again).
 *
 * A task is settled when the attempt that settles its message says so
 * (its `acknowledged` phase event), or, when a ledger is given, when the
 * ledger holds the task's done-marker and the events topic has been read
 * to its end (a worker that died after the done-marker leaves no
 * `acknowledged`; a task submitted again after it was done runs no new
 * attempt at all). The outcome is that of the attempt the done-marker
 * names: its `result` event, else its manifest, else "dead-lettered" when
 * the task was given up with no record. A ledger that cannot be asked
 * when the acknowledgement comes (its Redis away, a failover) is asked
 * again for 15 s; then the events alone settle the task, and stderr
 * says so.
 */
#ifndef TB_FOLLOW_H
#define TB_FOLLOW_H

#include "tb/config.h"
#include "tb/error.h"
#include "tb/ledger.h"
#include "tb/schema_event.h"
#include "tb/store.h"

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#define TB_FOLLOW_BEGINNING (-1) /* since_ms: the topic's oldest event */
#define TB_FOLLOW_END (-2)       /* since_ms: only events produced from now */

typedef struct tb_follow_opts {
	const char *task;            /* NULL: every task's events */
	int64_t since_ms;            /* ms since the epoch, or TB_FOLLOW_* */
	int until_settled;           /* with task: return once it is settled */
	uint64_t timeout_ms;         /* 0: no limit */
	int json;                    /* one JSON object per line, else readable */
	FILE *out;                   /* where events go */
	tb_ledger_t *ledger;         /* optional (see above) */
	tb_store_t *store;           /* optional: a done attempt's manifest */
	volatile sig_atomic_t *stop; /* optional: set by a signal handler */
} tb_follow_opts_t;

typedef struct tb_follow_result {
	int settled;
	uint64_t attempt; /* the settling attempt (0 if none ran for us) */
	char outcome[32]; /* tb_outcomes[], or "dead-lettered" */
	char reason[512];
	uint64_t events; /* events printed */
} tb_follow_result_t;

/**
 * Reads the events topic of @p cfg and prints what @p o selects.
 * @return 0 when settled, stopped or (no task) the stop flag was set;
 *         TB_ETIMEOUT when @p o->timeout_ms passed first; TB_EIO when
 *         Kafka cannot be read (why in @p err)
 */
int tb_follow(const tb_config_t *cfg, const tb_follow_opts_t *o, tb_follow_result_t *res,
	      tb_error_t *err);

/**
 * A consumer of @p cfg's events topic, every partition assigned from
 * @p since_ms (ms since the epoch, or TB_FOLLOW_*), no group joined: for
 * readers with a loop of their own (`taskbox top`).
 * @param[out] out destroyed with rd_kafka_consumer_close + rd_kafka_destroy
 * @param[out] partitions the topic's partition count
 */
int tb_follow_open(const tb_config_t *cfg, int64_t since_ms, rd_kafka_t **out, int *partitions,
		   tb_error_t *err);

/**
 * A consumer of @p ntopics topics of @p cfg's cluster, every partition of
 * each assigned from @p since_ms, no group joined (tb_follow_open); the
 * first topic's partition count into @p partitions (may be NULL).
 */
int tb_follow_open_topics(const tb_config_t *cfg, const char *const *topics, size_t ntopics,
			  int64_t since_ms, rd_kafka_t **out, int *partitions, tb_error_t *err);

/** One event as JSON, its payload decoded (the caller decrefs; NULL
 * without memory). */
json_t *tb_follow_event_json(const tb_event_t *ev);

/** One event as a line a person reads ("task #seq what"). */
void tb_follow_print_event(FILE *out, const tb_event_t *ev);

/** One event as one line of JSON (payload decoded). */
void tb_follow_print_json(FILE *out, const tb_event_t *ev);

#endif
