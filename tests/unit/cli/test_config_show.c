/*
 * test_config_show.c: what `taskbox config show` masks (config_show.h):
 * the credentials among kafka.properties, by name, and the password of a
 * URL, whatever else the URL holds; and the rows it builds from a file.
 */
#include "config_show.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static void test_config_show__secret_properties(void **state)
{
	static const char *const secret[] = {
		"sasl.password",
		"sasl.username",
		"ssl.key.password",
		"ssl.key.pem",
		"ssl.keystore.password",
		"sasl.oauthbearer.config",
		"sasl.oauthbearer.client.secret",
		"sasl.jaas.config",
		"ssl.ca.pem",
	};
	static const char *const plain[] = { "security.protocol", "sasl.mechanisms",
					     "session.timeout.ms", "ssl.ca.location",
					     "statistics.interval.ms" };

	(void)state;
	for (size_t i = 0; i < sizeof(secret) / sizeof(secret[0]); i++)
		if (!tb_config_secret_property(secret[i]))
			fail_msg("%s is not masked", secret[i]);
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		if (tb_config_secret_property(plain[i]))
			fail_msg("%s is masked", plain[i]);
}

static void test_config_show__url_passwords(void **state)
{
	static const char *const cases[][2] = {
		{ "redis://u:p@h:1/0", "redis://u:********@h:1/0" },
		{ "redis://:p@h:1", "redis://:********@h:1" },
		{ "redis://u:p@ss@h/0", "redis://u:********@h/0" }, /* the last '@' */
		{ "redis://u@h:1", "redis://u@h:1" },               /* no password */
		{ "redis://h:1/0", "redis://h:1/0" },
		{ "s3://bucket/a:b@c", "s3://bucket/a:b@c" }, /* a path, not a user */
		{ "dir:///var/x@y:z", "dir:///var/x@y:z" },
		{ "memory:", "memory:" },
		{ "u:p@h", "u:p@h" }, /* no scheme: no URL */
	};
	char out[128];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int masked = tb_config_mask_url(out, sizeof(out), cases[i][0]);
		assert_string_equal(out, cases[i][1]);
		assert_int_equal(masked, strcmp(cases[i][0], cases[i][1]) != 0);
	}
}

/* The rows of a file: its keys with their lines, a variable over one,
 * defaults; credentials masked. */
static void test_config_show__rows(void **state)
{
	char path[] = "/tmp/tb-test-show-XXXXXX";
	const char *text = "{\"v\": 1,\n"
			   " \"kafka\": {\"group\": \"g\",\n"
			   "   \"properties\": {\"sasl.password\": \"pw\"}},\n"
			   " \"ledger\": {\"url\": \"redis://u:pw@h:1\"}}\n";
	int fd = mkstemp(path);
	tb_config_t cfg;
	tb_error_t err;
	json_t *shown;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	setenv("TASKBOX_SLOTS", "9", 1);
	assert_int_equal(tb_config_load(&cfg, path, &err), 0);
	assert_int_equal(tb_config_show(&shown, &cfg, path, &err), 0);
	unsetenv("TASKBOX_SLOTS");
	tb_config_free(&cfg);
	unlink(path);
	json_t *keys = json_object_get(shown, "keys");
	char *dump = json_dumps(keys, JSON_COMPACT | JSON_PRESERVE_ORDER);
	assert_null(strstr(dump, "pw\""));
	free(dump);
	json_t *group = json_object_get(keys, "kafka.group");
	assert_string_equal(json_string_value(json_object_get(group, "source")), "file");
	assert_int_equal(json_integer_value(json_object_get(group, "line")), 2);
	json_t *props = json_object_get(keys, "kafka.properties");
	assert_int_equal(json_integer_value(json_object_get(props, "line")), 3);
	assert_true(json_is_true(json_object_get(props, "masked")));
	json_t *slots = json_object_get(keys, "slots");
	assert_int_equal(json_integer_value(json_object_get(slots, "value")), 9);
	assert_string_equal(json_string_value(json_object_get(slots, "variable")), "TASKBOX_SLOTS");
	json_t *prefix = json_object_get(keys, "ledger.prefix");
	assert_string_equal(json_string_value(json_object_get(prefix, "source")), "default");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(keys, "ledger.url"), "value")),
	    "redis://u:********@h:1");
	assert_string_equal(json_object_iter_key(json_object_iter(keys)), "v");
	json_decref(shown);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_show__secret_properties),
		cmocka_unit_test(test_config_show__url_passwords),
		cmocka_unit_test(test_config_show__rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
