/*
 * test_interactive.c: interactive sessions through the lifecycle, as root,
 * in real sandboxes, with the chat example recipe: three turns with events
 * in order and a verdict over the whole conversation; the idle timeout;
 * follow-ups arriving while the session idles, frozen: no CPU used while
 * frozen, though the agent left a busy loop running.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "lifecycle.h"
#include "sandbox_pool.h"
#include "session.h"
#include "tb/json_mpack.h"
#include "tb/schema_verdict.h"

#define GROUP "tbinter"

static tb_fixture_t F;
static char url[160], commit[64];

struct events {
	pthread_mutex_t lock;
	char line[128][96]; /* "type state/role turn text" */
	int n;
	int seq_ok;
	atomic_int idles, turn_started; /* for the test thread */
};

static int sink(void *ud, const tb_event_t *ev, const void *bytes, size_t len, tb_error_t *err)
{
	struct events *e = ud;
	json_t *p = NULL;

	(void)bytes, (void)len;
	if (tb_mpack_to_json(&p, ev->payload.data, ev->payload.len, err) < 0)
		return 0;
	const char *what = json_string_value(json_object_get(p, "state"));
	if (!what)
		what = json_string_value(json_object_get(p, "role"));
	if (!what)
		what = json_string_value(json_object_get(p, "phase"));
	const char *text = json_string_value(json_object_get(p, "text"));
	pthread_mutex_lock(&e->lock);
	if (ev->seq != (uint64_t)e->n)
		e->seq_ok = 0;
	if (e->n < 128)
		snprintf(e->line[e->n], sizeof(e->line[0]), "%s %s %lld %s",
			 tb_event_type_name(ev->type), what ? what : "-",
			 (long long)json_integer_value(json_object_get(p, "turn")),
			 text ? text : "");
	e->n++;
	pthread_mutex_unlock(&e->lock);
	if (ev->type == TB_EV_TURN && what && !strcmp(what, "idle"))
		atomic_fetch_add(&e->idles, 1);
	if (ev->type == TB_EV_TURN && what && !strcmp(what, "turn-started"))
		atomic_fetch_add(&e->turn_started, 1);
	json_decref(p);
	return 0;
}

/* Index of the first event line starting with @p prefix, from @p from. */
static int find(struct events *e, const char *prefix, int from)
{
	for (int i = from; i < e->n && i < 128; i++)
		if (!strncmp(e->line[i], prefix, strlen(prefix)))
			return i;
	return -1;
}

static int count(struct events *e, const char *prefix)
{
	int k = 0;
	for (int i = 0; i < e->n && i < 128; i++)
		k += !strncmp(e->line[i], prefix, strlen(prefix));
	return k;
}

static tb_lifecycle_ctx_t ctx(struct events *e, tb_session_t *s)
{
	return (tb_lifecycle_ctx_t){ .policy = F.policy,
				     .store = F.store,
				     .recipes = F.recipes,
				     .runtimes_dir = F.runtimes,
				     .work_root = F.work,
				     .group = GROUP,
				     .slot = 5,
				     .worker = "interactive-test",
				     .sink = { sink, e, NULL },
				     .session = s };
}

static tb_task_t task(const char *id, const char *prompt, const char *runtime)
{
	tb_task_t t = { 0 };
	t.id = (char *)id;
	t.kind = TB_TASK_INTERACTIVE;
	t.recipe.url = url;
	t.recipe.commit = commit;
	t.prompt = (char *)prompt;
	t.runtime = (char *)runtime;
	return t;
}

static void put(tb_session_t *s, uint64_t seq, const char *text)
{
	tb_followup_t f = { 0 };
	char why[256];
	f.task_id = "x";
	f.seq = seq;
	f.kind = text ? TB_FOLLOWUP_PROMPT : TB_FOLLOWUP_END;
	f.text = (char *)text;
	assert_int_equal(tb_session_put(s, &f, (int64_t)seq, NULL, 0, why, sizeof(why)),
			 TB_SESSION_QUEUED);
}

static tb_manifest_t manifest(const char *key)
{
	tb_manifest_t m;
	tb_error_t err;
	char *bytes;
	size_t len;
	assert_int_equal(tb_store_get_bytes(F.store, key, 1 << 20, &bytes, &len, &err), 0);
	assert_int_equal(tb_msg_decode(&tb_schema_manifest, &m, bytes, len, &err), 0);
	free(bytes);
	return m;
}

static void three_turns_in_order(void **state)
{
	struct events e = { .lock = PTHREAD_MUTEX_INITIALIZER, .seq_ok = 1 };
	tb_session_t *s;
	tb_lifecycle_result_t res;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_session_new(&s, &err), 0);
	put(s, 1, "second");
	put(s, 2, "third");
	put(s, 3, NULL); /* end */
	tb_lifecycle_ctx_t c = ctx(&e, s);
	tb_task_t t = task("chat-three", "first", "test");
	if (tb_lifecycle_run(&c, &t, 1, &res, &err) != 0)
		fail_msg("run: %s", err.msg);
	assert_int_equal(res.outcome, TB_OUTCOME_SUCCEEDED);
	assert_string_equal(res.reason, "the session ended: ended by its producer");
	assert_true(e.seq_ok);
	/* each turn: the prompt, started, answered, ended; in order */
	static const char *const words[] = { "first", "second", "third" };
	int at = 0;
	for (int turn = 1; turn <= 3; turn++) {
		char want[96];
		snprintf(want, sizeof(want), "message user 0 %s", words[turn - 1]);
		assert_true((at = find(&e, want, at)) >= 0);
		snprintf(want, sizeof(want), "turn turn-started %d", turn);
		assert_true((at = find(&e, want, at)) >= 0);
		snprintf(want, sizeof(want), "message assistant 0 turn %d: you said %s", turn,
			 words[turn - 1]);
		assert_true((at = find(&e, want, at)) >= 0);
		snprintf(want, sizeof(want), "turn turn-ended %d", turn);
		assert_true((at = find(&e, want, at)) >= 0);
	}
	assert_true(find(&e, "message assistant 0 bye after 3 turns", at) > at);
	assert_int_equal(count(&e, "turn idle"), 0); /* every prompt was there */
	tb_manifest_t m = manifest(res.manifest_key);
	assert_true(TB_HAS(&m, TB_MANIFEST_TURNS) && TB_HAS(&m, TB_MANIFEST_FOLLOWUPS));
	assert_int_equal(m.turns, 3);
	assert_int_equal(m.followups, 3);
	assert_int_equal(m.verdicts.n, 1); /* judged over the whole conversation */
	assert_int_equal(((tb_verdict_ref_t *)m.verdicts.items)[0].outcome, TB_VERDICT_PASS);
	assert_int_equal(m.artifacts.n, 1);
	assert_int_equal(((tb_artifact_t *)m.artifacts.items)[0].size,
			 strlen("turn 1: first\nturn 2: second\nturn 3: third\n"));
	tb_msg_free(&tb_schema_manifest, &m);
	tb_session_free(s);
}

static void idle_timeout_ends_the_session(void **state)
{
	struct events e = { .lock = PTHREAD_MUTEX_INITIALIZER, .seq_ok = 1 };
	tb_session_t *s;
	tb_lifecycle_result_t res;
	tb_error_t err;
	char why[256];

	(void)state;
	assert_int_equal(tb_session_new(&s, &err), 0);
	tb_lifecycle_ctx_t c = ctx(&e, s);
	tb_task_t t = task("chat-idle", "only", "quick"); /* idle_timeout_seconds 1 */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (tb_lifecycle_run(&c, &t, 1, &res, &err) != 0)
		fail_msg("run: %s", err.msg);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(res.outcome, TB_OUTCOME_SUCCEEDED);
	assert_string_equal(res.reason, "the session ended: idle for 1 s");
	int idle = find(&e, "turn idle 1", 0);
	assert_true(idle > find(&e, "turn turn-ended 1", 0));
	assert_true(find(&e, "message assistant 0 bye after 1 turns", idle) > idle);
	assert_true(t1.tv_sec - t0.tv_sec >= 1);
	/* the session is over: a follow-up now is refused, with the reason */
	tb_followup_t f = { .task_id = "chat-idle", .seq = 1, .kind = TB_FOLLOWUP_PROMPT };
	f.text = "too late";
	assert_int_equal(tb_session_put(s, &f, 9, NULL, 0, why, sizeof(why)), TB_SESSION_REFUSED);
	assert_non_null(strstr(why, "idle for 1 s"));
	tb_manifest_t m = manifest(res.manifest_key);
	assert_int_equal(m.turns, 1);
	assert_int_equal(m.followups, 0);
	tb_msg_free(&tb_schema_manifest, &m);
	tb_session_free(s);
}

/* CPU time (clock ticks) of every process in this test's sandboxes, found
 * by their cgroup path on the host. */
static long long sandbox_ticks(void)
{
	long long total = 0;
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char path[300], buf[4096];
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cgroup", de->d_name);
		FILE *f = fopen(path, "re");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = '\0';
		if (!strstr(buf, "/" GROUP "/"))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		if (!(f = fopen(path, "re")))
			continue;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		char *p = strrchr(buf, ')'); /* fields after the command name */
		unsigned long long ut = 0, st = 0;
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
				&st) == 2)
			total += (long long)(ut + st);
	}
	if (d)
		closedir(d);
	return total;
}

struct bg {
	tb_lifecycle_ctx_t c;
	tb_task_t t;
	tb_lifecycle_result_t res;
	tb_error_t err;
	int rc;
};

static void *run_bg(void *arg)
{
	struct bg *b = arg;
	b->rc = tb_lifecycle_run(&b->c, &b->t, 1, &b->res, &b->err);
	return NULL;
}

static int wait_until(atomic_int *v, int want, int seconds)
{
	for (int i = 0; i < seconds * 100; i++) {
		if (atomic_load(v) >= want)
			return 1;
		usleep(10000);
	}
	return 0;
}

/* Processes this test's threads started (sandboxes' inits: their own
 * and those the pool built ahead). */
static int children(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d))) {
		char path[300], buf[4096];
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/children", de->d_name);
		FILE *f = fopen(path, "re");
		size_t len = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f)
			fclose(f);
		buf[len] = '\0';
		char *save = NULL;
		for (char *tok = strtok_r(buf, " \n", &save); tok;
		     tok = strtok_r(NULL, " \n", &save))
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

static void followups_wake_a_frozen_idle_session(void **state)
{
	struct events e = { .lock = PTHREAD_MUTEX_INITIALIZER, .seq_ok = 1 };
	struct bg b = { 0 };
	tb_session_t *s;
	tb_error_t err;
	pthread_t th;

	(void)state;
	assert_int_equal(tb_session_new(&s, &err), 0);
	tb_sandbox_pool_t *pool;
	assert_int_equal(tb_sandbox_pool_new(&pool, F.policy, F.work, GROUP, 6, &err), 0);
	b.c = ctx(&e, s);
	b.c.pool = pool;                           /* slot 5 */
	b.t = task("chat-frozen", "spin", "test"); /* the agent leaves a busy loop */
	assert_int_equal(pthread_create(&th, NULL, run_bg, &b), 0);
	/* Turn 1 takes a second with the loop spinning: CPU is used. */
	assert_true(wait_until(&e.turn_started, 1, 120));
	long long t0 = sandbox_ticks();
	assert_true(wait_until(&e.idles, 1, 60));
	long long busy = sandbox_ticks() - t0;
	/* Idle, frozen: the loop is still there, and uses nothing. */
	usleep(200000);
	long long f0 = sandbox_ticks();
	sleep(2);
	long long frozen = sandbox_ticks() - f0;
	printf("  cpu ticks: %lld in turn 1 (about a second, spinning), %lld in 2 s idle\n", busy,
	       frozen);
	assert_true(busy >= 20);
	assert_int_equal(frozen, 0);
	/* The session's sandbox is the only one: the pool builds no
	 * successor for a slot a session holds (sandbox_pool.h). */
	assert_int_equal(children(), 1);
	/* A follow-up thaws it for turn 2, then it idles again; then end. */
	put(s, 1, "again");
	assert_true(wait_until(&e.idles, 2, 60));
	put(s, 2, NULL);
	pthread_join(th, NULL);
	if (b.rc != 0)
		fail_msg("run: %s", b.err.msg);
	assert_int_equal(b.res.outcome, TB_OUTCOME_SUCCEEDED);
	assert_true(find(&e, "turn turn-started 2", find(&e, "turn idle 1", 0)) > 0);
	assert_true(find(&e, "message assistant 0 turn 2: you said again", 0) > 0);
	assert_true(find(&e, "turn idle 2", 0) > find(&e, "turn turn-ended 2", 0));
	tb_sandbox_pool_free(pool);
	tb_session_free(s);
}

static int setup(void **state)
{
	char repo[128], cmd[1024];

	(void)state;
	if (tb_fixture_setup(&F, "interactive", GROUP,
			     TB_FIXTURE_STORE | TB_FIXTURE_RECIPES | TB_FIXTURE_RUNTIME) < 0)
		return -1;
	snprintf(repo, sizeof(repo), "%s/chat", F.root);
	snprintf(url, sizeof(url), "file://%s", repo);
	snprintf(cmd, sizeof(cmd), "%s/examples/recipes/chat", TB_SOURCE_DIR);
	if (tb_fixture_commit(repo, cmd, commit, sizeof(commit)) < 0)
		return -1;
	/* "quick": the default runtime with a one-second idle timeout */
	snprintf(cmd, sizeof(cmd),
		 "sed -e 's/\"name\": \"default\"/\"name\": \"quick\"/' "
		 "-e 's/\"idle_timeout_seconds\": [0-9]*/\"idle_timeout_seconds\": 1/' "
		 "%s/examples/runtimes/default.json > %s/quick.json && grep -q "
		 "'\"idle_timeout_seconds\": 1' %s/quick.json",
		 TB_SOURCE_DIR, F.runtimes, F.runtimes);
	return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return tb_fixture_teardown(&F);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(three_turns_in_order),
		cmocka_unit_test(idle_timeout_ends_the_session),
		cmocka_unit_test(followups_wake_a_frozen_idle_session),
	};
	if (geteuid() != 0) {
		printf("SKIP: sandboxes need root\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
