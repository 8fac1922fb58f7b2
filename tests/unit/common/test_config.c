/*
 * test_config.c: the worker configuration, runtime files and recipe
 * manifests: defaults, environment overrides, and errors that name the
 * file, the key and what was expected.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "tb/config.h"
#include "tb/jsonconf.h"
#include "tb/recipe_manifest.h"
#include "tb/runtime.h"

static char tmp_path[64];

static const char *write_tmp(const char *text)
{
	snprintf(tmp_path, sizeof(tmp_path), "/tmp/tb-test-config-XXXXXX");
	int fd = mkstemp(tmp_path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return tmp_path;
}

static const char *write_tmp_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *write_tmp_fmt(const char *fmt, ...)
{
	char text[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	return write_tmp(text);
}

static void assert_contains(const char *haystack, const char *needle)
{
	if (!strstr(haystack, needle))
		fail_msg("expected '%s' in: %s", needle, haystack);
}

static void test_config__defaults_are_the_embedded_demo(void **state)
{
	tb_config_t cfg;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_config_load(&cfg, NULL, &err), 0);
	assert_string_equal(cfg.kafka.brokers, "mock");
	assert_string_equal(cfg.ledger.url, "memory:");
	assert_int_equal(cfg.slots, 4);
	assert_int_equal(cfg.log_level, TB_LOG_INFO);
	assert_null(cfg.kafka.group_instance_id);
	assert_string_equal(tb_kafka_assignors[cfg.kafka.assignor], "cooperative-sticky");
	tb_config_free(&cfg);
}

static void test_config__example_file_loads(void **state)
{
	tb_config_t cfg;
	tb_error_t err;

	(void)state;
	if (tb_config_load(&cfg, TB_SOURCE_DIR "/examples/worker.json", &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(cfg.kafka.brokers, "127.0.0.1:19092");
	assert_string_equal(cfg.kafka.properties.items[0].key, "statistics.interval.ms");
	assert_string_equal(cfg.store.endpoint, "http://127.0.0.1:18333");
	tb_config_free(&cfg);
}

/* Started from / by systemd, a relative runtimes_dir in
 * /etc/taskbox/worker.json named /runtimes: it is the file's neighbour. */
static void test_config__relative_dirs_resolve_against_the_file(void **state)
{
	tb_config_t cfg;
	tb_error_t err;

	(void)state;
	assert_int_equal(chdir("/"), 0);
	if (tb_config_load(&cfg, TB_SOURCE_DIR "/examples/worker.json", &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(cfg.runtimes_dir, TB_SOURCE_DIR "/examples/runtimes");
	assert_int_equal(cfg.relative, 1); /* runtimes_dir alone */
	assert_string_equal(cfg.work_dir, "/var/lib/taskbox/work");
	tb_config_free(&cfg);
}

static void test_config__relative_dirs_from_the_environment_resolve_against_cwd(void **state)
{
	tb_config_t cfg;
	tb_error_t err;

	(void)state;
	assert_int_equal(chdir("/tmp"), 0);
	setenv("TASKBOX_WORK_DIR", "w", 1);
	int rc = tb_config_load(&cfg, TB_SOURCE_DIR "/examples/worker.json", &err);
	unsetenv("TASKBOX_WORK_DIR");
	if (rc != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(cfg.work_dir, "/tmp/w");
	assert_int_equal(cfg.relative, 3);
	tb_config_free(&cfg);
}

static void test_config__environment_overrides_file(void **state)
{
	tb_config_t cfg;
	tb_error_t err;

	(void)state;
	setenv("TASKBOX_SLOTS", "9", 1);
	setenv("TASKBOX_KAFKA_BROKERS", "10.0.0.1:9092", 1);
	setenv("TASKBOX_LOG_LEVEL", "debug", 1);
	assert_int_equal(tb_config_load(&cfg, TB_SOURCE_DIR "/examples/worker.json", &err), 0);
	assert_int_equal(cfg.slots, 9);
	assert_string_equal(cfg.kafka.brokers, "10.0.0.1:9092");
	assert_int_equal(cfg.log_level, TB_LOG_DEBUG);
	tb_config_free(&cfg);

	setenv("TASKBOX_SLOTS", "many", 1);
	assert_int_equal(tb_config_load(&cfg, NULL, &err), TB_EINVAL);
	assert_contains(err.msg, "environment TASKBOX_SLOTS: expected a non-negative integer");
	setenv("TASKBOX_SLOTS", "0", 1);
	assert_int_equal(tb_config_load(&cfg, NULL, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'slots': 0 is outside 1..1024");
	setenv("TASKBOX_LOG_LEVEL", "loud", 1);
	unsetenv("TASKBOX_SLOTS");
	assert_int_equal(tb_config_load(&cfg, NULL, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'log_level': 'loud' is not one of");
	unsetenv("TASKBOX_LOG_LEVEL");
	unsetenv("TASKBOX_KAFKA_BROKERS");
}

static void test_config__errors_name_file_key_and_expectation(void **state)
{
	tb_config_t cfg;
	tb_error_t err;
	const char *p;

	(void)state;
	p = write_tmp("{\"v\": 1, \"kafka\": {\"brokerz\": \"x\"}}");
	assert_int_equal(tb_config_load(&cfg, p, &err), TB_EINVAL);
	assert_contains(err.msg, p);
	assert_contains(err.msg, "unknown key 'kafka.brokerz'");
	unlink(p);

	p = write_tmp("{\"v\": 1, \"slots\": \"four\"}");
	assert_int_equal(tb_config_load(&cfg, p, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'slots': expected a non-negative integer, got string");
	unlink(p);

	p = write_tmp("{\"v\": 1, \"slots\": 4,}");
	assert_int_equal(tb_config_load(&cfg, p, &err), TB_EINVAL);
	assert_contains(err.msg, ":1:");
	unlink(p);

	p = write_tmp("{\"v\": 2}");
	assert_int_equal(tb_config_load(&cfg, p, &err), TB_EVERSION);
	unlink(p);

	assert_int_equal(tb_config_load(&cfg, "/nonexistent/taskbox.json", &err), TB_ENOTFOUND);
	assert_contains(err.msg, "/nonexistent/taskbox.json");
}

/* kafka.properties tunes librdkafka (security, timeouts), but may not
 * undo what the worker's guarantees rest on. */
static void test_config__kafka_properties_cannot_undo_the_guarantees(void **state)
{
	const char *owned[] = {
		"enable.auto.commit", "enable.auto.offset.store",      "enable.idempotence",
		"auto.offset.reset",  "partition.assignment.strategy", "group.id"
	};
	tb_config_t cfg;
	tb_error_t err;
	char text[256];
	const char *p;

	(void)state;
	for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
		snprintf(text, sizeof(text),
			 "{\"v\": 1, \"kafka\": {\"properties\": {\"socket.timeout.ms\": "
			 "\"30000\", \"%s\": \"x\"}}}",
			 owned[i]);
		p = write_tmp(text);
		assert_int_equal(tb_config_load(&cfg, p, &err), TB_EINVAL);
		assert_contains(err.msg, owned[i]);
		assert_contains(err.msg, "is set by taskbox and cannot be changed");
		unlink(p);
	}
	/* the assignor is a key of its own, one of librdkafka's names */
	p = write_tmp("{\"v\": 1, \"kafka\": {\"assignor\": \"range\"}}");
	assert_int_equal(tb_config_load(&cfg, p, &err), 0);
	assert_string_equal(tb_kafka_assignors[cfg.kafka.assignor], "range");
	tb_config_free(&cfg);
	unlink(p);
	p = write_tmp("{\"v\": 1, \"kafka\": {\"assignor\": \"sticky\"}}");
	assert_int_equal(tb_config_load(&cfg, p, &err), TB_EINVAL);
	assert_contains(err.msg, "kafka.assignor");
	assert_contains(err.msg, "cooperative-sticky");
	unlink(p);
	p = write_tmp("{\"v\": 1, \"kafka\": {\"properties\": {\"security.protocol\": "
		      "\"SASL_SSL\", \"auto.commit.interval.ms\": \"1\"}}}");
	assert_int_equal(tb_config_load(&cfg, p, &err), 0);
	assert_int_equal(cfg.kafka.properties.n, 2);
	tb_config_free(&cfg);
	unlink(p);
}

static void test_runtime__example_loads_and_limits_merge(void **state)
{
	tb_runtime_t rt;
	tb_limits_t recipe = { 0 }, task = { 0 }, out;
	tb_error_t err;

	(void)state;
	if (tb_runtime_load(&rt, TB_SOURCE_DIR "/examples/runtimes/default.json", &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(rt.max_attempts, 3);
	assert_int_equal(rt.endpoints.n, 1);
	assert_string_equal(((tb_endpoint_t *)rt.endpoints.items)[0].credential.env,
			    "TASKBOX_LLM_KEY");
	assert_string_equal(rt.env.items[0].key, "TASKBOX_MODEL");

	recipe.memory_mb = 128, TB_SET_HAS(&recipe, TB_LIMIT_MEMORY_MB);
	task.memory_mb = 1024, TB_SET_HAS(&task, TB_LIMIT_MEMORY_MB);
	assert_int_equal(tb_runtime_limits(&out, &rt, &recipe, &task, &err), 0);
	assert_int_equal(out.memory_mb, 1024);
	assert_int_equal(out.wall_seconds, 600);
	assert_int_equal(tb_runtime_limits(&out, &rt, &recipe, NULL, &err), 0);
	assert_int_equal(out.memory_mb, 128);

	task.pids = 100000, TB_SET_HAS(&task, TB_LIMIT_PIDS);
	assert_int_equal(tb_runtime_limits(&out, &rt, &recipe, &task, &err), TB_EPOISON);
	assert_contains(err.msg,
			"the task asks for pids 100000, runtime 'default' allows at most 4096");
	tb_runtime_free(&rt);
}

/* Budgets: none unless asked; a runtime's cap bounds what is asked and
 * is the budget when nothing asks; a dialect is read. */
static void test_runtime__budgets_are_capped_and_default_to_the_cap(void **state)
{
	tb_runtime_t rt;
	tb_limits_t task = { 0 }, out;
	tb_error_t err;
	const char *p;

	(void)state;
	assert_int_equal(
	    tb_runtime_load(&rt, TB_SOURCE_DIR "/examples/runtimes/default.json", &err), 0);
	assert_int_equal(((tb_endpoint_t *)rt.endpoints.items)[0].dialect, TB_DIALECT_OPENAI);
	assert_true(TB_HAS((tb_endpoint_t *)rt.endpoints.items, TB_ENDPOINT_DIALECT));
	assert_int_equal(rt.agent.budget_grace_seconds, 10);
	assert_int_equal(rt.agent.usage_interval_seconds, 30);
	/* its rate limit, the wait left to the default */
	const tb_rate_conf_t *rl = &((tb_endpoint_t *)rt.endpoints.items)[0].rate_limit;
	assert_true(TB_HAS(rl, TB_RATE_REQUESTS) && rl->requests_per_second == 10.0);
	assert_true(TB_HAS(rl, TB_RATE_TOKENS) && rl->tokens_per_minute == 1000000);
	assert_false(TB_HAS(rl, TB_RATE_MAX_WAIT));
	assert_false(TB_HAS((tb_endpoint_t *)rt.endpoints.items, TB_ENDPOINT_DEFAULT_MAX_TOKENS));
	assert_int_equal(tb_runtime_limits(&out, &rt, NULL, NULL, &err), 0);
	assert_false(TB_HAS(&out, TB_LIMIT_MAX_TOKENS)); /* no budget */
	task.max_tokens = 5000000, TB_SET_HAS(&task, TB_LIMIT_MAX_TOKENS);
	assert_int_equal(tb_runtime_limits(&out, &rt, NULL, &task, &err), 0); /* uncapped */
	assert_int_equal(out.max_tokens, 5000000);
	tb_runtime_free(&rt);

	p = write_tmp("{\"v\": 1, \"name\": \"capped\", \"limits\": {\"max_tokens\": 1000}, "
		      "\"max_limits\": {\"max_tokens\": 9000, \"max_requests\": 50, "
		      "\"max_output_tokens\": 700}, \"agent\": {\"usage_interval_seconds\": 0}}");
	if (tb_runtime_load(&rt, p, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(tb_runtime_limits(&out, &rt, NULL, NULL, &err), 0);
	assert_int_equal(out.max_tokens, 1000); /* its default */
	assert_int_equal(out.max_requests, 50); /* the cap, nothing asking less */
	assert_int_equal(out.max_output_tokens, 700);
	assert_false(TB_HAS(&out, TB_LIMIT_MAX_INPUT_TOKENS));
	assert_int_equal(rt.agent.usage_interval_seconds, 0); /* none */
	assert_int_equal(out.wall_seconds, 600);              /* the sandbox's as ever */
	assert_int_equal(tb_runtime_limits(&out, &rt, NULL, &task, &err), TB_EPOISON);
	assert_contains(err.msg,
			"asks for max_tokens 5000000, runtime 'capped' allows at most 9000");
	tb_runtime_free(&rt);
	unlink(p);

	/* an endpoint's default output, reserved for requests naming none */
	p = write_tmp("{\"v\": 1, \"name\": \"d\", \"network\": {\"allow\": [{\"name\": \"llm\", "
		      "\"host\": \"h\", \"port\": 443, \"scheme\": \"https\", \"dialect\": "
		      "\"anthropic\", \"default_max_tokens\": 4096}]}}");
	if (tb_runtime_load(&rt, p, &err) != 0)
		fail_msg("%s", err.msg);
	const tb_endpoint_t *ep = rt.endpoints.items;
	assert_true(TB_HAS(ep, TB_ENDPOINT_DEFAULT_MAX_TOKENS));
	assert_int_equal(ep->default_max_tokens, 4096);
	tb_runtime_free(&rt);
	unlink(p);
	p = write_tmp("{\"v\": 1, \"name\": \"d\", \"network\": {\"allow\": [{\"name\": \"llm\", "
		      "\"host\": \"h\", \"port\": 443, \"scheme\": \"https\", "
		      "\"default_max_tokens\": 0}]}}");
	assert_int_equal(tb_runtime_load(&rt, p, &err), TB_EINVAL);
	assert_contains(err.msg, "default_max_tokens");
	unlink(p);
}

static void test_runtime__cross_field_rules(void **state)
{
	tb_runtime_t rt;
	tb_error_t err;
	const char *p;

	(void)state;
	p = write_tmp("{\"v\": 1, \"name\": \"x\", \"limits\": {\"memory_mb\": 9000}}");
	assert_int_equal(tb_runtime_load(&rt, p, &err), TB_EINVAL);
	assert_contains(err.msg, "limits.memory_mb (9000) is above max_limits.memory_mb (4096)");
	unlink(p);

	p = write_tmp(
	    "{\"v\": 1, \"name\": \"x\", \"agent\": {\"usage_interval_seconds\": 86401}}");
	assert_int_equal(tb_runtime_load(&rt, p, &err), TB_EINVAL);
	assert_contains(err.msg, "agent.usage_interval_seconds");
	unlink(p);

	p = write_tmp("{\"v\": 1, \"name\": \"x\", \"network\": {\"allow\": [{\"name\": \"a\","
		      " \"host\": \"h\", \"port\": 443, \"scheme\": \"https\","
		      " \"credential\": {\"header\": \"A\", \"query\": \"k\", \"env\": \"E\"}}]}}");
	assert_int_equal(tb_runtime_load(&rt, p, &err), TB_EINVAL);
	assert_contains(err.msg, "exactly one of 'header' and 'query'");
	unlink(p);

	p = write_tmp("{\"v\": 1, \"name\": \"x\", \"network\": {\"allow\": [{\"name\": \"a\","
		      " \"host\": \"h\", \"port\": 443, \"scheme\": \"gopher\"}]}}");
	assert_int_equal(tb_runtime_load(&rt, p, &err), TB_EINVAL);
	assert_contains(err.msg, "network.allow[0].scheme");
	unlink(p);

	/* a rate limit limits something, at a rate that can be kept */
	static const char *const rates[][2] = {
		{ "{}", "give 'requests_per_second', 'tokens_per_minute' or both" },
		{ "{\"max_wait_seconds\": 5}",
		  "give 'requests_per_second', 'tokens_per_minute' or both" },
		{ "{\"requests_per_second\": 0}", "'requests_per_second' must be 0.001 or more" },
		{ "{\"requests_per_second\": \"fast\"}", "rate_limit.requests_per_second" },
		{ "{\"tokens_per_minute\": 0}", "rate_limit.tokens_per_minute" },
		{ "{\"tokens_per_minute\": 5, \"max_wait_seconds\": 3601}",
		  "rate_limit.max_wait_seconds" },
		{ "{\"requests_per_second\": 1, \"burst\": 3}", "burst" },
	};
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		p = write_tmp_fmt("{\"v\": 1, \"name\": \"x\", \"network\": {\"allow\": "
				  "[{\"name\": \"a\", \"host\": \"h\", \"port\": 443, "
				  "\"scheme\": \"https\", \"rate_limit\": %s}]}}",
				  rates[i][0]);
		assert_int_equal(tb_runtime_load(&rt, p, &err), TB_EINVAL);
		assert_contains(err.msg, rates[i][1]);
		unlink(p);
	}
	p = write_tmp(
	    "{\"v\": 1, \"name\": \"x\", \"network\": {\"allow\": [{\"name\": "
	    "\"a\", \"host\": \"h\", \"port\": 443, \"scheme\": \"https\", "
	    "\"rate_limit\": {\"requests_per_second\": 0.5, \"max_wait_seconds\": 0}}]}}");
	if (tb_runtime_load(&rt, p, &err) != 0)
		fail_msg("%s", err.msg);
	const tb_rate_conf_t *half = &((tb_endpoint_t *)rt.endpoints.items)[0].rate_limit;
	assert_true(half->requests_per_second == 0.5 && TB_HAS(half, TB_RATE_MAX_WAIT));
	assert_int_equal(half->max_wait_seconds, 0);
	tb_runtime_free(&rt);
	unlink(p);

	/* the proxy's platform route, /_taskbox/events, is no binding's */
	p = write_tmp("{\"v\": 1, \"name\": \"x\", \"network\": {\"allow\": [{\"name\": "
		      "\"_TaskBox\", \"host\": \"h\", \"port\": 443, \"scheme\": \"https\"}]}}");
	assert_int_equal(tb_runtime_load(&rt, p, &err), TB_EINVAL);
	assert_contains(err.msg, "endpoint name '_TaskBox' is reserved");
	unlink(p);
}

static void test_recipe__example_manifest_parses(void **state)
{
	tb_recipe_manifest_t m;
	tb_error_t err;
	size_t len;
	char *text = th_read_file(TB_SOURCE_DIR "/examples/recipes/hello/taskbox.json", &len);

	(void)state;
	if (tb_recipe_manifest_parse(&m, text, len, "hello", &err) != 0)
		fail_msg("%s", err.msg);
	assert_string_equal(m.agent.command.items[0], "/bin/sh");
	assert_int_equal(m.judges.n, 2);
	assert_int_equal(m.limits.memory_mb, 128);
	assert_true(TB_HAS(&m.limits, TB_LIMIT_MEMORY_MB));
	assert_false(TB_HAS(&m.limits, TB_LIMIT_PIDS));
	tb_recipe_manifest_free(&m);
	free(text);
}

static void test_recipe__bad_manifests_are_explained(void **state)
{
	tb_recipe_manifest_t m;
	tb_error_t err;
	const char *no_agent = "{\"v\": 1, \"name\": \"x\"}";
	const char *empty_cmd = "{\"v\": 1, \"name\": \"x\", \"agent\": {\"command\": []}}";
	const char *dup = "{\"v\": 1, \"name\": \"x\", \"agent\": {\"command\": [\"a\"]},"
			  " \"judges\": [{\"name\": \"j\", \"command\": [\"a\"]},"
			  " {\"name\": \"j\", \"command\": [\"b\"]}]}";

	(void)state;
	assert_int_equal(tb_recipe_manifest_parse(&m, no_agent, strlen(no_agent), "r", &err),
			 TB_EINVAL);
	assert_contains(err.msg, "field 'agent': required but missing");
	assert_int_equal(tb_recipe_manifest_parse(&m, empty_cmd, strlen(empty_cmd), "r", &err),
			 TB_EINVAL);
	assert_contains(err.msg, "field 'agent.command': 0 entries, at least 1 required");
	assert_int_equal(tb_recipe_manifest_parse(&m, dup, strlen(dup), "r", &err), TB_EINVAL);
	assert_contains(err.msg, "name 'j' used twice");
	assert_int_equal(tb_recipe_manifest_parse(&m, "[]", 2, "r", &err), TB_EINVAL);
	static const char *const workdirs[][2] = {
		{ "work", "must be an absolute path" },
		{ "/a/../etc", "must not have a '.' or '..' component" },
		{ "/a/.", "must not have a '.' or '..' component" },
	};
	for (size_t i = 0; i < sizeof(workdirs) / sizeof(workdirs[0]); i++) {
		char text[256];
		snprintf(text, sizeof(text),
			 "{\"v\": 1, \"name\": \"x\", \"agent\": {\"command\": [\"a\"], "
			 "\"workdir\": \"%s\"}}",
			 workdirs[i][0]);
		assert_int_equal(tb_recipe_manifest_parse(&m, text, strlen(text), "r", &err),
				 TB_EINVAL);
		assert_contains(err.msg, "agent.workdir");
		assert_contains(err.msg, workdirs[i][1]);
	}
	const char *ok = "{\"v\": 1, \"name\": \"x\", \"agent\": {\"command\": [\"a\"], "
			 "\"workdir\": \"/src/.venv/..x\"}}";
	assert_int_equal(tb_recipe_manifest_parse(&m, ok, strlen(ok), "r", &err), 0);
	assert_string_equal(m.agent.workdir, "/src/.venv/..x");
	tb_recipe_manifest_free(&m);
}

/* `taskbox config show` names each key's line: found by the key path
 * alone, never in a string value, an array or another object, with keys
 * compared decoded; 0 when it is not there. */
static void test_jsonconf__key_lines(void **state)
{
	const char *text = "{\n"
			   "  \"v\": 1, \"slots\": 2,\n"
			   "  \"worker_id\": \"kafka { \\\"brokers\\\": [\",\n"
			   "  \"list\": [{\"brokers\": 1}, \"}\"],\n"
			   "  \"ledger\": {\"brokers\": \"no\"},\n"
			   "  \"kafka\": {\n"
			   "    \"group\": \"g\",\n"
			   "    \"properties\": {\"sasl.password\": \"x\",\n"
			   "                   \"a\": {}},\n"
			   "    \"bro\\u006bers\":\n"
			   "      \"h:1\"\n"
			   "  },\n"
			   "  \"drain_seconds\":3}\n";
	const char *const v[] = { "v" }, *const slots[] = { "slots" };
	const char *const brokers[] = { "kafka", "brokers" };
	const char *const pw[] = { "kafka", "properties", "sasl.password" };
	const char *const drain[] = { "drain_seconds" }, *const none[] = { "kafka", "nope" };
	const char *const scalar[] = { "slots", "x" }, *const group[] = { "kafka", "group" };
	size_t n = strlen(text);

	(void)state;
	json_error_t jerr; /* what the finder is given: text jansson accepts */
	json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	assert_non_null(doc);
	json_decref(doc);
	assert_int_equal(tb_jsonconf_key_line(text, n, v, 1), 2);
	assert_int_equal(tb_jsonconf_key_line(text, n, slots, 1), 2);
	assert_int_equal(tb_jsonconf_key_line(text, n, group, 2), 7);
	assert_int_equal(tb_jsonconf_key_line(text, n, pw, 3), 8);
	assert_int_equal(tb_jsonconf_key_line(text, n, brokers, 2), 10);
	assert_int_equal(tb_jsonconf_key_line(text, n, drain, 1), 13);
	assert_int_equal(tb_jsonconf_key_line(text, n, none, 2), 0);
	assert_int_equal(tb_jsonconf_key_line(text, n, scalar, 2), 0);
	const char *const top_brokers[] = { "brokers" };
	assert_int_equal(tb_jsonconf_key_line(text, n, top_brokers, 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config__defaults_are_the_embedded_demo),
		cmocka_unit_test(test_config__example_file_loads),
		cmocka_unit_test(test_config__relative_dirs_resolve_against_the_file),
		cmocka_unit_test(
		    test_config__relative_dirs_from_the_environment_resolve_against_cwd),
		cmocka_unit_test(test_config__environment_overrides_file),
		cmocka_unit_test(test_config__errors_name_file_key_and_expectation),
		cmocka_unit_test(test_config__kafka_properties_cannot_undo_the_guarantees),
		cmocka_unit_test(test_runtime__example_loads_and_limits_merge),
		cmocka_unit_test(test_runtime__cross_field_rules),
		cmocka_unit_test(test_runtime__budgets_are_capped_and_default_to_the_cap),
		cmocka_unit_test(test_recipe__example_manifest_parses),
		cmocka_unit_test(test_recipe__bad_manifests_are_explained),
		cmocka_unit_test(test_jsonconf__key_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
