/*
 * health.h: what a worker says of its health at /healthz and /readyz, and
 * as the taskbox_up gauges (docs/operating.md, "Metrics"). Alive: the main loop has
 * turned in the last TB_HEALTH_STALL_MS. Ready: alive, and every service
 * it depends on answered the last time it was asked: Kafka (the consumer
 * is in its group, and a broker answered the last probe, every second),
 * the ledger (the heartbeat's write), the store (a probe every 2 s), the
 * sandbox (the last one built). Thread-safe.
 */
#ifndef TB_HEALTH_H
#define TB_HEALTH_H

#include <stdio.h>

#define TB_HEALTH_STALL_MS 30000

typedef enum tb_dep {
	TB_DEP_KAFKA = 0,
	TB_DEP_LEDGER,
	TB_DEP_STORE,
	TB_DEP_SANDBOX,
	TB_DEP_COUNT
} tb_dep_t;

const char *tb_dep_name(tb_dep_t d);

/** The main loop turned (now). */
void tb_health_turned(void);

/** Dependency @p d answered (@p up 1) or did not (0); @p why says how. */
void tb_health_dep(tb_dep_t d, int up, const char *why);

/**
 * Whether @p d can be reached at all (@p up 1, the default) or not (0,
 * with @p why): a probe's finding, apart from the state tb_health_dep()
 * keeps (Kafka's group membership), which it hides while down and gives
 * back when up again. A dependency is up only when both say so.
 */
void tb_health_reach(tb_dep_t d, int up, const char *why);

/** Whether @p d answered when last asked (0 when never asked). */
int tb_health_dep_up(tb_dep_t d);

/** /healthz's body (@p ready 0) or /readyz's (1) as one JSON object into
 * @p f. @return 1 alive (ready), 0 not. */
int tb_health_render(FILE *f, int ready);

/** The taskbox_up gauges, as Prometheus text, into @p f. */
void tb_health_gauges(FILE *f);

/** Forgets everything (tests). */
void tb_health_reset(void);

#endif
