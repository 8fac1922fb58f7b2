/*
 * sandbox.h: one namespaced sandbox per task (tb_sandbox).
 *
 * A sandbox is an init process in new user, pid, mount, net, uts, ipc and
 * cgroup namespaces, inside a cgroup with the task's limits, with a fresh
 * root file system: read-only binds of the runtime's host paths, fresh
 * /proc, a minimal /dev, size-capped tmpfs /workspace, /outputs and /tmp,
 * the recipe read-only at /recipe and inputs read-only at /inputs. The
 * network namespace has loopback only. Processes run in it one after the
 * other or together (the agent, then the judges), as an unprivileged user
 * with no capabilities, under the seccomp policy, with rlimits. Each
 * judge gets a view of its own (tb_sandbox_judge_view). The sandbox stays
 * up until tb_sandbox_destroy(), which leaves no process, mount, cgroup or
 * directory behind.
 *
 * Sandbox root (uid 0 inside) maps to host uid/gid uid_base; the agent
 * runs as uid/gid TB_SANDBOX_AGENT_ID inside, host uid_base + that. Each
 * sandbox holds a 65536-id range of its own among every live sandbox of
 * the host, whichever process made it (sandbox_ids.h), so no two share a
 * host uid and none is host root.
 *
 * This file is the contract; sandbox.c is the worker's side, sandbox_init.c
 * the init process, sandbox_cgroup.c and sandbox_seccomp.c the limits.
 * The worker must run as root (it writes the uid maps and cgroups). A
 * sandbox handle is used by one thread at a time, and must be created by
 * a thread that outlives it: the kernel's parent-death signal, which ends
 * the sandbox with the worker, fires when the creating thread exits.
 */
#ifndef TB_SANDBOX_H
#define TB_SANDBOX_H

#include "sandbox_cgroup.h"
#include "sandbox_ids.h"
#include "sandbox_seccomp.h"
#include "tb/codec.h"
#include "tb/error.h"

#include <stdint.h>
#include <sys/types.h>

typedef struct tb_sandbox tb_sandbox_t;

typedef struct tb_sandbox_spec {
	const char *name;             /* unique among live sandboxes: [A-Za-z0-9._-] */
	const char *hostname;         /* inside the uts namespace */
	unsigned slot;                /* the worker's slot it serves (sandbox_pool.h) */
	const char *work_root;        /* host directory init builds the root over */
	const char *group;            /* the worker's prefix: cgroup and dir names */
	const tb_strlist_t *ro_binds; /* host paths bound read-only (no image) */
	const char *image_tree;       /* the root: an image's tree on the host (image.h),
				       * read-only, its files' owners kept; NULL: ro_binds */
	/* The root from a file system of the caller's instead of
	 * image_tree (an image read on demand, worker/lazy): called once
	 * the sandbox holds its range of host ids, with the range's base,
	 * it returns a detached mount (>= 0, read-only, nosuid, nodev), which
	 * the sandbox takes, whose owners are shown in that range already
	 * (it is not idmapped); or < 0 with @p err set. NULL: image_tree.
	 * Used as image_tree is (writable_mb, the judges' pristine view);
	 * a sandbox pool builds such a sandbox on the spot. */
	int (*image_root)(void *arg, uint32_t id_base, tb_error_t *err);
	void *image_root_arg;
	const char *recipe_dir;         /* bound read-only at /recipe; may be NULL */
	const char *inputs_dir;         /* bound read-only at /inputs; may be NULL */
	int lazy_mount;                 /* > 0: a detached mount whose file "i" is bound
				       * over /inputs/lazy_paths[i] (a file there:
				       * inputs read on demand, worker/lazy); 0: none */
	const tb_strlist_t *lazy_paths; /* with lazy_mount: paths under inputs_dir */
	uint64_t workspace_mb;          /* /workspace and /tmp tmpfs size */
	uint64_t outputs_mb;            /* /outputs tmpfs size */
	uint64_t writable_mb; /* image_tree or image_root: the agent's writable layer over it;
				       * the judges see the image without it */
	int image_hold;       /* image_tree: a descriptor (> 0) the sandbox keeps
				       * a duplicate of until destroyed (the image's
				       * cache lock: not evicted under it); 0: none */
	uint64_t memory_mb;   /* cgroup limits; 0 = none */
	uint64_t pids;
	uint64_t cpu_millis;
	uint64_t max_open_files; /* RLIMIT_NOFILE of every process */
	uint64_t max_file_mb;    /* RLIMIT_FSIZE */
	uint64_t wall_ms;        /* deadline from creation; 0 = none */
} tb_sandbox_spec_t;

/* Why a process ended. */
typedef enum tb_sandbox_end {
	TB_SANDBOX_EXITED = 0, /* exited with code */
	TB_SANDBOX_SIGNALED,   /* killed by signal */
	TB_SANDBOX_OOM,        /* the OOM killer, at the memory limit */
	TB_SANDBOX_PIDS_LIMIT, /* a fork was refused at the pids limit */
	TB_SANDBOX_DEADLINE,   /* the wall-clock deadline passed */
} tb_sandbox_end_t;

typedef struct tb_sandbox_exit {
	tb_sandbox_end_t end;
	int code;   /* exit code, for TB_SANDBOX_EXITED */
	int signal; /* terminating signal, when there was one */
} tb_sandbox_exit_t;

typedef struct tb_sandbox_exec {
	const char *const *argv; /* argv[0] is looked up as a path, not in PATH */
	const char *const *envp; /* the whole environment */
	const char *cwd;         /* inside the sandbox; NULL = /workspace */
	int stdin_fd;            /* -1: /dev/null */
	int stdout_fd;           /* -1: /dev/null */
	int stderr_fd;           /* -1: /dev/null */
	int extra_fd;            /* becomes fd 3 in the process; -1: none */
	unsigned uid;            /* uid and gid inside; 0 = TB_SANDBOX_AGENT_ID.
				  * Each judge runs as a uid of its own
				  * (TB_SANDBOX_JUDGE_ID + its index): nothing of
				  * the agent's or another judge's can signal it,
				  * trace it or open its descriptors */
} tb_sandbox_exec_t;

/** A human-readable reason ("killed by the OOM killer at the memory
 * limit"), static storage. */
const char *tb_sandbox_end_describe(const tb_sandbox_exit_t *e, char *buf, size_t len);

/**
 * Builds a sandbox for one task: tb_sandbox_prepare() then
 * tb_sandbox_assign() with the same spec. @p policy is the worker's
 * compiled seccomp policy and must outlive the sandbox.
 * @param[out] out released with tb_sandbox_destroy()
 * @return 0; TB_EIO with the step that failed (a namespace, a mount, a
 *         cgroup); TB_EINVAL for a bad spec
 */
int tb_sandbox_create(tb_sandbox_t **out, const tb_seccomp_t *policy, const tb_sandbox_spec_t *spec,
		      tb_error_t *err);

/**
 * Finds taskbox-sandbox-init, the program every sandbox runs as its init
 * (pid 1): $TASKBOX_SANDBOX_INIT if set, else next to the running
 * program, else ../libexec/taskbox/ from it (an installed tree, whatever
 * its prefix), else (builds with tests) the build tree's, else the
 * configured prefix's libexec/taskbox/. Only a regular executable owned by root or the
 * worker's user, writable by no one else, in directories others cannot
 * write, is taken; it is opened once and every sandbox executes that
 * open file. The worker calls this at start to fail early.
 * @return 0; TB_ENOTFOUND naming the places tried and why each was not
 */
int tb_sandbox_find_init(const char **path, tb_error_t *err);

/**
 * Builds everything that does not depend on the task (namespaces, cgroup,
 * root file system, /proc, /dev, tmpfs), so a worker can prepare the next
 * sandbox of a slot while the slot is still busy and launch the task the
 * moment it arrives. Uses spec's name, group, work_root, slot, ro_binds,
 * sizes, rlimits and limits. A prepared sandbox is still built for one
 * task only: nothing can run in it before tb_sandbox_assign(), and it is
 * destroyed after that task.
 */
int tb_sandbox_prepare(tb_sandbox_t **out, const tb_seccomp_t *policy,
		       const tb_sandbox_spec_t *spec, tb_error_t *err);

/**
 * Gives a prepared sandbox its task: hostname, the recipe and inputs
 * (bound read-only), the cgroup limits, and the deadline, which starts
 * now. Afterwards the host's file system is no longer reachable from the
 * sandbox. @return 0; TB_EIO (the sandbox is then unusable: destroy it);
 * TB_EINVAL if already assigned or a path is not usable
 */
int tb_sandbox_assign(tb_sandbox_t *sb, const tb_sandbox_spec_t *spec, tb_error_t *err);

/**
 * Starts a process in the sandbox. The fds are passed to the sandbox and
 * may be closed by the caller afterwards.
 * @param[out] out a handle for tb_sandbox_wait (>= 1)
 * @return 0; TB_ENOTFOUND if argv[0] cannot be executed (with errno's
 *         text); TB_EIO if the sandbox is gone; TB_ETIMEOUT if the
 *         deadline has passed (everything running is then killed, as by
 *         tb_sandbox_wait, and the deadline is spent: later spawns run)
 */
int tb_sandbox_spawn(tb_sandbox_t *sb, int *out, const tb_sandbox_exec_t *ex, tb_error_t *err);

/** No deadline from now on: for what runs after the agent (judges, with
 * timeouts of their own). */
void tb_sandbox_disarm_deadline(tb_sandbox_t *sb);

/** The deadline @p ms from now, if that is sooner than the one set (a
 * budget spent: the agent's grace to finish its turn, then everything
 * running is killed as at the wall-clock deadline). @return 1 when it
 * moved the deadline, 0 when the one set comes first. */
int tb_sandbox_deadline_within(tb_sandbox_t *sb, uint64_t ms);

/**
 * Waits up to @p timeout_ms (-1: no limit but the deadline) for process
 * @p id to end. When the sandbox's deadline passes, every process in it
 * but init is killed, the result says TB_SANDBOX_DEADLINE, and the sandbox
 * stays up (its files can be read, more processes started).
 * @return 0 with @p out filled; TB_ETIMEOUT if @p timeout_ms passed first;
 *         TB_EIO if the sandbox died
 */
int tb_sandbox_wait(tb_sandbox_t *sb, int id, int timeout_ms, tb_sandbox_exit_t *out,
		    tb_error_t *err);

/** Sends @p sig to process @p id (its whole process group). */
int tb_sandbox_kill(tb_sandbox_t *sb, int id, int sig, tb_error_t *err);

/**
 * Freezes every process of the sandbox (@p frozen 1: they use no CPU and
 * the agent's wall clock goes on) or thaws them. Kills and teardown thaw
 * first. @return 0; TB_EINVAL where the machine has no cgroup freezer
 */
int tb_sandbox_freeze(tb_sandbox_t *sb, int frozen, tb_error_t *err);

/**
 * SIGKILLs every process in the sandbox but its init, whatever session or
 * group they moved to, and returns once none is left (their ends are
 * reported to tb_sandbox_wait as usual): between the agent and the judges,
 * and after each judge. @return 0 (also when the sandbox had already
 * ended: nothing is left); TB_EIO if init could not be asked or did not
 * confirm within 5 s: init is then killed, which ends every process of
 * the namespace with it, and the sandbox is of no further use (destroy it)
 */
int tb_sandbox_kill_all(tb_sandbox_t *sb, tb_error_t *err);

/**
 * Readies the sandbox for one judge that will run as @p uid (see
 * tb_sandbox_exec_t.uid): every process ends first, as by
 * tb_sandbox_kill_all(); then /workspace and /outputs are read-only for
 * good, and /tmp, /dev/shm and /home are fresh empty tmpfs, /home owned
 * by @p uid with mode 0700. Call it before each judge: nothing the agent
 * or an earlier judge left in a writable place reaches the next.
 * @return 0; TB_EINVAL for a uid that is not a judge's or a sandbox not
 *         assigned; TB_EIO naming the mount that failed, or if init is gone
 */
int tb_sandbox_judge_view(tb_sandbox_t *sb, unsigned uid, tb_error_t *err);

/**
 * What the sandbox's processes have used so far, from its cgroup: CPU time
 * of every process ever in it, its peak memory and process count (the
 * figures the kernel gives, @p out's have says which). For the attempt's
 * accounting: read before and after a stretch, the difference is its.
 */
void tb_sandbox_usage(tb_sandbox_t *sb, tb_cgroup_stats_t *out);

/** The init process's pid on the host, for tests and logs. */
pid_t tb_sandbox_init_pid(const tb_sandbox_t *sb);

/**
 * Kills everything in the sandbox and removes its cgroup (its file systems
 * go with its mount namespace).
 * Frees @p sb whatever happens. @return 0, or TB_EIO naming what is left.
 */
int tb_sandbox_destroy(tb_sandbox_t *sb, tb_error_t *err);

/**
 * Removes what dead workers with the same @p group prefix left behind:
 * cgroups (killing their processes), and the `<group>-*` directories
 * under @p work_root (an interrupted task's inputs; earlier builds also
 * made one per sandbox).
 * @return the number of sandboxes removed, or a negative TB_E* code.
 */
int tb_sandbox_sweep(const char *work_root, const char *group, tb_error_t *err);

#endif
