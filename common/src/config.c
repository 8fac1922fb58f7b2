/*
 * config.c: the worker configuration's table and defaults. Loading is
 * jsonconf.c's; what each setting does is the business of the module that
 * reads it.
 */
#include "tb/config.h"
#include "tb/log.h"

#include "tb/jsonconf.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char tb_config_defaults[] =
    "{\"worker_id\": \"\", \"slots\": 4, \"log_level\": \"info\", \"log_format\": \"logfmt\","
    " \"kafka\": {\"brokers\": \"mock\", \"group\": \"taskbox-workers\","
    "  \"assignor\": \"cooperative-sticky\","
    "  \"tasks_topic\": \"taskbox.tasks\", \"events_topic\": \"taskbox.events\","
    "  \"dlq_topic\": \"taskbox.dlq\"},"
    " \"ledger\": {\"url\": \"memory:\", \"prefix\": \"taskbox\", \"lease_ms\": 15000},"
    " \"store\": {\"url\": \"dir:///var/lib/taskbox/artifacts\","
    "  \"region\": \"us-east-1\"},"
    " \"runtimes_dir\": \"/etc/taskbox/runtimes\","
    " \"work_dir\": \"/var/lib/taskbox/work\","
    " \"cache_dir\": \"/var/cache/taskbox\", \"image_cache_mb\": 20480,"
    " \"input_cache_mb\": 10240,"
    " \"image_stall_seconds\": 30, \"image_lazy\": false,"
    " \"metrics_listen\": \"\", \"drain_seconds\": 120}";

static const char *const log_levels[] = { "debug", "info", "warn", "error", NULL };
static const char *const log_formats[] = { "logfmt", "json", NULL };
const char *const tb_kafka_assignors[] = { "cooperative-sticky", "range", "roundrobin", NULL };

#define STR(n, st, m, lo)                                                                          \
	{                                                                                          \
		.name = n, .type = TB_FT_STR, .flags = TB_FF_REQUIRED, .offset = offsetof(st, m),  \
		.min = lo, .max = 4096                                                             \
	}
#define OPT_STR(n, st, m)                                                                          \
	{                                                                                          \
		.name = n, .type = TB_FT_STR, .offset = offsetof(st, m), .min = 1, .max = 4096     \
	}

/* clang-format off: one field per row reads as a table */
static const tb_field_t kafka_fields[] = {
	STR("brokers", tb_kafka_config_t, brokers, 1),
	STR("group", tb_kafka_config_t, group, 1),
	OPT_STR("group_instance_id", tb_kafka_config_t, group_instance_id),
	{ .name = "assignor",
	  .type = TB_FT_ENUM,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_kafka_config_t, assignor),
	  .names = tb_kafka_assignors },
	STR("tasks_topic", tb_kafka_config_t, tasks_topic, 1),
	STR("events_topic", tb_kafka_config_t, events_topic, 1),
	STR("dlq_topic", tb_kafka_config_t, dlq_topic, 1),
	{ .name = "properties",
	  .type = TB_FT_STRMAP,
	  .offset = offsetof(tb_kafka_config_t, properties),
	  .max = 256,
	  .item_max = 4096 },
};
/* clang-format on */
static const tb_schema_t kafka_schema = {
	.name = "kafka",
	.size = sizeof(tb_kafka_config_t),
	.fields = kafka_fields,
	.nfields = sizeof(kafka_fields) / sizeof(kafka_fields[0]),
	.strict = true,
};

/* clang-format off */
static const tb_field_t ledger_fields[] = {
	STR("url", tb_ledger_config_t, url, 1),
	STR("prefix", tb_ledger_config_t, prefix, 1),
	{.name = "lease_ms", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_ledger_config_t, lease_ms), .min = 1000, .max = 600000},
};
/* clang-format on */
static const tb_schema_t ledger_schema = {
	.name = "ledger",
	.size = sizeof(tb_ledger_config_t),
	.fields = ledger_fields,
	.nfields = 3,
	.strict = true,
};

/* clang-format off */
static const tb_field_t store_fields[] = {
	STR("url", tb_store_config_t, url, 1),
	OPT_STR("endpoint", tb_store_config_t, endpoint),
	STR("region", tb_store_config_t, region, 1),
};
/* clang-format on */
static const tb_schema_t store_schema = {
	.name = "store",
	.size = sizeof(tb_store_config_t),
	.fields = store_fields,
	.nfields = 3,
	.strict = true,
};

/* clang-format off */
static const tb_field_t config_fields[] = {
	STR("worker_id", tb_config_t, worker_id, 0),
	{.name = "slots", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, slots), .min = 1, .max = 1024},
	{.name = "log_level", .type = TB_FT_ENUM, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, log_level), .names = log_levels},
	{.name = "log_format", .type = TB_FT_ENUM, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, log_format), .names = log_formats},
	{.name = "kafka", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, kafka), .sub = &kafka_schema},
	{.name = "ledger", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, ledger), .sub = &ledger_schema},
	{.name = "store", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, store), .sub = &store_schema},
	STR("runtimes_dir", tb_config_t, runtimes_dir, 1),
	STR("work_dir", tb_config_t, work_dir, 1),
	STR("cache_dir", tb_config_t, cache_dir, 1),
	{.name = "image_cache_mb", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, image_cache_mb), .min = 64, .max = 1u << 30},
	{.name = "input_cache_mb", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, input_cache_mb), .min = 64, .max = 1u << 30},
	{.name = "image_stall_seconds", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, image_stall_seconds), .min = 1, .max = 3600},
	{.name = "image_lazy", .type = TB_FT_BOOL, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, image_lazy)},
	STR("metrics_listen", tb_config_t, metrics_listen, 0),
	{.name = "drain_seconds", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_config_t, drain_seconds), .min = 1, .max = 3600},
};
/* clang-format on */

const tb_schema_t tb_schema_config = {
	.name = "config",
	.size = sizeof(tb_config_t),
	.has_offset = offsetof(tb_config_t, has),
	.fields = config_fields,
	.nfields = sizeof(config_fields) / sizeof(config_fields[0]),
	.strict = true,
};

/* The librdkafka settings taskbox sets itself, because its guarantees
 * rest on them or another key names them: kafka.properties may not. */
static const struct {
	const char *key, *why;
} owned_props[] = {
	{ "bootstrap.servers", "it is kafka.brokers" },
	{ "metadata.broker.list", "it is kafka.brokers" },
	{ "group.id", "it is kafka.group" },
	{ "group.instance.id", "it is kafka.group_instance_id" },
	{ "enable.auto.commit", "offsets are committed only after a task's teardown" },
	{ "enable.auto.offset.store", "offsets are committed only after a task's teardown" },
	{ "auto.offset.reset", "a new group reads every task from the start" },
	{ "partition.assignment.strategy", "it is kafka.assignor" },
	{ "enable.idempotence", "each task's events are delivered once each, in order" },
};

static int check_properties(const tb_config_t *cfg, tb_error_t *err)
{
	const tb_strmap_t *p = &cfg->kafka.properties;

	for (size_t i = 0; i < p->n; i++)
		for (size_t k = 0; k < sizeof(owned_props) / sizeof(owned_props[0]); k++)
			if (!strcmp(p->items[i].key, owned_props[k].key))
				return tb_error_set(err, TB_EINVAL,
						    "kafka.properties: '%s' is set by taskbox and "
						    "cannot be changed: %s",
						    owned_props[k].key, owned_props[k].why);
	return 0;
}

const char *const tb_config_path_keys[] = { "runtimes_dir", "work_dir", "cache_dir", NULL };

/* @p value (relative) resolved against the directory of @p file, or the
 * current directory when @p file is NULL. @return it (malloc'd), or NULL. */
static char *resolved(const char *value, const char *file)
{
	char cwd[4096] = ".", *out = NULL;
	const char *slash = file ? strrchr(file, '/') : NULL;
	int dirlen = slash ? (int)(slash - file) : 0;
	size_t cap;

	if ((!file || file[0] != '/') && !getcwd(cwd, sizeof(cwd)))
		return NULL;
	cap = strlen(cwd) + (file ? strlen(file) : 0) + strlen(value) + 4;
	if (!(out = malloc(cap)))
		return NULL;
	if (file && file[0] == '/')
		snprintf(out, cap, "%.*s/%s", dirlen, file, value);
	else if (slash)
		snprintf(out, cap, "%s/%.*s/%s", cwd, dirlen, file, value);
	else
		snprintf(out, cap, "%s/%s", cwd, value);
	return out;
}

/* Every relative directory made absolute (tb_config_load says how). */
static int resolve_paths(tb_config_t *cfg, const char *path, tb_error_t *err)
{
	char **keys[] = { &cfg->runtimes_dir, &cfg->work_dir, &cfg->cache_dir };
	static const char *const envs[] = { "TASKBOX_RUNTIMES_DIR", "TASKBOX_WORK_DIR",
					    "TASKBOX_CACHE_DIR" };

	for (int i = 0; i < 3; i++) {
		if ((*keys[i])[0] == '/')
			continue;
		const char *env = getenv(envs[i]);
		char *abs = resolved(*keys[i], env && env[0] ? NULL : path);
		if (!abs)
			return tb_error_set(err, TB_ENOMEM, "%s: cannot resolve '%s'",
					    tb_config_path_keys[i], *keys[i]);
		free(*keys[i]);
		*keys[i] = abs;
		cfg->relative |= 1u << i;
	}
	return 0;
}

/* TASKBOX_* variables that are not configuration keys but are read
 * elsewhere (the CLI, tests, the sandbox's own environment). */
static const char *const other_variables[] = {
	"TASKBOX_CONFIG",
	"TASKBOX_FAULT",
	"TASKBOX_SANDBOX_INIT",
	"TASKBOX_VIEW_TOKEN",
	"TASKBOX_TEST_*",
	"TASKBOX_TOKEN",
	"TASKBOX_EVENTS_URL",
	"TASKBOX_ENDPOINT_*",
	"TASKBOX_TASK_ID",
	"TASKBOX_ATTEMPT",
	NULL,
};

int tb_config_load(tb_config_t *out, const char *path, tb_error_t *err)
{
	json_t *doc = NULL;
	char unknown[1024];
	int rc;

	/* a misspelled variable would otherwise be ignored without a word */
	tb_jsonconf_env_unknown(&tb_schema_config, "TASKBOX", other_variables, unknown,
				sizeof(unknown));
	if (unknown[0])
		tb_warn(NULL, "environment: no configuration key is named %s: ignored", unknown);

	if (!path) {
		doc = json_object();
		rc = tb_jsonconf_decode(&tb_schema_config, out, doc, tb_config_defaults, "TASKBOX",
					"configuration", err);
		json_decref(doc);
	} else {
		rc = tb_jsonconf_load(&tb_schema_config, out, path, tb_config_defaults, "TASKBOX",
				      1, err);
	}
	if (rc == 0) {
		out->relative = 0;
		if ((rc = check_properties(out, err)) < 0 ||
		    (rc = resolve_paths(out, path, err)) < 0)
			tb_config_free(out);
	}
	return rc;
}

void tb_config_free(tb_config_t *cfg)
{
	tb_msg_free(&tb_schema_config, cfg);
}
