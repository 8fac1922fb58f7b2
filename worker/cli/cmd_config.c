/*
 * cmd_config.c: `taskbox config`: the worker configuration as a command
 * finds it. `show` prints every key with the value in effect and where it
 * came from (config_show.h); `check` is `taskbox worker --check`, the
 * same code (cmd_worker.c), reached where an operator looks for it.
 */
#include "cmd.h"
#include "config_show.h"

#include "tb/encoding.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const verbs[] = { "show", "check" };

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox config show  [--config FILE] [--json]\n"
		     "       taskbox config check [--config FILE]\n\n"
		     "The worker configuration, found as every command finds it: --config\n"
		     "FILE, else $TASKBOX_CONFIG, else $XDG_CONFIG_HOME/taskbox/config.json\n"
		     "(~/.config/...), else /etc/taskbox/worker.json, else none; TASKBOX_*\n"
		     "variables win over it (schemas/config.md).\n"
		     "show: every key, the value in effect (a relative directory resolved,\n"
		     "with the value given) and where it came from: FILE:LINE, env\n"
		     "TASKBOX_<KEY>, or default. Values of kafka.properties whose names say\n"
		     "they hold credentials (password, secret, token, key, pem, jaas,\n"
		     "username, sasl.oauthbearer.config) and the password in a URL are\n"
		     "shown as " TB_CONFIG_MASK ".\n"
		     "  show --json   one object: {\"file\": FILE or null, \"keys\": {KEY:\n"
		     "                {\"value\", \"source\": file|env|default, \"file\",\n"
		     "                \"line\", \"variable\", \"given\", \"masked\"}}}\n"
		     "check: what `taskbox worker --check` does, the same code, as root on\n"
		     "the host that is to run the worker: the configuration refused as the\n"
		     "worker refuses one (a key or type wrong, kafka.brokers 'mock', a\n"
		     "runtimes_dir with no valid runtime, no sandbox under work_dir), then\n"
		     "Kafka, the ledger and the store asked (5 s each), one line each.\n"
		     "`taskbox schema config` checks keys and types alone, without root.\n"
		     "Exit: 0 shown, or all well; 1 a service does not answer; 2 usage;\n"
		     "3 the configuration could not be loaded, or was refused.\n");
}

/* A verb that is neither: said, with the nearest when it is near. */
static int unknown_verb(const char *verb)
{
	if (verb[0] == '-')
		return tb_cmd_usage_error("config", usage,
					  "say show or check first, then the options ('%s')", verb);
	return tb_cmd_unknown_verb("config", usage, verb, verbs, sizeof(verbs) / sizeof(verbs[0]));
}

/* Where @p row's value came from, as text: FILE:LINE, env VAR, default;
 * a relative directory's given value after it. */
static void source_text(char *out, size_t len, const json_t *row)
{
	const char *source = json_string_value(json_object_get(row, "source"));
	const char *given = json_string_value(json_object_get(row, "given"));
	int n;

	if (!strcmp(source, "file"))
		n = snprintf(out, len, "%s:%lld", json_string_value(json_object_get(row, "file")),
			     (long long)json_integer_value(json_object_get(row, "line")));
	else if (!strcmp(source, "env"))
		n = snprintf(out, len, "env %s",
			     json_string_value(json_object_get(row, "variable")));
	else
		n = snprintf(out, len, "default");
	if (given && n >= 0 && (size_t)n < len) {
		char *quoted = json_dumps(json_object_get(row, "given"), JSON_ENCODE_ANY);
		snprintf(out + n, len - (size_t)n, " (given as %s)", quoted ? quoted : given);
		free(quoted);
	}
}

/* One line a key: KEY, the value as JSON ("(none)" when unset), where it
 * came from; the values' column as wide as most of them need. */
static void print_text(const json_t *shown)
{
	const json_t *keys = json_object_get(shown, "keys");
	const char *file = json_string_value(json_object_get(shown, "file")), *key;
	size_t kw = 0, vw = 0;
	json_t *row;

	printf("configuration file: %s\n", file ? file : "none (the built-in defaults)");
	json_object_foreach((json_t *)keys, key, row)
	{
		char *v = json_dumps(json_object_get(row, "value"), JSON_ENCODE_ANY | JSON_COMPACT);
		kw = strlen(key) > kw ? strlen(key) : kw;
		vw = v && strlen(v) > vw && strlen(v) <= 40 ? strlen(v) : vw;
		free(v);
	}
	json_object_foreach((json_t *)keys, key, row)
	{
		const json_t *value = json_object_get(row, "value");
		char *v =
		    json_is_null(value) ? NULL : json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
		char source[4400];
		source_text(source, sizeof(source), row);
		printf("%-*s  %-*s  %s\n", (int)kw, key, (int)vw, v ? v : "(none)", source);
		free(v);
	}
}

static int show(const char *path, int as_json)
{
	json_t *shown = NULL;
	tb_config_t cfg;
	tb_error_t err;
	int rc;

	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox config show: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	rc = tb_config_show(&shown, &cfg, tb_cmd_config_file(), &err);
	tb_config_free(&cfg);
	if (rc < 0) {
		fprintf(stderr, "taskbox config show: %s\n", err.msg);
		return rc == TB_ENOMEM ? TB_EXIT_FAILURE : TB_EXIT_CONFIG;
	}
	if (as_json) {
		char *text = json_dumps(shown, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (text)
			printf("%s\n", text);
		free(text);
	} else {
		print_text(shown);
	}
	json_decref(shown);
	return fflush(stdout) == 0 ? TB_EXIT_OK : TB_EXIT_FAILURE;
}

int tb_cmd_config(int argc, char **argv)
{
	const char *verb = argc > 1 ? argv[1] : NULL, *path = NULL;
	int as_json = 0, rc;
	static const tb_opt_t all[] = {
		/* every verb's options together, for --help's short forms */
		{ "--config", TB_OPT_STRING, NULL, 0, 0, NULL, 'c' },
		{ "--json", TB_OPT_FLAG, NULL, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};

	if (!verb)
		return tb_cmd_usage_error("config", usage, "say show or check");
	if ((rc = tb_cmd_verb_option(verb, usage, all)) >= 0)
		return rc;
	int is_show = !strcmp(verb, "show");
	if (!is_show && strcmp(verb, "check"))
		return unknown_verb(verb);
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ is_show ? "--json" : NULL, TB_OPT_FLAG, &as_json, 0, 0, NULL, 'j' },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { is_show ? "config show" : "config check", opts, NULL, 0, 0 };
	if ((rc = tb_cmd_options(&o, argc, argv, 2, usage)) >= 0)
		return rc;
	return is_show ? show(path, as_json) : tb_cmd_worker_check("config check", path);
}
