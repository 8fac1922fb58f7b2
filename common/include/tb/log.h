/*
 * log.h: structured log lines on stderr (logfmt), one write per line so
 * threads never interleave inside a line:
 *
 *   ts=2026-11-29T08:14:20.123Z level=info task=t-1 msg="sandbox up"
 *
 * Every line about a task carries task=<id>. This file owns the format and
 * the level threshold; it does not decide what is worth logging.
 */
#ifndef TB_LOG_H
#define TB_LOG_H

typedef enum tb_log_level {
	TB_LOG_DEBUG = 0,
	TB_LOG_INFO = 1,
	TB_LOG_WARN = 2,
	TB_LOG_ERROR = 3,
} tb_log_level_t;

/** Sets the lowest level written (default TB_LOG_INFO). Thread-safe. */
void tb_log_set_level(tb_log_level_t level);

/**
 * Parses "debug", "info", "warn" or "error" into @p out.
 * @return 0, or TB_EINVAL for any other string.
 */
int tb_log_parse_level(tb_log_level_t *out, const char *name);

/** Sends log lines to file descriptor @p fd instead of 2 (tests). */
void tb_log_set_fd(int fd);

/** JSON lines (1: {"ts","level","task","msg"} per line, for collectors)
 * or logfmt (0, the default). */
void tb_log_set_json(int json);

/**
 * Writes one line at @p level. @p task_id may be NULL for lines that are
 * not about a task. The message is quoted and escaped as needed.
 */
void tb_log(tb_log_level_t level, const char *task_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define tb_debug(task, ...) tb_log(TB_LOG_DEBUG, (task), __VA_ARGS__)
#define tb_info(task, ...) tb_log(TB_LOG_INFO, (task), __VA_ARGS__)
#define tb_warn(task, ...) tb_log(TB_LOG_WARN, (task), __VA_ARGS__)
#define tb_err(task, ...) tb_log(TB_LOG_ERROR, (task), __VA_ARGS__)

#endif
