/*
 * cmd_common.c: what several subcommands share: opening the fleet's
 * ledger and store, parsing options, and reading a prompt from a file.
 */
#include "cmd.h"

#include "tb/encoding.h"
#include "tb/schema_task.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char config_file[4096];

/* Loads @p file (NULL: none), remembering which for tb_cmd_config_file. */
static int load_from(tb_config_t *cfg, const char *file, tb_error_t *err)
{
	snprintf(config_file, sizeof(config_file), "%s", file ? file : "");
	return tb_config_load(cfg, file, err);
}

const char *tb_cmd_config_file(void)
{
	return config_file[0] ? config_file : NULL;
}

int tb_cmd_load_config(tb_config_t *cfg, const char *given, tb_error_t *err)
{
	const char *env = getenv("TASKBOX_CONFIG"), *xdg = getenv("XDG_CONFIG_HOME");
	const char *home = getenv("HOME");
	char user[4096] = "";

	if (given)
		return load_from(cfg, given, err);
	if (env && env[0])
		return load_from(cfg, env, err);
	if (xdg && xdg[0] == '/')
		snprintf(user, sizeof(user), "%s/taskbox/config.json", xdg);
	else if (home && home[0] == '/')
		snprintf(user, sizeof(user), "%s/.config/taskbox/config.json", home);
	if (user[0] && access(user, F_OK) == 0)
		return load_from(cfg, user, err);
	if (access("/etc/taskbox/worker.json", F_OK) == 0)
		return load_from(cfg, "/etc/taskbox/worker.json", err);
	return load_from(cfg, NULL, err);
}

/* The usage's last lines, from the table itself so that they cannot
 * drift: "Short forms: -c --config, -j --json, -h --help, -V --version; ...",
 * wrapped before 80 columns. */
static void print_short_forms(FILE *out, const tb_opt_t *opts)
{
	int col = fprintf(out, "Short forms:");
	for (const tb_opt_t *o = opts; o->name; o++) {
		if (!o->letter)
			continue;
		if (col + (int)strlen(o->name) + 6 > 78)
			col = fprintf(out, "\n");
		col += fprintf(out, " -%c %s,", o->letter, o->name);
	}
	if (col > 40)
		fprintf(out, "\n");
	fprintf(out, " -h --help, -V --version; letters combine (-ab is -a -b).\n");
}

volatile sig_atomic_t tb_cmd_stop;

static void on_stop_signal(int sig)
{
	(void)sig;
	tb_cmd_stop = 1;
}

void tb_cmd_stop_on_signals(void)
{
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
}

int tb_cmd_usage_error(const char *cmd, void (*usage)(FILE *out), const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "taskbox %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n\n");
	usage(stderr);
	return TB_EXIT_USAGE;
}

int tb_cmd_unknown_verb(const char *cmd, void (*usage)(FILE *out), const char *verb,
			const char *const *verbs, size_t n)
{
	char list[256] = "";
	size_t best = 99, at = 0, len = 0;

	for (size_t i = 0; i < n; i++) {
		size_t d = tb_edit_distance(verb, verbs[i]);
		if (d < best)
			best = d, at = i;
		if (len < sizeof(list))
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
						i == 0       ? ""
						: i + 1 == n ? " or "
							     : ", ",
						verbs[i]);
	}
	if (best <= 2)
		return tb_cmd_usage_error(cmd, usage, "'%s' is not %s; did you mean '%s'?", verb,
					  list, verbs[at]);
	return tb_cmd_usage_error(cmd, usage, "'%s' is not %s", verb, list);
}

int tb_cmd_verb_option(const char *word, void (*usage)(FILE *out), const tb_opt_t *opts)
{
	if (!strcmp(word, "--help") || !strcmp(word, "-h")) {
		usage(stdout);
		print_short_forms(stdout, opts);
		return TB_EXIT_OK;
	}
	if (!strcmp(word, "--version") || !strcmp(word, "-V")) {
		tb_cmd_print_version(stdout);
		return TB_EXIT_OK;
	}
	if (!strcmp(word, "--list-options")) {
		tb_opts_list(opts);
		return TB_EXIT_OK;
	}
	return -1;
}

int tb_cmd_options(tb_opts_t *o, int argc, char **argv, int first, void (*usage)(FILE *out))
{
	switch (tb_opts_parse(o, argc, argv, first)) {
	case TB_OPTS_OK:
		return -1;
	case TB_OPTS_HELP:
		usage(stdout);
		print_short_forms(stdout, o->opts);
		return TB_EXIT_OK;
	case TB_OPTS_LISTED:
		return TB_EXIT_OK;
	case TB_OPTS_VERSION:
		tb_cmd_print_version(stdout);
		return TB_EXIT_OK;
	default:
		return TB_EXIT_USAGE;
	}
}

int tb_cmd_open_fleet(const char *cmd, const tb_config_t *cfg, tb_ledger_t **ledger,
		      tb_store_t **store, tb_error_t *err)
{
	*ledger = NULL;
	if (store)
		*store = NULL;
	if (!strcmp(cfg->ledger.url, "memory:")) {
		tb_error_set(err, TB_EINVAL,
			     "ledger.url is 'memory:', which lives inside one worker: point it at "
			     "the fleet's Redis (TASKBOX_LEDGER_URL)");
		return TB_EXIT_CONFIG;
	}
	if (tb_ledger_open(ledger, cfg->ledger.url, cfg->ledger.prefix, cmd, err) < 0)
		return TB_EXIT_FAILURE;
	if (store && tb_store_open(store, &cfg->store, err) < 0) {
		tb_ledger_close(*ledger);
		*ledger = NULL;
		return TB_EXIT_FAILURE;
	}
	return TB_EXIT_OK;
}

char *tb_cmd_read_prompt(const char *cmd, const char *path)
{
	FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "rb");
	size_t cap = TB_PROMPT_MAX_BYTES + 2, n;
	char *buf = f ? malloc(cap) : NULL;

	if (!f) {
		fprintf(stderr, "taskbox %s: %s: %s\n", cmd, path, strerror(errno));
		return NULL;
	}
	if (buf) {
		n = fread(buf, 1, cap - 1, f);
		buf[n] = '\0';
	} else {
		fprintf(stderr, "taskbox %s: out of memory\n", cmd);
	}
	if (f != stdin)
		fclose(f);
	return buf; /* too long: the schema check names the limit */
}
