/*
 * metrics.c: the registry behind metrics.h (one mutex: every update is a
 * few additions, and a scrape renders a few kilobytes). Its HTTP endpoint
 * is the worker's (worker/loop/metrics_http.c).
 */
#include "tb/metrics.h"

#include "tb/health.h"
#include "tb/version.h"

#include "tb/schema_dlq.h"
#include "tb/schema_event.h"
#include "tb/schema_manifest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUES 32 /* label values per family; more are folded into "other" */
#define MAX_LAG_PARTITIONS 1024

/* Seconds; phases span milliseconds (claims) to minutes (agents). */
/* Up to a week: the longest wall_seconds a runtime may allow (task.md),
 * so an agent's phase is never all in +Inf. */
static const double buckets[] = { 0.001, 0.0025, 0.005, 0.01,  0.025, 0.05,   0.1,   0.25, 0.5,
				  1,     2.5,    5,     10,    30,    60,     300,   900,  1800,
				  3600,  7200,   14400, 43200, 86400, 259200, 604800 };
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))
/* A step inside a phase (tb_step_t) spans tenths of a millisecond (a
 * ledger call) to seconds (a teardown under load). */
static const double step_buckets[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
				       0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
				       1,      2.5,     5,      10,    30,     60 };
#define NSTEP_BUCKETS (sizeof(step_buckets) / sizeof(step_buckets[0]))
_Static_assert(NSTEP_BUCKETS <= NBUCKETS, "a histogram holds either set of buckets");

static const char *const step_names[TB_STEP__COUNT] = {
	[TB_STEP_LEDGER_BEGIN] = "ledger_begin",
	[TB_STEP_RECIPE] = "recipe",
	[TB_STEP_EGRESS_START] = "egress_start",
	[TB_STEP_STORE_RECORD] = "store_record",
	[TB_STEP_STORE_MANIFEST] = "store_manifest",
	[TB_STEP_EVENTS_DELIVERED] = "events_delivered",
	[TB_STEP_DONE_MARKER] = "done_marker",
	[TB_STEP_TEARDOWN] = "teardown",
	[TB_STEP_TEARDOWN_WAIT] = "teardown_wait",
};

typedef struct histogram {
	uint64_t counts[NBUCKETS]; /* per bucket, not cumulative */
	uint64_t count;
	double sum;
} histogram_t;

typedef struct family { /* one label, its values in first-seen order */
	size_t n;
	char names[MAX_VALUES][48];
	uint64_t counts[MAX_VALUES];
	histogram_t hist[MAX_VALUES]; /* histogram families only */
} family_t;

static const char *const egress_classes[] = { "2xx", "3xx", "4xx", "5xx", "refused" };

/* What the attempts of one runtime and recipe used, summed (the usage of
 * schemas/manifest.md). */
typedef struct used {
	char runtime[48], recipe[48];
	uint64_t attempts, wall_ms, cpu_ms[2]; /* agent, judges */
	uint64_t sent, refused, up, down, saved;
	uint64_t tokens[3]; /* input, output, cached */
} used_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char worker[128];
	unsigned slots, busy, waiting;
	family_t tasks, failures, dlq, phase, images, layer_indexes, lazy_starts, read_orders;
	histogram_t launch;
	histogram_t step[TB_STEP__COUNT];
	int64_t lag[MAX_LAG_PARTITIONS];
	int nlag;
	uint64_t egress[5];
	uint64_t events;
	uint64_t image_bytes, image_evictions, image_prefetched;
	used_t used[MAX_VALUES];
	size_t nused;
} R;

/* The slot for @p name in @p f: made on first sight; "other" when full. */
static size_t slot(family_t *f, const char *name)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->names[i], name))
			return i;
	if (f->n < MAX_VALUES - 1 || (f->n == MAX_VALUES - 1 && !strcmp(name, "other"))) {
		snprintf(f->names[f->n], sizeof(f->names[0]), "%s", name);
		return f->n++;
	}
	return slot(f, "other");
}

static void observe_in(histogram_t *h, double v, const double *bk, size_t nb)
{
	size_t b = 0;
	while (b < nb && v > bk[b])
		b++;
	if (b < nb)
		h->counts[b]++;
	h->count++;
	h->sum += v;
}

static void observe(histogram_t *h, double v)
{
	observe_in(h, v, buckets, NBUCKETS);
}

/* Every known label value appears from the start, at 0, so rates and
 * alerts see a series before its first event. */
static void seed(void)
{
	for (size_t i = 0; tb_outcomes[i]; i++)
		slot(&R.tasks, tb_outcomes[i]);
	slot(&R.tasks, "dead-lettered");
	for (size_t i = 0; tb_dlq_causes[i]; i++)
		slot(&R.dlq, tb_dlq_causes[i]);
	for (int i = 0; i < TB_PHASE__COUNT; i++) /* so slot i is phase i */
		slot(&R.phase, tb_phase_name(i));
}

void tb_metrics_reset(void)
{
	pthread_mutex_lock(&lock);
	memset(&R, 0, sizeof(R));
	seed();
	pthread_mutex_unlock(&lock);
}

void tb_metrics_init(const char *worker_id, unsigned slots)
{
	tb_metrics_reset();
	pthread_mutex_lock(&lock);
	snprintf(R.worker, sizeof(R.worker), "%s", worker_id);
	R.slots = slots;
	pthread_mutex_unlock(&lock);
}

static void count(family_t *f, const char *name)
{
	pthread_mutex_lock(&lock);
	if (!R.tasks.n)
		seed();
	f->counts[slot(f, name && name[0] ? name : "unknown")]++;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_task(const char *outcome)
{
	count(&R.tasks, outcome);
}

void tb_metrics_failure(const char *code)
{
	count(&R.failures, code);
}

void tb_metrics_dlq(const char *cause)
{
	count(&R.dlq, cause);
}

void tb_metrics_phase(tb_phase_t phase, uint64_t duration_ms)
{
	if ((int)phase < 0 || phase >= TB_PHASE__COUNT)
		return;
	pthread_mutex_lock(&lock);
	if (!R.tasks.n)
		seed();
	observe(&R.phase.hist[phase], (double)duration_ms / 1e3);
	pthread_mutex_unlock(&lock);
}

void tb_metrics_launch(uint64_t duration_us)
{
	pthread_mutex_lock(&lock);
	observe(&R.launch, (double)duration_us / 1e6);
	pthread_mutex_unlock(&lock);
}

void tb_metrics_step(tb_step_t step, uint64_t duration_us)
{
	if ((int)step < 0 || step >= TB_STEP__COUNT)
		return;
	pthread_mutex_lock(&lock);
	observe_in(&R.step[step], (double)duration_us / 1e6, step_buckets, NSTEP_BUCKETS);
	pthread_mutex_unlock(&lock);
}

void tb_metrics_busy(unsigned slots_busy, unsigned waiting)
{
	pthread_mutex_lock(&lock);
	R.busy = slots_busy;
	R.waiting = waiting;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_lag(const int64_t *lag, int n)
{
	pthread_mutex_lock(&lock);
	R.nlag = n < MAX_LAG_PARTITIONS ? n : MAX_LAG_PARTITIONS;
	for (int i = 0; i < R.nlag; i++)
		R.lag[i] = lag[i];
	pthread_mutex_unlock(&lock);
}

void tb_metrics_egress(int status)
{
	int c = status >= 200 && status < 600 ? status / 100 - 2 : 4;

	pthread_mutex_lock(&lock);
	R.egress[c]++;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_events(uint64_t n)
{
	pthread_mutex_lock(&lock);
	R.events += n;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_image(const char *result, uint64_t fetched)
{
	pthread_mutex_lock(&lock);
	R.images.counts[slot(&R.images, result)]++;
	R.image_bytes += fetched;
	pthread_mutex_unlock(&lock);
}

/* The sums for @p runtime and @p recipe: made on first sight; the last
 * one, "other" for both, when the table is full. Under the lock. */
static used_t *used_for(const char *runtime, const char *recipe)
{
	for (size_t i = 0; i < R.nused; i++)
		if (!strcmp(R.used[i].runtime, runtime) && !strcmp(R.used[i].recipe, recipe))
			return &R.used[i];
	used_t *u = &R.used[R.nused < MAX_VALUES ? R.nused++ : MAX_VALUES - 1];
	if (R.nused == MAX_VALUES) {
		runtime = "other";
		recipe = "other";
	}
	if (strcmp(u->runtime, runtime) || strcmp(u->recipe, recipe)) {
		snprintf(u->runtime, sizeof(u->runtime), "%s", runtime);
		snprintf(u->recipe, sizeof(u->recipe), "%s", recipe);
	}
	return u;
}

void tb_metrics_usage(const char *runtime, const char *recipe, const tb_usage_t *usage)
{
	pthread_mutex_lock(&lock);
	used_t *u = used_for(runtime && runtime[0] ? runtime : "unknown",
			     recipe && recipe[0] ? recipe : "unknown");
	u->attempts++;
	u->wall_ms += usage->wall_ms;
	u->cpu_ms[0] += usage->agent.user_ms + usage->agent.system_ms;
	u->cpu_ms[1] += usage->judges.user_ms + usage->judges.system_ms;
	u->saved += usage->saved_bytes;
	for (size_t i = 0; i < usage->egress.n; i++) {
		const tb_usage_egress_t *e = (const tb_usage_egress_t *)usage->egress.items + i;
		u->sent += e->requests - e->refused;
		u->refused += e->refused;
		u->up += e->bytes_up;
		u->down += e->bytes_down;
		u->tokens[0] += e->input_tokens;
		u->tokens[1] += e->output_tokens;
		u->tokens[2] += e->cached_tokens;
	}
	pthread_mutex_unlock(&lock);
}

void tb_metrics_layer_index(const char *result)
{
	pthread_mutex_lock(&lock);
	R.layer_indexes.counts[slot(&R.layer_indexes, result)]++;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_image_lazy(const char *result)
{
	pthread_mutex_lock(&lock);
	R.lazy_starts.counts[slot(&R.lazy_starts, result)]++;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_read_order(const char *result)
{
	pthread_mutex_lock(&lock);
	R.read_orders.counts[slot(&R.read_orders, result)]++;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_image_prefetched(uint64_t bytes)
{
	pthread_mutex_lock(&lock);
	R.image_prefetched += bytes;
	pthread_mutex_unlock(&lock);
}

void tb_metrics_image_evicted(void)
{
	pthread_mutex_lock(&lock);
	R.image_evictions++;
	pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------ render */

/* A label value, escaped as the text format wants (\\, \", \n). */
static void label(FILE *f, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f), fputc(*v, f);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One series of the usage sums: @p name{runtime,recipe[,@p extra]} @p v. */
static void used_series(FILE *f, const char *name, const used_t *u, const char *extra, double v)
{
	fprintf(f, "%s{runtime=\"", name);
	label(f, u->runtime);
	fputs("\",recipe=\"", f);
	label(f, u->recipe);
	fprintf(f, "\"%s%s} %.15g\n", extra ? "," : "", extra ? extra : "", v);
}

/* The attempts' usage, summed by runtime and recipe. */
static void usage_sums(FILE *f)
{
	head(f, "taskbox_attempts_accounted_total", "counter",
	     "Attempts whose usage is in the sums below, by runtime and recipe.");
	for (size_t i = 0; i < R.nused; i++)
		used_series(f, "taskbox_attempts_accounted_total", &R.used[i], NULL,
			    (double)R.used[i].attempts);
	head(f, "taskbox_attempt_wall_seconds_total", "counter",
	     "Attempts' time from received to recorded, summed.");
	for (size_t i = 0; i < R.nused; i++)
		used_series(f, "taskbox_attempt_wall_seconds_total", &R.used[i], NULL,
			    (double)R.used[i].wall_ms / 1000.0);
	head(f, "taskbox_attempt_cpu_seconds_total", "counter",
	     "CPU time in the sandboxes (user and system), of the agent and of the judges.");
	for (size_t i = 0; i < R.nused; i++)
		for (int p = 0; p < 2; p++)
			used_series(f, "taskbox_attempt_cpu_seconds_total", &R.used[i],
				    p ? "part=\"judges\"" : "part=\"agent\"",
				    (double)R.used[i].cpu_ms[p] / 1000.0);
	head(f, "taskbox_attempt_egress_requests_total", "counter",
	     "Attempts' requests through the egress proxy: sent, or refused by it.");
	for (size_t i = 0; i < R.nused; i++) {
		used_series(f, "taskbox_attempt_egress_requests_total", &R.used[i],
			    "result=\"sent\"", (double)R.used[i].sent);
		used_series(f, "taskbox_attempt_egress_requests_total", &R.used[i],
			    "result=\"refused\"", (double)R.used[i].refused);
	}
	head(f, "taskbox_attempt_egress_bytes_total", "counter",
	     "Attempts' egress body bytes: up (from the sandbox), down (into it).");
	for (size_t i = 0; i < R.nused; i++) {
		used_series(f, "taskbox_attempt_egress_bytes_total", &R.used[i], "direction=\"up\"",
			    (double)R.used[i].up);
		used_series(f, "taskbox_attempt_egress_bytes_total", &R.used[i],
			    "direction=\"down\"", (double)R.used[i].down);
	}
	static const char *const kinds[3] = { "kind=\"input\"", "kind=\"output\"",
					      "kind=\"cached\"" };
	head(f, "taskbox_attempt_tokens_total", "counter",
	     "Provider tokens the answers through the egress proxy reported (input includes "
	     "cached).");
	for (size_t i = 0; i < R.nused; i++)
		for (int k = 0; k < 3; k++)
			used_series(f, "taskbox_attempt_tokens_total", &R.used[i], kinds[k],
				    (double)R.used[i].tokens[k]);
	head(f, "taskbox_attempt_saved_bytes_total", "counter",
	     "Bytes of the attempts' outputs saved as artifacts.");
	for (size_t i = 0; i < R.nused; i++)
		used_series(f, "taskbox_attempt_saved_bytes_total", &R.used[i], NULL,
			    (double)R.used[i].saved);
}

static void counters(FILE *f, const char *name, const char *key, const family_t *fam,
		     const char *help)
{
	head(f, name, "counter", help);
	for (size_t i = 0; i < fam->n; i++) {
		fprintf(f, "%s{%s=\"", name, key);
		label(f, fam->names[i]);
		fprintf(f, "\"} %llu\n", (unsigned long long)fam->counts[i]);
	}
}

/* One histogram's series; @p key/@p value: its label, or NULL. */
static void histogram_in(FILE *f, const char *name, const char *key, const char *value,
			 const histogram_t *h, const double *bk, size_t nb)
{
	char lbl[128] = "";
	uint64_t cum = 0;

	if (key)
		snprintf(lbl, sizeof(lbl), "%s=\"%s\",", key, value); /* known names only */
	for (size_t b = 0; b < nb; b++) {
		cum += h->counts[b];
		fprintf(f, "%s_bucket{%sle=\"%g\"} %llu\n", name, lbl, bk[b],
			(unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, lbl, (unsigned long long)h->count);
	if (key)
		lbl[strlen(lbl) - 1] = '\0'; /* no trailing comma */
	fprintf(f, "%s_sum%s%s%s %.6f\n", name, key ? "{" : "", lbl, key ? "}" : "", h->sum);
	fprintf(f, "%s_count%s%s%s %llu\n", name, key ? "{" : "", lbl, key ? "}" : "",
		(unsigned long long)h->count);
}

static void histogram(FILE *f, const char *name, const char *key, const char *value,
		      const histogram_t *h)
{
	histogram_in(f, name, key, value, h, buckets, NBUCKETS);
}

char *tb_metrics_render(size_t *len)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);

	if (!f)
		return NULL;
	pthread_mutex_lock(&lock);
	if (!R.tasks.n)
		seed();
	head(f, "taskbox_worker_info", "gauge", "This worker (always 1).");
	fputs("taskbox_worker_info{worker=\"", f);
	label(f, R.worker);
	fputs("\"} 1\n", f);
	head(f, "taskbox_build_info", "gauge",
	     "The taskbox build this worker runs (always 1): version, commit, build type.");
	fputs("taskbox_build_info{version=\"" TB_VERSION "\",commit=\"" TB_GIT_COMMIT
	      "\",build_type=\"" TB_BUILD_TYPE "\"} 1\n",
	      f);
	tb_health_gauges(f);
	head(f, "taskbox_slots", "gauge", "Sandboxes this worker runs at once, at most.");
	fprintf(f, "taskbox_slots %u\n", R.slots);
	head(f, "taskbox_slots_busy", "gauge", "Sandboxes running now.");
	fprintf(f, "taskbox_slots_busy %u\n", R.busy);
	head(f, "taskbox_tasks_waiting", "gauge",
	     "Tasks in the worker's line (lease busy, ledger away, back-off).");
	fprintf(f, "taskbox_tasks_waiting %u\n", R.waiting);
	counters(f, "taskbox_tasks_total", "outcome", &R.tasks,
		 "Tasks settled by this worker, by outcome.");
	counters(f, "taskbox_attempt_failures_total", "code", &R.failures,
		 "Attempts that failed and will be tried again, by error code.");
	counters(f, "taskbox_dlq_messages_total", "cause", &R.dlq,
		 "Records this worker wrote to the DLQ, by cause.");
	head(f, "taskbox_phase_duration_seconds", "histogram",
	     "Time from the previous lifecycle phase to this one.");
	for (size_t i = 0; i < R.phase.n; i++)
		histogram(f, "taskbox_phase_duration_seconds", "phase", R.phase.names[i],
			  &R.phase.hist[i]);
	head(f, "taskbox_sandbox_launch_seconds", "histogram",
	     "Time to create a task's sandbox (namespaces, mounts, cgroup, seccomp).");
	histogram(f, "taskbox_sandbox_launch_seconds", NULL, NULL, &R.launch);
	head(f, "taskbox_step_duration_seconds", "histogram",
	     "Time of a step inside a task's phases (ledger, store, events, teardown).");
	for (int i = 0; i < TB_STEP__COUNT; i++)
		histogram_in(f, "taskbox_step_duration_seconds", "step", step_names[i], &R.step[i],
			     step_buckets, NSTEP_BUCKETS);
	head(f, "taskbox_consumer_lag", "gauge",
	     "Tasks on a partition this worker holds not yet committed.");
	for (int p = 0; p < R.nlag; p++)
		if (R.lag[p] >= 0)
			fprintf(f, "taskbox_consumer_lag{partition=\"%d\"} %lld\n", p,
				(long long)R.lag[p]);
	head(f, "taskbox_egress_requests_total", "counter",
	     "Requests through the egress proxy, by status class.");
	for (int c = 0; c < 5; c++)
		fprintf(f, "taskbox_egress_requests_total{status=\"%s\"} %llu\n", egress_classes[c],
			(unsigned long long)R.egress[c]);
	head(f, "taskbox_events_total", "counter", "Events produced to the events topic.");
	fprintf(f, "taskbox_events_total %llu\n", (unsigned long long)R.events);
	counters(f, "taskbox_image_gets_total", "result", &R.images,
		 "Environments' images asked for: cached, made, refused (wrong), failed.");
	head(f, "taskbox_image_fetched_bytes_total", "counter", "Image blobs fetched, in bytes.");
	fprintf(f, "taskbox_image_fetched_bytes_total %llu\n", (unsigned long long)R.image_bytes);
	head(f, "taskbox_image_evictions_total", "counter", "Images evicted from the cache.");
	fprintf(f, "taskbox_image_evictions_total %llu\n", (unsigned long long)R.image_evictions);
	counters(f, "taskbox_image_layer_indexes_total", "result", &R.layer_indexes,
		 "Layer indexes: published, unpublished, found, none, refused, failed; "
		 "TOCs (eStargz, zstd:chunked): toc, toc_refused.");
	counters(f, "taskbox_image_lazy_starts_total", "result", &R.lazy_starts,
		 "Images made ready with image_lazy: lazy (read on demand), whole (pulled).");
	counters(f, "taskbox_image_read_orders_total", "result", &R.read_orders,
		 "Images' read orders: found, none, refused, unfit, failed, recorded, "
		 "unrecorded.");
	head(f, "taskbox_image_prefetched_bytes_total", "counter",
	     "Spans fetched ahead in an image's read order, in bytes.");
	fprintf(f, "taskbox_image_prefetched_bytes_total %llu\n",
		(unsigned long long)R.image_prefetched);
	usage_sums(f);
	pthread_mutex_unlock(&lock);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	if (len)
		*len = size;
	return buf;
}
