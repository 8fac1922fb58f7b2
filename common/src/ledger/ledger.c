/*
 * ledger.c: chooses the ledger implementation ledger.url names, and the
 * wrappers that are the only way into its function table.
 */
#include "tb/ledger.h"

#include "tb/sys/ledger.h"

#include <string.h>

int tb_ledger_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
		   tb_error_t *err)
{
	*out = NULL;
	if (!strcmp(url, "memory:"))
		return tb_ledger_memory_open(out, worker, err);
	if (!strncmp(url, "redis://", 8) || !strncmp(url, "redis-sentinel://", 17))
		return tb_ledger_redis_open(out, url, prefix, worker, err);
	return tb_error_set(err, TB_EINVAL,
			    "ledger.url '%s': expected 'memory:', redis://host:port[/db] or "
			    "redis-sentinel://host:port[,host:port...]/master[/db]",
			    url);
}

int tb_ledger_begin(tb_ledger_t *l, const char *task, uint64_t lease_ms, uint64_t *attempt,
		    tb_error_t *err)
{
	return l->ops->begin(l, task, NULL, lease_ms, attempt, err);
}

int tb_ledger_begin_task(tb_ledger_t *l, const char *task, const char *content, uint64_t lease_ms,
			 uint64_t *attempt, tb_error_t *err)
{
	return l->ops->begin(l, task, content, lease_ms, attempt, err);
}

int tb_ledger_renew(tb_ledger_t *l, const char *task, uint64_t attempt, uint64_t lease_ms,
		    tb_error_t *err)
{
	return l->ops->renew(l, task, attempt, lease_ms, NULL, err);
}

int tb_ledger_renew_at(tb_ledger_t *l, const char *task, uint64_t attempt, uint64_t lease_ms,
		       const char *phase, tb_error_t *err)
{
	return l->ops->renew(l, task, attempt, lease_ms, phase, err);
}

int tb_ledger_note(tb_ledger_t *l, const char *task, uint64_t attempt, const char *phase,
		   tb_error_t *err)
{
	return l->ops->note ? l->ops->note(l, task, attempt, phase, err) : 0;
}

int tb_ledger_release(tb_ledger_t *l, const char *task, uint64_t attempt, tb_error_t *err)
{
	return l->ops->release(l, task, attempt, err);
}

int tb_ledger_failed(tb_ledger_t *l, const char *task, uint64_t attempt, int code,
		     const char *reason, tb_error_t *err)
{
	return l->ops->failed(l, task, attempt, code, reason, err);
}

int tb_ledger_done(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest_key,
		   tb_error_t *err)
{
	return l->ops->done(l, task, attempt, manifest_key, err);
}

int tb_ledger_history(tb_ledger_t *l, const char *task, tb_ledger_attempt_t **out, size_t *n,
		      tb_error_t *err)
{
	return l->ops->history(l, task, out, n, err);
}

int tb_ledger_revive(tb_ledger_t *l, const char *task, tb_error_t *err)
{
	return l->ops->revive(l, task, err);
}

int tb_ledger_next_followup(tb_ledger_t *l, const char *task, uint64_t *seq, tb_error_t *err)
{
	return l->ops->next_followup(l, task, seq, err);
}

int tb_ledger_inspect(tb_ledger_t *l, const char *task, tb_ledger_task_t *out, tb_error_t *err)
{
	return l->ops->inspect(l, task, out, err);
}

int tb_ledger_alive(tb_ledger_t *l, const char *info, uint64_t ttl_ms, tb_error_t *err)
{
	return l->ops->alive(l, info, ttl_ms, err);
}

int tb_ledger_shares_rates(const tb_ledger_t *l)
{
	return l->ops->rate_take && l->ops->rate_spend;
}

int tb_ledger_rate_take(tb_ledger_t *l, const tb_ledger_rate_t *r, tb_ledger_turn_t *out,
			tb_error_t *err)
{
	memset(out, 0, sizeof(*out));
	if (!tb_ledger_shares_rates(l))
		return tb_error_set(err, TB_EINVAL, "this ledger keeps no rate buckets");
	return l->ops->rate_take(l, r, out, err);
}

int tb_ledger_rate_spend(tb_ledger_t *l, const tb_ledger_rate_t *r, uint64_t tokens,
			 uint64_t pause_ms, tb_error_t *err)
{
	if (!tb_ledger_shares_rates(l))
		return tb_error_set(err, TB_EINVAL, "this ledger keeps no rate buckets");
	return l->ops->rate_spend(l, r, tokens, pause_ms, err);
}

int tb_ledger_workers(tb_ledger_t *l, char ***infos, size_t *n, tb_error_t *err)
{
	return l->ops->workers(l, infos, n, err);
}

int tb_ledger_keeps_pins(const tb_ledger_t *l)
{
	return l->ops->pin && l->ops->pinned;
}

/* A pin's name and value: printable, no space, bounded. */
static int pin_text_ok(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (!n || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
			return 0;
	return 1;
}

int tb_ledger_pin(tb_ledger_t *l, const char *name, const char *value, uint64_t ttl_ms, char *out,
		  size_t cap, tb_error_t *err)
{
	if (!tb_ledger_keeps_pins(l))
		return tb_error_set(err, TB_EINVAL, "this ledger keeps no pins");
	if (!pin_text_ok(name, 200) || !pin_text_ok(value, 255) || !ttl_ms)
		return tb_error_set(err, TB_EINVAL,
				    "ledger pin '%.80s': a name or value out of bounds", name);
	return l->ops->pin(l, name, value, ttl_ms, out, cap, err);
}

int tb_ledger_pinned(tb_ledger_t *l, const char *name, char *out, size_t cap, tb_error_t *err)
{
	if (!tb_ledger_keeps_pins(l))
		return tb_error_set(err, TB_EINVAL, "this ledger keeps no pins");
	if (!pin_text_ok(name, 200))
		return tb_error_set(err, TB_EINVAL, "ledger pin '%.80s': a name out of bounds",
				    name);
	return l->ops->pinned(l, name, out, cap, err);
}

void tb_ledger_close(tb_ledger_t *l)
{
	if (l)
		l->ops->close(l);
}
