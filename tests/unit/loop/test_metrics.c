/*
 * test_metrics.c: the worker's Prometheus registry renders what was
 * recorded in the text format, and its endpoint serves it on loopback.
 */
#include "metrics_http.h"
#include "tb/health.h"
#include "tb/metrics.h"
#include "tb/version.h"

#include <curl/curl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static char *render(void)
{
	size_t len = 0;
	char *text = tb_metrics_render(&len);
	assert_non_null(text);
	assert_int_equal(strlen(text), len);
	return text;
}

/* Whether @p text has a line that is exactly @p line. */
static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || !p[n]))
			return 1;
	return 0;
}

/* Each attempt's usage is summed under its runtime and recipe; past the
 * table's 32 pairs, one "other" pair takes the rest. */
static void sums_usage_by_runtime_and_recipe(void **state)
{
	tb_usage_egress_t eg[2] = { { 0x1c0, (char *)"llm", 5, 1, 300, 4000, 900, 1500, 200, 1000,
				      0, 0 },
				    { 0, (char *)"-", 2, 2, 0, 0, 0, 0, 0, 0, 0, 0 } };
	tb_usage_t u = { .wall_ms = 2500,
			 .agent = { 3, 1200, 300 },
			 .judges = { 3, 40, 10 },
			 .saved_bytes = 1000,
			 .egress = { 2, eg } };
	char line[200];

	(void)state;
	tb_metrics_init("w-1", 4);
	tb_metrics_usage("default", "hello", &u);
	tb_metrics_usage("default", "hello", &u);
	tb_metrics_usage("gpu", "train", &u);
	for (int i = 0; i < 40; i++) {
		snprintf(line, sizeof(line), "r%d", i);
		tb_metrics_usage("default", line, &u);
	}
	char *t = render();
	static const char *const want[] = {
		"taskbox_attempts_accounted_total{runtime=\"default\",recipe=\"hello\"} 2",
		"taskbox_attempt_wall_seconds_total{runtime=\"default\",recipe=\"hello\"} 5",
		"taskbox_attempt_cpu_seconds_total{runtime=\"default\",recipe=\"hello\",part="
		"\"agent\"} "
		"3",
		"taskbox_attempt_cpu_seconds_total{runtime=\"default\",recipe=\"hello\",part="
		"\"judges\"} 0.1",
		"taskbox_attempt_egress_requests_total{runtime=\"default\",recipe=\"hello\",result="
		"\"sent\"} 8",
		"taskbox_attempt_egress_requests_total{runtime=\"default\",recipe=\"hello\",result="
		"\"refused\"} 6",
		"taskbox_attempt_egress_bytes_total{runtime=\"default\",recipe=\"hello\",direction="
		"\"up\"} 600",
		"taskbox_attempt_egress_bytes_total{runtime=\"default\",recipe=\"hello\",direction="
		"\"down\"} 8000",
		"taskbox_attempt_saved_bytes_total{runtime=\"default\",recipe=\"hello\"} 2000",
		"taskbox_attempt_tokens_total{runtime=\"default\",recipe=\"hello\",kind=\"input\"} "
		"3000",
		"taskbox_attempt_tokens_total{runtime=\"default\",recipe=\"hello\",kind=\"output\"}"
		" "
		"400",
		"taskbox_attempt_tokens_total{runtime=\"default\",recipe=\"hello\",kind=\"cached\"}"
		" "
		"2000",
		"taskbox_attempts_accounted_total{runtime=\"gpu\",recipe=\"train\"} 1",
		/* 2 pairs above, 29 more of their own, the other 11 folded */
		"taskbox_attempts_accounted_total{runtime=\"default\",recipe=\"r28\"} 1",
		"taskbox_attempts_accounted_total{runtime=\"other\",recipe=\"other\"} 11",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!has_line(t, want[i]))
			fail_msg("missing line: %s\n%s", want[i], t);
	assert_null(strstr(t, "recipe=\"r29\""));
	free(t);
}

static void renders_what_was_recorded(void **state)
{
	(void)state;
	tb_metrics_init("w-1", 4);
	tb_metrics_task("succeeded");
	tb_metrics_task("succeeded");
	tb_metrics_task("dead-lettered");
	tb_metrics_failure("retryable");
	tb_metrics_dlq("poison");
	tb_metrics_phase(TB_PHASE_RUNNING, 40);       /* 0.04 s: bucket 0.05 */
	tb_metrics_phase(TB_PHASE_RUNNING, 2000);     /* 2 s: bucket 2.5 */
	tb_metrics_launch(3000);                      /* 3 ms */
	tb_metrics_step(TB_STEP_STORE_MANIFEST, 400); /* 0.4 ms: bucket 0.0005 */
	tb_metrics_step(TB_STEP_STORE_MANIFEST, 2000);
	tb_metrics_busy(3, 1);
	int64_t lag[] = { 5, -1, 0 };
	tb_metrics_lag(lag, 3);
	tb_metrics_egress(200);
	tb_metrics_egress(403);
	tb_metrics_egress(0);
	tb_metrics_events(7);
	char *t = render();
	static const char *const want[] = {
		"taskbox_worker_info{worker=\"w-1\"} 1",
		"taskbox_build_info{version=\"" TB_VERSION "\",commit=\"" TB_GIT_COMMIT
		"\",build_type=\"" TB_BUILD_TYPE "\"} 1",
		"taskbox_slots 4",
		"taskbox_slots_busy 3",
		"taskbox_tasks_waiting 1",
		"taskbox_tasks_total{outcome=\"succeeded\"} 2",
		"taskbox_tasks_total{outcome=\"dead-lettered\"} 1",
		"taskbox_tasks_total{outcome=\"timed-out\"} 0", /* seeded */
		"taskbox_attempt_failures_total{code=\"retryable\"} 1",
		"taskbox_dlq_messages_total{cause=\"poison\"} 1",
		"taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"0.025\"} 0",
		"taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"0.05\"} 1",
		"taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"2.5\"} 2",
		"taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"+Inf\"} 2",
		"taskbox_phase_duration_seconds_sum{phase=\"running\"} 2.040000",
		"taskbox_phase_duration_seconds_count{phase=\"running\"} 2",
		"taskbox_phase_duration_seconds_count{phase=\"acknowledged\"} 0",
		"taskbox_sandbox_launch_seconds_bucket{le=\"0.0025\"} 0",
		"taskbox_sandbox_launch_seconds_bucket{le=\"0.005\"} 1",
		"taskbox_sandbox_launch_seconds_count 1",
		"taskbox_step_duration_seconds_bucket{step=\"store_manifest\",le=\"0.00025\"} 0",
		"taskbox_step_duration_seconds_bucket{step=\"store_manifest\",le=\"0.0005\"} 1",
		"taskbox_step_duration_seconds_bucket{step=\"store_manifest\",le=\"0.0025\"} 2",
		"taskbox_step_duration_seconds_sum{step=\"store_manifest\"} 0.002400",
		"taskbox_step_duration_seconds_count{step=\"store_manifest\"} 2",
		"taskbox_step_duration_seconds_count{step=\"ledger_begin\"} 0", /* every step, from 0 */
		"taskbox_step_duration_seconds_count{step=\"teardown_wait\"} 0",
		"# TYPE taskbox_step_duration_seconds histogram",
		"taskbox_consumer_lag{partition=\"0\"} 5",
		"taskbox_consumer_lag{partition=\"2\"} 0",
		"taskbox_egress_requests_total{status=\"2xx\"} 1",
		"taskbox_egress_requests_total{status=\"4xx\"} 1",
		"taskbox_egress_requests_total{status=\"refused\"} 1",
		"taskbox_events_total 7",
		"# TYPE taskbox_phase_duration_seconds histogram",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!has_line(t, want[i]))
			fail_msg("missing line '%s' in:\n%s", want[i], t);
	assert_null(strstr(t, "partition=\"1\"")); /* not held */
	free(t);
}

static void escapes_label_values_and_folds_overflow(void **state)
{
	(void)state;
	tb_metrics_init("a\"b\\c\nd", 1);
	char name[32];
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "code-%d", i);
		tb_metrics_failure(name);
	}
	char *t = render();
	assert_true(has_line(t, "taskbox_worker_info{worker=\"a\\\"b\\\\c\\nd\"} 1"));
	assert_true(has_line(t, "taskbox_attempt_failures_total{code=\"code-0\"} 1"));
	assert_true(has_line(t, "taskbox_attempt_failures_total{code=\"other\"} 9"));
	assert_null(strstr(t, "code-39"));
	free(t);
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	FILE *f = ud;
	return fwrite(p, size, n, f);
}

/* GET (or @p method) http://127.0.0.1:port/path; the status, body in @p body. */
static long fetch(unsigned port, const char *method, const char *path, char **body)
{
	char url[128], *buf = NULL;
	size_t size = 0;
	long status = 0;
	FILE *f = open_memstream(&buf, &size);
	CURL *c = curl_easy_init();

	assert_non_null(c);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	fclose(f);
	*body = buf;
	return status;
}

/* A phase as long as a runtime may allow (hours, a week) falls in a
 * bucket of its own, not only in +Inf. */
static void buckets_reach_the_longest_deadline(void **state)
{
	(void)state;
	tb_metrics_reset();
	tb_metrics_phase(TB_PHASE_RUNNING, 2 * 3600 * 1000ull);  /* two hours */
	tb_metrics_phase(TB_PHASE_RUNNING, 6 * 86400 * 1000ull); /* six days */
	char *t = render();
	assert_true(
	    has_line(t, "taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"3600\"} 0"));
	assert_true(
	    has_line(t, "taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"7200\"} 1"));
	assert_true(has_line(
	    t, "taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"259200\"} 1"));
	assert_true(has_line(
	    t, "taskbox_phase_duration_seconds_bucket{phase=\"running\",le=\"604800\"} 2"));
	free(t);
}

static void serves_on_loopback(void **state)
{
	tb_metrics_server_t *s;
	tb_error_t err;
	char *body;

	(void)state;
	tb_metrics_init("served", 2);
	tb_metrics_task("failed");
	assert_int_equal(tb_metrics_serve(&s, "127.0.0.1:0", &err), 0);
	assert_true(tb_metrics_port(s) > 0);
	assert_int_equal(fetch(tb_metrics_port(s), "GET", "/metrics", &body), 200);
	assert_true(has_line(body, "taskbox_tasks_total{outcome=\"failed\"} 1"));
	free(body);
	/* alive once the main loop turns; ready once every dependency
	 * answered, and not while one does not (said in the body and as the
	 * taskbox_up gauges) */
	tb_health_reset();
	assert_int_equal(fetch(tb_metrics_port(s), "GET", "/healthz", &body), 503);
	assert_non_null(strstr(body, "\"alive\":false"));
	assert_non_null(strstr(body, "the main loop has not started"));
	free(body);
	tb_health_turned();
	assert_int_equal(fetch(tb_metrics_port(s), "GET", "/healthz", &body), 200);
	assert_non_null(strstr(body, "\"alive\":true"));
	free(body);
	tb_health_dep(TB_DEP_KAFKA, 1, "in the consumer group, 2 partitions");
	tb_health_dep(TB_DEP_LEDGER, 0, "ledger redis://127.0.0.1:1: Connection refused");
	tb_health_dep(TB_DEP_STORE, 1, "answered");
	tb_health_dep(TB_DEP_SANDBOX, 1, "a sandbox was built");
	assert_int_equal(fetch(tb_metrics_port(s), "GET", "/readyz", &body), 503);
	assert_non_null(strstr(body, "\"ready\":false"));
	assert_non_null(strstr(body, "\"ledger\":{\"up\":false,\"why\":\"ledger "
				     "redis://127.0.0.1:1: Connection refused\"}"));
	free(body);
	assert_int_equal(fetch(tb_metrics_port(s), "GET", "/metrics", &body), 200);
	assert_true(has_line(body, "taskbox_up{dependency=\"ledger\"} 0"));
	assert_true(has_line(body, "taskbox_up{dependency=\"kafka\"} 1"));
	free(body);
	tb_health_dep(TB_DEP_LEDGER, 1, "answered");
	assert_int_equal(fetch(tb_metrics_port(s), "GET", "/readyz", &body), 200);
	assert_non_null(strstr(body, "\"ready\":true"));
	free(body);
	assert_int_equal(fetch(tb_metrics_port(s), "GET", "/nope", &body), 404);
	free(body);
	assert_int_equal(fetch(tb_metrics_port(s), "POST", "/metrics", &body), 405);
	free(body);
	tb_metrics_server_t *again;
	char taken[64];
	snprintf(taken, sizeof(taken), "127.0.0.1:%u", tb_metrics_port(s));
	assert_int_equal(tb_metrics_serve(&again, taken, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "cannot listen"));
	tb_metrics_stop(s);
}

static void refuses_bad_addresses(void **state)
{
	tb_metrics_server_t *s;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_metrics_serve(&s, "9464", &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "host:port"));
	assert_int_equal(tb_metrics_serve(&s, "127.0.0.1:", &err), TB_EINVAL);
	assert_int_equal(tb_metrics_serve(&s, "127.0.0.1:notaport", &err), TB_EINVAL);
	assert_null(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(renders_what_was_recorded),
		cmocka_unit_test(sums_usage_by_runtime_and_recipe),
		cmocka_unit_test(escapes_label_values_and_folds_overflow),
		cmocka_unit_test(buckets_reach_the_longest_deadline),
		cmocka_unit_test(serves_on_loopback),
		cmocka_unit_test(refuses_bad_addresses),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
