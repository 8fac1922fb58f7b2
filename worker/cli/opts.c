/*
 * opts.c: the commands' option parser (opts.h).
 */
#include "opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table's entry named @p arg up to @p len bytes, or NULL. */
static const tb_opt_t *find(const tb_opt_t *opts, const char *arg, size_t len)
{
	for (const tb_opt_t *o = opts; o->name; o++)
		if (strlen(o->name) == len && !strncmp(o->name, arg, len))
			return o;
	return NULL;
}

/* Stores @p v into @p o's destination. @return TB_OPTS_OK or TB_OPTS_BAD. */
static int store(const tb_opts_t *p, const tb_opt_t *o, char *v)
{
	char *end;

	switch (o->kind) {
	case TB_OPT_STRING:
		*(const char **)o->dest = v;
		return TB_OPTS_OK;
	case TB_OPT_LIST: {
		tb_opt_list_t *l = o->dest;
		if (l->n >= l->cap) {
			fprintf(stderr, "taskbox %s: %s at most %zu times\n", p->cmd, o->name,
				l->cap);
			return TB_OPTS_BAD;
		}
		l->items[l->n++] = v;
		return TB_OPTS_OK;
	}
	case TB_OPT_UINT: {
		errno = 0;
		unsigned long long n = strtoull(v, &end, 10);
		if (errno || end == v || *end || v[0] == '-' || n < o->min || n > o->max) {
			fprintf(stderr, "taskbox %s: %s wants %llu..%llu%s%s, not '%s'\n", p->cmd,
				o->name, (unsigned long long)o->min, (unsigned long long)o->max,
				o->unit ? " " : "", o->unit ? o->unit : "", v);
			return TB_OPTS_BAD;
		}
		*(uint64_t *)o->dest = n;
		return TB_OPTS_OK;
	}
	case TB_OPT_FLAG:
		break;
	}
	*(int *)o->dest = 1;
	return TB_OPTS_OK;
}

/* The table's entry whose short form is @p c, or NULL. */
static const tb_opt_t *find_letter(const tb_opt_t *opts, char c)
{
	for (const tb_opt_t *o = opts; o->name; o++)
		if (o->letter && o->letter == c)
			return o;
	return NULL;
}

void tb_opts_list(const tb_opt_t *opts)
{
	printf("--help\t-h\tflag\n--version\t-V\tflag\n");
	for (const tb_opt_t *o = opts; o->name; o++) {
		char letter[3] = { o->letter ? '-' : 0, o->letter, 0 };
		printf("%s\t%s\t%s\n", o->name, letter,
		       o->kind == TB_OPT_FLAG   ? "flag"
		       : o->kind == TB_OPT_UINT ? "number"
						: "value");
	}
}

/* The value of @p o: @p given (after "--name=", even empty), else the
 * next word. @return TB_OPTS_* */
static int take_value(const tb_opts_t *p, const tb_opt_t *o, char *given, int argc, char **argv,
		      int *i)
{
	char *v = given ? given : *i + 1 < argc ? argv[++*i] : NULL;
	if (!v) {
		fprintf(stderr, "taskbox %s: %s wants a value\n", p->cmd, o->name);
		return TB_OPTS_BAD;
	}
	return store(p, o, v);
}

/* "--name", "--name=value" or "--name value" at argv[*i]. */
static int parse_long(tb_opts_t *p, int argc, char **argv, int *i)
{
	char *a = argv[*i];
	if (!strcmp(a, "--help"))
		return TB_OPTS_HELP;
	if (!strcmp(a, "--version"))
		return TB_OPTS_VERSION;
	if (!strcmp(a, "--list-options")) {
		tb_opts_list(p->opts);
		return TB_OPTS_LISTED;
	}
	char *eq = strchr(a, '=');
	size_t len = eq ? (size_t)(eq - a) : strlen(a);
	const tb_opt_t *o = find(p->opts, a, len);
	if (!o) {
		fprintf(stderr,
			"taskbox %s: unknown option '%.*s' (taskbox %s --help lists them)\n",
			p->cmd, (int)len, a, p->cmd);
		return TB_OPTS_BAD;
	}
	if (o->kind != TB_OPT_FLAG)
		return take_value(p, o, eq ? eq + 1 : NULL, argc, argv, i);
	if (eq) {
		fprintf(stderr, "taskbox %s: %s takes no value\n", p->cmd, o->name);
		return TB_OPTS_BAD;
	}
	return store(p, o, NULL);
}

/* "-x", "-xvalue", "-x value" or "-abc" at argv[*i]. */
static int parse_short(tb_opts_t *p, int argc, char **argv, int *i)
{
	for (char *c = argv[*i] + 1; *c; c++) {
		if (*c == 'h')
			return TB_OPTS_HELP;
		if (*c == 'V')
			return TB_OPTS_VERSION;
		const tb_opt_t *o = find_letter(p->opts, *c);
		if (!o) {
			fprintf(stderr,
				"taskbox %s: unknown option '-%c' (taskbox %s --help lists them)\n",
				p->cmd, *c, p->cmd);
			return TB_OPTS_BAD;
		}
		if (o->kind != TB_OPT_FLAG)
			return take_value(p, o, c[1] ? c + 1 : NULL, argc, argv, i);
		store(p, o, NULL);
	}
	return TB_OPTS_OK;
}

int tb_opts_parse(tb_opts_t *p, int argc, char **argv, int first)
{
	int options = 1; /* until "--" */

	p->npos = 0;
	for (int i = first; i < argc; i++) {
		const char *a = argv[i];
		if (!options || a[0] != '-' || !strcmp(a, "-")) {
			if (p->npos >= p->max_pos) {
				fprintf(stderr, "taskbox %s: unexpected argument '%s'\n", p->cmd,
					a);
				return TB_OPTS_BAD;
			}
			p->pos[p->npos++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			options = 0;
			continue;
		}
		int rc =
		    a[1] == '-' ? parse_long(p, argc, argv, &i) : parse_short(p, argc, argv, &i);
		if (rc != TB_OPTS_OK)
			return rc;
	}
	return TB_OPTS_OK;
}
