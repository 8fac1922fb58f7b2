/*
 * opts.h: the one option parser of the taskbox commands, driven by a
 * table per command. What every command accepts the same way:
 *
 *   --name value and --name=value     an option with a value
 *   --name                            a flag
 *   -x value and -xvalue              an option's short form, where its
 *                                     table entry has a letter
 *   -abc                              short flags combined (getopt's rule:
 *                                     a letter that takes a value takes the
 *                                     rest of the word, or the next word)
 *   -h, --help                        the command's usage (on stdout)
 *   -V, --version                     taskbox's version (on stdout)
 *   --                                the end of options: what follows is
 *                                     positional, even if it starts with -
 *   -                                 positional (a command's "stdin")
 *   --list-options                    the table itself, one option a line
 *                                     ("--config\t-c\tvalue"; flag, value
 *                                     or number): what the shell
 *                                     completions are written from
 *
 * An unknown option, a flag given a value, an option missing its value,
 * a number out of its range and one positional too many are each said on
 * stderr, naming the command and what was wrong. Positionals may come
 * before, between or after the options.
 */
#ifndef TB_OPTS_H
#define TB_OPTS_H

#include <stddef.h>
#include <stdint.h>

typedef enum tb_opt_kind {
	TB_OPT_FLAG,   /* int *: 1 when given */
	TB_OPT_STRING, /* const char **: the value (the last one given wins) */
	TB_OPT_UINT,   /* uint64_t *: a decimal integer in [min, max] */
	TB_OPT_LIST,   /* tb_opt_list_t *: every value, in order */
} tb_opt_kind_t;

typedef struct tb_opt_list {
	char **items; /* the caller's array of cap entries: argv's own strings */
	size_t n, cap;
} tb_opt_list_t;

typedef struct tb_opt {
	const char *name; /* "--config"; NULL ends a table */
	tb_opt_kind_t kind;
	void *dest;
	uint64_t min, max; /* TB_OPT_UINT */
	const char *unit;  /* TB_OPT_UINT: named in its error ("seconds") */
	char letter;       /* the short form's letter ('c' for -c), or 0 */
} tb_opt_t;

typedef struct tb_opts {
	const char *cmd;      /* "submit", "artifacts get": named in errors */
	const tb_opt_t *opts; /* ended by an entry whose name is NULL */
	const char **pos;     /* positionals, into the caller's array */
	int max_pos;          /* of this many at most */
	int npos;             /* out: how many came */
} tb_opts_t;

enum {
	TB_OPTS_OK = 0,      /* parsed: go on */
	TB_OPTS_HELP = 1,    /* --help: print the usage on stdout, exit 0 */
	TB_OPTS_BAD = 2,     /* said on stderr: exit TB_EXIT_USAGE */
	TB_OPTS_VERSION = 3, /* --version: print the version on stdout, exit 0 */
	TB_OPTS_LISTED = 4,  /* --list-options: printed on stdout, exit 0 */
};

/** Prints @p opts as --list-options does, the built-ins (--help,
 * --version) first: one option a line, "--config\t-c\tvalue". */
void tb_opts_list(const tb_opt_t *opts);

/** Parses argv[first..argc) by @p o's table. @return TB_OPTS_* */
int tb_opts_parse(tb_opts_t *o, int argc, char **argv, int first);

#endif
