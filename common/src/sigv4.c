/*
 * sigv4.c: the SigV4 algorithm, step by step as AWS documents it
 * ("Authenticating Requests: Using the Authorization Header" and "Query
 * String Authentication"): canonical request, string to sign, derived
 * signing key, signature. HMAC and SHA-256 are OpenSSL's.
 */
#include "tb/sigv4.h"

#include "tb/encoding.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CANON_MAX (16u << 10)
#define MAX_PARAMS 64
#define MAX_HEADERS 32

void tb_sha256_hex(char out[65], const void *data, size_t len)
{
	unsigned char d[SHA256_DIGEST_LENGTH];
	SHA256(data, len, d);
	tb_hex(out, d, sizeof(d));
}

static void hmac(unsigned char out[32], const void *key, size_t klen, const char *msg)
{
	unsigned int n = 32;
	HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &n);
}

void tb_sigv4_date(char out[TB_SIGV4_DATE_LEN], time_t t)
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, TB_SIGV4_DATE_LEN, "%Y%m%dT%H%M%SZ", &tm);
}

struct param {
	char k[512], v[1024];
};

static int by_key(const void *a, const void *b)
{
	const struct param *x = a, *y = b;
	int c = strcmp(x->k, y->k);
	return c ? c : strcmp(x->v, y->v);
}

/* "b=2&a=1&c" -> "a=1&b=2&c=" with SigV4 encoding. */
static int canonical_query(char *out, size_t len, const char *query, tb_error_t *err)
{
	struct param *p = calloc(MAX_PARAMS, sizeof(*p));
	size_t n = 0, o = 0;
	char *copy = strdup(query ? query : ""), *save = NULL;
	int rc = 0;

	if (!p || !copy) {
		free(p);
		free(copy);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	for (char *t = strtok_r(copy, "&", &save); t; t = strtok_r(NULL, "&", &save)) {
		if (n == MAX_PARAMS) {
			rc = tb_error_set(err, TB_ETOOBIG, "sigv4: more than %d query parameters",
					  MAX_PARAMS);
			goto out;
		}
		char *eq = strchr(t, '=');
		if (eq)
			*eq = '\0';
		if (strlen(t) >= sizeof(p[n].k) || (eq && strlen(eq + 1) >= sizeof(p[n].v))) {
			rc = tb_error_set(err, TB_ETOOBIG, "sigv4: query parameter too long");
			goto out;
		}
		memcpy(p[n].k, t, strlen(t) + 1);
		memcpy(p[n].v, eq ? eq + 1 : "", strlen(eq ? eq + 1 : "") + 1);
		tb_percent_decode(p[n].k, p[n].k, strlen(p[n].k), 0);
		tb_percent_decode(p[n].v, p[n].v, strlen(p[n].v), 0);
		n++;
	}
	qsort(p, n, sizeof(*p), by_key);
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		char k[1600], v[3100];
		if (tb_percent_encode(k, sizeof(k), p[i].k, 0) ||
		    tb_percent_encode(v, sizeof(v), p[i].v, 0)) {
			rc = tb_error_set(err, TB_ETOOBIG, "sigv4: query too long");
			goto out;
		}
		int w = snprintf(out + o, len - o, "%s%s=%s", i ? "&" : "", k, v);
		if (w < 0 || (size_t)w >= len - o) {
			rc = tb_error_set(err, TB_ETOOBIG, "sigv4: query too long");
			goto out;
		}
		o += (size_t)w;
	}
out:
	free(p);
	free(copy);
	return rc;
}

struct hdr {
	char name[128];
	const char *value;
};

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct hdr *)a)->name, ((const struct hdr *)b)->name);
}

/* Appends "value" with leading/trailing space trimmed and inner runs of
 * spaces folded to one, as SigV4 asks. */
static size_t append_trimmed(char *out, size_t o, size_t len, const char *v)
{
	int space = 0;
	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v && o + 1 < len; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space && o + 2 < len)
			out[o++] = ' ';
		space = 0;
		out[o++] = *v;
	}
	out[o] = '\0';
	return o;
}

static void scope_of(char *out, size_t len, const tb_sigv4_creds_t *c, const char *amz_date)
{
	snprintf(out, len, "%.8s/%s/%s/aws4_request", amz_date, c->region, c->service);
}

/* The signature over @p canonical (the canonical request). */
static void sign(char out[65], const tb_sigv4_creds_t *c, const char *amz_date,
		 const char *canonical)
{
	unsigned char k1[32], k2[32], k3[32], k4[32], sig[32];
	char key[256], scope[256], hash[65], sts[512], date[9];

	tb_sha256_hex(hash, canonical, strlen(canonical));
	scope_of(scope, sizeof(scope), c, amz_date);
	snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date, scope, hash);
	snprintf(key, sizeof(key), "AWS4%s", c->secret_key);
	snprintf(date, sizeof(date), "%.8s", amz_date);
	hmac(k1, key, strlen(key), date);
	hmac(k2, k1, 32, c->region);
	hmac(k3, k2, 32, c->service);
	hmac(k4, k3, 32, "aws4_request");
	hmac(sig, k4, 32, sts);
	tb_hex(out, sig, 32);
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(k4, sizeof(k4));
}

int tb_sigv4_authorization(char *out, size_t len, const tb_sigv4_creds_t *c, const char *method,
			   const char *path, const char *query, const tb_sigv4_header_t *headers,
			   size_t nheaders, const char *payload_sha256, const char *amz_date,
			   tb_error_t *err)
{
	struct hdr h[MAX_HEADERS];
	char *canon = NULL, uri[4096], query_c[4096], signed_names[1024] = "", signature[65];
	char scope[256];
	size_t o = 0, names_len = 0;
	int rc;

	if (nheaders > MAX_HEADERS)
		return tb_error_set(err, TB_ETOOBIG, "sigv4: too many headers");
	if (tb_percent_encode(uri, sizeof(uri), path, 1) < 0)
		return tb_error_set(err, TB_ETOOBIG, "sigv4: path too long");
	if ((rc = canonical_query(query_c, sizeof(query_c), query, err)) < 0)
		return rc;
	for (size_t i = 0; i < nheaders; i++) {
		size_t n = strlen(headers[i].name);
		if (n >= sizeof(h[i].name))
			return tb_error_set(err, TB_ETOOBIG, "sigv4: header name too long");
		for (size_t k = 0; k <= n; k++)
			h[i].name[k] = (char)(headers[i].name[k] >= 'A' && headers[i].name[k] <= 'Z'
						  ? headers[i].name[k] + 32
						  : headers[i].name[k]);
		h[i].value = headers[i].value;
	}
	qsort(h, nheaders, sizeof(h[0]), by_name);
	if (!(canon = malloc(CANON_MAX)))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	o = (size_t)snprintf(canon, CANON_MAX, "%s\n%s\n%s\n", method, uri, query_c);
	for (size_t i = 0; i < nheaders && o < CANON_MAX; i++) {
		o += (size_t)snprintf(canon + o, CANON_MAX - o, "%s:", h[i].name);
		if (o < CANON_MAX)
			o = append_trimmed(canon, o, CANON_MAX, h[i].value);
		if (o + 1 < CANON_MAX)
			canon[o++] = '\n', canon[o] = '\0';
		/* By hand, not snprintf: GCC -O3 cannot bound h[i].name and
		 * warns (-Wformat-truncation). Names are checked shorter than
		 * 128 above; a list that would not fit fails below. */
		size_t nl = strlen(h[i].name);
		if (names_len + nl + 2 > sizeof(signed_names)) {
			o = CANON_MAX;
			break;
		}
		if (i)
			signed_names[names_len++] = ';';
		memcpy(signed_names + names_len, h[i].name, nl + 1);
		names_len += nl;
	}
	if (o < CANON_MAX)
		o += (size_t)snprintf(canon + o, CANON_MAX - o, "\n%s\n%s", signed_names,
				      payload_sha256);
	if (o >= CANON_MAX) {
		free(canon);
		return tb_error_set(err, TB_ETOOBIG, "sigv4: canonical request over %u bytes",
				    CANON_MAX);
	}
	sign(signature, c, amz_date, canon);
	free(canon);
	scope_of(scope, sizeof(scope), c, amz_date);
	if ((size_t)snprintf(out, len,
			     "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
			     c->access_key, scope, signed_names, signature) >= len)
		return tb_error_set(err, TB_ETOOBIG, "sigv4: authorization too long");
	return 0;
}

int tb_sigv4_presign(char *out, size_t len, const tb_sigv4_creds_t *c, const char *base,
		     const char *host, const char *path, unsigned expires, const char *amz_date,
		     tb_error_t *err)
{
	char scope[256], cred[512], query[4096], uri[4096], canon[8192], signature[65];
	char token[2048] = "";
	int rc;

	(void)err;
	scope_of(scope, sizeof(scope), c, amz_date);
	snprintf(canon, sizeof(canon), "%s/%s", c->access_key, scope);
	if (tb_percent_encode(cred, sizeof(cred), canon, 0) < 0 ||
	    tb_percent_encode(uri, sizeof(uri), path, 1) < 0)
		return tb_error_set(err, TB_ETOOBIG, "sigv4: presign: too long");
	if (c->session_token) {
		char enc[1800];
		if (tb_percent_encode(enc, sizeof(enc), c->session_token, 0) < 0)
			return tb_error_set(err, TB_ETOOBIG, "sigv4: session token too long");
		snprintf(token, sizeof(token), "&X-Amz-Security-Token=%s", enc);
	}
	/* Already in sorted order: Algorithm, Credential, Date, Expires,
	 * Security-Token, SignedHeaders. */
	rc = snprintf(query, sizeof(query),
		      "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=%s&X-Amz-Date=%s"
		      "&X-Amz-Expires=%u%s&X-Amz-SignedHeaders=host",
		      cred, amz_date, expires, token);
	if (rc < 0 || (size_t)rc >= sizeof(query))
		return tb_error_set(err, TB_ETOOBIG, "sigv4: presign: too long");
	rc = snprintf(canon, sizeof(canon), "GET\n%s\n%s\nhost:%s\n\nhost\nUNSIGNED-PAYLOAD", uri,
		      query, host);
	if (rc < 0 || (size_t)rc >= sizeof(canon))
		return tb_error_set(err, TB_ETOOBIG, "sigv4: presign: too long");
	sign(signature, c, amz_date, canon);
	rc = snprintf(out, len, "%s%s?%s&X-Amz-Signature=%s", base, uri, query, signature);
	if (rc < 0 || (size_t)rc >= len)
		return tb_error_set(err, TB_ETOOBIG, "sigv4: presigned URL too long");
	return 0;
}
