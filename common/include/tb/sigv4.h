/*
 * sigv4.h: AWS Signature Version 4 for S3, computed here rather than by
 * libcurl. libcurl 7.88's CURLOPT_AWS_SIGV4 neither adds
 * x-amz-content-sha256 nor sorts and encodes the query string, and it
 * cannot presign a URL for sharing; one implementation serves requests and
 * share URLs alike, and is checked against AWS's published examples.
 *
 * This file owns the canonical request, the string to sign and the
 * signature. It does no I/O and knows nothing of buckets or retries.
 */
#ifndef TB_SIGV4_H
#define TB_SIGV4_H

#include "tb/error.h"

#include <stddef.h>
#include <time.h>

typedef struct tb_sigv4_creds {
	const char *access_key;
	const char *secret_key;
	const char *session_token; /* may be NULL */
	const char *region;
	const char *service; /* "s3" */
} tb_sigv4_creds_t;

typedef struct tb_sigv4_header {
	const char *name;  /* any case; signed as lower case */
	const char *value; /* trimmed when signed */
} tb_sigv4_header_t;

#define TB_SIGV4_AUTH_MAX 1024
#define TB_SIGV4_DATE_LEN 17 /* 20130524T000000Z + NUL */

/**
 * Computes the Authorization header value for one request.
 * @param method "GET", "PUT", ...
 * @param path the URI path, not yet encoded ("/bucket/key with space")
 * @param query the query string as it will be sent, "k=v&k2" (may be
 *        empty); it is decoded, sorted and re-encoded for signing, so send
 *        it encoded the same way (tb_percent_encode, keeping '/')
 * @param headers every header to sign, host, x-amz-date and
 *        x-amz-content-sha256 included
 * @param payload_sha256 the hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
 * @param amz_date the x-amz-date value (tb_sigv4_date)
 * @param[out] out the header value, at most TB_SIGV4_AUTH_MAX bytes
 * @return 0, TB_ETOOBIG (a canonical request over 16 KiB), TB_EINVAL
 */
int tb_sigv4_authorization(char *out, size_t len, const tb_sigv4_creds_t *c, const char *method,
			   const char *path, const char *query, const tb_sigv4_header_t *headers,
			   size_t nheaders, const char *payload_sha256, const char *amz_date,
			   tb_error_t *err);

/**
 * Builds a presigned URL: @p base (scheme://host[:port]) + @p path, valid
 * for @p expires seconds from @p amz_date, signing only the host header.
 * @param[out] out NUL-terminated URL
 */
int tb_sigv4_presign(char *out, size_t len, const tb_sigv4_creds_t *c, const char *base,
		     const char *host, const char *path, unsigned expires, const char *amz_date,
		     tb_error_t *err);

/** Formats @p t as an x-amz-date ("20130524T000000Z"). */
void tb_sigv4_date(char out[TB_SIGV4_DATE_LEN], time_t t);

/** Hex SHA-256 of @p data. */
void tb_sha256_hex(char out[65], const void *data, size_t len);

#endif
