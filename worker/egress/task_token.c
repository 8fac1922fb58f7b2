/*
 * task_token.c: issuing and checking task tokens (task_token.h). Owns the
 * base64url coding and the payload format; the key comes from the caller.
 */
#include "task_token.h"

#include "tb/encoding.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define PREFIX "tb1."
#define PREFIX_LEN 4
#define MAC_BYTES 32
#define PAYLOAD_MAX 180 /* 128 + ':' + 20 + ':' + 20, rounded up */

static int valid_id(const char *s, size_t len)
{
	if (len < 1 || len > 128 || s[0] == '.' || s[0] == '-')
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

/* A decimal without sign or leading zeros that fits 64 bits. */
static int parse_u64(uint64_t *out, const char *s, size_t len)
{
	uint64_t v = 0;

	if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int mac_of(uint8_t mac[MAC_BYTES], const tb_task_token_key_t *key, const uint8_t *payload,
		  size_t len)
{
	uint8_t msg[PREFIX_LEN + PAYLOAD_MAX];
	unsigned mlen = 0;

	memcpy(msg, PREFIX, PREFIX_LEN);
	memcpy(msg + PREFIX_LEN, payload, len);
	if (!HMAC(EVP_sha256(), key->bytes, sizeof(key->bytes), msg, PREFIX_LEN + len, mac,
		  &mlen) ||
	    mlen != MAC_BYTES)
		return -1;
	return 0;
}

int tb_task_token_key_new(tb_task_token_key_t *out, tb_error_t *err)
{
	size_t got = 0;

	while (got < sizeof(out->bytes)) {
		ssize_t n = getrandom(out->bytes + got, sizeof(out->bytes) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return tb_error_errno(err, TB_EIO, errno, "task token key: getrandom");
		got += (size_t)n;
	}
	return 0;
}

void tb_task_token_key_wipe(tb_task_token_key_t *key)
{
	OPENSSL_cleanse(key->bytes, sizeof(key->bytes));
}

int tb_task_token_issue(char *out, size_t cap, const tb_task_token_key_t *key, const char *task_id,
			uint64_t attempt, uint64_t expires_ms, tb_error_t *err)
{
	char payload[PAYLOAD_MAX];
	uint8_t mac[MAC_BYTES];
	size_t o;

	if (!task_id || !valid_id(task_id, strlen(task_id)) || attempt == 0)
		return tb_error_set(err, TB_EINVAL,
				    "task token: the task id must be an identifier of 1-128 bytes "
				    "and the attempt at least 1");
	int n = snprintf(payload, sizeof(payload), "%s:%llu:%llu", task_id,
			 (unsigned long long)attempt, (unsigned long long)expires_ms);
	if (n < 0 || (size_t)n >= sizeof(payload) ||
	    mac_of(mac, key, (const uint8_t *)payload, (size_t)n) < 0)
		return tb_error_set(err, TB_EINVAL, "task token: cannot sign");
	if (cap < PREFIX_LEN + 1)
		return tb_error_set(err, TB_ETOOBIG, "task token: no room");
	memcpy(out, PREFIX, PREFIX_LEN);
	o = PREFIX_LEN;
	ssize_t w = tb_base64_encode(out + o, cap - o, payload, (size_t)n, TB_BASE64_URL);
	if (w <= 0 || o + (size_t)w + 1 >= cap)
		return tb_error_set(err, TB_ETOOBIG, "task token: no room");
	o += (size_t)w;
	out[o++] = '.';
	if (tb_base64_encode(out + o, cap - o, mac, sizeof(mac), TB_BASE64_URL) <= 0)
		return tb_error_set(err, TB_ETOOBIG, "task token: no room");
	OPENSSL_cleanse(mac, sizeof(mac));
	return 0;
}

int tb_task_token_parse(tb_task_token_claims_t *out, const tb_task_token_key_t *key,
			const char *token, size_t len, uint64_t now_ms, tb_error_t *err)
{
	uint8_t payload[PAYLOAD_MAX + 3], mac[MAC_BYTES + 3], want[MAC_BYTES];
	const char *dot;
	ssize_t plen, mlen;
	uint64_t attempt, expires;

	if (len > TB_TASK_TOKEN_MAX)
		return tb_error_set(err, TB_ETOOBIG, "task token: over %d bytes",
				    TB_TASK_TOKEN_MAX);
	if (len < PREFIX_LEN || memcmp(token, PREFIX, PREFIX_LEN) != 0)
		return tb_error_set(err, TB_EINVAL, "task token: malformed");
	token += PREFIX_LEN, len -= PREFIX_LEN;
	if (!(dot = memchr(token, '.', len)))
		return tb_error_set(err, TB_EINVAL, "task token: malformed");
	/* one text per token: no padding, unused bits zero */
	plen = tb_base64_decode(payload, PAYLOAD_MAX, token, (size_t)(dot - token),
				TB_BASE64_URL | TB_BASE64_EXACT);
	mlen = tb_base64_decode(mac, sizeof(mac), dot + 1, len - (size_t)(dot - token) - 1,
				TB_BASE64_URL | TB_BASE64_EXACT);
	if (plen <= 0 || mlen != MAC_BYTES)
		return tb_error_set(err, TB_EINVAL, "task token: malformed");
	/* The MAC first: nothing the payload says counts before it holds. */
	if (mac_of(want, key, payload, (size_t)plen) < 0)
		return tb_error_set(err, TB_EINVAL, "task token: cannot check");
	int same = CRYPTO_memcmp(want, mac, MAC_BYTES) == 0;
	OPENSSL_cleanse(want, sizeof(want));
	if (!same)
		return tb_error_set(err, TB_EINVAL, "task token: not signed by this worker");
	const char *p = (const char *)payload, *end = p + plen;
	const char *c1 = memchr(p, ':', (size_t)plen);
	const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
	if (!c2 || !valid_id(p, (size_t)(c1 - p)) ||
	    parse_u64(&attempt, c1 + 1, (size_t)(c2 - c1 - 1)) < 0 ||
	    parse_u64(&expires, c2 + 1, (size_t)(end - c2 - 1)) < 0 || attempt == 0)
		return tb_error_set(err, TB_EINVAL, "task token: malformed");
	if (now_ms >= expires)
		return tb_error_set(err, TB_ETIMEOUT, "task token: expired");
	if (out) {
		memcpy(out->task_id, p, (size_t)(c1 - p));
		out->task_id[c1 - p] = '\0';
		out->attempt = attempt;
		out->expires_ms = expires;
	}
	return 0;
}

int tb_task_token_verify(const tb_task_token_key_t *key, const char *token, size_t len,
			 const char *task_id, uint64_t attempt, uint64_t now_ms, tb_error_t *err)
{
	tb_task_token_claims_t c;
	int rc;

	if ((rc = tb_task_token_parse(&c, key, token, len, now_ms, err)) < 0)
		return rc;
	if (strcmp(c.task_id, task_id) != 0 || c.attempt != attempt)
		return tb_error_set(err, TB_EFENCED,
				    "task token: issued to another task or attempt");
	return 0;
}
