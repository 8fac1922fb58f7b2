/*
 * usage.c: what an attempt used (schemas/manifest.md, "usage"), gathered
 * as it goes: the sandbox's cgroup counters read at three points (the
 * agent starts; the agent and all it started are gone; the judges are
 * done), the egress proxy's tally, the collected outputs (collect.c),
 * and the wall time. The figures stand in the manifest, in the result
 * event, and in the torn-down phase of an attempt that ended without one;
 * while the agent runs, usage events say them so far (agent.c), so that
 * an attempt whose worker is killed leaves its figures up to its last one.
 */
#include "run_int.h"

#include "tb/clock.h"
#include "tb/json_mpack.h"

#include <string.h>

/* @p to minus @p from into @p out, when both have CPU figures. */
static void cpu_between(const tb_cgroup_stats_t *from, const tb_cgroup_stats_t *to,
			tb_usage_cpu_t *out)
{
	if (!(from->have & to->have & TB_CGROUP_CPU))
		return;
	uint64_t user =
	    to->cpu_user_us > from->cpu_user_us ? to->cpu_user_us - from->cpu_user_us : 0;
	uint64_t sys =
	    to->cpu_system_us > from->cpu_system_us ? to->cpu_system_us - from->cpu_system_us : 0;
	out->user_ms = user / 1000;
	out->system_ms = sys / 1000;
	TB_SET_HAS(out, 0);
	TB_SET_HAS(out, 1);
}

/* The sandbox's peaks in @p now into @p u. */
static void peaks(const tb_cgroup_stats_t *now, tb_usage_t *u)
{
	if (now->have & TB_CGROUP_MEMORY_PEAK) {
		u->memory_peak_bytes = now->memory_peak;
		TB_SET_HAS(u, TB_USAGE_MEMORY_PEAK);
	}
	if (now->have & TB_CGROUP_PIDS_PEAK) {
		u->pids_peak = now->pids_peak;
		TB_SET_HAS(u, TB_USAGE_PIDS_PEAK);
	}
}

/* Each input's size and bytes fetched so far into @p out (a lazy one's
 * as read; an eager one's, all). */
static void inputs_usage(const tb_run_t *r, tb_list_t *out)
{
	tb_usage_input_t *v = r->inputs.n ? calloc(r->inputs.n, sizeof(*v)) : NULL;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; v && i < r->inputs.n; i++) {
		v[i] = r->inputs.usage[i];
		v[i].has = 0;
		if (!(v[i].name = strdup(r->inputs.usage[i].name))) {
			while (i--)
				free(v[i].name);
			free(v);
			return; /* out of memory: the figures go without them */
		}
	}
	for (size_t k = 0; v && r->lazy && k < r->inputs.nlazy; k++)
		v[r->inputs.of[k]].fetched_bytes = tb_lazy_fs_fetched(r->lazy, k);
	out->items = v;
	out->n = v ? r->inputs.n : 0;
}

void tb_run_usage_mark(tb_run_t *r, tb_run_usage_point_t point)
{
	tb_usage_t *u = &r->m.usage;
	tb_cgroup_stats_t now;

	if (!r->sb || point <= r->usage_at)
		return;
	tb_sandbox_usage(r->sb, &now);
	switch (point) {
	case TB_USAGE_AT_AGENT_START:
		r->usage_from = now;
		break;
	case TB_USAGE_AT_AGENT_END:
		if (r->usage_at == TB_USAGE_AT_AGENT_START)
			cpu_between(&r->usage_from, &now, &u->agent);
		r->usage_agent = now;
		/* the proxy stops with the agent: its tally is final */
		if (!u->egress.n && tb_egress_usage(r->egress, &u->egress) < 0)
			memset(&u->egress, 0, sizeof(u->egress));
		break;
	case TB_USAGE_AT_JUDGES_END:
		if (r->usage_at == TB_USAGE_AT_AGENT_END)
			cpu_between(&r->usage_agent, &now, &u->judges);
		if (!u->inputs.n) /* nothing reads them after the judges */
			inputs_usage(r, &u->inputs);
		break;
	case TB_USAGE_AT_NONE:
		break;
	}
	peaks(&now, u);
	r->usage_at = point;
}

/* The attempt's wall time from its first phase to @p now_ms into @p u. */
static void wall(const tb_run_t *r, uint64_t now_ms, tb_usage_t *u)
{
	const tb_phase_time_t *first = r->m.phases.items;
	uint64_t from = r->m.phases.n ? first->at : r->m.started_at;

	u->wall_ms = now_ms > from ? now_ms - from : 0;
	TB_SET_HAS(u, TB_USAGE_WALL);
}

void tb_run_usage_inputs(tb_run_t *r)
{
	if (!r->m.usage.inputs.n)
		inputs_usage(r, &r->m.usage.inputs);
}

void tb_run_usage_wall(tb_run_t *r, uint64_t now_ms)
{
	wall(r, now_ms, &r->m.usage);
}

static json_t *usage_json(const tb_usage_t *u)
{
	msgpack_sbuffer sb;
	json_t *out = NULL;
	tb_error_t err;

	msgpack_sbuffer_init(&sb);
	if (tb_obj_encode(&sb, &tb_schema_usage, u, "usage", &err) == 0 &&
	    tb_mpack_to_json(&out, sb.data, sb.size, &err) < 0)
		out = NULL;
	msgpack_sbuffer_destroy(&sb);
	return out;
}

json_t *tb_run_usage_json(const tb_run_t *r)
{
	return usage_json(&r->m.usage);
}

json_t *tb_run_usage_now(const tb_run_t *r)
{
	tb_usage_t u = { 0 };
	tb_cgroup_stats_t now;

	wall(r, tb_wall_ms(), &u);
	if (r->sb && r->usage_at == TB_USAGE_AT_AGENT_START) {
		tb_sandbox_usage(r->sb, &now);
		cpu_between(&r->usage_from, &now, &u.agent);
		peaks(&now, &u);
	}
	if (tb_egress_usage(r->egress, &u.egress) < 0)
		memset(&u.egress, 0, sizeof(u.egress));
	inputs_usage(r, &u.inputs);
	json_t *out = usage_json(&u);
	tb_msg_free(&tb_schema_usage, &u);
	return out;
}
