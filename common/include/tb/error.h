/*
 * error.h: the error convention every taskbox function follows.
 *
 * A function that can fail returns int: 0 on success, a negative TB_E* code
 * on failure, and fills the caller's tb_error_t with a message. Context is
 * prepended as the error moves up ("checkout recipe: fetch origin: ..."),
 * so the final message reads from the outermost operation inward. There is
 * no global "last error". This file owns the codes and the message buffer;
 * it does not log (see log.h).
 */
#ifndef TB_ERROR_H
#define TB_ERROR_H

#include <stddef.h>

/* Codes callers act on. Keep the list short: a code exists only when some
 * caller does something different for it. */
enum {
	TB_OK = 0,
	TB_EINVAL = -1,     /* bad input: malformed, wrong type, out of range */
	TB_ENOMEM = -2,     /* allocation failed */
	TB_ENOTFOUND = -3,  /* the thing named does not exist */
	TB_ETIMEOUT = -4,   /* a deadline passed */
	TB_ERETRY = -5,     /* transient: the same call may succeed later */
	TB_EPOISON = -6,    /* can never succeed for this input: DLQ it */
	TB_EFENCED = -7,    /* a newer lease owner exists: stop, write nothing */
	TB_EIO = -8,        /* a system call or service failed */
	TB_ETOOBIG = -9,    /* over a size cap */
	TB_EVERSION = -10,  /* unknown major schema version */
	TB_EEXIST = -11,    /* already there (a create-only write) */
	TB_EBUSY = -12,     /* held by another (a live lease): wait for it */
	TB_ECONFLICT = -13, /* a name already stands for something else */
	TB_ECRASHED = -14,  /* the worker crashed in this attempt's thread (evidence) */
};

#define TB_ERROR_MSG_MAX 1024

typedef struct tb_error {
	int code;                   /* the TB_E* code, TB_OK when clear */
	char msg[TB_ERROR_MSG_MAX]; /* NUL-terminated, truncated if long */
} tb_error_t;

/** Clears @p err to TB_OK and an empty message. */
void tb_error_clear(tb_error_t *err);

/**
 * Sets @p err to @p code with a printf-style message and returns @p code,
 * so a failing path can be written `return tb_error_set(err, TB_EINVAL, ...)`.
 * @p err may be NULL (the message is then dropped).
 */
int tb_error_set(tb_error_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Like tb_error_set() and appends ": strerror(errnum)".
 */
int tb_error_errno(tb_error_t *err, int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/**
 * Prepends context to the message already in @p err ("ctx: old message")
 * and returns err->code unchanged. Use it as an error moves up a layer.
 */
int tb_error_prefix(tb_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** The name of a code ("invalid", "poison", ...), for logs and events. */
const char *tb_error_name(int code);

#endif
