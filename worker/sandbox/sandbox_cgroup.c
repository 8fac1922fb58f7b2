/*
 * sandbox_cgroup.c: cgroup v1/v2 discovery, limits and removal.
 *
 * Discovery reads /proc/self/cgroup (where this process sits in each
 * hierarchy) and /proc/self/mountinfo (where each hierarchy is mounted,
 * and which of its cgroups the mount shows as its root: cgroup_paths.h). A controller is
 * taken from v2 when the unified hierarchy offers it in cgroup.controllers,
 * else from the v1 hierarchy that carries it. A sandbox then has one
 * directory per hierarchy used (one in pure v2, up to three in v1).
 *
 * v2's "no internal processes" rule: controllers can only be enabled for
 * children of a cgroup that has no processes of its own. If the worker's
 * cgroup holds the worker, the worker moves itself into a "worker" leaf
 * first (as systemd's Delegate= expects of a delegated subtree).
 */
#include "sandbox_cgroup.h"

#include "cgroup_paths.h"

#include "tb/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The freezer is not a controller on v2 (every non-root cgroup has
 * cgroup.freeze), nor is cpuacct (every one has cpu.stat): there they
 * ride with the v2 hierarchy the others use. On v1 cpuacct is the
 * accounting's CPU time (cpuacct.stat), often a hierarchy of its own. */
enum { CTL_MEMORY, CTL_PIDS, CTL_CPU, CTL_FREEZER, CTL_CPUACCT, CTL_COUNT };
static const char *const ctl_names[CTL_COUNT] = { "memory", "pids", "cpu", "freezer", "cpuacct" };

/* Controllers that only follow (no limit of theirs is written). */
#define CTL_RIDERS ((1u << CTL_FREEZER) | (1u << CTL_CPUACCT))

#define MAX_HIER CTL_COUNT

typedef struct hier {
	char base[1100]; /* mount point + this process's path in it */
	int v2;
	unsigned ctls; /* bit per CTL_* served by this hierarchy */
} hier_t;

static struct {
	pthread_once_t once;
	int rc;
	char why[256];
	hier_t h[MAX_HIER];
	int n;
} probe = { .once = PTHREAD_ONCE_INIT };

struct tb_cgroup {
	tb_cgroup_limits_t lim; /* as last written */
	int n;
	struct {
		char path[1600];
		int v2;
		unsigned ctls;
	} dir[MAX_HIER];
	char group_path[MAX_HIER][1400]; /* the worker's group directories */
};

/* ---------------------------------------------------------------- probe */

/* The whole of @p path (a /proc file: read to its end, not by its size),
 * at most 1 MiB. @return it, free()d by the caller; NULL on failure. */
static char *slurp(const char *path)
{
	size_t cap = 1 << 20, n = 0;
	char *buf = malloc(cap + 1);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t got = 0;

	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while (n < cap && (got = read(fd, buf + n, cap - n)) > 0)
		n += (size_t)got;
	close(fd);
	buf[n] = '\0';
	return buf;
}

static int has_word(const char *file, const char *word)
{
	char buf[1024], *save = NULL;
	FILE *f = fopen(file, "re");
	size_t n;

	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (char *t = strtok_r(buf, " \n", &save); t; t = strtok_r(NULL, " \n", &save))
		if (strcmp(t, word) == 0)
			return 1;
	return 0;
}

static hier_t *hier_for(const char *base, int v2)
{
	for (int i = 0; i < probe.n; i++)
		if (strcmp(probe.h[i].base, base) == 0)
			return &probe.h[i];
	if (probe.n == MAX_HIER)
		return NULL;
	hier_t *h = &probe.h[probe.n++];
	snprintf(h->base, sizeof(h->base), "%s", base);
	h->v2 = v2;
	return h;
}

/* The hierarchy serving controller @p c: the v2 one when our own cgroup
 * there is delegated it (its cgroup.controllers names it), else the v1
 * one carrying it. A v1 mount that does not show our cgroup is said in
 * @p why. */
static hier_t *serving(int c, const char *self, const char *mi, char *why, size_t whylen)
{
	char base[1100], file[1200];
	tb_error_t err;
	hier_t *h = NULL;

	if (tb_cgroup_paths_find(base, sizeof(base), self, mi, NULL, &err) == 0) {
		snprintf(file, sizeof(file), "%s/cgroup.controllers", base);
		if ((1u << c) & CTL_RIDERS) {
			for (int i = 0; i < probe.n && !h; i++)
				if (probe.h[i].v2)
					h = &probe.h[i];
		} else if (has_word(file, ctl_names[c])) {
			h = hier_for(base, 1);
		}
	} else if (err.code == TB_EIO) {
		snprintf(why, whylen, "%.255s", err.msg);
	}
	if (h)
		return h;
	if (tb_cgroup_paths_find(base, sizeof(base), self, mi, ctl_names[c], &err) == 0)
		return hier_for(base, 0);
	if (err.code == TB_EIO)
		snprintf(why, whylen, "%.255s", err.msg);
	return NULL;
}

static void do_probe(void)
{
	char *self = slurp("/proc/self/cgroup"), *mi = slurp("/proc/self/mountinfo");
	char why[sizeof(probe.why)] = "";

	if (!self || !mi) {
		probe.rc = TB_EIO;
		snprintf(probe.why, sizeof(probe.why),
			 "cannot read /proc/self/cgroup or /proc/self/mountinfo");
		goto cleanup;
	}
	for (int c = 0; c < CTL_COUNT; c++) {
		hier_t *h = serving(c, self, mi, why, sizeof(why));
		if (h)
			h->ctls |= 1u << c;
	}
	int limits = 0;
	for (int i = 0; i < probe.n; i++)
		limits |= (probe.h[i].ctls & ~CTL_RIDERS) != 0;
	if (!limits) {
		probe.rc = TB_EIO;
		snprintf(probe.why, sizeof(probe.why),
			 "no cgroup hierarchy offers memory, pids or cpu%s%s", why[0] ? ": " : "",
			 why);
	}
cleanup:
	free(self);
	free(mi);
}

static int probed(tb_error_t *err)
{
	pthread_once(&probe.once, do_probe);
	if (probe.rc < 0)
		return tb_error_set(err, probe.rc, "cgroups: %s", probe.why);
	return 0;
}

int tb_cgroup_describe(char *buf, size_t len, tb_error_t *err)
{
	size_t pos = 0;
	int rc;

	if ((rc = probed(err)) < 0)
		return rc;
	buf[0] = '\0';
	for (int c = 0; c < CTL_COUNT; c++)
		for (int i = 0; i < probe.n; i++)
			if (probe.h[i].ctls & (1u << c) && pos < len)
				pos += (size_t)snprintf(buf + pos, len - pos, "%s%s:%s",
							pos ? " " : "", ctl_names[c],
							probe.h[i].v2 ? "v2" : "v1");
	return 0;
}

/* ------------------------------------------------------------ file I/O */

static int write_file(const char *dir, const char *file, const char *value, tb_error_t *err)
{
	char path[1700];
	int fd, e;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "cgroup: open %s", path);
	n = write(fd, value, strlen(value));
	e = errno;
	close(fd);
	if (n < 0) {
		tb_error_errno(err, TB_EIO, e, "cgroup: write '%s' to %s", value, path);
		errno = e; /* callers act on EBUSY */
		return TB_EIO;
	}
	return 0;
}

static int file_exists(const char *dir, const char *file)
{
	char path[1700];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return access(path, F_OK) == 0;
}

/* Reads "key N" from a flat-keyed file (memory.events, pids.events, ...). */
static uint64_t read_key(const char *dir, const char *file, const char *key)
{
	char path[1700], line[256];
	uint64_t v = 0;
	size_t kl = strlen(key);
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ' ')
			v = strtoull(line + kl + 1, NULL, 10);
	fclose(f);
	return v;
}

/* The number in @p dir/@p file into @p v. @return 0, or -1 when the
 * kernel has no such file (or nothing in it). */
static int read_num(const char *dir, const char *file, uint64_t *v)
{
	char path[1700], line[64];
	int rc = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if ((f = fopen(path, "re"))) {
		if (fgets(line, sizeof(line), f)) {
			*v = strtoull(line, NULL, 10);
			rc = 0;
		}
		fclose(f);
	}
	return rc;
}

/* ------------------------------------------------------------- create */

/* v2: lets children of @p dir use our controllers; see the file comment. */
static int enable_subtree(const char *dir, unsigned ctls, tb_error_t *err)
{
	char value[64] = "";
	size_t pos = 0;

	for (int c = 0; c < CTL_COUNT; c++)
		if (ctls & (1u << c) && !((1u << c) & CTL_RIDERS)) /* not v2 controllers */
			pos += (size_t)snprintf(value + pos, sizeof(value) - pos, "%s+%s",
						pos ? " " : "", ctl_names[c]);
	return write_file(dir, "cgroup.subtree_control", value, err);
}

static int make_group(char *out, size_t len, const hier_t *h, const char *group, tb_error_t *err)
{
	int rc;

	snprintf(out, len, "%s/%s", h->base, group);
	if (mkdir(out, 0755) < 0 && errno != EEXIST)
		return tb_error_errno(err, TB_EIO, errno, "cgroup: mkdir %s", out);
	if (!h->v2)
		return 0;
	if (enable_subtree(h->base, h->ctls, err) < 0) {
		if (errno != EBUSY)
			return TB_EIO;
		/* The worker's own cgroup holds processes: move ourselves into
		 * a leaf so the subtree can have controllers. */
		char leaf[1200];
		snprintf(leaf, sizeof(leaf), "%s/worker", h->base);
		if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
			return tb_error_errno(err, TB_EIO, errno, "cgroup: mkdir %s", leaf);
		if ((rc = write_file(leaf, "cgroup.procs", "0", err)) < 0 ||
		    (rc = enable_subtree(h->base, h->ctls, err)) < 0)
			return rc;
	}
	return enable_subtree(out, h->ctls, err);
}

static int apply_limits(const char *dir, int v2, unsigned ctls, const tb_cgroup_limits_t *lim,
			tb_error_t *err)
{
	char v[64];
	int rc;

	if ((ctls & (1u << CTL_MEMORY)) && lim->memory_bytes) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->memory_bytes);
		if (v2) {
			if ((rc = write_file(dir, "memory.max", v, err)) < 0)
				return rc;
			if (file_exists(dir, "memory.swap.max") &&
			    (rc = write_file(dir, "memory.swap.max", "0", err)) < 0)
				return rc;
		} else {
			/* memsw (memory + swap) may never be below the memory
			 * limit: lowering, memory goes first; raising, memsw. */
			int memsw = file_exists(dir, "memory.memsw.limit_in_bytes");
			if (write_file(dir, "memory.limit_in_bytes", v, NULL) < 0 &&
			    (!memsw ||
			     (rc = write_file(dir, "memory.memsw.limit_in_bytes", v, err)) < 0 ||
			     (rc = write_file(dir, "memory.limit_in_bytes", v, err)) < 0))
				return memsw ? rc
					     : write_file(dir, "memory.limit_in_bytes", v, err);
			if (memsw &&
			    (rc = write_file(dir, "memory.memsw.limit_in_bytes", v, err)) < 0)
				return rc;
		}
	}
	if ((ctls & (1u << CTL_PIDS)) && lim->pids) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->pids);
		if ((rc = write_file(dir, "pids.max", v, err)) < 0)
			return rc;
	}
	if ((ctls & (1u << CTL_CPU)) && lim->cpu_millis) {
		/* quota per 100 ms period: 1000 millis = one full core */
		unsigned long long quota = (unsigned long long)lim->cpu_millis * 100;
		if (quota < 1000)
			quota = 1000; /* the kernel's smallest quota: 1 ms */
		if (v2) {
			snprintf(v, sizeof(v), "%llu 100000", quota);
			return write_file(dir, "cpu.max", v, err);
		}
		if ((rc = write_file(dir, "cpu.cfs_period_us", "100000", err)) < 0)
			return rc;
		snprintf(v, sizeof(v), "%llu", quota);
		return write_file(dir, "cpu.cfs_quota_us", v, err);
	}
	return 0;
}

int tb_cgroup_create(tb_cgroup_t **out, const char *group, const char *name,
		     const tb_cgroup_limits_t *lim, tb_error_t *err)
{
	tb_cgroup_t *cg;
	int rc;

	*out = NULL;
	if ((rc = probed(err)) < 0)
		return rc;
	if (!(cg = calloc(1, sizeof(*cg))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (int i = 0; i < probe.n; i++) {
		const hier_t *h = &probe.h[i];
		if ((rc = make_group(cg->group_path[i], sizeof(cg->group_path[i]), h, group, err)) <
		    0)
			goto fail;
		snprintf(cg->dir[i].path, sizeof(cg->dir[i].path), "%s/%s", cg->group_path[i],
			 name);
		cg->dir[i].v2 = h->v2;
		cg->dir[i].ctls = h->ctls;
		if (mkdir(cg->dir[i].path, 0755) < 0) {
			rc =
			    tb_error_errno(err, TB_EIO, errno, "cgroup: mkdir %s", cg->dir[i].path);
			goto fail;
		}
		cg->n = i + 1;
		if ((rc = apply_limits(cg->dir[i].path, h->v2, h->ctls, lim, err)) < 0)
			goto fail;
	}
	cg->lim = *lim;
	*out = cg;
	return 0;
fail:
	tb_cgroup_destroy(cg, 1000, NULL);
	return rc;
}

int tb_cgroup_limit(tb_cgroup_t *cg, const tb_cgroup_limits_t *lim, tb_error_t *err)
{
	int rc;

	/* A sandbox prepared with the runtime's defaults usually keeps them:
	 * cgroup v1 writes are not free, skip them then. */
	if (!memcmp(&cg->lim, lim, sizeof(*lim)))
		return 0;
	cg->lim = *lim;
	for (int i = 0; i < cg->n; i++)
		if ((rc = apply_limits(cg->dir[i].path, cg->dir[i].v2, cg->dir[i].ctls, lim, err)) <
		    0)
			return rc;
	return 0;
}

int tb_cgroup_attach(tb_cgroup_t *cg, pid_t pid, tb_error_t *err)
{
	char v[32];
	int rc;

	snprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < cg->n; i++)
		if ((rc = write_file(cg->dir[i].path, "cgroup.procs", v, err)) < 0)
			return rc;
	return 0;
}

/* CPU time of @p d's processes: v2's cpu.stat (in every cgroup, in
 * microseconds), else v1's cpuacct.stat (clock ticks). */
static void cpu_stats(const char *d, int v2, tb_cgroup_stats_t *out)
{
	char path[1700];

	snprintf(path, sizeof(path), "%s/%s", d, v2 ? "cpu.stat" : "cpuacct.stat");
	if (access(path, R_OK) < 0)
		return;
	if (v2) {
		out->cpu_user_us = read_key(d, "cpu.stat", "user_usec");
		out->cpu_system_us = read_key(d, "cpu.stat", "system_usec");
	} else {
		long hz = sysconf(_SC_CLK_TCK);
		uint64_t per_tick = hz > 0 ? 1000000u / (uint64_t)hz : 10000u;
		out->cpu_user_us = read_key(d, "cpuacct.stat", "user") * per_tick;
		out->cpu_system_us = read_key(d, "cpuacct.stat", "system") * per_tick;
	}
	out->have |= TB_CGROUP_CPU;
}

void tb_cgroup_stats(tb_cgroup_t *cg, tb_cgroup_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < cg->n; i++) {
		const char *d = cg->dir[i].path;
		int v2 = cg->dir[i].v2;
		if (cg->dir[i].ctls & (1u << CTL_MEMORY)) {
			out->oom_kills =
			    read_key(d, v2 ? "memory.events" : "memory.oom_control", "oom_kill");
			if (read_num(d, v2 ? "memory.peak" : "memory.max_usage_in_bytes",
				     &out->memory_peak) == 0)
				out->have |= TB_CGROUP_MEMORY_PEAK;
		}
		if (cg->dir[i].ctls & (1u << CTL_PIDS)) {
			out->pids_refused = read_key(d, "pids.events", "max");
			if (v2 && read_num(d, "pids.peak", &out->pids_peak) == 0)
				out->have |= TB_CGROUP_PIDS_PEAK;
		}
		if (cg->dir[i].ctls & (1u << CTL_CPUACCT))
			cpu_stats(d, v2, out);
	}
}

/* Writes the freezer state of @p dir (v2 cgroup.freeze, v1 freezer.state)
 * and waits, a second at most, until the kernel says it holds. */
static int freeze_dir(const char *dir, int v2, int frozen, tb_error_t *err)
{
	const char *file = v2 ? "cgroup.freeze" : "freezer.state";
	const char *value = v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED");
	struct timespec pause = { 0, 1000000 }; /* 1 ms */
	char path[1700], state[64];
	int rc;

	if ((rc = write_file(dir, file, value, err)) < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/%s", dir, v2 ? "cgroup.events" : "freezer.state");
	for (int i = 0; i < 1000; i++) {
		if (v2) {
			if (read_key(dir, "cgroup.events", "frozen") == (uint64_t)frozen)
				return 0;
		} else {
			FILE *f = fopen(path, "re");
			int got = f && fgets(state, sizeof(state), f);
			if (f)
				fclose(f);
			if (got && !strncmp(state, value, strlen(value)))
				return 0; /* FREEZING until every task is frozen */
		}
		nanosleep(&pause, NULL);
	}
	return tb_error_set(err, TB_ETIMEOUT, "cgroup: %s not %s after 1 s", dir,
			    frozen ? "frozen" : "thawed");
}

int tb_cgroup_freeze(tb_cgroup_t *cg, int frozen, tb_error_t *err)
{
	for (int i = 0; i < cg->n; i++)
		if (cg->dir[i].ctls & (1u << CTL_FREEZER))
			return freeze_dir(cg->dir[i].path, cg->dir[i].v2, frozen, err);
	return tb_error_set(err, TB_EINVAL, "cgroup: no freezer on this machine");
}

/* Thaws @p dir if it has a freezer (a frozen process cannot die). */
static void thaw_dir(const char *dir)
{
	if (file_exists(dir, "cgroup.freeze"))
		freeze_dir(dir, 1, 0, NULL);
	else if (file_exists(dir, "freezer.state"))
		freeze_dir(dir, 0, 0, NULL);
}

/* Counts the pids listed in @p dir/cgroup.procs; SIGKILLs them if @p kill. */
static int procs(const char *dir, int kill_them)
{
	char path[1700], line[32];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	if (!(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		long pid = strtol(line, NULL, 10);
		if (pid > 0) {
			n++;
			if (kill_them)
				kill((pid_t)pid, SIGKILL);
		}
	}
	fclose(f);
	return n;
}

int tb_cgroup_nprocs(tb_cgroup_t *cg)
{
	int total = 0;

	for (int i = 0; i < cg->n; i++) {
		int n = procs(cg->dir[i].path, 0);
		if (n < 0)
			return -1;
		total += n;
	}
	return total;
}

/* Kills what is in @p dir, waits for it to empty, removes it. */
static int remove_dir(const char *dir, int timeout_ms, tb_error_t *err)
{
	uint64_t deadline = tb_mono_ms() + (uint64_t)timeout_ms;
	struct timespec pause = { 0, 200000 }; /* 0.2 ms, doubling */

	thaw_dir(dir);
	for (;;) {
		int n = procs(dir, 1);
		if (n < 0 && errno == ENOENT)
			return 0; /* already gone */
		if (n < 0)
			return tb_error_errno(err, TB_EIO, errno, "cgroup: read %s/cgroup.procs",
					      dir);
		if (n == 0 && rmdir(dir) == 0)
			return 0;
		if (n == 0 && errno != EBUSY)
			return tb_error_errno(err, TB_EIO, errno, "cgroup: rmdir %s", dir);
		if (tb_mono_ms() >= deadline)
			return tb_error_set(err, TB_EIO,
					    "cgroup: %s still has %d processes after %d ms", dir, n,
					    timeout_ms);
		nanosleep(&pause, NULL);
		if (pause.tv_nsec < 20000000)
			pause.tv_nsec *= 2;
	}
}

int tb_cgroup_destroy(tb_cgroup_t *cg, int timeout_ms, tb_error_t *err)
{
	int rc = 0;

	if (!cg)
		return 0;
	for (int i = 0; i < cg->n; i++) {
		int r = remove_dir(cg->dir[i].path, timeout_ms, err);
		if (r < 0 && rc == 0)
			rc = r;
	}
	free(cg);
	return rc;
}

/* Calls @p fn(leaf, hierarchy index, @p arg) for each sandbox's leaf of
 * @p group in every hierarchy, then removes the group's directories that
 * are left empty (one may still hold a live worker's leaf: fine). */
static void each_leaf(const char *group, void (*fn)(const char *, int, void *), void *arg)
{
	for (int i = 0; i < probe.n; i++) {
		char dir[1400];
		snprintf(dir, sizeof(dir), "%s/%s", probe.h[i].base, group);
		DIR *g = opendir(dir);
		struct dirent *se;
		while (g && (se = readdir(g))) {
			char sub[1700];
			if (se->d_type != DT_DIR || se->d_name[0] == '.')
				continue;
			snprintf(sub, sizeof(sub), "%s/%s", dir, se->d_name);
			fn(sub, i, arg);
		}
		if (g) {
			closedir(g);
			rmdir(dir);
		}
	}
}

static void thaw_leaf(const char *leaf, int h, void *arg)
{
	(void)h, (void)arg;
	thaw_dir(leaf);
}

typedef struct sweep_state {
	int removed;
	tb_error_t *err;
} sweep_state_t;

static void remove_leaf(const char *leaf, int h, void *arg)
{
	sweep_state_t *st = arg;

	/* one sandbox has a leaf in every hierarchy: count it once */
	if (remove_dir(leaf, 5000, st->err) == 0 && h == 0)
		st->removed++;
}

int tb_cgroup_sweep(const char *group, tb_error_t *err)
{
	sweep_state_t st = { 0, err };
	int rc;

	if ((rc = probed(err)) < 0)
		return rc;
	/* Thawed everywhere first: with cgroup v1 the freezer is a
	 * hierarchy of its own, and a sandbox left frozen (an idle session
	 * whose worker was killed) cannot die from the kills of the others
	 * while it stays frozen. */
	each_leaf(group, thaw_leaf, NULL);
	each_leaf(group, remove_leaf, &st);
	return st.removed;
}
