/*
 * blackbox.h: what a worker says of its own death, for the next worker
 * with its id (docs/crash-safety.md, "What convicts a task").
 *
 * Each slot's thread says which task's attempt it works for and the phase
 * it is in. A handler of the fatal signals a bug raises (SIGSEGV, SIGBUS,
 * SIGABRT, SIGFPE, SIGILL) writes one line, with write(2) alone
 * (async-signal-safe), to a file opened when the worker starts:
 *
 *   crashed <TAB> signal <TAB> task <TAB> attempt <TAB> phase <LF>
 *
 * ("-", 0 and "-" when the thread worked for no task), then dies of the
 * signal as it would have. The next worker with this id reads the file
 * before it takes any task, keeps each line in the ledger as its
 * attempt's failure "crashed" (evidence that the task killed its worker),
 * and empties it. A SIGKILL, a power cut or a lost host leave nothing
 * here: no evidence against any task.
 */
#ifndef TB_BLACKBOX_H
#define TB_BLACKBOX_H

#include "tb/error.h"

#include <stdint.h>

/**
 * Opens (making it) the file at @p path for this worker's death, and
 * installs the fatal-signal handlers. Call once, before any slot runs.
 * @return 0; TB_EIO naming the file
 */
int tb_blackbox_open(const char *path, tb_error_t *err);

/** Closes the file (removed when nothing is in it) and puts the
 * handlers that were there back. */
void tb_blackbox_close(void);

/** This thread works for @p task's attempt @p attempt from now on (NULL:
 * for no task). Cheap: a copy into thread-local storage. */
void tb_blackbox_enter(const char *task, uint64_t attempt);

/** The phase this thread's task is in (a phase name; copied). */
void tb_blackbox_phase(const char *phase);

/** One death a predecessor recorded. */
typedef struct tb_blackbox_death {
	int signal;
	char task[256]; /* "" when its thread worked for no task */
	uint64_t attempt;
	char phase[32];
} tb_blackbox_death_t;

/**
 * Reads the deaths recorded at @p path (by a predecessor: call before
 * tb_blackbox_open()), @p fn called for each, in order, and returns how
 * many there were. The file is left as it is: remove it once every
 * death is kept (tb_blackbox_forget()). A missing file is none.
 * @return the count; TB_EIO when the file cannot be read
 */
int tb_blackbox_read(const char *path, void (*fn)(void *ud, const tb_blackbox_death_t *d), void *ud,
		     tb_error_t *err);

/** Removes @p path's records (they are kept elsewhere now). */
void tb_blackbox_forget(const char *path);

#endif
