/*
 * test_ledger.c: the ledger contract, run against every implementation:
 * in memory always, and on the real Redis when TASKBOX_TEST_REDIS is set
 * (the Redis cases skip, saying so, without it). Also: bad URLs are
 * explained, and an unreachable Redis is TB_ERETRY (wait), never a
 * failure that would dead-letter a task.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tb/ledger.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LEASE 10000 /* ms: longer than any case */

static char prefix[64];

static tb_ledger_t *open_or_skip(const char *which, const char *worker)
{
	tb_ledger_t *l = NULL;
	tb_error_t err;
	const char *url = !strcmp(which, "memory") ? "memory:" : getenv("TASKBOX_TEST_REDIS");

	if (!url) {
		skip(); /* prints nothing; the run's header says why */
		return NULL;
	}
	if (tb_ledger_open(&l, url, prefix, worker, &err) < 0)
		fail_msg("%s: %s", url, err.msg);
	return l;
}

static void contract(tb_ledger_t *l)
{
	tb_error_t err;
	uint64_t attempt = 0;
	tb_ledger_attempt_t *hist;
	size_t n;
	char task[64];

	snprintf(task, sizeof(task), "t-%d-%ld", getpid(), (long)time(NULL));
	/* attempts count up from 1 */
	assert_int_equal(tb_ledger_begin(l, task, LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 1);
	assert_int_equal(tb_ledger_history(l, task, &hist, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_null(hist);
	/* failures keep their reasons, oldest first, tabs and all */
	assert_int_equal(tb_ledger_failed(l, task, 1, TB_EIO, "sandbox: cgroup\tgone", &err), 0);
	assert_int_equal(tb_ledger_begin(l, task, LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 2);
	assert_int_equal(tb_ledger_failed(l, task, 2, TB_ERETRY, "recipe fetch timed out", &err),
			 0);
	assert_int_equal(tb_ledger_history(l, task, &hist, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(hist[0].attempt, 1);
	assert_string_equal(hist[0].reason, "sandbox: cgroup\tgone");
	assert_string_equal(hist[0].code, "io");
	assert_int_equal(hist[1].attempt, 2);
	assert_string_equal(hist[1].reason, "recipe fetch timed out");
	assert_string_equal(hist[1].code, "retryable");
	assert_true(hist[1].ts > 0);
	assert_true(hist[1].worker[0] != '\0');
	free(hist);
	assert_int_equal(tb_ledger_begin(l, task, LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 3);
	/* the attempt is the fencing token: an older one can neither renew
	 * its lease nor finish the task */
	assert_int_equal(tb_ledger_renew(l, task, 2, LEASE, &err), TB_EFENCED);
	assert_non_null(strstr(err.msg, "fenced"));
	assert_int_equal(tb_ledger_done(l, task, 2, "tasks/x/2/manifest.msgpack", &err),
			 TB_EFENCED);
	assert_int_equal(tb_ledger_renew(l, task, 3, LEASE, &err), 0);
	/* done: every later begin refuses, whichever attempt it would be */
	assert_int_equal(tb_ledger_done(l, task, 3, "tasks/x/3/manifest.msgpack", &err), 0);
	assert_int_equal(tb_ledger_begin(l, task, LEASE, &attempt, &err), TB_EEXIST);
	assert_non_null(strstr(err.msg, task));
	/* the same attempt's second done-marker changes nothing */
	assert_int_equal(tb_ledger_done(l, task, 3, "", &err), 0);
	assert_int_equal(tb_ledger_begin(l, task, LEASE, &attempt, &err), TB_EEXIST);
	/* an unknown task has no attempt to fence with */
	assert_int_equal(tb_ledger_done(l, "never-begun", 1, "m", &err), TB_EFENCED);

	/* inspect, and revive: a task done with a record stays done; a dead
	 * letter may run again, its budget counted from here */
	tb_ledger_task_t t;
	assert_int_equal(tb_ledger_inspect(l, task, &t, &err), 0);
	assert_true(t.done);
	assert_int_equal(t.done_attempt, 3);
	assert_string_equal(t.manifest, "tasks/x/3/manifest.msgpack");
	assert_int_equal(tb_ledger_revive(l, task, &err), TB_EEXIST);
	char dead[80];
	snprintf(dead, sizeof(dead), "%s-dead", task);
	assert_int_equal(tb_ledger_revive(l, dead, &err), TB_ENOTFOUND);
	assert_int_equal(tb_ledger_begin(l, dead, LEASE, &attempt, &err), 0);
	assert_int_equal(tb_ledger_done(l, dead, 1, "", &err), 0);
	assert_int_equal(tb_ledger_inspect(l, dead, &t, &err), 0);
	assert_true(t.done && !t.manifest[0]);
	assert_int_equal(tb_ledger_revive(l, dead, &err), 0);
	assert_int_equal(tb_ledger_inspect(l, dead, &t, &err), 0);
	assert_false(t.done);
	assert_int_equal(t.base, 1);
	assert_int_equal(tb_ledger_begin(l, dead, LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 2);
	assert_int_equal(tb_ledger_revive(l, dead, &err), TB_ENOTFOUND);
	assert_int_equal(tb_ledger_inspect(l, "never-seen", &t, &err), 0);
	assert_int_equal(t.attempts, 0);
	/* follow-up numbers, per task, from 1 */
	uint64_t seq;
	assert_int_equal(tb_ledger_next_followup(l, dead, &seq, &err), 0);
	assert_int_equal(seq, 1);
	assert_int_equal(tb_ledger_next_followup(l, dead, &seq, &err), 0);
	assert_int_equal(seq, 2);
	assert_int_equal(tb_ledger_next_followup(l, task, &seq, &err), 0);
	assert_int_equal(seq, 1);

	/* an id stands for the content its first message had, for good: the
	 * same content begins as ever; another is refused before anything
	 * (no attempt counted), done or not, and so after a revive */
	const char *a = "sha256:aaaa", *b = "sha256:bbbb";
	char named[80];
	snprintf(named, sizeof(named), "%s-named", task);
	assert_int_equal(tb_ledger_begin_task(l, named, a, LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 1);
	assert_int_equal(tb_ledger_begin_task(l, named, b, LEASE, &attempt, &err), TB_ECONFLICT);
	assert_non_null(strstr(err.msg, "already names another task (sha256:aaaa; this one is "
					"sha256:bbbb)"));
	assert_int_equal(tb_ledger_inspect(l, named, &t, &err), 0);
	assert_int_equal(t.attempts, 1);
	assert_int_equal(tb_ledger_begin_task(l, named, a, LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 2);
	assert_int_equal(tb_ledger_done(l, named, 2, "", &err), 0);
	assert_int_equal(tb_ledger_begin_task(l, named, b, LEASE, &attempt, &err), TB_ECONFLICT);
	assert_int_equal(tb_ledger_begin_task(l, named, a, LEASE, &attempt, &err), TB_EEXIST);
	assert_int_equal(tb_ledger_revive(l, named, &err), 0);
	assert_int_equal(tb_ledger_begin_task(l, named, b, LEASE, &attempt, &err), TB_ECONFLICT);
	/* unchecked: the plain begin (tests, tools) */
	assert_int_equal(tb_ledger_begin(l, named, LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 3);

	/* an attempt that ends without a word (its worker died) is kept as
	 * "died" by the next begin, with the phase it last said; one that
	 * left a failure is not; one before a revive is not */
	char silent[80];
	snprintf(silent, sizeof(silent), "%s-silent", task);
	assert_int_equal(tb_ledger_begin(l, silent, LEASE, &attempt, &err), 0);
	assert_int_equal(tb_ledger_renew_at(l, silent, 1, LEASE, "running", &err), 0);
	assert_int_equal(tb_ledger_renew_at(l, silent, 1, LEASE, "collected", &err), 0);
	/* a note says the phase as a renewal does, unawaited */
	assert_int_equal(tb_ledger_note(l, silent, 1, "recorded", &err), 0);
	assert_int_equal(tb_ledger_begin(l, silent, LEASE, &attempt, &err), 0); /* 2 */
	/* a fenced attempt's note is dropped: attempt 2's phase stands */
	assert_int_equal(tb_ledger_note(l, silent, 2, "running", &err), 0);
	assert_int_equal(tb_ledger_note(l, silent, 1, "judged", &err), 0);
	assert_int_equal(tb_ledger_begin(l, silent, LEASE, &attempt, &err), 0); /* 3 */
	assert_int_equal(tb_ledger_failed(l, silent, 3, TB_EIO, "store away", &err), 0);
	assert_int_equal(tb_ledger_begin(l, silent, LEASE, &attempt, &err), 0); /* 4 */
	assert_int_equal(attempt, 4);
	assert_int_equal(tb_ledger_history(l, silent, &hist, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(hist[0].attempt, 1);
	assert_string_equal(hist[0].code, "died");
	assert_string_equal(hist[0].reason, "its worker died in phase recorded");
	assert_int_equal(hist[1].attempt, 2);
	assert_string_equal(hist[1].code, "died");
	assert_string_equal(hist[1].reason, "its worker died in phase running");
	assert_int_equal(hist[2].attempt, 3);
	assert_string_equal(hist[2].code, "io");
	free(hist);
	assert_int_equal(tb_ledger_done(l, silent, 4, "", &err), 0);
	assert_int_equal(tb_ledger_revive(l, silent, &err), 0);
	assert_int_equal(tb_ledger_begin(l, silent, LEASE, &attempt, &err), 0); /* 5 */
	assert_int_equal(tb_ledger_history(l, silent, &hist, &n, &err), 0);
	assert_int_equal(n, 3); /* the dead-lettered attempt 4 is not a death */
	free(hist);
	/* nor one let go of (its partition moved) */
	assert_int_equal(tb_ledger_release(l, silent, 5, &err), 0);
	assert_int_equal(tb_ledger_begin(l, silent, LEASE, &attempt, &err), 0); /* 6 */
	assert_int_equal(tb_ledger_history(l, silent, &hist, &n, &err), 0);
	assert_int_equal(n, 3);
	free(hist);
}

/* alive() is seen by workers() for its TTL, and not after. */
static void liveness(tb_ledger_t *l)
{
	char **infos;
	size_t n;
	tb_error_t err;

	assert_int_equal(tb_ledger_alive(l, "{\"worker\":\"w-a\",\"slots\":2}", 400, &err), 0);
	assert_int_equal(tb_ledger_workers(l, &infos, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(infos[0], "{\"worker\":\"w-a\",\"slots\":2}");
	free(infos[0]);
	free(infos);
	usleep(600000);
	assert_int_equal(tb_ledger_workers(l, &infos, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_null(infos);
	tb_ledger_close(l);
}

static void test_ledger__memory_liveness(void **state)
{
	(void)state;
	liveness(open_or_skip("memory", "w-a"));
}

static void test_ledger__redis_liveness(void **state)
{
	(void)state;
	liveness(open_or_skip("redis", "w-a"));
}

static void test_ledger__memory_contract(void **state)
{
	tb_ledger_t *l = open_or_skip("memory", "w-a");

	(void)state;
	contract(l);
	tb_ledger_close(l);
}

static void test_ledger__redis_contract(void **state)
{
	tb_ledger_t *l = open_or_skip("redis", "w-a");

	(void)state;
	contract(l);
	tb_ledger_close(l);
}

/*
 * Two workers (two connections) share one count, one lease and one
 * done-marker: while one holds the lease the other waits; once it is let
 * go the other begins, and the first is fenced out.
 */
/*
 * A pin is set once, by whichever worker comes first: a second worker's
 * other value leaves it, and is told the first; it lapses after its
 * time. The in-process ledger keeps none, and says so.
 */
static void test_ledger__redis_a_pin_is_set_once(void **state)
{
	tb_ledger_t *a = open_or_skip("redis", "worker-a");
	tb_ledger_t *b = open_or_skip("redis", "worker-b");
	tb_ledger_t *m = open_or_skip("memory", "worker-m");
	char name[64], out[80];
	tb_error_t err;

	(void)state;
	snprintf(name, sizeof(name), "layer-index:%d", (int)getpid());
	assert_true(tb_ledger_keeps_pins(a));
	assert_int_equal(tb_ledger_pinned(a, name, out, sizeof(out), &err), TB_ENOTFOUND);
	assert_int_equal(tb_ledger_pin(a, name, "sha256:first", 1000, out, sizeof(out), &err), 0);
	assert_string_equal(out, "sha256:first");
	assert_int_equal(tb_ledger_pin(b, name, "sha256:second", 1000, out, sizeof(out), &err), 0);
	assert_string_equal(out, "sha256:first");
	assert_int_equal(tb_ledger_pinned(b, name, out, sizeof(out), &err), 0);
	assert_string_equal(out, "sha256:first");
	assert_int_equal(tb_ledger_pin(a, "a name", "v", 1000, out, sizeof(out), &err), TB_EINVAL);
	usleep(1200 * 1000);
	assert_int_equal(tb_ledger_pinned(b, name, out, sizeof(out), &err), TB_ENOTFOUND);
	assert_false(tb_ledger_keeps_pins(m));
	assert_int_equal(tb_ledger_pin(m, name, "v", 1000, out, sizeof(out), &err), TB_EINVAL);
	tb_ledger_close(a);
	tb_ledger_close(b);
	tb_ledger_close(m);
}

static void test_ledger__redis_leases_are_shared_between_workers(void **state)
{
	tb_ledger_t *a = open_or_skip("redis", "worker-a");
	tb_ledger_t *b = open_or_skip("redis", "worker-b");
	tb_ledger_attempt_t *hist;
	tb_error_t err;
	uint64_t att = 0;
	size_t n;
	char task[64];

	(void)state;
	snprintf(task, sizeof(task), "shared-%d-%ld", getpid(), (long)time(NULL));
	assert_int_equal(tb_ledger_begin(a, task, LEASE, &att, &err), 0);
	assert_int_equal(att, 1);
	assert_int_equal(tb_ledger_begin(b, task, LEASE, &att, &err), TB_EBUSY);
	assert_non_null(strstr(err.msg, "worker-a"));
	assert_int_equal(att, 1);
	assert_int_equal(tb_ledger_renew(a, task, 1, LEASE, &err), 0);
	assert_int_equal(tb_ledger_release(a, task, 1, &err), 0);
	assert_int_equal(tb_ledger_begin(b, task, LEASE, &att, &err), 0);
	assert_int_equal(att, 2);
	/* worker-a's attempt 1, still running somewhere, is fenced out */
	assert_int_equal(tb_ledger_renew(a, task, 1, LEASE, &err), TB_EFENCED);
	assert_int_equal(tb_ledger_done(a, task, 1, "tasks/t/1/manifest.msgpack", &err),
			 TB_EFENCED);
	assert_int_equal(tb_ledger_begin(a, task, LEASE, &att, &err), TB_EBUSY);
	assert_int_equal(tb_ledger_failed(b, task, 2, TB_EFENCED, "lost its slot", &err), 0);
	assert_int_equal(tb_ledger_history(a, task, &hist, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(hist[0].worker, "worker-b");
	assert_string_equal(hist[0].code, "fenced");
	free(hist);
	assert_int_equal(tb_ledger_done(b, task, 2, "m", &err), 0);
	/* done released the lease: the other worker sees done, not busy */
	assert_int_equal(tb_ledger_begin(a, task, LEASE, &att, &err), TB_EEXIST);
	tb_ledger_close(a);
	tb_ledger_close(b);
}

/* A holder that stops renewing loses the lease when it expires. */
static void test_ledger__redis_lease_expires_without_heartbeats(void **state)
{
	tb_ledger_t *a = open_or_skip("redis", "worker-a");
	tb_ledger_t *b = open_or_skip("redis", "worker-b");
	tb_error_t err;
	uint64_t att = 0;
	char task[64];

	(void)state;
	snprintf(task, sizeof(task), "expiry-%d-%ld", getpid(), (long)time(NULL));
	assert_int_equal(tb_ledger_begin(a, task, 300, &att, &err), 0);
	assert_int_equal(tb_ledger_begin(b, task, 300, &att, &err), TB_EBUSY);
	usleep(200000);
	assert_int_equal(tb_ledger_renew(a, task, 1, 300, &err), 0); /* a heartbeat */
	usleep(200000);
	assert_int_equal(tb_ledger_begin(b, task, 300, &att, &err), TB_EBUSY);
	usleep(300000); /* no heartbeat for longer than the lease */
	assert_int_equal(tb_ledger_begin(b, task, 300, &att, &err), 0);
	assert_int_equal(att, 2);
	assert_int_equal(tb_ledger_renew(a, task, 1, 300, &err), TB_EFENCED);
	tb_ledger_close(a);
	tb_ledger_close(b);
}

/* A worker restarted with its id takes its predecessor's lease at once. */
static void test_ledger__redis_a_restarted_worker_takes_its_lease_over(void **state)
{
	tb_ledger_t *before = open_or_skip("redis", "worker-r");
	tb_ledger_t *after = open_or_skip("redis", "worker-r");
	tb_error_t err;
	uint64_t att = 0;
	char task[64];

	(void)state;
	snprintf(task, sizeof(task), "restart-%d-%ld", getpid(), (long)time(NULL));
	assert_int_equal(tb_ledger_begin(before, task, LEASE, &att, &err), 0);
	tb_ledger_close(before); /* killed: its lease stands */
	assert_int_equal(tb_ledger_begin(after, task, LEASE, &att, &err), 0);
	assert_int_equal(att, 2);
	tb_ledger_close(after);
}

/* A task failing forever keeps only its newest 64 reasons. */
static void keeps_the_newest_failures(tb_ledger_t *l)
{
	tb_ledger_attempt_t *hist;
	tb_error_t err;
	char reason[32];
	size_t n;

	for (uint64_t i = 1; i <= 70; i++) {
		snprintf(reason, sizeof(reason), "failure %llu", (unsigned long long)i);
		assert_int_equal(tb_ledger_failed(l, "capped", i, TB_EIO, reason, &err), 0);
	}
	assert_int_equal(tb_ledger_history(l, "capped", &hist, &n, &err), 0);
	assert_int_equal(n, 64);
	assert_int_equal(hist[0].attempt, 7);
	assert_string_equal(hist[63].reason, "failure 70");
	free(hist);
	tb_ledger_close(l);
}

static void test_ledger__memory_keeps_the_newest_failures(void **state)
{
	(void)state;
	keeps_the_newest_failures(open_or_skip("memory", "w"));
}

static void test_ledger__redis_keeps_the_newest_failures(void **state)
{
	(void)state;
	keeps_the_newest_failures(open_or_skip("redis", "w"));
}

/* Another prefix is another fleet: nothing is shared. */
static void test_ledger__redis_prefixes_are_separate(void **state)
{
	const char *url = getenv("TASKBOX_TEST_REDIS");
	tb_ledger_t *a = open_or_skip("redis", "w"), *b;
	tb_error_t err;
	uint64_t att;
	char other[80];

	(void)state;
	snprintf(other, sizeof(other), "%s-other", prefix);
	assert_int_equal(tb_ledger_open(&b, url, other, "w", &err), 0);
	assert_int_equal(tb_ledger_begin(a, "same-id", LEASE, &att, &err), 0);
	assert_int_equal(tb_ledger_done(a, "same-id", att, "m", &err), 0);
	assert_int_equal(tb_ledger_begin(b, "same-id", LEASE, &att, &err), 0);
	assert_int_equal(att, 1);
	tb_ledger_close(a);
	tb_ledger_close(b);
}

/* Nothing listens on loopback port 1: every call says "wait", with the
 * address; opening does not need the server. */
static void test_ledger__unreachable_redis_is_retryable(void **state)
{
	tb_ledger_t *l;
	tb_ledger_attempt_t *hist;
	tb_error_t err;
	uint64_t att = 0;
	size_t n;

	(void)state;
	assert_int_equal(tb_ledger_open(&l, "redis://127.0.0.1:1", "tb", "w", &err), 0);
	char **infos;
	assert_int_equal(tb_ledger_begin(l, "t", LEASE, &att, &err), TB_ERETRY);
	assert_non_null(strstr(err.msg, "127.0.0.1:1"));
	assert_int_equal(att, 0);
	assert_int_equal(tb_ledger_renew(l, "t", 1, LEASE, &err), TB_ERETRY);
	assert_int_equal(tb_ledger_release(l, "t", 1, &err), TB_ERETRY);
	assert_int_equal(tb_ledger_alive(l, "{}", LEASE, &err), TB_ERETRY);
	assert_int_equal(tb_ledger_workers(l, &infos, &n, &err), TB_ERETRY);
	assert_int_equal(tb_ledger_failed(l, "t", 1, TB_EIO, "r", &err), TB_ERETRY);
	assert_int_equal(tb_ledger_done(l, "t", 1, "m", &err), TB_ERETRY);
	assert_int_equal(tb_ledger_history(l, "t", &hist, &n, &err), TB_ERETRY);
	assert_int_equal(n, 0);
	tb_ledger_close(l);
}

static void test_ledger__bad_urls_are_explained(void **state)
{
	static const char *bad[] = {
		"redis://",
		"redis://host",
		"redis://h:0",
		"redis://h:70000",
		"redis://h:1/x",
		"redis://h:1/-2",
		"rediss://h:1",
		"postgres://h:1",
		"redis-sentinel://h:1",
		"redis-sentinel://h:1,/m",
		"redis-sentinel:///m",
		"redis-sentinel://a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9/m",
	};
	tb_ledger_t *l;
	tb_error_t err;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(tb_ledger_open(&l, bad[i], "tb", "w", &err), TB_EINVAL);
		assert_null(l);
		assert_non_null(strstr(err.msg, "ledger.url"));
	}
	assert_int_equal(tb_ledger_open(&l, "redis://h:1", "has space", "w", &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "ledger.prefix"));
	assert_int_equal(tb_ledger_open(&l, "redis://h:1/3", "tb", "w", &err), 0);
	tb_ledger_close(l);
	assert_int_equal(
	    tb_ledger_open(&l, "redis-sentinel://a:26379,b:26380/main/2", "tb", "w", &err), 0);
	tb_ledger_close(l);
}

/* ------------------------------------------------- a master and replica */

/* A free port on loopback (bound, read, closed). */
static unsigned free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* A redis-server of this test's own on @p port; the replica of the one
 * on @p master when not 0. */
static pid_t redis_spawn(unsigned port, unsigned master)
{
	char p[16], m[16], rdb[64];
	snprintf(p, sizeof(p), "%u", port);
	snprintf(m, sizeof(m), "%u", master);
	/* a replica writes what its master sends to a file even with no
	 * saves: in /tmp, never where the test was started */
	snprintf(rdb, sizeof(rdb), "tb-ledger-test-%u.rdb", port);
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		if (master)
			execl("/usr/bin/redis-server", "redis-server", "--bind", "127.0.0.1",
			      "--port", p, "--save", "", "--appendonly", "no", "--dir", "/tmp",
			      "--dbfilename", rdb, "--replicaof", "127.0.0.1", m, (char *)NULL);
		else
			execl("/usr/bin/redis-server", "redis-server", "--bind", "127.0.0.1",
			      "--port", p, "--save", "", "--appendonly", "no", "--dir", "/tmp",
			      "--dbfilename", rdb, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* What redis_spawn()'s server on @p port left in /tmp, removed. */
static void redis_forget(unsigned port)
{
	char rdb[64];
	snprintf(rdb, sizeof(rdb), "/tmp/tb-ledger-test-%u.rdb", port);
	unlink(rdb);
}

/* Whether the replica on @p port has its master's data flowing (within
 * 10 s). */
static int replica_up(unsigned port)
{
	for (int i = 0; i < 100; i++) {
		redisContext *c = redisConnect("127.0.0.1", (int)port);
		redisReply *r = c && !c->err ? redisCommand(c, "INFO replication") : NULL;
		int up = r && r->type == REDIS_REPLY_STRING &&
			 strstr(r->str, "master_link_status:up") != NULL;
		freeReplyObject(r);
		redisFree(c);
		if (up)
			return 1;
		usleep(100000);
	}
	return 0;
}

/* The replica's value of @p key, or "" (into @p out). */
static void replica_get(unsigned port, const char *key, char *out, size_t len)
{
	redisContext *c = redisConnect("127.0.0.1", (int)port);
	redisReply *r = c && !c->err ? redisCommand(c, "GET %s", key) : NULL;
	snprintf(out, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
	freeReplyObject(r);
	redisFree(c);
}

/* With a replica, an attempt begun, a lease renewed and a done-marker are
 * on the replica when the call returns (WAIT); a replica that does not
 * acknowledge makes them retryable errors, not successes a failover could
 * undo. */
static void test_ledger__safety_writes_wait_for_a_replica(void **state)
{
	unsigned mport, rport;
	pid_t master, replica;
	tb_ledger_t *l = NULL;
	tb_error_t err;
	uint64_t attempt = 0;
	char url[64], key[256], got[256];

	(void)state;
	if (access("/usr/bin/redis-server", X_OK) != 0)
		skip();
	mport = free_port(), rport = free_port();
	master = redis_spawn(mport, 0);
	usleep(200000);
	replica = redis_spawn(rport, mport);
	if (!replica_up(rport)) {
		kill(master, SIGTERM), kill(replica, SIGTERM);
		waitpid(master, NULL, 0), waitpid(replica, NULL, 0);
		fail_msg("the replica did not come up within 10 s");
	}
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", mport);
	assert_int_equal(tb_ledger_open(&l, url, "rep", "w-rep", &err), 0);
	assert_int_equal(tb_ledger_begin(l, "t-rep-1", LEASE, &attempt, &err), 0);
	snprintf(key, sizeof(key), "rep:task:{t-rep-1}:attempts");
	replica_get(rport, key, got, sizeof(got));
	assert_string_equal(got, "1"); /* there as the call returned */
	assert_int_equal(tb_ledger_done(l, "t-rep-1", 1, "tasks/t-rep-1/1/manifest.msgpack", &err),
			 0);
	snprintf(key, sizeof(key), "rep:task:{t-rep-1}:done");
	replica_get(rport, key, got, sizeof(got));
	assert_string_equal(got, "1 tasks/t-rep-1/1/manifest.msgpack");
	/* a replica that does not answer: not counted */
	kill(replica, SIGSTOP);
	int rc = tb_ledger_begin(l, "t-rep-2", LEASE, &attempt, &err);
	kill(replica, SIGCONT);
	assert_int_equal(rc, TB_ERETRY);
	assert_non_null(strstr(err.msg, "no replica acknowledged the write"));
	/* once it answers, the same worker begins it (the number moved on),
	 * the unacknowledged attempt kept as one that never ran, not a death */
	assert_int_equal(tb_ledger_begin(l, "t-rep-2", LEASE, &attempt, &err), 0);
	assert_int_equal(attempt, 2);
	/* a renewal counts only once the replica has it too: a failover
	 * to a replica that missed it would end the lease earlier than its
	 * holder thinks, while its attempt still runs */
	const uint64_t short_lease = 1500; /* its renewals wait 50 ms */
	assert_int_equal(tb_ledger_renew(l, "t-rep-2", 2, short_lease, &err), 0);
	kill(replica, SIGSTOP);
	rc = tb_ledger_renew(l, "t-rep-2", 2, short_lease, &err);
	assert_int_equal(rc, TB_ERETRY);
	assert_non_null(strstr(err.msg, "no replica acknowledged the write"));
	/* and for a third of a lease, renewals do not wait for it (the
	 * heartbeat renews every attempt in turn: one wait per beat) */
	rc = tb_ledger_renew(l, "t-rep-2", 2, short_lease, &err);
	kill(replica, SIGCONT);
	assert_int_equal(rc, TB_ERETRY);
	assert_non_null(strstr(err.msg, "renewals do not count until it does"));
	usleep(600 * 1000); /* past that third */
	rc = -1;
	for (int i = 0; i < 20 && rc != 0; i++) /* bounded: the replica catching up */
		if ((rc = tb_ledger_renew(l, "t-rep-2", 2, short_lease, &err)) != 0)
			usleep(100 * 1000);
	assert_int_equal(rc, 0);
	tb_ledger_attempt_t *hist = NULL;
	size_t nh = 0;
	assert_int_equal(tb_ledger_history(l, "t-rep-2", &hist, &nh, &err), 0);
	assert_int_equal(nh, 1);
	assert_int_equal(hist[0].attempt, 1);
	assert_string_equal(hist[0].code, "busy");
	free(hist);
	tb_ledger_close(l);
	kill(master, SIGTERM), kill(replica, SIGTERM);
	waitpid(master, NULL, 0), waitpid(replica, NULL, 0);
	redis_forget(mport), redis_forget(rport);
}

/* A note is sent unawaited, so a connection the server dropped is found
 * by the command after it: that command, never sent, goes on a new
 * connection (the done-marker after a phase's note must not fail for
 * the note's lost connection). */
static void test_ledger__a_note_on_a_dropped_connection_fails_nothing(void **state)
{
	unsigned port;
	pid_t server;
	tb_ledger_t *l = NULL;
	tb_error_t err;
	uint64_t attempt = 0;
	char url[64];

	(void)state;
	if (access("/usr/bin/redis-server", X_OK) != 0)
		skip();
	port = free_port();
	server = redis_spawn(port, 0);
	redisContext *admin = NULL;
	for (int i = 0; i < 50 && (!admin || admin->err); i++) { /* bounded: its start */
		redisFree(admin);
		usleep(100000);
		admin = redisConnect("127.0.0.1", (int)port);
	}
	assert_true(admin && !admin->err);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
	assert_int_equal(tb_ledger_open(&l, url, "drop", "w-drop", &err), 0);
	assert_int_equal(tb_ledger_begin(l, "t-drop", LEASE, &attempt, &err), 0);
	/* every connection but the admin's: the ledger's */
	redisReply *rep = redisCommand(admin, "CLIENT KILL TYPE normal SKIPME yes");
	assert_true(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer >= 1);
	freeReplyObject(rep);
	assert_int_equal(tb_ledger_note(l, "t-drop", attempt, "recorded", &err), 0);
	assert_int_equal(
	    tb_ledger_done(l, "t-drop", attempt, "tasks/t-drop/1/manifest.msgpack", &err), 0);
	tb_ledger_task_t t;
	assert_int_equal(tb_ledger_inspect(l, "t-drop", &t, &err), 0);
	assert_true(t.done);
	tb_ledger_close(l);
	redisFree(admin);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	redis_forget(port);
}

/* A redis-server in sentinel mode on @p port watching master "tbm" on
 * @p master (a quorum of one, a second to call it down), its file in
 * @p dir. */
static pid_t sentinel_spawn(unsigned port, unsigned master, const char *dir)
{
	char conf[256];
	snprintf(conf, sizeof(conf), "%s/sentinel.conf", dir);
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f,
		"port %u\nbind 127.0.0.1\ndir %s\nsentinel monitor tbm 127.0.0.1 %u 1\n"
		"sentinel down-after-milliseconds tbm 1000\nsentinel failover-timeout tbm 5000\n",
		port, dir, master);
	fclose(f);
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execl("/usr/bin/redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Whether the sentinel on @p port knows the master's replica (within
 * 15 s): it can fail over to it. */
static int sentinel_ready(unsigned port)
{
	for (int i = 0; i < 150; i++) {
		redisContext *c = redisConnect("127.0.0.1", (int)port);
		redisReply *r = c && !c->err ? redisCommand(c, "SENTINEL replicas tbm") : NULL;
		int ready = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1;
		freeReplyObject(r);
		redisFree(c);
		if (ready)
			return 1;
		usleep(100000);
	}
	return 0;
}

/* ledger.url names sentinels: the worker finds the master through them,
 * and after the master dies and a sentinel promotes its replica, follows
 * it without a restart; what was done (acknowledged by the replica) is
 * still done, and attempt numbers go on. */
static void test_ledger__a_sentinel_failover_is_followed(void **state)
{
	char dir[] = "/tmp/tb-sentinel-XXXXXX", url[128], key[128], got[64];
	unsigned mport, rport, sport;
	pid_t master, replica, sentinel;
	tb_ledger_t *l = NULL;
	tb_ledger_task_t t;
	tb_error_t err;
	uint64_t attempt = 0;
	int rc = TB_ERETRY;

	(void)state;
	if (access("/usr/bin/redis-server", X_OK) != 0)
		skip();
	assert_non_null(mkdtemp(dir));
	mport = free_port(), rport = free_port(), sport = free_port();
	master = redis_spawn(mport, 0);
	usleep(200000);
	replica = redis_spawn(rport, mport);
	sentinel = sentinel_spawn(sport, mport, dir);
	int up = replica_up(rport) && sentinel_ready(sport);
	snprintf(url, sizeof(url), "redis-sentinel://127.0.0.1:1,127.0.0.1:%u/tbm", sport);
	if (up && tb_ledger_open(&l, url, "sen", "w-sen", &err) == 0 &&
	    tb_ledger_begin(l, "t-sen-1", LEASE, &attempt, &err) == 0 &&
	    tb_ledger_done(l, "t-sen-1", 1, "tasks/t-sen-1/1/manifest.msgpack", &err) == 0) {
		kill(master, SIGKILL);
		waitpid(master, NULL, 0);
		master = -1;
		/* bounded: the failover takes a few seconds */
		for (int i = 0; i < 300 && rc == TB_ERETRY; i++) {
			rc = tb_ledger_begin(l, "t-sen-2", LEASE, &attempt, &err);
			if (rc == TB_ERETRY)
				usleep(100000);
		}
	}
	if (master > 0)
		kill(master, SIGTERM), waitpid(master, NULL, 0);
	int done_kept = l && rc == 0 && tb_ledger_inspect(l, "t-sen-1", &t, &err) == 0 && t.done;
	snprintf(key, sizeof(key), "sen:task:{t-sen-2}:attempts");
	replica_get(rport, key, got, sizeof(got)); /* the promoted replica took the write */
	tb_ledger_close(l);
	kill(sentinel, SIGTERM), kill(replica, SIGTERM);
	waitpid(sentinel, NULL, 0), waitpid(replica, NULL, 0);
	redis_forget(mport), redis_forget(rport);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	if (!up)
		fail_msg("the replica or the sentinel did not come up within 15 s");
	if (rc != 0)
		fail_msg("no begin after the failover: %s", err.msg);
	assert_int_equal(attempt, 1);
	assert_true(done_kept);
	assert_string_equal(got, "1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ledger__memory_contract),
		cmocka_unit_test(test_ledger__redis_contract),
		cmocka_unit_test(test_ledger__memory_liveness),
		cmocka_unit_test(test_ledger__redis_liveness),
		cmocka_unit_test(test_ledger__redis_leases_are_shared_between_workers),
		cmocka_unit_test(test_ledger__redis_a_pin_is_set_once),
		cmocka_unit_test(test_ledger__redis_lease_expires_without_heartbeats),
		cmocka_unit_test(test_ledger__redis_a_restarted_worker_takes_its_lease_over),
		cmocka_unit_test(test_ledger__memory_keeps_the_newest_failures),
		cmocka_unit_test(test_ledger__redis_keeps_the_newest_failures),
		cmocka_unit_test(test_ledger__redis_prefixes_are_separate),
		cmocka_unit_test(test_ledger__unreachable_redis_is_retryable),
		cmocka_unit_test(test_ledger__bad_urls_are_explained),
		cmocka_unit_test(test_ledger__safety_writes_wait_for_a_replica),
		cmocka_unit_test(test_ledger__a_note_on_a_dropped_connection_fails_nothing),
		cmocka_unit_test(test_ledger__a_sentinel_failover_is_followed),
	};

	snprintf(prefix, sizeof(prefix), "taskbox-test-%d-%ld", getpid(), (long)time(NULL));
	if (!getenv("TASKBOX_TEST_REDIS"))
		printf("TASKBOX_TEST_REDIS is not set: the Redis cases are skipped\n");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
