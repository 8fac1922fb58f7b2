/*
 * sys/ledger.h: the ledger's function table, for those who write a
 * ledger backend (ledger_memory.c, ledger_redis.c, a test's). Callers use
 * the wrappers of tb/ledger.h, never this table: each entry's contract is
 * that of its wrapper there.
 */
#ifndef TB_SYS_LEDGER_H
#define TB_SYS_LEDGER_H

#include "tb/ledger.h"

struct tb_ledger_ops {
	int (*begin)(tb_ledger_t *l, const char *task, const char *content, uint64_t lease_ms,
		     uint64_t *attempt, tb_error_t *err);
	int (*renew)(tb_ledger_t *l, const char *task, uint64_t attempt, uint64_t lease_ms,
		     const char *phase, tb_error_t *err);
	/* NULL: the phase goes with the heartbeats' renewals only */
	int (*note)(tb_ledger_t *l, const char *task, uint64_t attempt, const char *phase,
		    tb_error_t *err);
	int (*release)(tb_ledger_t *l, const char *task, uint64_t attempt, tb_error_t *err);
	int (*failed)(tb_ledger_t *l, const char *task, uint64_t attempt, int code,
		      const char *reason, tb_error_t *err);
	int (*done)(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		    tb_error_t *err);
	int (*history)(tb_ledger_t *l, const char *task, tb_ledger_attempt_t **out, size_t *n,
		       tb_error_t *err);
	int (*revive)(tb_ledger_t *l, const char *task, tb_error_t *err);
	int (*next_followup)(tb_ledger_t *l, const char *task, uint64_t *seq, tb_error_t *err);
	int (*inspect)(tb_ledger_t *l, const char *task, tb_ledger_task_t *out, tb_error_t *err);
	int (*alive)(tb_ledger_t *l, const char *info, uint64_t ttl_ms, tb_error_t *err);
	int (*workers)(tb_ledger_t *l, char ***infos, size_t *n, tb_error_t *err);
	/* Shared rate buckets; both NULL in a backend that keeps none. */
	int (*rate_take)(tb_ledger_t *l, const tb_ledger_rate_t *r, tb_ledger_turn_t *out,
			 tb_error_t *err);
	int (*rate_spend)(tb_ledger_t *l, const tb_ledger_rate_t *r, uint64_t tokens,
			  uint64_t pause_ms, tb_error_t *err);
	/* Pins; both NULL in a backend that keeps none. */
	int (*pin)(tb_ledger_t *l, const char *name, const char *value, uint64_t ttl_ms, char *out,
		   size_t cap, tb_error_t *err);
	int (*pinned)(tb_ledger_t *l, const char *name, char *out, size_t cap, tb_error_t *err);
	void (*close)(tb_ledger_t *l);
};

/* A backend's handle starts with this. */
struct tb_ledger {
	const struct tb_ledger_ops *ops;
};

#endif
