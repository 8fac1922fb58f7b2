/*
 * recipe_manifest.c: the recipe manifest's table and parser.
 */
#include "tb/recipe_manifest.h"

#include "tb/jsonconf.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* clang-format off: one field per row reads as a table */
static const tb_field_t judge_fields[] = {
	{ .name = "name",
	  .type = TB_FT_STR,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_judge_t, name),
	  .min = 1,
	  .max = 64,
	  .check = tb_check_id },
	{ .name = "command",
	  .type = TB_FT_STRLIST,
	  .flags = TB_FF_REQUIRED,
	  .offset = offsetof(tb_judge_t, command),
	  .min = 1,
	  .max = 64,
	  .item_max = 4096 },
	{ .name = "timeout_seconds",
	  .type = TB_FT_U64,
	  .offset = offsetof(tb_judge_t, timeout_seconds),
	  .min = 1,
	  .max = 86400 },
};
/* clang-format on */

static const tb_schema_t judge_schema = {
	.name = "judge",
	.size = sizeof(tb_judge_t),
	.has_offset = offsetof(tb_judge_t, has),
	.fields = judge_fields,
	.nfields = 3,
	.strict = true,
};

/* An absolute path with no "." or ".." component: where the agent starts. */
static int check_workdir(const void *value, char *why, size_t whylen)
{
	const char *s = value;

	if (s[0] != '/') {
		snprintf(why, whylen, "must be an absolute path");
		return -1;
	}
	for (const char *c = s; *c; c++)
		if (c[0] == '/' && c[1] == '.' &&
		    (c[2] == '/' || !c[2] || (c[2] == '.' && (c[3] == '/' || !c[3])))) {
			snprintf(why, whylen, "must not have a '.' or '..' component");
			return -1;
		}
	return 0;
}

/* clang-format off */
static const tb_field_t agent_fields[] = {
	{.name = "command", .type = TB_FT_STRLIST, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_agent_spec_t, command), .min = 1, .max = 64, .item_max = 4096},
	{.name = "env", .type = TB_FT_STRMAP,
	 .offset = offsetof(tb_agent_spec_t, env), .max = 64, .item_max = 4096},
	{.name = "workdir", .type = TB_FT_STR,
	 .offset = offsetof(tb_agent_spec_t, workdir), .min = 1, .max = 4096,
	 .check = check_workdir},
};
/* clang-format on */

static const tb_schema_t agent_schema = {
	.name = "agent",
	.size = sizeof(tb_agent_spec_t),
	.fields = agent_fields,
	.nfields = sizeof(agent_fields) / sizeof(agent_fields[0]),
	.strict = true,
};

/* clang-format off */
static const tb_field_t environment_fields[] = {
	{.name = "image", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_environment_t, image), .min = 1, .max = TB_IMAGE_REF_MAX - 1,
	 .check = tb_check_image_ref},
};
/* clang-format on */

static const tb_schema_t environment_schema = {
	.name = "environment",
	.size = sizeof(tb_environment_t),
	.has_offset = offsetof(tb_environment_t, has),
	.fields = environment_fields,
	.nfields = 1,
	.strict = true,
};

static int manifest_check(const void *obj, tb_error_t *err)
{
	const tb_recipe_manifest_t *m = obj;
	const tb_judge_t *j = m->judges.items;

	for (size_t i = 0; i < m->judges.n; i++)
		for (size_t k = 0; k < i; k++)
			if (strcmp(j[i].name, j[k].name) == 0)
				return tb_error_set(err, TB_EINVAL, "judges: name '%s' used twice",
						    j[i].name);
	return 0;
}

/* clang-format off */
static const tb_field_t manifest_fields[] = {
	{.name = "name", .type = TB_FT_STR, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_recipe_manifest_t, name), .min = 1, .max = 64,
	 .check = tb_check_id},
	{.name = "description", .type = TB_FT_STR,
	 .offset = offsetof(tb_recipe_manifest_t, description), .max = 4096},
	{.name = "agent", .type = TB_FT_OBJ, .flags = TB_FF_REQUIRED,
	 .offset = offsetof(tb_recipe_manifest_t, agent), .sub = &agent_schema},
	{.name = "judges", .type = TB_FT_LIST,
	 .offset = offsetof(tb_recipe_manifest_t, judges), .max = 32, .sub = &judge_schema},
	{.name = "limits", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_recipe_manifest_t, limits), .sub = &tb_schema_limits},
	{.name = "environment", .type = TB_FT_OBJ,
	 .offset = offsetof(tb_recipe_manifest_t, environment), .sub = &environment_schema},
};
/* clang-format on */

const tb_schema_t tb_schema_recipe_manifest = {
	.name = "recipe",
	.size = sizeof(tb_recipe_manifest_t),
	.has_offset = offsetof(tb_recipe_manifest_t, has),
	.fields = manifest_fields,
	.nfields = sizeof(manifest_fields) / sizeof(manifest_fields[0]),
	.strict = true,
	.check = manifest_check,
};

int tb_recipe_manifest_parse(tb_recipe_manifest_t *out, const char *text, size_t len,
			     const char *origin, tb_error_t *err)
{
	json_t *doc = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = tb_jsonconf_parse(&doc, text, len, TB_RECIPE_MANIFEST_MAX, origin, err)) < 0)
		return rc;
	if ((rc = tb_jsonconf_check_version(doc, 1, origin, err)) == 0)
		rc = tb_jsonconf_decode(&tb_schema_recipe_manifest, out, doc, NULL, NULL, origin,
					err);
	json_decref(doc);
	return rc;
}

void tb_recipe_manifest_free(tb_recipe_manifest_t *m)
{
	tb_msg_free(&tb_schema_recipe_manifest, m);
}
