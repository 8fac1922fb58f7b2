/*
 * cmd_worker.c: `taskbox worker`: load the configuration, open the
 * artifact store and the ledger, then the worker itself (tb_worker_open:
 * caches, seccomp policy, init, what a dead worker of the same id left
 * behind removed), check what it was given, and run the loop until
 * SIGTERM or SIGINT, which let running attempts finish first.
 */
#include "cmd.h"

#include "tb/fault.h"
#include "metrics_http.h"
#include "preflight.h"
#include "tb/metrics.h"
#include "sandbox.h"
#include "tb/kafka.h"
#include "tb/listen.h"
#include "tb/log.h"
#include "worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static const char *tasks_topic;   /* for on_lag */
static const char *me = "worker"; /* the command, in messages: "worker", "config check" */

/* The consumer's statistics: the tasks topic's lag, to the metrics. */
static void on_lag(const char *topic, const int64_t *lag, int n)
{
	if (tasks_topic && !strcmp(topic, tasks_topic))
		tb_metrics_lag(lag, n);
}

static void on_signal(int sig)
{
	(void)sig;
	/* The second signal ends at once: the sandboxes die with us, and the
	 * unacknowledged messages are delivered again. */
	if (stop)
		_exit(TB_EXIT_FAILURE);
	stop = 1;
}

/* What a worker checks before it joins its group, whatever follows: the
 * relative directories it resolved (said), a runtime to serve tasks
 * with, a sandbox built under work_dir. @return 0, or < 0 with @p err
 * (the worker refuses: exit 3). */
static int preflight(const tb_worker_deps_t *d, int quiet, tb_error_t *err)
{
	const tb_config_t *cfg = d->cfg;
	const char *file = tb_cmd_config_file();
	const char *const dirs[] = { cfg->runtimes_dir, cfg->work_dir, cfg->cache_dir };
	char names[512], where[4200];
	int rc;

	if (!quiet) /* the first thing it says: what it was told */
		tb_info(NULL, "configuration: %s (and TASKBOX_* variables over it)",
			file ? file : "no file: the built-in defaults");
	for (int i = 0; tb_config_path_keys[i]; i++)
		if (cfg->relative & (1u << i))
			tb_info(NULL, "%s is relative: resolved against %s to %s",
				tb_config_path_keys[i],
				file ? "the configuration file's directory"
				     : "the current directory",
				dirs[i]);
	if ((rc = tb_preflight_runtimes(names, sizeof(names), cfg, file, err)) < 0)
		return rc;
	if (!quiet)
		tb_info(NULL, "runtimes in %s: %s", cfg->runtimes_dir, names);
	if ((rc = tb_worker_probe_sandbox(d, err)) < 0)
		return tb_error_prefix(err,
				       "no sandbox can be built under work_dir %s (from %s; every "
				       "directory above it must be searchable by others, 0711)",
				       cfg->work_dir,
				       tb_preflight_origin(where, sizeof(where), "work_dir", file));
	return 0;
}

/* `--check`: whether each service answers (5 s each at most), one line
 * each on stdout. @return TB_EXIT_OK, or TB_EXIT_FAILURE if one does not. */
static int check_services(const tb_worker_deps_t *d)
{
	rd_kafka_t *p = NULL;
	tb_object_info_t info;
	char **infos = NULL;
	size_t n = 0;
	tb_error_t err;
	int bad = 0, rc;

	rc = tb_kafka_producer_new(&p, d->brokers, &d->cfg->kafka.properties, &err);
	if (rc == 0)
		rc = tb_kafka_probe(p, d->brokers, 5000, &err);
	bad |= rc < 0;
	printf("%s kafka %s%s%s\n", rc < 0 ? "FAIL" : "ok", d->brokers, rc < 0 ? ": " : "",
	       rc < 0 ? err.msg : "");
	if (p)
		rd_kafka_destroy(p);
	rc = tb_ledger_workers(d->ledger, &infos, &n, &err);
	for (size_t i = 0; i < n; i++)
		free(infos[i]);
	free(infos);
	bad |= rc < 0;
	printf("%s ledger %s%s%s\n", rc < 0 ? "FAIL" : "ok", d->cfg->ledger.url, rc < 0 ? ": " : "",
	       rc < 0 ? err.msg : "");
	rc = tb_store_head(d->store, "health/probe", &info, &err);
	rc = rc == TB_ENOTFOUND ? 0 : rc;
	bad |= rc < 0;
	printf("%s store %s%s%s\n", rc < 0 ? "FAIL" : "ok", tb_store_describe(d->store),
	       rc < 0 ? ": " : "", rc < 0 ? err.msg : "");
	return bad ? TB_EXIT_FAILURE : TB_EXIT_OK;
}

/* `--check`: metrics_listen read and its address tried, not served: one
 * line on stdout. A worker running on this host holds it, and a check
 * beside it is not refused for that: the line says so. @return 0, or -1
 * refused (said on stderr). */
static int check_metrics_listen(const char *listen)
{
	struct addrinfo *ai;
	char host[256];
	tb_error_t err;
	int one = 1, e = 0;

	if (!listen[0])
		return 0;
	if (tb_listen_resolve(&ai, host, sizeof(host), "metrics_listen", listen, "0.0.0.0:9464",
			      &err) < 0) {
		fprintf(stderr, "taskbox %s: refused: %s\n", me, err.msg);
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		e = errno;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	if (e && e != EADDRINUSE) {
		fprintf(stderr, "taskbox %s: refused: metrics_listen '%s': %s\n", me, listen,
			strerror(e));
		return -1;
	}
	printf("ok metrics_listen %s%s\n", listen,
	       e ? ": in use now (by a worker running here?); a worker started beside it "
		   "could not listen there"
		 : "");
	return 0;
}

/* What comes before the group is joined, once tb_worker_open() swept
 * what a dead worker of this id left: preflight(); with --check, the
 * services asked. @return an exit code to end with, or -1 to go on. */
static int before_joining(tb_worker_deps_t *d, int check)
{
	const tb_config_t *cfg = d->cfg;
	tb_error_t err;
	int rc = -1;

	if (preflight(d, check, &err) < 0) {
		fprintf(stderr, "taskbox %s: refused: %s\n", me, err.msg);
		rc = TB_EXIT_CONFIG;
	} else if (check) {
		printf("ok configuration %s: runtimes, a sandbox under %s\n",
		       tb_cmd_config_file() ? tb_cmd_config_file() : "(environment and defaults)",
		       cfg->work_dir);
		rc = check_services(d);
	}
	if (check && tb_sandbox_sweep(cfg->work_dir, d->group, &err) < 0)
		tb_warn(NULL, "cleaning up after the check: %s", err.msg);
	return rc;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox worker [--config FILE] [--check]\n\n"
		     "Runs a worker: takes tasks from the tasks topic in the consumer group\n"
		     "and runs each in its own sandbox (as root). Configuration: FILE and\n"
		     "TASKBOX_* variables, see schemas/config.md; S3 credentials from\n"
		     "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Give each worker on a\n"
		     "host a stable worker_id: on start it removes what a dead worker with\n"
		     "the same id left (processes, cgroups, directories). SIGTERM or SIGINT\n"
		     "stop it after the running attempts finish (at most drain_seconds, 120\n"
		     "by default; then, or on a second signal, it exits with 1, leaving them\n"
		     "unacknowledged: they replay).\n"
		     "Before it joins the group it refuses (exit 3) a configuration it\n"
		     "cannot serve: a runtimes_dir with no valid runtime, a work_dir no\n"
		     "sandbox can be built under. Relative directories in FILE are\n"
		     "resolved against FILE's directory.\n"
		     "  --check   run those checks and ask Kafka, the ledger and the store\n"
		     "            (5 s each), one line each, then exit: 0 all well, 1 a\n"
		     "            service does not answer, 3 a configuration refused\n"
		     "            (`taskbox config check` is the same)\n"
		     "Exit: 0 stopped, 1 failed, 2 usage, 3 configuration refused.\n");
}

/* The worker's id (the configuration's, else host-pid) into @p id, and
 * the prefix of its sandboxes' cgroups and directories into @p group. */
static void names(const tb_config_t *cfg, char *id, size_t idlen, char *group, size_t grouplen)
{
	if (cfg->worker_id[0]) {
		snprintf(id, idlen, "%s", cfg->worker_id);
	} else {
		char host[64] = "host";
		gethostname(host, sizeof(host) - 1);
		snprintf(id, idlen, "%s-%d", host, (int)getpid());
	}
	snprintf(group, grouplen, "tb-%s", id);
	for (char *c = group; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
			*c = '_';
}

/* The worker's end: what tb_worker_run() returned (@p rc) said, its own
 * cgroup directories removed once every sandbox is gone. @return the
 * exit code. */
static int finished(int rc, const tb_worker_stats_t *stats, tb_error_t *err, const tb_config_t *cfg,
		    const char *group)
{
	if (rc == TB_ETIMEOUT) {
		fprintf(stderr, "taskbox worker: %s: exiting with tasks running\n", err->msg);
		_exit(TB_EXIT_FAILURE);
	}
	if (rc < 0) {
		fprintf(stderr, "taskbox worker: %s\n", err->msg);
		rc = TB_EXIT_FAILURE;
	} else {
		tb_info(
		    NULL,
		    "stopped: %llu messages, %llu recorded (%llu succeeded), %llu dead-lettered",
		    (unsigned long long)stats->received, (unsigned long long)stats->recorded,
		    (unsigned long long)stats->succeeded, (unsigned long long)stats->dead);
		rc = TB_EXIT_OK;
	}
	if (tb_sandbox_sweep(cfg->work_dir, group, err) < 0)
		tb_warn(NULL, "cleaning up after the worker: %s", err->msg);
	return rc;
}

/* The worker from its configuration on (@p path: --config, or NULL),
 * or with @p check its checks alone (--check, `taskbox config check`).
 * @return the exit code. */
static int run(const char *path, int check)
{
	tb_worker_deps_t d = { 0 };
	tb_worker_stats_t stats;
	char id[160], group[200];
	tb_metrics_server_t *metrics = NULL;
	tb_config_t cfg;
	tb_error_t err;
	int rc = TB_EXIT_CONFIG;

	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox %s: %s\n", me, err.msg);
		return TB_EXIT_CONFIG;
	}
	tb_log_set_level((tb_log_level_t)cfg.log_level);
	tb_log_set_json(cfg.log_format == 1);
	const char *fault = tb_fault_init();
	if (fault)
		tb_warn(NULL, "TASKBOX_FAULT is set: fault point '%s' is armed (a test)", fault);
	if (!strcmp(cfg.kafka.brokers, "mock")) {
		fprintf(stderr,
			"taskbox %s: kafka.brokers is 'mock', a cluster that lives inside "
			"one process: run `taskbox demo`, or set kafka.brokers "
			"(TASKBOX_KAFKA_BROKERS)\n",
			me);
		goto out;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "taskbox %s: building sandboxes needs root\n", me);
		goto out;
	}
	names(&cfg, id, sizeof(id), group, sizeof(group));
	if ((mkdir(cfg.work_dir, 0711) < 0 && errno != EEXIST) ||
	    (mkdir(cfg.cache_dir, 0755) < 0 && errno != EEXIST)) {
		fprintf(stderr, "taskbox %s: cannot create %s or %s: %s\n", me, cfg.work_dir,
			cfg.cache_dir, strerror(errno));
		goto out;
	}
	tb_metrics_init(id, (unsigned)cfg.slots);
	tasks_topic = cfg.kafka.tasks_topic;
	tb_kafka_on_lag(on_lag);
	if (check) { /* beside a running worker too, which holds the port */
		if (check_metrics_listen(cfg.metrics_listen) < 0)
			goto out;
	} else if (cfg.metrics_listen[0] &&
		   tb_metrics_serve(&metrics, cfg.metrics_listen, &err) < 0) {
		fprintf(stderr, "taskbox %s: %s\n", me, err.msg);
		goto out;
	}
	if (metrics)
		tb_info(NULL, "metrics on %s, port %u: GET /metrics", cfg.metrics_listen,
			tb_metrics_port(metrics));
	if (check) /* a group of its own: a live worker of this id is not ours to sweep */
		snprintf(group, sizeof(group), "tb-check-%d", (int)getpid());
	d.cfg = &cfg;
	d.brokers = cfg.kafka.brokers;
	d.worker_id = id;
	d.group = group;
	d.drain_ms = cfg.drain_seconds * 1000;
	if (tb_store_open(&d.store, &cfg.store, &err) < 0 ||
	    tb_ledger_open(&d.ledger, cfg.ledger.url, cfg.ledger.prefix, id, &err) < 0 ||
	    tb_worker_open(&d, check ? 0 : TB_WORKER_OPEN_SWEEP | TB_WORKER_OPEN_INPUTS, &err) <
		0) {
		fprintf(stderr, "taskbox %s: %s\n", me, err.msg);
		goto cleanup;
	}
	if ((rc = before_joining(&d, check)) >= 0)
		goto cleanup;
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	tb_info(NULL, "worker %s: store %s, ledger %s", id, tb_store_describe(d.store),
		cfg.ledger.url);
	rc = finished(tb_worker_run(&d, &stop, 0, &stats, &err), &stats, &err, &cfg, group);
cleanup:
	tb_metrics_stop(metrics);
	metrics = NULL;
	tb_worker_close(&d); /* first: its image cache publishes through both */
	tb_store_close(d.store);
	if (d.ledger)
		tb_ledger_close(d.ledger);
out:
	tb_kafka_on_lag(NULL);
	tb_metrics_stop(metrics);
	tb_config_free(&cfg);
	return rc;
}

int tb_cmd_worker_check(const char *cmd, const char *path)
{
	me = cmd;
	return run(path, 1);
}

int tb_cmd_worker(int argc, char **argv)
{
	const char *path = NULL;
	int check = 0, rc;
	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--check", TB_OPT_FLAG, &check, 0, 0, NULL, 0 },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t o = { "worker", opts, NULL, 0, 0 };

	if ((rc = tb_cmd_options(&o, argc, argv, 1, usage)) >= 0)
		return rc;
	return run(path, check);
}
