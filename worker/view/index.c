/*
 * index.c: the runs `taskbox view` knows of, in memory (index.h).
 *
 * Tasks are an array in the order first seen, found by id through an
 * open-addressing table of their positions; forgetting the least recently
 * active tenth compacts the array and builds the table again.
 */
#include "index.h"

#include "tb/json_mpack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEXT 512         /* a reason or a prompt kept: its first bytes */
#define MAX_ATTEMPTS_KEPT 32 /* per task: the latest ones */
#define RATE_MINUTES 60
#define MAX_DEAD 1000 /* DLQ records kept for the page */

typedef struct attempt {
	uint64_t attempt;
	char *worker, *outcome, *reason, *manifest_key;
	int64_t first_ts, last_ts;
	int phase; /* the latest reached, or -1 */
	unsigned pass, fail, verdicts;
} attempt_t;

typedef struct task {
	char *id, *recipe, *commit, *runtime, *prompt, *reason;
	json_t *labels; /* an object, or NULL */
	int kind;       /* -1 until the task message is seen */
	int64_t submitted_ms, first_ts, last_ts;
	int64_t dead_ts; /* its DLQ record's time; 0: none */
	int dead;        /* dead-lettered, and nothing of it came after */
	unsigned events;
	tb_view_span_t span;
	attempt_t *a; /* most tasks have one: allocated as they come */
	size_t na, cap;
} task_t;

struct tb_view_index {
	pthread_mutex_t lock;
	task_t *t;
	size_t n, cap, max;
	uint32_t *table; /* positions + 1; 0 empty */
	size_t nslots;   /* a power of two, over twice n */
	uint64_t forgotten;
	struct rate {
		int64_t minute;
		unsigned ok, bad;
	} rates[RATE_MINUTES];
	json_t *dead[MAX_DEAD]; /* a ring of DLQ records, the oldest overwritten */
	size_t ndead;           /* records seen */
};

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* A copy of at most MAX_TEXT bytes of @p s (never cutting a UTF-8
 * sequence), or NULL. */
static char *keep(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!s)
		return NULL;
	if (n > MAX_TEXT) {
		n = MAX_TEXT;
		while (n && ((uint8_t)s[n] & 0xC0) == 0x80)
			n--;
	}
	char *c = malloc(n + 1);
	if (c) {
		memcpy(c, s, n);
		c[n] = '\0';
	}
	return c;
}

static void set(char **field, const char *s)
{
	if (!s || (*field && !strcmp(*field, s)))
		return;
	free(*field);
	*field = keep(s);
}

static void task_free(task_t *t)
{
	free(t->id), free(t->recipe), free(t->commit), free(t->runtime), free(t->prompt);
	free(t->reason);
	json_decref(t->labels);
	for (size_t i = 0; i < t->na; i++) {
		attempt_t *a = &t->a[i];
		free(a->worker), free(a->outcome), free(a->reason), free(a->manifest_key);
	}
	free(t->a);
}

static void fill(tb_view_index_t *x, uint32_t *table, size_t nslots)
{
	memset(table, 0, nslots * sizeof(*table));
	for (size_t i = 0; i < x->n; i++) {
		size_t h = hash(x->t[i].id) & (nslots - 1);
		while (table[h])
			h = (h + 1) & (nslots - 1);
		table[h] = (uint32_t)i + 1;
	}
}

/* The table at @p nslots positions (larger): -1 without memory, the old
 * one kept. */
static int grow(tb_view_index_t *x, size_t nslots)
{
	uint32_t *table = malloc(nslots * sizeof(*table));
	if (!table)
		return -1;
	fill(x, table, nslots);
	free(x->table);
	x->table = table;
	x->nslots = nslots;
	return 0;
}

static task_t *find(tb_view_index_t *x, const char *id)
{
	for (size_t h = hash(id) & (x->nslots - 1); x->table[h]; h = (h + 1) & (x->nslots - 1))
		if (!strcmp(x->t[x->table[h] - 1].id, id))
			return &x->t[x->table[h] - 1];
	return NULL;
}

static int by_activity(const void *a, const void *b)
{
	const task_t *p = a, *q = b;
	return p->last_ts < q->last_ts ? 1 : p->last_ts > q->last_ts ? -1 : 0;
}

/* The least recently active tenth, forgotten. */
static void forget_some(tb_view_index_t *x)
{
	size_t keep_n = x->n - x->n / 10 - 1;
	qsort(x->t, x->n, sizeof(*x->t), by_activity);
	for (size_t i = keep_n; i < x->n; i++)
		task_free(&x->t[i]);
	x->forgotten += x->n - keep_n;
	x->n = keep_n;
	fill(x, x->table, x->nslots); /* in place: the positions moved */
}

/* Task @p id, made if new; NULL without memory. */
static task_t *task_of(tb_view_index_t *x, const char *id)
{
	task_t *t = find(x, id);
	if (t)
		return t;
	if (x->n >= x->max)
		forget_some(x);
	if (x->n == x->cap) {
		size_t more = x->cap ? x->cap * 2 : 256;
		task_t *bigger = realloc(x->t, more * sizeof(*bigger));
		if (!bigger)
			return NULL;
		x->t = bigger, x->cap = more;
	}
	if ((x->n + 1) * 2 > x->nslots && grow(x, x->nslots * 2) < 0)
		return NULL;
	t = &x->t[x->n];
	memset(t, 0, sizeof(*t));
	if (!(t->id = strdup(id)))
		return NULL;
	t->kind = -1;
	t->span.partition = -1;
	size_t h = hash(id) & (x->nslots - 1);
	while (x->table[h])
		h = (h + 1) & (x->nslots - 1);
	x->table[h] = (uint32_t)++x->n;
	return t;
}

int tb_view_index_new(tb_view_index_t **out, size_t max_tasks, tb_error_t *err)
{
	tb_view_index_t *x = calloc(1, sizeof(*x));

	*out = NULL;
	if (!x || !(x->table = calloc(512, sizeof(*x->table)))) {
		free(x);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	x->nslots = 512;
	x->max = max_tasks < 16 ? 16 : max_tasks;
	pthread_mutex_init(&x->lock, NULL);
	*out = x;
	return 0;
}

void tb_view_index_free(tb_view_index_t *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->n; i++)
		task_free(&x->t[i]);
	free(x->t);
	free(x->table);
	for (size_t i = 0; i < MAX_DEAD; i++)
		json_decref(x->dead[i]);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

void tb_view_index_task(tb_view_index_t *x, const tb_task_t *m, int64_t ts)
{
	pthread_mutex_lock(&x->lock);
	task_t *t = task_of(x, m->id);
	if (t) {
		if (t->dead && ts > t->dead_ts)
			t->dead = 0; /* sent back: waiting again */
		set(&t->recipe, m->recipe.url);
		set(&t->commit, m->recipe.commit);
		set(&t->runtime, m->runtime ? m->runtime : "default");
		set(&t->prompt, m->prompt);
		t->kind = m->kind;
		t->submitted_ms = m->submitted_at ? (int64_t)m->submitted_at : ts;
		if (!t->last_ts)
			t->first_ts = t->last_ts = ts;
		json_decref(t->labels);
		t->labels = NULL;
		for (size_t i = 0; i < m->labels.n; i++) {
			if (!t->labels)
				t->labels = json_object();
			json_object_set_new(t->labels, m->labels.items[i].key,
					    json_string(m->labels.items[i].value));
		}
	}
	pthread_mutex_unlock(&x->lock);
}

static attempt_t *attempt_of(task_t *t, uint64_t n)
{
	for (size_t i = 0; i < t->na; i++)
		if (t->a[i].attempt == n)
			return &t->a[i];
	if (t->na == MAX_ATTEMPTS_KEPT) { /* the oldest goes */
		attempt_t *a = &t->a[0];
		free(a->worker), free(a->outcome), free(a->reason), free(a->manifest_key);
		memmove(t->a, t->a + 1, (t->na - 1) * sizeof(*t->a));
		t->na--;
	}
	if (t->na == t->cap) {
		size_t more = t->cap ? t->cap * 2 : 1;
		attempt_t *bigger = realloc(t->a, more * sizeof(*bigger));
		if (!bigger)
			return NULL;
		t->a = bigger, t->cap = more;
	}
	attempt_t *a = &t->a[t->na++];
	memset(a, 0, sizeof(*a));
	a->attempt = n;
	a->phase = -1;
	return a;
}

static const char *str(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static void count_result(tb_view_index_t *x, int64_t ts, const char *outcome)
{
	int64_t minute = ts / 60000; /* ts >= 0: a wild one was left out */
	struct rate *r = &x->rates[minute % RATE_MINUTES];
	if (r->minute != minute)
		*r = (struct rate){ minute, 0, 0 };
	if (outcome && !strcmp(outcome, "succeeded"))
		r->ok++;
	else
		r->bad++;
}

/* What event @p ev says of its attempt @p a (its payload @p p). */
static void note(tb_view_index_t *x, task_t *t, attempt_t *a, const tb_event_t *ev, const json_t *p)
{
	if (ev->type == TB_EV_PHASE) {
		const char *name = str(p, "phase");
		for (int i = 0; name && i < TB_PHASE__COUNT; i++)
			if (!strcmp(name, tb_phase_name(i)) && i > a->phase)
				a->phase = i;
		if (str(p, "worker"))
			set(&a->worker, str(p, "worker"));
		if (json_is_object(json_object_get(p, "labels")) && !t->labels)
			t->labels = json_deep_copy(json_object_get(p, "labels"));
	} else if (ev->type == TB_EV_RESULT) {
		set(&a->outcome, str(p, "outcome"));
		set(&a->reason, str(p, "reason"));
		set(&a->manifest_key, str(p, "manifest_key"));
		count_result(x, (int64_t)ev->ts, str(p, "outcome"));
	} else if (ev->type == TB_EV_ERROR && !a->outcome) {
		set(&a->reason, str(p, "reason"));
	} else if (ev->type == TB_EV_VERDICT) {
		const char *o = str(p, "outcome");
		a->verdicts++;
		a->pass += o && !strcmp(o, "pass");
		a->fail += o && !strcmp(o, "fail");
	}
}

void tb_view_index_event(tb_view_index_t *x, const tb_event_t *ev, int32_t partition,
			 int64_t offset)
{
	json_t *p = NULL;
	tb_error_t err;

	if (ev->ts > (uint64_t)INT64_MAX / 2)
		return; /* no time of this world: its arithmetic would overflow */
	if (tb_mpack_to_json(&p, ev->payload.data, ev->payload.len, &err) < 0)
		p = NULL;
	pthread_mutex_lock(&x->lock);
	task_t *t = task_of(x, ev->task_id);
	if (t) {
		if (t->span.partition < 0 || offset < t->span.first)
			t->span.first = offset;
		if (t->span.partition < 0 || offset > t->span.last)
			t->span.last = offset;
		t->span.partition = partition;
		if (!t->first_ts || (int64_t)ev->ts < t->first_ts)
			t->first_ts = (int64_t)ev->ts;
		if ((int64_t)ev->ts > t->last_ts)
			t->last_ts = (int64_t)ev->ts;
		t->events++;
		if (t->dead && (int64_t)ev->ts > t->dead_ts)
			t->dead = 0; /* sent back: running again */
		attempt_t *a = attempt_of(t, ev->attempt);
		if (!a) {
			pthread_mutex_unlock(&x->lock);
			json_decref(p);
			return; /* no memory: the event is not counted */
		}
		if (!a->first_ts || (int64_t)ev->ts < a->first_ts)
			a->first_ts = (int64_t)ev->ts;
		if ((int64_t)ev->ts > a->last_ts)
			a->last_ts = (int64_t)ev->ts;
		if (p)
			note(x, t, a, ev, p);
	}
	pthread_mutex_unlock(&x->lock);
	json_decref(p);
}

void tb_view_index_dlq(tb_view_index_t *x, const tb_dlq_t *d, int32_t partition, int64_t offset)
{
	char *reason = keep(d->reason);
	json_t *rec = json_pack("{s:i,s:I,s:o,s:s,s:s,s:I,s:I}", "partition", (int)partition,
				"offset", (json_int_t)offset, "task",
				d->task_id ? json_string(d->task_id) : json_null(), "cause",
				tb_dlq_causes[d->cause], "reason", reason ? reason : "", "ts",
				(json_int_t)d->ts, "attempts", (json_int_t)d->attempts.n);
	free(reason);
	pthread_mutex_lock(&x->lock);
	json_decref(x->dead[x->ndead % MAX_DEAD]);
	x->dead[x->ndead++ % MAX_DEAD] = rec;
	task_t *t = d->task_id ? task_of(x, d->task_id) : NULL;
	if (t && d->ts <= (uint64_t)INT64_MAX / 2) {
		t->dead = 1;
		t->dead_ts = (int64_t)d->ts;
		set(&t->reason, d->reason);
		if ((int64_t)d->ts > t->last_ts)
			t->last_ts = (int64_t)d->ts;
	}
	pthread_mutex_unlock(&x->lock);
}

/* ------------------------------------------------------------ queries */

static const attempt_t *latest(const task_t *t)
{
	const attempt_t *best = NULL;
	for (size_t i = 0; i < t->na; i++)
		if (!best || t->a[i].attempt > best->attempt)
			best = &t->a[i];
	return best;
}

/* queued, running, retrying, dead-lettered, or the outcome */
static const char *status_of(const task_t *t)
{
	const attempt_t *a = latest(t);
	if (t->dead)
		return "dead-lettered";
	if (!a)
		return "queued";
	if (a->outcome)
		return a->outcome;
	return a->phase >= TB_PHASE_TORN_DOWN ? "retrying" : "running";
}

static json_t *jstr(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *summary(const task_t *t)
{
	const attempt_t *a = latest(t);
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(t->id));
	json_object_set_new(o, "kind",
			    t->kind < 0 ? json_null()
					: json_string(t->kind ? "interactive" : "one-shot"));
	json_object_set_new(o, "recipe", jstr(t->recipe));
	json_object_set_new(o, "commit", jstr(t->commit));
	json_object_set_new(o, "runtime", jstr(t->runtime));
	json_object_set_new(o, "status", json_string(status_of(t)));
	json_object_set_new(
	    o, "phase", a && a->phase >= 0 ? json_string(tb_phase_name(a->phase)) : json_null());
	json_object_set_new(o, "attempts", json_integer(a ? (json_int_t)a->attempt : 0));
	json_object_set_new(o, "reason", jstr(t->dead ? t->reason : a ? a->reason : NULL));
	json_object_set_new(o, "submitted_at", json_integer(t->submitted_ms));
	json_object_set_new(o, "first_ts", json_integer(t->first_ts));
	json_object_set_new(o, "last_ts", json_integer(t->last_ts));
	json_object_set_new(o, "duration_ms",
			    json_integer(a ? (json_int_t)(a->last_ts - a->first_ts) : 0));
	json_object_set_new(o, "verdicts",
			    json_pack("{s:i,s:i,s:i}", "pass", a ? (int)a->pass : 0, "fail",
				      a ? (int)a->fail : 0, "total", a ? (int)a->verdicts : 0));
	json_object_set_new(o, "events", json_integer(t->events));
	json_object_set_new(o, "labels", t->labels ? json_deep_copy(t->labels) : json_object());
	return o;
}

static int selected(const task_t *t, const tb_view_query_t *q)
{
	if (q->recipe && q->recipe[0] && (!t->recipe || !strstr(t->recipe, q->recipe)))
		return 0;
	if (q->runtime && q->runtime[0] && (!t->runtime || strcmp(t->runtime, q->runtime)))
		return 0;
	if (q->status && q->status[0] && strcmp(status_of(t), q->status))
		return 0;
	if (q->q && q->q[0] && !strstr(t->id, q->q))
		return 0;
	if (q->since_ms && t->last_ts < q->since_ms)
		return 0;
	return !q->until_ms || t->last_ts <= q->until_ms;
}

static void add_unique(json_t *list, const char *s)
{
	size_t i;
	json_t *v;
	if (!s)
		return;
	json_array_foreach(list, i, v) if (!strcmp(json_string_value(v), s)) return;
	if (json_array_size(list) < 200)
		json_array_append_new(list, json_string(s));
}

static int by_last(const void *a, const void *b)
{
	const task_t *p = *(task_t *const *)a, *q = *(task_t *const *)b;
	if (p->last_ts != q->last_ts)
		return p->last_ts < q->last_ts ? 1 : -1;
	return strcmp(p->id, q->id);
}

json_t *tb_view_index_list(tb_view_index_t *x, const tb_view_query_t *q)
{
	size_t limit = q->limit ? q->limit : 50;
	json_t *out = json_object(), *tasks = json_array(), *recipes = json_array(),
	       *runtimes = json_array();

	if (limit > 500)
		limit = 500;
	pthread_mutex_lock(&x->lock);
	task_t **pick = malloc((x->n ? x->n : 1) * sizeof(*pick));
	size_t n = 0;
	for (size_t i = 0; pick && i < x->n; i++) {
		add_unique(recipes, x->t[i].recipe);
		add_unique(runtimes, x->t[i].runtime);
		if (selected(&x->t[i], q))
			pick[n++] = &x->t[i];
	}
	if (pick)
		qsort(pick, n, sizeof(*pick), by_last);
	for (size_t i = q->offset; pick && i < n && i < q->offset + limit; i++)
		json_array_append_new(tasks, summary(pick[i]));
	json_object_set_new(out, "forgotten", json_integer((json_int_t)x->forgotten));
	pthread_mutex_unlock(&x->lock);
	free(pick);
	json_object_set_new(out, "total", json_integer((json_int_t)n));
	json_object_set_new(out, "offset", json_integer((json_int_t)q->offset));
	json_object_set_new(out, "tasks", tasks);
	json_object_set_new(out, "recipes", recipes);
	json_object_set_new(out, "runtimes", runtimes);
	return out;
}

json_t *tb_view_index_get(tb_view_index_t *x, const char *id, tb_view_span_t *span)
{
	json_t *o = NULL;

	pthread_mutex_lock(&x->lock);
	task_t *t = find(x, id);
	if (t) {
		o = summary(t);
		json_object_set_new(o, "prompt", jstr(t->prompt));
		json_t *list = json_array();
		for (size_t i = 0; i < t->na; i++) {
			const attempt_t *a = &t->a[i];
			json_array_append_new(
			    list, json_pack("{s:I,s:o,s:I,s:I,s:o,s:o,s:o,s:o}", "attempt",
					    (json_int_t)a->attempt, "worker", jstr(a->worker),
					    "first_ts", (json_int_t)a->first_ts, "last_ts",
					    (json_int_t)a->last_ts, "phase",
					    a->phase >= 0 ? json_string(tb_phase_name(a->phase))
							  : json_null(),
					    "outcome", jstr(a->outcome), "reason", jstr(a->reason),
					    "manifest_key", jstr(a->manifest_key)));
		}
		json_object_set_new(o, "attempt_list", list);
		if (span)
			*span = t->span;
	}
	pthread_mutex_unlock(&x->lock);
	return o;
}

json_t *tb_view_index_dead_letters(tb_view_index_t *x)
{
	json_t *out = json_array();

	pthread_mutex_lock(&x->lock);
	for (size_t i = x->ndead; i > 0 && i + MAX_DEAD > x->ndead; i--)
		if (x->dead[(i - 1) % MAX_DEAD])
			json_array_append(out, x->dead[(i - 1) % MAX_DEAD]);
	pthread_mutex_unlock(&x->lock);
	return out;
}

json_t *tb_view_index_rates(tb_view_index_t *x, int64_t now_ms, int minutes)
{
	json_t *out = json_array();
	int64_t now = now_ms / 60000;

	if (minutes > RATE_MINUTES)
		minutes = RATE_MINUTES;
	pthread_mutex_lock(&x->lock);
	for (int64_t m = now - minutes + 1; m <= now; m++) {
		const struct rate *r = &x->rates[m % RATE_MINUTES];
		int here = r->minute == m;
		json_array_append_new(out, json_pack("{s:I,s:i,s:i}", "minute", (json_int_t)m,
						     "succeeded", here ? (int)r->ok : 0, "failed",
						     here ? (int)r->bad : 0));
	}
	pthread_mutex_unlock(&x->lock);
	return out;
}
