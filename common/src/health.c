/*
 * health.c: what the worker says of its own health (tb/health.h): when
 * its main loop last turned, and whether each service it depends on
 * answered the last time it was asked. Written by the threads that find
 * out, read by the metrics endpoint's thread; one mutex.
 */
#include "tb/health.h"

#include "tb/clock.h"
#include "tb/codec.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static const char *const names[TB_DEP_COUNT] = { "kafka", "ledger", "store", "sandbox" };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t turned_ms; /* monotonic; 0: never */
	struct {
		int known, up;
		char why[300];
		int unreachable; /* tb_health_reach()'s, over up and why */
		char unreach_why[300];
	} dep[TB_DEP_COUNT];
} H;

const char *tb_dep_name(tb_dep_t d)
{
	return d < TB_DEP_COUNT ? names[d] : "?";
}

void tb_health_turned(void)
{
	uint64_t now = tb_mono_ms();

	pthread_mutex_lock(&lock);
	H.turned_ms = now;
	pthread_mutex_unlock(&lock);
}

void tb_health_dep(tb_dep_t d, int up, const char *why)
{
	if (d >= TB_DEP_COUNT)
		return;
	pthread_mutex_lock(&lock);
	H.dep[d].known = 1;
	H.dep[d].up = up;
	snprintf(H.dep[d].why, sizeof(H.dep[d].why), "%s", why ? why : "");
	tb_utf8_sanitize(H.dep[d].why); /* a JSON string, in /readyz's body */
	pthread_mutex_unlock(&lock);
}

void tb_health_reach(tb_dep_t d, int up, const char *why)
{
	if (d >= TB_DEP_COUNT)
		return;
	pthread_mutex_lock(&lock);
	H.dep[d].unreachable = !up;
	snprintf(H.dep[d].unreach_why, sizeof(H.dep[d].unreach_why), "%s", why ? why : "");
	tb_utf8_sanitize(H.dep[d].unreach_why);
	pthread_mutex_unlock(&lock);
}

/* Under the lock: whether @p d is up, and why (into @p why). */
static int dep_up(int d, const char **why)
{
	if (H.dep[d].unreachable) {
		*why = H.dep[d].unreach_why;
		return 0;
	}
	*why = H.dep[d].known ? H.dep[d].why : "not known yet";
	return H.dep[d].known && H.dep[d].up;
}

int tb_health_dep_up(tb_dep_t d)
{
	const char *why;

	pthread_mutex_lock(&lock);
	int up = d < TB_DEP_COUNT && dep_up((int)d, &why);
	pthread_mutex_unlock(&lock);
	return up;
}

int tb_health_render(FILE *f, int ready)
{
	uint64_t now = tb_mono_ms();
	json_t *o = json_object(), *deps = ready ? json_object() : NULL;

	pthread_mutex_lock(&lock);
	uint64_t ago = H.turned_ms ? now - H.turned_ms : 0;
	int alive = H.turned_ms && ago <= TB_HEALTH_STALL_MS, ok = alive;
	for (int d = 0; deps && d < TB_DEP_COUNT; d++) {
		const char *why;
		int up = dep_up(d, &why);
		ok &= up;
		json_object_set_new(deps, names[d], json_pack("{s:b,s:s}", "up", up, "why", why));
	}
	uint64_t turned = H.turned_ms;
	pthread_mutex_unlock(&lock);
	json_object_set_new(o, ready ? "ready" : "alive", json_boolean(ok));
	json_object_set_new(o, "loop_ms_ago", json_integer((json_int_t)ago));
	if (!turned)
		json_object_set_new(o, "reason", json_string("the main loop has not started"));
	else if (!alive) {
		char why[80];
		snprintf(why, sizeof(why), "the main loop has not turned for %llu s",
			 (unsigned long long)(ago / 1000));
		json_object_set_new(o, "reason", json_string(why));
	}
	if (deps)
		json_object_set_new(o, "dependencies", deps);
	json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
	fputc('\n', f);
	json_decref(o);
	return ok;
}

void tb_health_gauges(FILE *f)
{
	pthread_mutex_lock(&lock);
	fputs("# HELP taskbox_up Whether a service the worker depends on answered when last "
	      "asked (1) or not (0): kafka (in the consumer group), ledger, store, sandbox (one "
	      "can be built).\n# TYPE taskbox_up gauge\n",
	      f);
	for (int d = 0; d < TB_DEP_COUNT; d++) {
		const char *why;
		fprintf(f, "taskbox_up{dependency=\"%s\"} %d\n", names[d], dep_up(d, &why));
	}
	pthread_mutex_unlock(&lock);
}

void tb_health_reset(void)
{
	pthread_mutex_lock(&lock);
	memset(&H, 0, sizeof(H));
	pthread_mutex_unlock(&lock);
}
