/*
 * log.c: logfmt lines, or JSON lines (log_format), to a file descriptor.
 * The level, format and fd are atomics so any thread may log without a
 * lock; each line is built in a stack buffer and written with one
 * write(2).
 */
#include "tb/log.h"

#include "tb/clock.h"
#include "tb/codec.h"

#include "tb/error.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = TB_LOG_INFO;
static _Atomic int log_fd = 2;
static _Atomic int log_json; /* 1: JSON lines */

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void tb_log_set_level(tb_log_level_t level)
{
	atomic_store(&log_level, (int)level);
}

void tb_log_set_fd(int fd)
{
	atomic_store(&log_fd, fd);
}

void tb_log_set_json(int json)
{
	atomic_store(&log_json, json != 0);
}

/* Appends @p s quoted, escaping quote, backslash and newline; other
 * control characters become a space in logfmt, \u00XX with @p json (then
 * @p s must be UTF-8: tb_utf8_sanitize). */
static size_t append_quoted(char *buf, size_t pos, size_t cap, const char *s, int json)
{
	if (pos + 1 < cap)
		buf[pos++] = '"';
	for (; *s && pos + 8 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[pos++] = '\\';
			buf[pos++] = (char)c;
		} else if (c == '\n') {
			buf[pos++] = '\\';
			buf[pos++] = 'n';
		} else if (c < 0x20 && json) {
			pos += (size_t)snprintf(buf + pos, cap - pos, "\\u%04x", c);
		} else if (c < 0x20) {
			buf[pos++] = ' ';
		} else {
			buf[pos++] = (char)c;
		}
	}
	if (pos + 1 < cap)
		buf[pos++] = '"';
	return pos;
}

/* {"ts":..,"level":..,"task":..,"msg":..} into @p line; @return its length. */
static size_t json_line(char *line, size_t cap, const char *ts, const char *level,
			const char *task_id, char *msg)
{
	char task[200];
	size_t pos = (size_t)snprintf(line, cap, "{\"ts\":\"%s\",\"level\":\"%s\"", ts, level);

	if (task_id) {
		snprintf(task, sizeof(task), "%s", task_id);
		tb_utf8_sanitize(task);
		pos += (size_t)snprintf(line + pos, cap - pos, ",\"task\":");
		pos = append_quoted(line, pos, cap, task, 1);
	}
	tb_utf8_sanitize(msg);
	if (pos < cap)
		pos += (size_t)snprintf(line + pos, cap - pos, ",\"msg\":");
	pos = append_quoted(line, pos < cap ? pos : cap - 1, cap, msg, 1);
	if (pos + 1 < cap)
		line[pos++] = '}';
	return pos;
}

int tb_log_parse_level(tb_log_level_t *out, const char *name)
{
	for (int i = 0; i < 4; i++) {
		if (name && strcmp(name, level_names[i]) == 0) {
			*out = (tb_log_level_t)i;
			return 0;
		}
	}
	return TB_EINVAL;
}

void tb_log(tb_log_level_t level, const char *task_id, const char *fmt, ...)
{
	char msg[2048];
	char line[4096];
	struct tm tm;
	size_t pos;
	va_list ap;

	if ((int)level < atomic_load(&log_level) || level > TB_LOG_ERROR)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	uint64_t now = tb_wall_ms();
	time_t secs = (time_t)(now / 1000);
	gmtime_r(&secs, &tm);
	if (atomic_load(&log_json)) {
		char ts[40];
		size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", (long)(now % 1000));
		pos = json_line(line, sizeof(line) - 2, ts, level_names[level], task_id, msg);
		line[pos++] = '\n';
		ssize_t w = write(atomic_load(&log_fd), line, pos);
		(void)w;
		return;
	}
	pos = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
	pos += (size_t)snprintf(line + pos, sizeof(line) - pos, ".%03ldZ level=%s",
				(long)(now % 1000), level_names[level]);
	if (task_id) {
		pos += (size_t)snprintf(line + pos, sizeof(line) - pos, " task=");
		pos = append_quoted(line, pos, sizeof(line), task_id, 0);
	}
	pos += (size_t)snprintf(line + pos, sizeof(line) - pos, " msg=");
	pos = append_quoted(line, pos, sizeof(line), msg, 0);
	if (pos >= sizeof(line))
		pos = sizeof(line) - 1;
	line[pos++] = '\n';
	/* One write per line; a short write to stderr is not worth a retry loop
	 * that could block the caller. */
	ssize_t n = write(atomic_load(&log_fd), line, pos);
	(void)n;
}
