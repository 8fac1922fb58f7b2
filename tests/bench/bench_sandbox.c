/*
 * bench_sandbox.c: what a sandbox costs. Launches /bin/true N times each
 * way, in one run, and prints median and p99 per launch with ratios:
 *
 *   fork+exec       posix_spawn, no isolation: the absolute floor
 *   clone+ns        raw clone() into the same six namespaces, then exec:
 *                   the floor for this much isolation, with no file system
 *   unshare(1)      util-linux unshare with the same namespaces
 *   bwrap           bubblewrap --unshare-all with /usr bound read-only
 *   crun            crun run of a minimal bundle (in a private mount
 *                   namespace with a tmpfs over /sys/fs/cgroup/unified:
 *                   crun 1.8.1 refuses hybrid cgroup machines otherwise)
 *   taskbox         namespaces, cgroup limits, seccomp, a fresh root: the
 *                   launch of a prepared sandbox (assign + spawn + wait),
 *                   and separately the preparation, a cold launch and the
 *                   teardown
 *
 * and the worker's resident memory per live sandbox. Usage:
 *   bench_sandbox [--json] [-n N] [--crun-bundle DIR]
 * Needs root. Tools that are missing are reported and skipped.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox.h"

#define NS_FLAGS                                                                                   \
	(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC)

extern char **environ;

typedef struct result {
	const char *name;
	double median, p99; /* ms */
	int ok;
	char note[128];
} result_t;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void summarize(result_t *r, double *t, int n)
{
	qsort(t, (size_t)n, sizeof(double), cmp_double);
	r->median = t[n / 2];
	r->p99 = t[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
	r->ok = 1;
}

static int spawn_wait(char *const *argv)
{
	pid_t pid;
	int status;

	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0)
		return -1;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void bench_command(result_t *r, char *const *argv, int n)
{
	double *t = calloc((size_t)n, sizeof(double));

	if (access(argv[0], X_OK) != 0) {
		snprintf(r->note, sizeof(r->note), "%s not installed", argv[0]);
		free(t);
		return;
	}
	for (int i = 0; i < 5; i++) /* warm the page cache */
		spawn_wait(argv);
	for (int i = 0; i < n; i++) {
		double t0 = now_ms();
		if (spawn_wait(argv) != 0) {
			snprintf(r->note, sizeof(r->note), "%s failed", argv[0]);
			free(t);
			return;
		}
		t[i] = now_ms() - t0;
	}
	summarize(r, t, n);
	free(t);
}

static void bench_clone(result_t *r, int n)
{
	double *t = calloc((size_t)n, sizeof(double));
	char *argv[] = { "/bin/true", NULL };

	for (int i = 0; i < n; i++) {
		int status;
		double t0 = now_ms();
		pid_t pid = (pid_t)syscall(SYS_clone, NS_FLAGS | SIGCHLD, 0, NULL, NULL, 0);
		if (pid == 0) {
			execve(argv[0], argv, environ);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			snprintf(r->note, sizeof(r->note), "clone failed: %s", strerror(errno));
			free(t);
			return;
		}
		t[i] = now_ms() - t0;
	}
	summarize(r, t, n);
	free(t);
}

/*
 * The worker prepares a slot's next sandbox while the slot is busy, so a
 * task's launch is assign (hostname, recipe bind, limits, detach the host
 * root) + spawn + wait. The preparation is timed on its own, and so is a
 * cold launch (prepare + assign + spawn + wait) for a slot with nothing
 * prepared, and the teardown.
 */
static void bench_taskbox(result_t *warm, result_t *prep, result_t *cold, result_t *teardown, int n,
			  const tb_seccomp_t *policy, const char *work_root, const char *recipe)
{
	static char *binds_items[] = { "/usr", "/bin", "/lib", "/lib64" };
	static const tb_strlist_t binds = { 4, binds_items };
	const char *argv[] = { "/bin/true", NULL }, *envp[] = { NULL };
	tb_sandbox_exec_t ex = { argv, envp, NULL, -1, -1, -1, -1, 0 };
	double *w = calloc((size_t)n, sizeof(double)), *p = calloc((size_t)n, sizeof(double)),
	       *c = calloc((size_t)n, sizeof(double)), *d = calloc((size_t)n, sizeof(double));
	tb_error_t err;

	for (int i = 0; i < n + 5; i++) {
		char name[32];
		snprintf(name, sizeof(name), "b%d", i);
		tb_sandbox_spec_t s = { .name = name,
					.hostname = "bench",
					.slot = 0,
					.work_root = work_root,
					.group = "tbbench",
					.ro_binds = &binds,
					.recipe_dir = recipe,
					.workspace_mb = 16,
					.outputs_mb = 16,
					.memory_mb = 256,
					.pids = 64,
					.cpu_millis = 1000,
					.max_open_files = 256,
					.max_file_mb = 64 };
		tb_sandbox_exit_t e;
		tb_sandbox_t *sb;
		int id;
		int cold_run = i % 2; /* alternate: warm, cold */
		double t0 = now_ms();
		if (tb_sandbox_prepare(&sb, policy, &s, &err) != 0) {
			snprintf(warm->note, sizeof(warm->note), "%.100s", err.msg);
			goto out;
		}
		double t1 = now_ms();
		if (tb_sandbox_assign(sb, &s, &err) != 0 ||
		    tb_sandbox_spawn(sb, &id, &ex, &err) != 0 ||
		    tb_sandbox_wait(sb, id, 10000, &e, &err) != 0) {
			snprintf(warm->note, sizeof(warm->note), "%.100s", err.msg);
			goto out;
		}
		double t2 = now_ms();
		if (tb_sandbox_destroy(sb, &err) != 0) {
			snprintf(teardown->note, sizeof(teardown->note), "%.100s", err.msg);
			goto out;
		}
		double t3 = now_ms();
		if (i < 5) /* the first few warm caches */
			continue;
		int k = (i - 5) / 2;
		if (cold_run) {
			c[k] = t2 - t0;
		} else {
			w[k] = t2 - t1;
			p[k] = t1 - t0;
		}
		d[(i - 5)] = t3 - t2;
	}
	summarize(warm, w, n / 2);
	summarize(prep, p, n / 2);
	summarize(cold, c, n / 2);
	summarize(teardown, d, n);
out:
	free(w);
	free(p);
	free(c);
	free(d);
}

static long rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return kib;
}

/* Resident memory of this process per live sandbox, over @p n sandboxes. */
static double rss_per_sandbox(int n, const tb_seccomp_t *policy, const char *work_root)
{
	static char *binds_items[] = { "/usr" };
	static const tb_strlist_t binds = { 1, binds_items };
	tb_sandbox_t **live = calloc((size_t)n, sizeof(*live));
	tb_error_t err;
	long before = rss_kib(), after;
	int made = 0;

	for (; made < n; made++) {
		char name[32];
		snprintf(name, sizeof(name), "m%d", made);
		tb_sandbox_spec_t s = { .name = name,
					.hostname = "bench",
					.slot = (unsigned)made,
					.work_root = work_root,
					.group = "tbbench",
					.ro_binds = &binds,
					.workspace_mb = 4,
					.outputs_mb = 4,
					.memory_mb = 64,
					.pids = 16,
					.max_open_files = 64,
					.max_file_mb = 8 };
		if (tb_sandbox_create(&live[made], policy, &s, &err) != 0)
			break;
	}
	after = rss_kib();
	for (int i = 0; i < made; i++)
		tb_sandbox_destroy(live[i], &err);
	free(live);
	return made ? (double)(after - before) / made : -1;
}

/* crun needs cgroup v2 or v1 alone; give it a private mount namespace in
 * which the hybrid machine's unified mount is an empty tmpfs. */
static int isolate_for_crun(void)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	if (access("/sys/fs/cgroup/unified", F_OK) == 0 &&
	    mount("none", "/sys/fs/cgroup/unified", "tmpfs", 0, NULL) < 0)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	int n = 200, json = 0;
	const char *bundle = NULL;
	char work_root[] = "/tmp/tb-bench-XXXXXX";
	tb_seccomp_t *policy;
	tb_error_t err;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--crun-bundle") && i + 1 < argc)
			bundle = argv[++i];
	}
	if (n < 10)
		n = 10;
	if (geteuid() != 0 || !mkdtemp(work_root) || tb_seccomp_compile(&policy, &err) != 0) {
		fprintf(stderr, "bench_sandbox: needs root and a writable /tmp\n");
		return 1;
	}
	chmod(work_root, 0711);
	tb_sandbox_sweep(work_root, "tbbench", &err);

	result_t r[] = {
		{ .name = "fork+exec" },
		{ .name = "clone+ns" },
		{ .name = "unshare(1)" },
		{ .name = "bwrap" },
		{ .name = "crun" },
		{ .name = "taskbox launch" },
		{ .name = "taskbox teardown" },
		{ .name = "taskbox prepare" },
		{ .name = "taskbox cold launch" },
	};
	char recipe[sizeof(work_root) + 8];
	snprintf(recipe, sizeof(recipe), "%s/recipe", work_root);
	mkdir(recipe, 0755);
	char *fork_argv[] = { "/bin/true", NULL };
	char *unshare_argv[] = { "/usr/bin/unshare",
				 "--user",
				 "--map-root-user",
				 "--pid",
				 "--fork",
				 "--mount",
				 "--net",
				 "--uts",
				 "--ipc",
				 "/bin/true",
				 NULL };
	char *bwrap_argv[] = { "/usr/bin/bwrap", "--unshare-all", "--ro-bind", "/usr",
			       "/usr",           "--symlink",     "usr/bin",   "/bin",
			       "--symlink",      "usr/lib",       "/lib",      "--symlink",
			       "usr/lib64",      "/lib64",        "--proc",    "/proc",
			       "--dev",          "/dev",          "/bin/true", NULL };

	bench_command(&r[0], fork_argv, n);
	bench_clone(&r[1], n);
	bench_command(&r[2], unshare_argv, n);
	bench_command(&r[3], bwrap_argv, n);
	bench_taskbox(&r[5], &r[7], &r[8], &r[6], n, policy, work_root, recipe);
	double per_sandbox = rss_per_sandbox(50, policy, work_root);
	if (bundle) {
		char *crun_argv[] = { "/usr/bin/crun", "run",      "--bundle",
				      (char *)bundle,  "tb-bench", NULL };
		if (isolate_for_crun() == 0)
			bench_command(&r[4], crun_argv, n);
		else
			snprintf(r[4].note, sizeof(r[4].note), "cannot isolate cgroups for crun");
	} else {
		snprintf(r[4].note, sizeof(r[4].note),
			 "no bundle given (tests/bench/run makes one)");
	}

	double floor = r[1].ok ? r[1].median : 0, bw = r[3].ok ? r[3].median : 0;
	const result_t *tb = &r[5];
	if (json) {
		printf("[");
		for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
			if (!r[i].ok)
				continue;
			printf("%s\n {\"suite\": \"sandbox\", \"name\": \"%s\", \"unit\": \"ms\", "
			       "\"median\": %.3f, \"p99\": %.3f",
			       i ? "," : "", r[i].name, r[i].median, r[i].p99);
			if (i == 5 && floor)
				printf(", \"baseline\": \"clone+ns\", \"ratio\": %.2f",
				       tb->median / floor);
			printf("}");
		}
		if (tb->ok && bw)
			printf(
			    ",\n {\"suite\": \"sandbox\", \"name\": \"taskbox launch vs bwrap\", "
			    "\"unit\": \"ratio\", \"median\": %.2f, \"p99\": %.2f, \"baseline\": "
			    "\"bwrap\", \"ratio\": %.2f}",
			    tb->median / bw, tb->p99 / r[3].p99, tb->median / bw);
		printf(",\n {\"suite\": \"sandbox\", \"name\": \"worker RSS per live sandbox\", "
		       "\"unit\": \"KiB\", \"median\": %.1f, \"p99\": %.1f}\n]\n",
		       per_sandbox, per_sandbox);
	} else {
		printf("sandbox: /bin/true launched %d times each way\n", n);
		printf("  %-18s %10s %10s %12s %12s\n", "method", "median ms", "p99 ms",
		       "vs clone+ns", "vs bwrap");
		for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
			if (!r[i].ok) {
				printf("  %-18s %s\n", r[i].name,
				       r[i].note[0] ? r[i].note : "skipped");
				continue;
			}
			printf("  %-18s %10.3f %10.3f", r[i].name, r[i].median, r[i].p99);
			if (floor && i != 6 && i != 7)
				printf(" %11.2fx", r[i].median / floor);
			else
				printf(" %12s", "");
			if (bw && i != 6 && i != 7)
				printf(" %11.2fx", r[i].median / bw);
			printf("\n");
		}
		printf("  worker RSS per live sandbox: %.1f KiB (50 live sandboxes)\n",
		       per_sandbox);
		printf("  launch: assign + spawn + wait on a sandbox prepared while the slot was "
		       "busy;\n"
		       "  cold launch: prepare + assign + spawn + wait, for a slot with none "
		       "prepared.\n");
		printf("  targets: taskbox launch <= 1.3x clone+ns and <= 0.35x bwrap; <= 1024 KiB "
		       "per "
		       "sandbox\n");
	}
	tb_sandbox_sweep(work_root, "tbbench", &err);
	rmdir(recipe);
	rmdir(work_root);
	tb_seccomp_free(policy);
	return 0;
}
