/*
 * runtime.c: the runtime file's table, its cross-field rules and the limit
 * merge.
 */
#include "tb/runtime.h"

#include "tb/jsonconf.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const char tb_runtime_defaults[] =
    "{\"max_attempts\": 3, \"max_worker_deaths\": 25,"
    " \"limits\": {\"wall_seconds\": 600, \"memory_mb\": 512, \"pids\": 256,"
    "  \"cpu_millis\": 1000, \"outputs_mb\": 64},"
    " \"max_limits\": {\"wall_seconds\": 3600, \"memory_mb\": 4096, \"pids\": 4096,"
    "  \"cpu_millis\": 2000, \"outputs_mb\": 1024},"
    " \"sandbox\": {\"ro_binds\": [\"/usr\", \"/bin\", \"/lib\", \"/lib64\", \"/sbin\","
    "  \"/etc/alternatives\", \"/etc/ssl\"], \"workspace_mb\": 256,"
    "  \"max_open_files\": 256, \"max_file_mb\": 256, \"max_output_files\": 1000,"
    "  \"lazy_inputs_mb\": 64,"
    "  \"images\": {\"max_unpacked_mb\": 4096, \"writable_mb\": 1024}},"
    " \"agent\": {\"max_event_bytes\": 65536, \"max_events_per_second\": 2000,"
    "  \"idle_timeout_seconds\": 300, \"judge_timeout_seconds\": 60,"
    "  \"budget_grace_seconds\": 10, \"usage_interval_seconds\": 30},"
    " \"recording\": {\"max_body_kib\": 1024, \"max_mb\": 64}}";

/* clang-format off: one field per row reads as a table */
static const tb_field_t credential_fields[] = {
	{ .name = "header",
	  .type = TB_FT_STR,
	  .offset = offsetof(tb_credential_t, header),
	  .min = 1,
	  .max = 128 },
	{ .name = "query",
	  .type = TB_FT_STR,
	  .offset = offsetof(tb_credential_t, query),
	  .min = 1,
	  .max = 128 },
	{ .name = "format",
	  .type = TB_FT_STR,
	  .offset = offsetof(tb_credential_t, format),
	  .min = 2,
	  .max = 256 },
	{ .name = "env",
	  .type = TB_FT_STR,
	  .offset = offsetof(tb_credential_t, env),
	  .min = 1,
	  .max = 128 },
	{ .name = "file",
	  .type = TB_FT_STR,
	  .offset = offsetof(tb_credential_t, file),
	  .min = 1,
	  .max = 4096 },
};
/* clang-format on */

static int credential_check(const void *obj, tb_error_t *err)
{
	const tb_credential_t *c = obj;

	if (!c->header == !c->query)
		return tb_error_set(err, TB_EINVAL, "give exactly one of 'header' and 'query'");
	if (!c->env == !c->file)
		return tb_error_set(err, TB_EINVAL, "give exactly one of 'env' and 'file'");
	if (c->format && !strstr(c->format, "{}"))
		return tb_error_set(err, TB_EINVAL, "'format' must contain {} for the secret");
	return 0;
}

static const tb_schema_t credential_schema = {
	.name = "credential",
	.size = sizeof(tb_credential_t),
	.fields = credential_fields,
	.nfields = 5,
	.strict = true,
	.check = credential_check,
};

static int scheme_check(const void *value, char *why, size_t whylen)
{
	if (strcmp(value, "https") == 0 || strcmp(value, "http") == 0)
		return 0;
	snprintf(why, whylen, "expected 'https' or 'http'");
	return -1;
}

const char *const tb_dialects[] = { "openai", "anthropic", NULL };

/* clang-format off */
static const tb_field_t rate_fields[] = {
	{.name = "requests_per_second", .type = TB_FT_F64,
	 .offset = offsetof(tb_rate_conf_t, requests_per_second), .min = 0, .max = 100000},
	{.name = "tokens_per_minute", .type = TB_FT_U64,
	 .offset = offsetof(tb_rate_conf_t, tokens_per_minute), .min = 1,
	 .max = 1000000000000ULL},
	{.name = "max_wait_seconds", .type = TB_FT_U64,
	 .offset = offsetof(tb_rate_conf_t, max_wait_seconds), .min = 0, .max = 3600},
};
/* clang-format on */

static int rate_check(const void *obj, tb_error_t *err)
{
	const tb_rate_conf_t *r = obj;

	if (TB_HAS(r, 0) && !(r->requests_per_second >= 0.001))
		return tb_error_set(err, TB_EINVAL, "'requests_per_second' must be 0.001 or more");
	if (!TB_HAS(r, 0) && !TB_HAS(r, 1))
		return tb_error_set(err, TB_EINVAL,
				    "give 'requests_per_second', 'tokens_per_minute' or both");
	return 0;
}

static const tb_schema_t rate_schema = {
	.name = "rate_limit",
	.size = sizeof(tb_rate_conf_t),
	.has_offset = offsetof(tb_rate_conf_t, has),
	.fields = rate_fields,
	.nfields = sizeof(rate_fields) / sizeof(rate_fields[0]),
	.strict = true,
	.check = rate_check,
};

/* clang-format off */
static const tb_field_t endpoint_fields[] = {
	{.name = "name", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_endpoint_t, name), .min = 1, .max = 64, .check = tb_check_id},
	{.name = "host", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_endpoint_t, host), .min = 1, .max = 253},
	{.name = "port", .type = TB_FT_U64, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_endpoint_t, port), .min = 1, .max = 65535},
	{.name = "scheme", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_endpoint_t, scheme), .min = 1, .max = 16, .check = scheme_check},
	{.name = "methods", .type = TB_FT_STRLIST,
	 .offset = offsetof(tb_endpoint_t, methods), .max = 16, .item_max = 16},
	{.name = "path_prefixes", .type = TB_FT_STRLIST,
	 .offset = offsetof(tb_endpoint_t, path_prefixes), .max = 64, .item_max = 1024},
	{.name = "credential", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_endpoint_t, credential), .sub = &credential_schema},
	{.name = "dialect", .type = TB_FT_ENUM,
	 .offset = offsetof(tb_endpoint_t, dialect), .names = tb_dialects},
	{.name = "rate_limit", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_endpoint_t, rate_limit), .sub = &rate_schema},
	{.name = "record", .type = TB_FT_BOOL, .offset = offsetof(tb_endpoint_t, record)},
	{.name = "secret_headers", .type = TB_FT_STRLIST,
	 .offset = offsetof(tb_endpoint_t, secret_headers), .max = 64, .item_max = 128},
	{.name = "default_max_tokens", .type = TB_FT_U64,
	 .offset = offsetof(tb_endpoint_t, default_max_tokens), .min = 1, .max = 1000000000},
};
/* clang-format on */

static const tb_schema_t endpoint_schema = {
	.name = "endpoint",
	.size = sizeof(tb_endpoint_t),
	.has_offset = offsetof(tb_endpoint_t, has),
	.fields = endpoint_fields,
	.nfields = sizeof(endpoint_fields) / sizeof(endpoint_fields[0]),
	.strict = true,
};

#define U64(n, st, m, lo, hi)                                                                      \
	{                                                                                          \
		.name = n, .type = TB_FT_U64, .flags = TB_FF_REQUIRED, .offset = offsetof(st, m),  \
		.min = lo, .max = hi                                                               \
	}

/* A registry, or a registry and a repository's first components. */
static int check_prefix(const void *value, char *why, size_t len)
{
	const char *s = value;

	if (!s[0] || s[0] == '/' || strpbrk(s, "@ \t")) {
		snprintf(why, len,
			 "not a registry or repository prefix (registry.example.com/team)");
		return -1;
	}
	return 0;
}

/* An absolute path with no "." or ".." components. */
static int check_abs_path(const void *value, char *why, size_t len)
{
	const char *s = value;
	size_t n = strlen(s);

	if (s[0] != '/' || strstr(s, "/../") || strstr(s, "/./") ||
	    (n >= 3 && !strcmp(s + n - 3, "/..")) || (n >= 2 && !strcmp(s + n - 2, "/."))) {
		snprintf(why, len, "not an absolute path without '.' or '..'");
		return -1;
	}
	return 0;
}

/* clang-format off */
static const tb_field_t images_fields[] = {
	{.name = "allow", .type = TB_FT_STRLIST, .offset = offsetof(tb_images_conf_t, allow),
	 .max = 64, .item_max = 512, .check = check_prefix},
	{.name = "layouts", .type = TB_FT_STRLIST, .offset = offsetof(tb_images_conf_t, layouts),
	 .max = 64, .item_max = 4096, .check = check_abs_path},
	{.name = "default", .type = TB_FT_STR, .offset = offsetof(tb_images_conf_t, default_image),
	 .min = 1, .max = TB_IMAGE_REF_MAX - 1, .check = tb_check_image_ref},
	U64("max_unpacked_mb", tb_images_conf_t, max_unpacked_mb, 1, 1u << 20),
	U64("writable_mb", tb_images_conf_t, writable_mb, 1, 1u << 20),
	{.name = "credentials", .type = TB_FT_STR, .offset = offsetof(tb_images_conf_t, credentials),
	 .min = 1, .max = 4096, .check = check_abs_path},
};
/* clang-format on */

static const tb_schema_t images_schema = {
	.name = "images",
	.size = sizeof(tb_images_conf_t),
	.has_offset = offsetof(tb_images_conf_t, has),
	.fields = images_fields,
	.nfields = sizeof(images_fields) / sizeof(images_fields[0]),
	.strict = true,
};

/* clang-format off */
static const tb_field_t sandbox_fields[] = {
	{.name = "ro_binds", .type = TB_FT_STRLIST, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_sandbox_conf_t, ro_binds), .max = 64, .item_max = 4096},
	U64("workspace_mb", tb_sandbox_conf_t, workspace_mb, 1, 1u << 20),
	U64("max_open_files", tb_sandbox_conf_t, max_open_files, 16, 1u << 20),
	U64("max_file_mb", tb_sandbox_conf_t, max_file_mb, 1, 1u << 20),
	U64("max_output_files", tb_sandbox_conf_t, max_output_files, 1, 10000),
	U64("lazy_inputs_mb", tb_sandbox_conf_t, lazy_inputs_mb, 0, 1u << 30),
	{.name = "images", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_sandbox_conf_t, images), .sub = &images_schema},
};
/* clang-format on */

static const tb_schema_t sandbox_schema = {
	.name = "sandbox",
	.size = sizeof(tb_sandbox_conf_t),
	.fields = sandbox_fields,
	.nfields = sizeof(sandbox_fields) / sizeof(sandbox_fields[0]),
	.strict = true,
};

/* clang-format off */
static const tb_field_t agent_fields[] = {
	U64("max_event_bytes", tb_agent_conf_t, max_event_bytes, 256, 256u << 10),
	U64("max_events_per_second", tb_agent_conf_t, max_events_per_second, 1, 1000000),
	U64("idle_timeout_seconds", tb_agent_conf_t, idle_timeout_seconds, 1, 7 * 86400),
	U64("judge_timeout_seconds", tb_agent_conf_t, judge_timeout_seconds, 1, 86400),
	U64("budget_grace_seconds", tb_agent_conf_t, budget_grace_seconds, 0, 3600),
	U64("usage_interval_seconds", tb_agent_conf_t, usage_interval_seconds, 0, 86400),
};
/* clang-format on */

static const tb_schema_t agent_schema = {
	.name = "agent",
	.size = sizeof(tb_agent_conf_t),
	.fields = agent_fields,
	.nfields = 6,
	.strict = true,
};

/* "network": {"allow": [...]} and "bindings": {"env": {...}} are one level
 * deeper in the file than in the struct; these wrappers give them their
 * place in the table without a struct per level. */
typedef struct {
	tb_list_t allow;
} network_t;
/* clang-format off */
static const tb_field_t network_fields[] = {
	{.name = "allow", .type = TB_FT_LIST, .offset = offsetof(network_t, allow),
	 .max = 256, .sub = &endpoint_schema},
};
/* clang-format on */
static const tb_schema_t network_schema = {
	.name = "network",
	.size = sizeof(network_t),
	.fields = network_fields,
	.nfields = 1,
	.strict = true,
};

typedef struct {
	tb_strmap_t env;
} bindings_t;
/* clang-format off */
static const tb_field_t bindings_fields[] = {
	{.name = "env", .type = TB_FT_STRMAP, .offset = offsetof(bindings_t, env),
	 .max = 256, .item_max = 4096},
};
/* clang-format on */
static const tb_schema_t bindings_schema = {
	.name = "bindings",
	.size = sizeof(bindings_t),
	.fields = bindings_fields,
	.nfields = 1,
	.strict = true,
};

/* Limit i of @p l, through the table so the struct layout is free. */
static uint64_t *limit_at(const tb_limits_t *l, size_t i)
{
	return (uint64_t *)((char *)l + tb_schema_limits.fields[i].offset);
}

static int runtime_check(const void *obj, tb_error_t *err)
{
	const tb_runtime_t *rt = obj;
	const tb_field_t *lf = tb_schema_limits.fields;

	for (size_t i = 0; i < tb_schema_limits.nfields; i++) {
		/* the sandbox's limits are required; the budgets optional */
		int budget = i >= TB_LIMIT_MAX_TOKENS;
		if (!budget && (!TB_HAS(&rt->limits, i) || !TB_HAS(&rt->max_limits, i)))
			return tb_error_set(err, TB_EINVAL,
					    "limits.%s and max_limits.%s are both required",
					    lf[i].name, lf[i].name);
		if (TB_HAS(&rt->limits, i) && TB_HAS(&rt->max_limits, i) &&
		    *limit_at(&rt->limits, i) > *limit_at(&rt->max_limits, i))
			return tb_error_set(
			    err, TB_EINVAL, "limits.%s (%llu) is above max_limits.%s (%llu)",
			    lf[i].name, (unsigned long long)*limit_at(&rt->limits, i), lf[i].name,
			    (unsigned long long)*limit_at(&rt->max_limits, i));
	}
	const tb_images_conf_t *im = &rt->sandbox.images;
	if (im->default_image) {
		tb_image_ref_t ref;
		if (tb_image_ref_parse(&ref, im->default_image, err) < 0 ||
		    !tb_images_allowed(im, &ref))
			return tb_error_set(err, TB_EINVAL,
					    "sandbox.images.default: '%s' is not under one of "
					    "sandbox.images.%s",
					    im->default_image, ref.layout ? "layouts" : "allow");
	}
	for (size_t i = 0; i < rt->endpoints.n; i++) {
		/* The egress proxy's own route (POST /_taskbox/events) is where
		 * such a binding would be: any case, to leave no doubt. */
		const char *name = ((tb_endpoint_t *)rt->endpoints.items)[i].name;
		if (strcasecmp(name, "_taskbox") == 0)
			return tb_error_set(err, TB_EINVAL,
					    "network.allow: endpoint name '%s' is reserved: "
					    "/_taskbox/ is the proxy's platform route",
					    name);
		for (size_t k = 0; k < i; k++)
			if (strcmp(((tb_endpoint_t *)rt->endpoints.items)[i].name,
				   ((tb_endpoint_t *)rt->endpoints.items)[k].name) == 0)
				return tb_error_set(err, TB_EINVAL,
						    "network.allow: endpoint name '%s' used twice",
						    ((tb_endpoint_t *)rt->endpoints.items)[i].name);
	}
	return 0;
}

/* clang-format off */
static const tb_field_t recording_fields[] = {
	U64("max_body_kib", tb_recording_conf_t, max_body_kib, 1, 1u << 20),
	U64("max_mb", tb_recording_conf_t, max_mb, 1, 1024),
};
/* clang-format on */

static const tb_schema_t recording_schema = {
	.name = "recording",
	.size = sizeof(tb_recording_conf_t),
	.fields = recording_fields,
	.nfields = 2,
	.strict = true,
};

/* clang-format off */
static const tb_field_t runtime_fields[] = {
	{.name = "name", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_runtime_t, name), .min = 1, .max = 64, .check = tb_check_id},
	U64("max_attempts", tb_runtime_t, max_attempts, 1, 100),
	U64("max_worker_deaths", tb_runtime_t, max_worker_deaths, 1, 1000),
	{.name = "limits", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_runtime_t, limits), .sub = &tb_schema_limits},
	{.name = "max_limits", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_runtime_t, max_limits), .sub = &tb_schema_limits},
	{.name = "sandbox", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_runtime_t, sandbox), .sub = &sandbox_schema},
	{.name = "agent", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_runtime_t, agent), .sub = &agent_schema},
	{.name = "network", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_runtime_t, endpoints), .sub = &network_schema},
	{.name = "bindings", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_runtime_t, env), .sub = &bindings_schema},
	{.name = "recording", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_runtime_t, recording), .sub = &recording_schema},
};
/* clang-format on */

const tb_schema_t tb_schema_runtime = {
	.name = "runtime",
	.size = sizeof(tb_runtime_t),
	.has_offset = offsetof(tb_runtime_t, has),
	.fields = runtime_fields,
	.nfields = sizeof(runtime_fields) / sizeof(runtime_fields[0]),
	.strict = true,
	.check = runtime_check,
};

int tb_images_allowed(const tb_images_conf_t *im, const tb_image_ref_t *ref)
{
	const tb_strlist_t *list = ref->layout ? &im->layouts : &im->allow;

	for (size_t i = 0; i < list->n; i++)
		if (tb_image_ref_allowed(ref, list->items[i]))
			return 1;
	return 0;
}

int tb_runtime_load(tb_runtime_t *out, const char *path, tb_error_t *err)
{
	return tb_jsonconf_load(&tb_schema_runtime, out, path, tb_runtime_defaults, NULL, 1, err);
}

void tb_runtime_free(tb_runtime_t *rt)
{
	tb_msg_free(&tb_schema_runtime, rt);
}

static int apply(tb_limits_t *out, const tb_runtime_t *rt, const tb_limits_t *in, const char *who,
		 tb_error_t *err)
{
	for (size_t i = 0; i < tb_schema_limits.nfields; i++) {
		uint64_t want = *limit_at(in, i), max = *limit_at(&rt->max_limits, i);
		if (!TB_HAS(in, i))
			continue;
		/* a budget the runtime does not cap: any */
		if (TB_HAS(&rt->max_limits, i) && want > max)
			return tb_error_set(err, TB_EPOISON,
					    "%s asks for %s %llu, runtime '%s' allows at most %llu",
					    who, tb_schema_limits.fields[i].name,
					    (unsigned long long)want, rt->name,
					    (unsigned long long)max);
		*limit_at(out, i) = want;
		TB_SET_HAS(out, i);
	}
	return 0;
}

int tb_runtime_limits(tb_limits_t *out, const tb_runtime_t *rt, const tb_limits_t *recipe,
		      const tb_limits_t *task, tb_error_t *err)
{
	int rc;

	*out = rt->limits;
	if (recipe && (rc = apply(out, rt, recipe, "the recipe", err)) < 0)
		return rc;
	if (task && (rc = apply(out, rt, task, "the task", err)) < 0)
		return rc;
	/* A budget the runtime caps is never unlimited: where neither the
	 * runtime's defaults, the recipe nor the task set it, it is the cap. */
	for (size_t i = TB_LIMIT_MAX_TOKENS; i < tb_schema_limits.nfields; i++)
		if (TB_HAS(&rt->max_limits, i) && !TB_HAS(out, i)) {
			*limit_at(out, i) = *limit_at(&rt->max_limits, i);
			TB_SET_HAS(out, i);
		}
	return 0;
}
