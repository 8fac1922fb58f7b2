/*
 * sandbox_cgroup.h: one cgroup per sandbox, with memory (and swap), pids
 * and CPU limits, on cgroup v2, v1, or a hybrid of both (each controller is
 * used where the machine has it: this machine has memory and pids only in
 * v1). Sandbox cgroups nest under the worker's own cgroup, as
 * /proc/self/cgroup says and the cgroup mount shows it (cgroup_paths.h),
 * in a directory named by the worker's prefix so a
 * restarted worker can find and remove what a dead one left.
 *
 * This file owns the cgroup directories and their files. It does not
 * create processes or decide limits (the runtime does).
 */
#ifndef TB_SANDBOX_CGROUP_H
#define TB_SANDBOX_CGROUP_H

#include "tb/error.h"

#include <stdint.h>
#include <sys/types.h>

typedef struct tb_cgroup tb_cgroup_t;

typedef struct tb_cgroup_limits {
	uint64_t memory_bytes; /* 0: unlimited; swap is capped to 0 beyond it */
	uint64_t pids;         /* 0: unlimited */
	uint64_t cpu_millis;   /* 0: unlimited; 1000 = one core */
} tb_cgroup_limits_t;

/* Counters read after a process ends, to tell why it ended, and what the
 * sandbox used (the attempt's accounting). */
typedef struct tb_cgroup_stats {
	uint64_t oom_kills;     /* processes killed by the OOM killer */
	uint64_t pids_refused;  /* forks refused at the pids limit */
	uint64_t memory_peak;   /* bytes, where the kernel reports it */
	uint64_t pids_peak;     /* most processes at once (have & TB_CGROUP_PIDS_PEAK) */
	uint64_t cpu_user_us;   /* CPU time, all processes ever in it ... */
	uint64_t cpu_system_us; /* ... (both: have & TB_CGROUP_CPU) */
	unsigned have;          /* TB_CGROUP_*: which figures the kernel gave */
} tb_cgroup_stats_t;

enum { TB_CGROUP_MEMORY_PEAK = 1, TB_CGROUP_PIDS_PEAK = 2, TB_CGROUP_CPU = 4 };

/**
 * Which controllers this machine offers and where, for logs and tests:
 * e.g. "memory:v1 pids:v1 cpu:v1". Probes once per process.
 * @return 0, or TB_EIO if no cgroup file system is mounted.
 */
int tb_cgroup_describe(char *buf, size_t len, tb_error_t *err);

/**
 * Creates <worker cgroup>/<group>/<name> in every hierarchy that has one
 * of the controllers, and applies @p lim.
 * @param group the worker's directory, e.g. "taskbox-w1234"
 * @param[out] out released with tb_cgroup_destroy()
 * @return 0, TB_EIO (with the path and errno), TB_ENOMEM
 */
int tb_cgroup_create(tb_cgroup_t **out, const char *group, const char *name,
		     const tb_cgroup_limits_t *lim, tb_error_t *err);

/** Sets new limits on an existing sandbox cgroup. */
int tb_cgroup_limit(tb_cgroup_t *cg, const tb_cgroup_limits_t *lim, tb_error_t *err);

/** Moves process @p pid into the sandbox cgroup in every hierarchy. */
int tb_cgroup_attach(tb_cgroup_t *cg, pid_t pid, tb_error_t *err);

/**
 * Freezes (@p frozen 1) or thaws the sandbox's processes: frozen, they use
 * no CPU until thawed (v2 cgroup.freeze, or the v1 freezer). Waits until
 * the kernel reports the state. @return 0; TB_EINVAL without a freezer;
 * TB_EIO, TB_ETIMEOUT
 */
int tb_cgroup_freeze(tb_cgroup_t *cg, int frozen, tb_error_t *err);

/** Reads the counters (missing ones read as 0). */
void tb_cgroup_stats(tb_cgroup_t *cg, tb_cgroup_stats_t *out);

/** Number of processes still in the cgroup (-1 if unreadable). */
int tb_cgroup_nprocs(tb_cgroup_t *cg);

/**
 * SIGKILLs whatever is still inside, waits (bounded by @p timeout_ms) for
 * the cgroup to empty, and removes its directories. Frees @p cg whatever
 * happens. @return 0, or TB_EIO naming what could not be removed.
 */
int tb_cgroup_destroy(tb_cgroup_t *cg, int timeout_ms, tb_error_t *err);

/**
 * Removes every sandbox cgroup under <worker cgroup>/<group> (exactly that
 * name), killing their processes first: what a dead worker with the same
 * group left behind. @return the number removed, or a negative TB_E* code.
 */
int tb_cgroup_sweep(const char *group, tb_error_t *err);

#endif
