/*
 * task_token.h: the task-scoped credential (docs/architecture.md, invariant 5).
 *
 * A task token binds a task id, an attempt and an expiry (ms since the
 * epoch) under an HMAC-SHA256 made with a key only the worker holds. The
 * agent gets its token in its environment (TASKBOX_TOKEN) and shows it to
 * the worker's egress proxy on every request; the proxy checks it. A
 * token is useless to another task or attempt, after its expiry, and
 * after the worker exits (the key lives in the worker's memory only: it
 * is made from getrandom() and never written anywhere).
 *
 * Text form, safe in an HTTP header and an environment variable:
 *
 *   tb1.<base64url(payload)>.<base64url(mac)>
 *
 * payload is "<task id>:<attempt>:<expires ms>" (a task id is an
 * identifier: letters, digits, '-', '_', '.'), mac is HMAC-SHA256(key,
 * "tb1." payload), base64url without padding. This file owns the key, the
 * format and the checks; it does not know where a token travels.
 */
#ifndef TB_TASK_TOKEN_H
#define TB_TASK_TOKEN_H

#include "tb/error.h"

#include <stddef.h>
#include <stdint.h>

#define TB_TASK_TOKEN_KEY_BYTES 32
/* The longest token issued or accepted (a 128-byte task id fits). */
#define TB_TASK_TOKEN_MAX 320

typedef struct tb_task_token_key {
	uint8_t bytes[TB_TASK_TOKEN_KEY_BYTES];
} tb_task_token_key_t;

/* What a valid token says. */
typedef struct tb_task_token_claims {
	char task_id[129];
	uint64_t attempt;
	uint64_t expires_ms;
} tb_task_token_claims_t;

/**
 * Fills @p out with a fresh random key (getrandom). Wipe it with
 * tb_task_token_key_wipe() when done.
 * @return 0; TB_EIO if the kernel gives no randomness
 */
int tb_task_token_key_new(tb_task_token_key_t *out, tb_error_t *err);

/** Overwrites @p key so no copy of it stays in memory. */
void tb_task_token_key_wipe(tb_task_token_key_t *key);

/**
 * Writes a token for (@p task_id, @p attempt) valid until @p expires_ms
 * into @p out (NUL-terminated).
 * @param cap size of @p out; TB_TASK_TOKEN_MAX + 1 always suffices
 * @return 0; TB_EINVAL if @p task_id is not an identifier of 1-128 bytes
 *         or attempt is 0; TB_ETOOBIG if @p cap is too small
 */
int tb_task_token_issue(char *out, size_t cap, const tb_task_token_key_t *key, const char *task_id,
			uint64_t attempt, uint64_t expires_ms, tb_error_t *err);

/**
 * Checks @p token (@p len bytes, need not be NUL-terminated) against
 * @p key: the MAC (compared in constant time) before anything it says is
 * believed, then the expiry against @p now_ms. Fills @p out (may be NULL)
 * with the claims of a valid token.
 * @return 0; TB_ETOOBIG over TB_TASK_TOKEN_MAX; TB_EINVAL malformed or
 *         forged (a wrong MAC); TB_ETIMEOUT expired
 */
int tb_task_token_parse(tb_task_token_claims_t *out, const tb_task_token_key_t *key,
			const char *token, size_t len, uint64_t now_ms, tb_error_t *err);

/**
 * tb_task_token_parse() and then: the token must be for @p task_id and
 * @p attempt.
 * @return 0; the codes of tb_task_token_parse(); TB_EFENCED when the
 *         token is genuine but belongs to another task or attempt
 */
int tb_task_token_verify(const tb_task_token_key_t *key, const char *token, size_t len,
			 const char *task_id, uint64_t attempt, uint64_t now_ms, tb_error_t *err);

#endif
