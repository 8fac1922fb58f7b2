/*
 * test_opts.c: the commands' option parser (worker/cli/opts.h).
 */
#include "opts.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

typedef struct args {
	const char *config, *pos[2];
	int json;
	uint64_t seconds;
	char *items[2];
	tb_opt_list_t list;
	tb_opt_t opts[5];
	tb_opts_t o;
} args_t;

static void init(args_t *a)
{
	memset(a, 0, sizeof(*a));
	a->list = (tb_opt_list_t){ a->items, 0, 2 };
	a->opts[0] = (tb_opt_t){ "--config", TB_OPT_STRING, &a->config, 0, 0, NULL, 'c' };
	a->opts[1] = (tb_opt_t){ "--json", TB_OPT_FLAG, &a->json, 0, 0, NULL, 'j' };
	a->opts[2] = (tb_opt_t){ "--timeout", TB_OPT_UINT, &a->seconds, 1, 60, "seconds", 0 };
	a->opts[3] = (tb_opt_t){ "--label", TB_OPT_LIST, &a->list, 0, 0, NULL, 'l' };
	a->o = (tb_opts_t){ "test", a->opts, a->pos, 2, 0 };
}

/* Parses the NULL-ended words (argv[0] is the command). */
static int parse(args_t *a, ...)
{
	static char words[16][64];
	char *argv[16];
	int argc = 0;
	va_list ap;

	va_start(ap, a);
	for (const char *w; argc < 16 && (w = va_arg(ap, const char *));)
		snprintf(words[argc], sizeof(words[argc]), "%s", w), argv[argc] = words[argc],
								     argc++;
	va_end(ap);
	return tb_opts_parse(&a->o, argc, argv, 1);
}

static void test_opts__values_flags_and_positionals_in_any_order(void **state)
{
	args_t a;
	(void)state;
	init(&a);
	assert_int_equal(parse(&a, "t", "one", "--config", "c.json", "--json", "--timeout=30",
			       "two", "-l", "x", "-l", "y", NULL),
			 TB_OPTS_OK);
	assert_string_equal(a.config, "c.json");
	assert_int_equal(a.json, 1);
	assert_int_equal(a.seconds, 30);
	assert_int_equal(a.list.n, 2);
	assert_string_equal(a.items[1], "y");
	assert_int_equal(a.o.npos, 2);
	assert_string_equal(a.pos[0], "one");
	assert_string_equal(a.pos[1], "two");
}

static void test_opts__equals_form_keeps_the_rest_of_the_word(void **state)
{
	args_t a;
	(void)state;
	init(&a);
	assert_int_equal(parse(&a, "t", "--config=a=b", NULL), TB_OPTS_OK);
	assert_string_equal(a.config, "a=b");
	init(&a);
	assert_int_equal(parse(&a, "t", "--config=", NULL), TB_OPTS_OK);
	assert_string_equal(a.config, "");
	init(&a); /* a value may start with a dash */
	assert_int_equal(parse(&a, "t", "--config", "-x", NULL), TB_OPTS_OK);
	assert_string_equal(a.config, "-x");
}

static void test_opts__double_dash_and_lone_dash_are_positional(void **state)
{
	args_t a;
	(void)state;
	init(&a);
	assert_int_equal(parse(&a, "t", "-", "--", "--json", NULL), TB_OPTS_OK);
	assert_int_equal(a.json, 0);
	assert_int_equal(a.o.npos, 2);
	assert_string_equal(a.pos[0], "-");
	assert_string_equal(a.pos[1], "--json");
}

static void test_opts__help(void **state)
{
	args_t a;
	(void)state;
	init(&a);
	assert_int_equal(parse(&a, "t", "one", "--help", NULL), TB_OPTS_HELP);
	init(&a);
	assert_int_equal(parse(&a, "t", "-h", NULL), TB_OPTS_HELP);
	init(&a);
	assert_int_equal(parse(&a, "t", "one", "--version", NULL), TB_OPTS_VERSION);
	init(&a); /* after --, a positional */
	assert_int_equal(parse(&a, "t", "--", "-h", NULL), TB_OPTS_OK);
}

static void test_opts__short_forms_combine_as_getopts_do(void **state)
{
	args_t a;
	(void)state;
	init(&a); /* flags, then a letter taking the next word */
	assert_int_equal(parse(&a, "t", "-jc", "f.json", "one", NULL), TB_OPTS_OK);
	assert_int_equal(a.json, 1);
	assert_string_equal(a.config, "f.json");
	assert_int_equal(a.o.npos, 1);
	init(&a); /* ... or the rest of its own word */
	assert_int_equal(parse(&a, "t", "-jcf.json", NULL), TB_OPTS_OK);
	assert_int_equal(a.json, 1);
	assert_string_equal(a.config, "f.json");
	init(&a); /* the rest of the word is the value, letters or not */
	assert_int_equal(parse(&a, "t", "-cj", NULL), TB_OPTS_OK);
	assert_int_equal(a.json, 0);
	assert_string_equal(a.config, "j");
	init(&a);
	assert_int_equal(parse(&a, "t", "-lx", "-l", "y", NULL), TB_OPTS_OK);
	assert_int_equal(a.list.n, 2);
	assert_string_equal(a.items[0], "x");
	assert_string_equal(a.items[1], "y");
	init(&a);
	assert_int_equal(parse(&a, "t", "-jh", NULL), TB_OPTS_HELP);
	init(&a);
	assert_int_equal(parse(&a, "t", "-V", NULL), TB_OPTS_VERSION);
	init(&a); /* the long name still works beside the letter */
	assert_int_equal(parse(&a, "t", "--config", "x", "-j", NULL), TB_OPTS_OK);
	assert_string_equal(a.config, "x");
	assert_int_equal(a.json, 1);
}

static void test_opts__list_options_prints_the_table(void **state)
{
	args_t a;
	char line[4096] = "";
	(void)state;
	init(&a);
	FILE *saved = stdout, *tmp = tmpfile();
	assert_non_null(tmp);
	stdout = tmp;
	int rc = parse(&a, "t", "--list-options", NULL);
	fflush(tmp);
	stdout = saved;
	rewind(tmp);
	size_t n = fread(line, 1, sizeof(line) - 1, tmp);
	line[n] = 0;
	fclose(tmp);
	assert_int_equal(rc, TB_OPTS_LISTED);
	assert_non_null(strstr(line, "--help\t-h\tflag\n"));
	assert_non_null(strstr(line, "--config\t-c\tvalue\n"));
	assert_non_null(strstr(line, "--json\t-j\tflag\n"));
	assert_non_null(strstr(line, "--timeout\t\tnumber\n"));
	assert_non_null(strstr(line, "--label\t-l\tvalue\n"));
}

static void test_opts__each_mistake_is_refused(void **state)
{
	static const char *const bad[][4] = {
		{ "--frob", NULL },          /* unknown */
		{ "--conf", "x", NULL },     /* not a prefix match */
		{ "--json=1", NULL },        /* a flag with a value */
		{ "--config", NULL },        /* no value */
		{ "--timeout", "0", NULL },  /* under min */
		{ "--timeout", "61", NULL }, /* over max */
		{ "--timeout", "-5", NULL }, /* negative */
		{ "--timeout", "5s", NULL }, /* not a number */
		{ "--timeout=", NULL },      /* empty */
		{ "-z", NULL },              /* an unknown letter */
		{ "-jz", NULL },             /* ... after a known one */
		{ "-jc", NULL },             /* a letter's value missing */
		{ "-t", "5", NULL },         /* --timeout has no letter */
		{ "a", "b", "c", NULL },     /* a positional too many */
		{
		    "-l",
		    "1",
		    "-l",
		    "2",
		}, /* (with the next) a list over its cap */
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		args_t a;
		init(&a);
		int rc = i + 1 < sizeof(bad) / sizeof(bad[0])
			     ? parse(&a, "t", bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL)
			     : parse(&a, "t", "-l", "1", "-l", "2", "-l", "3", NULL);
		if (rc != TB_OPTS_BAD)
			fail_msg("case %zu (%s) was taken", i, bad[i][0]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opts__values_flags_and_positionals_in_any_order),
		cmocka_unit_test(test_opts__equals_form_keeps_the_rest_of_the_word),
		cmocka_unit_test(test_opts__double_dash_and_lone_dash_are_positional),
		cmocka_unit_test(test_opts__help),
		cmocka_unit_test(test_opts__short_forms_combine_as_getopts_do),
		cmocka_unit_test(test_opts__list_options_prints_the_table),
		cmocka_unit_test(test_opts__each_mistake_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
