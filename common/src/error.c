/*
 * error.c: filling and extending tb_error_t. Owns nothing but the message
 * formatting; callers own the tb_error_t.
 */
#include "tb/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void tb_error_clear(tb_error_t *err)
{
	if (!err)
		return;
	err->code = TB_OK;
	err->msg[0] = '\0';
}

int tb_error_set(tb_error_t *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

int tb_error_errno(tb_error_t *err, int code, int errnum, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	if (!err)
		return code;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	n = strlen(err->msg);
	if (n < sizeof(err->msg))
		snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(errnum));
	return code;
}

int tb_error_prefix(tb_error_t *err, const char *fmt, ...)
{
	char ctx[TB_ERROR_MSG_MAX];
	char old[TB_ERROR_MSG_MAX];
	va_list ap;

	if (!err)
		return TB_EINVAL;
	va_start(ap, fmt);
	vsnprintf(ctx, sizeof(ctx), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* ctx + ": " + old, truncated to the buffer: the outer context is
	 * kept whole, the innermost detail is what gets cut. */
	size_t n = strnlen(ctx, sizeof(err->msg) - 1);
	memcpy(err->msg, ctx, n);
	if (n + 2 < sizeof(err->msg)) {
		memcpy(err->msg + n, ": ", 2);
		n += 2;
	}
	size_t rest = strnlen(old, sizeof(old));
	if (rest > sizeof(err->msg) - 1 - n)
		rest = sizeof(err->msg) - 1 - n;
	memcpy(err->msg + n, old, rest);
	err->msg[n + rest] = '\0';
	return err->code;
}

const char *tb_error_name(int code)
{
	switch (code) {
	case TB_OK:
		return "ok";
	case TB_EINVAL:
		return "invalid";
	case TB_ENOMEM:
		return "out-of-memory";
	case TB_ENOTFOUND:
		return "not-found";
	case TB_ETIMEOUT:
		return "timeout";
	case TB_ERETRY:
		return "retryable";
	case TB_EPOISON:
		return "poison";
	case TB_EFENCED:
		return "fenced";
	case TB_EIO:
		return "io";
	case TB_ETOOBIG:
		return "too-big";
	case TB_EVERSION:
		return "unknown-version";
	case TB_ECONFLICT:
		return "conflict";
	case TB_ECRASHED:
		return "crashed";
	case TB_EEXIST:
		return "exists";
	case TB_EBUSY:
		return "busy";
	default:
		return "unknown";
	}
}
