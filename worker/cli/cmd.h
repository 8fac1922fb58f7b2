/*
 * cmd.h: the taskbox command's subcommands. Each lives in its own
 * cmd_<name>.c, parses its own arguments, and returns the process exit
 * code (see TB_EXIT_* below: the README and docs/commands.md name each,
 * tests/tools/check-readme-commands holds them to it).
 */
#ifndef TB_CMD_H
#define TB_CMD_H

#include "opts.h"
#include "tb/config.h"
#include "tb/ledger.h"
#include "tb/store.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

enum {
	TB_EXIT_OK = 0,
	TB_EXIT_FAILURE = 1,   /* the operation ran and failed */
	TB_EXIT_USAGE = 2,     /* bad arguments */
	TB_EXIT_CONFIG = 3,    /* configuration could not be loaded */
	TB_EXIT_INVALID = 4,   /* an input failed its schema */
	TB_EXIT_NOT_FOUND = 5, /* the thing named does not exist */
	/* waiting for a task (submit --wait, watch TASK_ID): */
	TB_EXIT_TASK_FAILED = 6, /* the task ended and did not succeed */
	TB_EXIT_DEAD = 7,        /* the task was dead-lettered */
	TB_EXIT_TIMEOUT = 8,     /* gave up waiting, or interrupted */
};

/**
 * Opens the fleet's ledger and, if @p store, the artifact store, for
 * subcommand @p cmd (named in the ledger's logs). @return TB_EXIT_OK;
 * TB_EXIT_CONFIG for the in-process `memory:` ledger, which no other
 * process can read; TB_EXIT_FAILURE when a service cannot be opened (why
 * in @p err; nothing is left open)
 */
int tb_cmd_open_fleet(const char *cmd, const tb_config_t *cfg, tb_ledger_t **ledger,
		      tb_store_t **store, tb_error_t *err);

/** Parses a command's arguments from argv[@p first] by @p o's table
 * (opts.h). @return -1 to go on; TB_EXIT_OK once @p usage printed the
 * help on stdout; TB_EXIT_USAGE once what was wrong was said. */
int tb_cmd_options(tb_opts_t *o, int argc, char **argv, int first, void (*usage)(FILE *out));

/** For commands whose first word is a verb (artifacts, schema, config):
 * --help or -h there prints @p usage and the short forms of @p opts
 * (every verb's options together; NULL-named last), --version or -V the
 * version, --list-options @p opts (for the man page's OPTIONS), as the
 * option table does after a verb. @return TB_EXIT_OK when it did; -1
 * when @p word is none of them (a verb to dispatch). */
int tb_cmd_verb_option(const char *word, void (*usage)(FILE *out), const tb_opt_t *opts);

/** Set by SIGINT or SIGTERM once tb_cmd_stop_on_signals() was called: a
 * command that waits or follows ends its loop on it. */
extern volatile sig_atomic_t tb_cmd_stop;

/** SIGINT and SIGTERM set tb_cmd_stop from now on (and end nothing else). */
void tb_cmd_stop_on_signals(void);

/** A usage error: "taskbox @p cmd: <what is wrong>" on stderr, then
 * @p usage. @return TB_EXIT_USAGE. */
int tb_cmd_usage_error(const char *cmd, void (*usage)(FILE *out), const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** A verb of @p cmd that is none of @p verbs (@p n of them): a usage
 * error naming them, with the nearest when it is near ("did you mean").
 * @return TB_EXIT_USAGE. */
int tb_cmd_unknown_verb(const char *cmd, void (*usage)(FILE *out), const char *verb,
			const char *const *verbs, size_t n);

/**
 * Loads the worker configuration the command is to use (schemas/config.md,
 * "Which file"): @p given (--config), else $TASKBOX_CONFIG, else
 * $XDG_CONFIG_HOME/taskbox/config.json (~/.config when unset), else
 * /etc/taskbox/worker.json, the first that is given or there; none: the
 * defaults. TASKBOX_* variables win over the file either way.
 * @return as tb_config_load(), the file named in the error
 */
int tb_cmd_load_config(tb_config_t *cfg, const char *given, tb_error_t *err);

/** The file the last tb_cmd_load_config() read, or NULL when it read none
 * (static storage, for messages). */
const char *tb_cmd_config_file(void);

/** What `taskbox --version` prints: this build's version, commit and
 * build type, then each library's version as the program runs with it. */
void tb_cmd_print_version(FILE *out);

/** A prompt from @p path ("-": stdin), cut one byte past the schema's
 * limit (which then names it); NULL after a message. The caller frees it. */
char *tb_cmd_read_prompt(const char *cmd, const char *path);

/** The exit code for a settled task's outcome (follow.h). */
static inline int tb_cmd_outcome_exit(const char *outcome)
{
	return !strcmp(outcome, "succeeded")       ? TB_EXIT_OK
	       : !strcmp(outcome, "dead-lettered") ? TB_EXIT_DEAD
						   : TB_EXIT_TASK_FAILED;
}

/**
 * `taskbox worker --check`, for command @p cmd ("config check", named in
 * its messages): the configuration found as tb_cmd_load_config() finds it
 * from @p path (--config, or NULL), refused as the worker refuses one
 * (kafka.brokers 'mock', not root, runtimes_dir, a sandbox under
 * work_dir), then Kafka, the ledger and the store asked, one line each on
 * stdout. @return TB_EXIT_OK all well, TB_EXIT_FAILURE a service does not
 * answer, TB_EXIT_CONFIG refused
 */
int tb_cmd_worker_check(const char *cmd, const char *path);

int tb_cmd_config(int argc, char **argv);
int tb_cmd_demo(int argc, char **argv);
int tb_cmd_end(int argc, char **argv);
int tb_cmd_send(int argc, char **argv);
int tb_cmd_dlq(int argc, char **argv);
int tb_cmd_schema(int argc, char **argv);
int tb_cmd_status(int argc, char **argv);
int tb_cmd_submit(int argc, char **argv);
int tb_cmd_top(int argc, char **argv);
int tb_cmd_view(int argc, char **argv);
int tb_cmd_watch(int argc, char **argv);
int tb_cmd_artifacts(int argc, char **argv);
int tb_cmd_worker(int argc, char **argv);

#endif
