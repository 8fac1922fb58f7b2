/*
 * config.h: the worker's configuration (schemas/config.md): a JSON file
 * plus TASKBOX_* environment overrides over built-in defaults. The defaults
 * are the embedded demo: librdkafka's mock cluster, the in-process ledger
 * and a local directory as the artifact store, so a worker started with no
 * configuration at all runs and touches no external service.
 */
#ifndef TB_CONFIG_H
#define TB_CONFIG_H

#include "tb/codec.h"
#include "tb/log.h"

typedef struct tb_kafka_config {
	char *brokers; /* "host:port,..." or "mock" for the in-process cluster */
	char *group;
	char *group_instance_id; /* static membership; optional */
	int assignor;            /* tb_kafka_assignors[] */
	char *tasks_topic;
	char *events_topic;
	char *dlq_topic;
	tb_strmap_t properties; /* extra librdkafka settings */
} tb_kafka_config_t;

/* kafka.assignor's names, librdkafka's partition.assignment.strategy;
 * the first is incremental (cooperative), the others eager. */
extern const char *const tb_kafka_assignors[];
#define TB_ASSIGNOR_COOPERATIVE 0

typedef struct tb_ledger_config {
	char *url;         /* "memory:" or "redis://host:port[/db]" */
	char *prefix;      /* key prefix in Redis */
	uint64_t lease_ms; /* a task's lease; heartbeats renew it every third */
} tb_ledger_config_t;

typedef struct tb_store_config {
	char *url;      /* "dir:///path", "s3://bucket[/prefix]", "s3v2://..." */
	char *endpoint; /* S3 endpoint URL; optional (AWS when absent) */
	char *region;
} tb_store_config_t;

typedef struct tb_config {
	uint32_t has;
	char *worker_id; /* defaults to <hostname>-<pid> when empty */
	uint64_t slots;
	int log_level;  /* tb_log_level_t */
	int log_format; /* 0 logfmt, 1 JSON lines */
	tb_kafka_config_t kafka;
	tb_ledger_config_t ledger;
	tb_store_config_t store;
	char *runtimes_dir;
	char *work_dir;
	char *cache_dir;
	uint64_t image_cache_mb;      /* environments' images under cache_dir, at most */
	uint64_t input_cache_mb;      /* blocks of inputs read on demand, at most */
	uint64_t image_stall_seconds; /* a registry silent this long is given up on */
	bool image_lazy;              /* roots read on demand from the layers' indexes */
	char *metrics_listen;         /* "127.0.0.1:9464"; empty disables */
	uint64_t drain_seconds;       /* on SIGTERM, how long running attempts may finish */
	unsigned relative;            /* bit i: tb_config_path_keys[i] was relative (resolved) */
} tb_config_t;

/* The keys naming directories: runtimes_dir, work_dir, cache_dir; NULL-ended. */
extern const char *const tb_config_path_keys[];

extern const tb_schema_t tb_schema_config;

/** The built-in defaults, as JSON (documented in schemas/config.md). */
extern const char tb_config_defaults[];

/**
 * Loads the worker configuration.
 * @param path a JSON file, or NULL for defaults and environment only
 * A relative directory (runtimes_dir, work_dir, cache_dir) is resolved
 * against the directory of @p path when the file gave it, else (its
 * TASKBOX_* variable, or no file) against the current directory, and
 * marked in out->relative: a worker started from / by systemd finds what
 * the file names beside it, not under /.
 * @param[out] out released with tb_config_free()
 * @return 0, TB_ENOTFOUND (no such file), TB_EVERSION, TB_EINVAL with the
 *         file, key and reason
 */
int tb_config_load(tb_config_t *out, const char *path, tb_error_t *err);

void tb_config_free(tb_config_t *cfg);

#endif
