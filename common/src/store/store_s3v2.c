/*
 * store_s3v2.c: the artifact store on S3-compatible servers that accept
 * AWS Signature V2, through libs3 (Debian's libs3 2.0): Ceph RGW,
 * SeaweedFS, MinIO and the like. libs3 2.0 signs V2 only (AWS refuses V2
 * for buckets created since June 2020: use s3:// there), has no multipart
 * API, and does not return a PUT's ETag; so objects go up in one request
 * (streamed from the file descriptor, never whole in memory). It also
 * matches response headers case-sensitively ("ETag", "x-amz-meta-"), so
 * against servers that capitalise them differently (SeaweedFS sends "Etag"
 * and "X-Amz-Meta-Sha256") it sees neither. The checksums therefore also
 * ride in the object's Content-Type, which every server returns as
 * "Content-Type": "application/octet-stream; taskbox-sums=<crc32c>.<sha256>"
 * (a media type parameter, so clients that download the object see an
 * ordinary binary type; one parameter, because libs3 takes at most 113
 * characters of Content-Type, and this is 112). It is set in the same
 * request as the content, so an object and its checksums appear together.
 * Objects of earlier builds have "taskbox-sha256=<sha256>" there and no
 * CRC-32C (they are verified by SHA-256), and older ones kept the SHA-256
 * in a sidecar object, <prefix>.taskbox-sha256/<key>: still read when the
 * Content-Type has none, and deleted with the object. libs3 cannot send
 * If-None-Match, so a put looks first (HEAD): two requests.
 * Requests are retried with back-off on what libs3 calls retryable and on
 * what S3 asks to be retried that libs3 does not (retryable()). Selected
 * by s3v2://bucket[/prefix].
 */
#include "tb/fsutil.h"
#include "tb/store.h"
#include "tb/sys/store.h"

#include <errno.h>
#include <libs3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ATTEMPTS 5
#define WRITE_CHUNK (256u << 10)
#define SIDECAR ".taskbox-sha256/" /* earlier builds' checksum records */
#define CT_SUMS "taskbox-sums="    /* <crc32c 8 hex>.<sha256 64 hex> */
#define CT_PARAM "taskbox-sha256=" /* earlier builds: <sha256 64 hex> */

typedef struct v2_store {
	tb_store_t base;
	char bucket[64];
	char prefix[512];
	char host[256];
	char *access_key, *secret_key;
	S3BucketContext ctx;
} v2_store_t;

/* What one request's callbacks report back. */
typedef struct v2_call {
	S3Status status;
	char message[512];
	int fd;          /* body source (put) or sink (get) */
	uint64_t offset; /* bytes moved so far */
	uint64_t size;   /* put: body size */
	uint64_t length; /* response Content-Length */
	char sha256[65]; /* from the Content-Type, or x-amz-meta-sha256 */
	char crc32c[9];  /* from the Content-Type, or x-amz-meta-crc32c */
	char md5[33];    /* the ETag, when it is a plain MD5 */
	int io_failed;
	int attempts; /* made so far, with retries */
	char *wbuf;   /* get, objects over WRITE_CHUNK: what is gathered before
		     * each write (owned by the call) */
	size_t wlen;
	tb_store_hasher_t *hash; /* get: what is written, hashed */
	char small[160];         /* a small object read into memory */
	const struct iovec *iov; /* a ranged get's body, at most cap bytes */
	int iovcnt;
	size_t cap;
	/* listing */
	tb_store_list_fn fn;
	void *ud;
	size_t skip;
	int stop;
	char last[1100]; /* the last key handed over (or skipped as a record) */
	size_t got;      /* keys in this page's answer */
} v2_call_t;

static S3Status on_props(const S3ResponseProperties *p, void *data)
{
	v2_call_t *c = data;

	c->length = p->contentLength;
	/* libs3 2.0 matches "x-amz-meta-" case-sensitively and misses the
	 * header when a server capitalises it (SeaweedFS does), so the
	 * checksum may not come back; a single-part object's ETag is the MD5
	 * of its content, which the server computed from what it received. */
	if (p->eTag) {
		const char *e = p->eTag + (p->eTag[0] == '"');
		if (strspn(e, "0123456789abcdef") == 32) {
			memcpy(c->md5, e, 32);
			c->md5[32] = '\0';
		}
	}
	for (int i = 0; i < p->metaDataCount; i++) {
		if (!strcasecmp(p->metaData[i].name, "sha256"))
			snprintf(c->sha256, sizeof(c->sha256), "%s", p->metaData[i].value);
		else if (!strcasecmp(p->metaData[i].name, "crc32c"))
			tb_store_take_crc32c(c->crc32c, p->metaData[i].value);
	}
	const char *type = p->contentType ? p->contentType : "";
	const char *t = strstr(type, CT_SUMS), *v = t ? t + strlen(CT_SUMS) : NULL;
	if (v && strspn(v, "0123456789abcdef") == 8 && v[8] == '.' &&
	    strspn(v + 9, "0123456789abcdef") == 64) {
		memcpy(c->crc32c, v, 8);
		c->crc32c[8] = '\0';
		memcpy(c->sha256, v + 9, 64);
		c->sha256[64] = '\0';
	} else if ((t = strstr(type, CT_PARAM)) &&
		   strspn(t + strlen(CT_PARAM), "0123456789abcdef") == 64) {
		memcpy(c->sha256, t + strlen(CT_PARAM), 64);
		c->sha256[64] = '\0';
	}
	return S3StatusOK;
}

static void on_complete(S3Status status, const S3ErrorDetails *e, void *data)
{
	v2_call_t *c = data;

	c->status = status;
	c->message[0] = '\0';
	if (e && e->message)
		snprintf(c->message, sizeof(c->message), "%s", e->message);
}

static int on_put_data(int size, char *buf, void *data)
{
	v2_call_t *c = data;
	uint64_t left = c->size - c->offset;
	size_t want = (uint64_t)size < left ? (size_t)size : (size_t)left;
	ssize_t n;

	if (want == 0)
		return 0;
	do
		n = pread(c->fd, buf, want, (off_t)c->offset);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		c->io_failed = 1;
		return -1; /* aborts the request */
	}
	c->offset += (uint64_t)n;
	return (int)n;
}

/* Writes out what on_get_data gathered. */
static int flush_get(v2_call_t *c)
{
	int rc = tb_write_all(c->fd, c->wbuf, c->wlen);

	if (rc == 0 && c->hash) /* what is in the file, in order */
		tb_store_hasher_update(c->hash, c->wbuf, c->wlen);
	c->wlen = 0;
	if (rc < 0)
		c->io_failed = 1;
	return rc;
}

/* libs3 hands the body over in libcurl's 16 KiB pieces; for a large object
 * they are gathered into WRITE_CHUNK writes: a sixteenth of the writes,
 * and the file lands in larger page-cache folios, which the checksum pass
 * after it (store.c) reads back a third faster. Without the memory, the
 * pieces are written as they come. */
static S3Status on_get_data(int size, const char *buf, void *data)
{
	v2_call_t *c = data;
	size_t len = (size_t)size;

	if (!c->wbuf && c->length > WRITE_CHUNK)
		c->wbuf = malloc(WRITE_CHUNK);
	if (c->wlen + len > WRITE_CHUNK && flush_get(c) < 0)
		return S3StatusAbortedByCallback;
	if (!c->wbuf || len > WRITE_CHUNK) {
		if (tb_write_all(c->fd, buf, len) < 0) {
			c->io_failed = 1;
			return S3StatusAbortedByCallback;
		}
		if (c->hash)
			tb_store_hasher_update(c->hash, buf, len);
	} else {
		memcpy(c->wbuf + c->wlen, buf, len);
		c->wlen += len;
	}
	c->offset += (uint64_t)size;
	return S3StatusOK;
}

static S3Status on_list(int truncated, const char *next, int count,
			const S3ListBucketContent *contents, int nprefixes, const char **prefixes,
			void *data)
{
	v2_call_t *c = data;

	(void)truncated, (void)next, (void)nprefixes, (void)prefixes; /* see v2_list */
	for (int i = 0; i < count && !c->stop; i++) {
		tb_object_info_t info = { .size = contents[i].size };
		const char *k = contents[i].key;
		snprintf(c->last, sizeof(c->last), "%s", k);
		c->got++;
		if (strlen(k) < c->skip || !strncmp(k + c->skip, SIDECAR, strlen(SIDECAR)))
			continue;
		c->stop = c->fn(c->ud, k + c->skip, &info) != 0;
	}
	return S3StatusOK;
}

static void full_key(const v2_store_t *s, const char *key, char *out, size_t cap)
{
	snprintf(out, cap, "%s%s", s->prefix, key);
}

/* The HTTP status behind libs3's names for answers without an error body
 * (a HEAD's): "HTTP 403" says more to an operator than the name alone. */
static const char *http_of(S3Status st)
{
	switch (st) {
	case S3StatusHttpErrorMovedTemporarily:
		return " (HTTP 307)";
	case S3StatusHttpErrorBadRequest:
		return " (HTTP 400)";
	case S3StatusHttpErrorForbidden:
		return " (HTTP 403: wrong credentials, or no access to the bucket)";
	case S3StatusHttpErrorNotFound:
		return " (HTTP 404)";
	case S3StatusHttpErrorConflict:
		return " (HTTP 409)";
	case S3StatusHttpErrorUnknown:
		return " (an HTTP error status libs3 does not name, with no body)";
	case S3StatusErrorUnknown:
		return " (an error code libs3 does not know)";
	default:
		return "";
	}
}

static int fail(const v2_store_t *s, const char *what, const char *key, const v2_call_t *c,
		tb_error_t *err)
{
	int notfound =
	    c->status == S3StatusHttpErrorNotFound || c->status == S3StatusErrorNoSuchKey;
	/* the server's answer about the object named (libs3 names these
	 * codes; one it does not know is S3StatusErrorUnknown, which cannot
	 * be told from a server failing) */
	int refused =
	    key[0] &&
	    (c->status == S3StatusErrorInvalidArgument || c->status == S3StatusErrorInvalidURI ||
	     c->status == S3StatusErrorKeyTooLong || c->status == S3StatusHttpErrorBadRequest);
	char tries[48] = "";

	if (c->attempts > 1)
		snprintf(tries, sizeof(tries), " (attempt %d of %d)", c->attempts, ATTEMPTS);
	return tb_error_set(err,
			    notfound  ? TB_ENOTFOUND
			    : refused ? TB_EINVAL
				      : TB_EIO,
			    "s3v2 %s %s/%s%s: %s%s%s%s%s", what, s->bucket, s->prefix, key,
			    S3_get_status_name(c->status), http_of(c->status),
			    c->message[0] ? ": " : "", c->message, tries);
}

/* Whether a failed request is worth another attempt: what libs3 calls
 * retryable (name lookups, failed connections, S3's InternalError,
 * OperationAborted, RequestTimeout), and what it does not but should be:
 * its own InternalError, which is what a connection broken mid-request
 * becomes (curl's send and receive errors); SlowDown; an error code libs3
 * does not know (ServiceUnavailable and TooManyRequests among them); an
 * error answer without a body in a status libs3 has no name for (a 5xx
 * or 429 to a HEAD); and an error body that is not S3's XML (a proxy's
 * 502 page). Some of these are permanent (an unknown code, a bodiless
 * 401 or 413): those fail 1.5 s later, after the same five attempts. */
static int retryable(S3Status st)
{
	return S3_status_is_retryable(st) || st == S3StatusInternalError ||
	       st == S3StatusErrorSlowDown || st == S3StatusErrorUnknown ||
	       st == S3StatusHttpErrorUnknown || st == S3StatusXmlParseFailure;
}

/* After attempt @p i (0-based) of a request: whether to make another,
 * having backed off (100, 200, 400, 800 ms); counts the attempts. */
static int again(v2_call_t *c, int i)
{
	c->attempts = i + 1;
	if (c->status == S3StatusOK || c->io_failed || !retryable(c->status) ||
	    c->attempts >= ATTEMPTS)
		return 0;
	struct timespec ts = { 0, 100000000L << (i < 3 ? i : 3) };
	nanosleep(&ts, NULL);
	return 1;
}

static void sidecar_key(const v2_store_t *s, const char *key, char *out, size_t cap)
{
	snprintf(out, cap, "%s" SIDECAR "%s", s->prefix, key);
}

static S3Status on_small_data(int size, const char *buf, void *data)
{
	v2_call_t *c = data;
	if (c->offset + (uint64_t)size >= sizeof(c->small))
		return S3StatusAbortedByCallback;
	memcpy(c->small + c->offset, buf, (size_t)size);
	c->offset += (uint64_t)size;
	c->small[c->offset] = '\0';
	return S3StatusOK;
}

/* Reads "<sha256> <size>" from the sidecar of @p key (earlier builds). */
static int read_sidecar(v2_store_t *s, const char *key, tb_object_info_t *out, tb_error_t *err)
{
	S3GetObjectHandler h = { { on_props, on_complete }, on_small_data };
	unsigned long long size = 0;
	char k[2200], sha[65] = "";
	v2_call_t c;

	sidecar_key(s, key, k, sizeof(k));
	for (int i = 0;; i++) {
		memset(&c, 0, sizeof(c));
		S3_get_object(&s->ctx, k, NULL, 0, 0, NULL, &h, &c);
		if (!again(&c, i))
			break;
	}
	if (c.status != S3StatusOK)
		return fail(s, "HEAD", key, &c, err);
	if (sscanf(c.small, "%64s %llu", sha, &size) != 2)
		return tb_error_set(err, TB_EIO, "s3v2: checksum record of %s is unreadable", key);
	snprintf(out->sha256, sizeof(out->sha256), "%s", sha);
	out->size = size;
	return 0;
}

/* What the store records for @p key, from the answer @p c (else an
 * earlier build's sidecar; else none: unverified), and its @p size. */
static void recorded(v2_store_t *s, const char *key, const v2_call_t *c, uint64_t size,
		     tb_object_info_t *out)
{
	tb_error_t ignored;

	memset(out, 0, sizeof(*out));
	if (c->sha256[0])
		snprintf(out->sha256, sizeof(out->sha256), "%s", c->sha256);
	else if (read_sidecar(s, key, out, &ignored) < 0)
		out->sha256[0] = '\0';
	out->size = size; /* the object's, whatever a sidecar says */
	snprintf(out->md5, sizeof(out->md5), "%s", c->md5);
	snprintf(out->crc32c, sizeof(out->crc32c), "%s", c->crc32c);
}

/* HEAD of @p key: its size and checksum (from the Content-Type, else an
 * earlier build's sidecar, else none: unverified). */
static int head_object(v2_store_t *s, const char *key, tb_object_info_t *out, tb_error_t *err)
{
	S3ResponseHandler h = { on_props, on_complete };
	char k[2048];
	v2_call_t c;

	full_key(s, key, k, sizeof(k));
	for (int i = 0;; i++) {
		memset(&c, 0, sizeof(c));
		S3_head_object(&s->ctx, k, NULL, &h, &c);
		if (!again(&c, i))
			break;
	}
	if (c.status != S3StatusOK)
		return fail(s, "HEAD", key, &c, err);
	recorded(s, key, &c, c.length, out);
	return 0;
}

static int v2_put(tb_store_t *base, const char *key, int fd, const tb_object_info_t *sums,
		  const tb_part_sums_t *parts, tb_error_t *err)
{
	(void)parts; /* one request, whatever the size */
	v2_store_t *s = (v2_store_t *)base;
	char type[160], k[2048];
	uint64_t size = sums->size;
	S3NameValue meta[] = { { "sha256", sums->sha256 }, { "crc32c", sums->crc32c } };
	S3PutProperties props = { .contentType = type,
				  .metaDataCount = sums->crc32c[0] ? 2 : 1,
				  .metaData = meta,
				  .expires = -1 };
	S3PutObjectHandler h = { { on_props, on_complete }, on_put_data };
	tb_object_info_t have;
	v2_call_t c;
	int rc;

	/* libs3 cannot send If-None-Match: look first. */
	if ((rc = head_object(s, key, &have, err)) == 0)
		return tb_error_set(err, TB_EEXIST, "s3v2: %s exists", key);
	if (rc != TB_ENOTFOUND)
		return rc;
	if (sums->crc32c[0])
		snprintf(type, sizeof(type), "application/octet-stream; " CT_SUMS "%s.%s",
			 sums->crc32c, sums->sha256);
	else /* no CRC-32C: as earlier builds wrote it */
		snprintf(type, sizeof(type), "application/octet-stream; " CT_PARAM "%s",
			 sums->sha256);
	full_key(s, key, k, sizeof(k));
	for (int i = 0;; i++) {
		/* A failed attempt may have landed with its answer lost
		 * (libs3 names that InternalError): look again before each
		 * retry, so that it never replaces what another writer put
		 * meanwhile (the caller compares contents on TB_EEXIST). */
		if (i > 0 && (rc = head_object(s, key, &have, err)) == 0)
			return tb_error_set(err, TB_EEXIST, "s3v2: %s exists", key);
		if (i > 0 && rc != TB_ENOTFOUND)
			return rc;
		memset(&c, 0, sizeof(c));
		c.fd = fd, c.size = size;
		S3_put_object(&s->ctx, k, size, &props, NULL, &h, &c);
		if (!again(&c, i))
			break;
	}
	if (c.io_failed)
		return tb_error_errno(err, TB_EIO, errno, "s3v2 PUT %s: read", key);
	return c.status == S3StatusOK ? 0 : fail(s, "PUT", key, &c, err);
}

static int v2_get(tb_store_t *base, const char *key, int fd, tb_store_hasher_t *hasher,
		  tb_object_info_t *out, tb_error_t *err)
{
	v2_store_t *s = (v2_store_t *)base;
	S3GetObjectHandler h = { { on_props, on_complete }, on_get_data };
	char k[2048];
	v2_call_t c;

	full_key(s, key, k, sizeof(k));
	for (int i = 0;; i++) {
		memset(&c, 0, sizeof(c));
		c.fd = fd;
		c.hash = hasher;
		if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
			return tb_error_errno(err, TB_EIO, errno, "s3v2 GET %s: reset file", key);
		tb_store_hasher_reset(hasher);
		S3_get_object(&s->ctx, k, NULL, 0, 0, NULL, &h, &c);
		/* libs3 reports a body cut short (a connection broken
		 * mid-answer) as a success: shorter than announced, it is
		 * retried like a failed connection. */
		if (c.status == S3StatusOK && c.length && c.offset < c.length)
			c.status = S3StatusConnectionFailed;
		if (c.status == S3StatusOK && !c.io_failed)
			flush_get(&c);
		free(c.wbuf);
		c.wbuf = NULL;
		if (!again(&c, i))
			break;
	}
	if (c.io_failed)
		return tb_error_errno(err, TB_EIO, errno, "s3v2 GET %s: write", key);
	if (c.status != S3StatusOK)
		return fail(s, "GET", key, &c, err);
	recorded(s, key, &c, c.offset, out);
	return 0;
}

static S3Status on_range_data(int size, const char *buf, void *data)
{
	v2_call_t *c = data;

	if ((uint64_t)size > c->cap - c->offset)
		return S3StatusAbortedByCallback; /* more than was asked for */
	tb_iov_put(c->iov, c->iovcnt, (size_t)c->offset, buf, (size_t)size);
	c->offset += (uint64_t)size;
	return S3StatusOK;
}

static int v2_range(tb_store_t *base, const char *key, uint64_t off, const struct iovec *iov,
		    int iovcnt, size_t len, size_t *got, tb_error_t *err)
{
	v2_store_t *s = (v2_store_t *)base;
	S3GetObjectHandler h = { { on_props, on_complete }, on_range_data };
	char k[2048];
	v2_call_t c;

	full_key(s, key, k, sizeof(k));
	for (int i = 0;; i++) {
		memset(&c, 0, sizeof(c));
		c.iov = iov, c.iovcnt = iovcnt, c.cap = len;
		S3_get_object(&s->ctx, k, NULL, off, len, NULL, &h, &c);
		if (c.status == S3StatusOK && c.length && c.offset < c.length)
			c.status = S3StatusConnectionFailed; /* cut short: as in v2_get */
		if (!again(&c, i))
			break;
	}
	if (c.status == S3StatusErrorInvalidRange) /* at or past its end */
		return 0;
	if (c.status != S3StatusOK)
		return fail(s, "GET", key, &c, err);
	*got = (size_t)c.offset;
	return 0;
}

static int v2_head(tb_store_t *base, const char *key, tb_object_info_t *out, tb_error_t *err)
{
	return head_object((v2_store_t *)base, key, out, err);
}

/* Lists page by page, each after the last key handed over, until a page
 * is empty; not by libs3's "truncated" and next marker, because libs3
 * reports an answer cut short as a success with the keys it had read: a
 * cut page looks like a short last one. That costs one more request per
 * listing (the empty page), and makes a retry, or a page after a cut one,
 * go on from where the keys stopped: none is handed over twice or
 * missed. */
static int v2_list(tb_store_t *base, const char *prefix, tb_store_list_fn fn, void *ud,
		   tb_error_t *err)
{
	v2_store_t *s = (v2_store_t *)base;
	S3ListBucketHandler h = { { on_props, on_complete }, on_list };
	char full[2048];
	v2_call_t c;

	full_key(s, prefix, full, sizeof(full));
	memset(&c, 0, sizeof(c));
	c.fn = fn, c.ud = ud, c.skip = strlen(s->prefix);
	for (int page = 0; page < 100000; page++) {
		c.got = 0;
		for (int i = 0;; i++) {
			S3_list_bucket(&s->ctx, full, c.last[0] ? c.last : NULL, NULL, 1000, NULL,
				       &h, &c);
			if (!again(&c, i))
				break;
		}
		if (c.status != S3StatusOK)
			return fail(s, "LIST", prefix, &c, err);
		if (c.stop || c.got == 0)
			break;
	}
	return 0;
}

/* Deletes the object @p k with retries; 0 if it is gone (or never was). */
static int delete_key(v2_store_t *s, const char *k, const char *what, tb_error_t *err)
{
	S3ResponseHandler h = { on_props, on_complete };
	v2_call_t c;

	for (int i = 0;; i++) {
		memset(&c, 0, sizeof(c));
		S3_delete_object(&s->ctx, k, NULL, &h, &c);
		if (!again(&c, i))
			break;
	}
	if (c.status == S3StatusOK || c.status == S3StatusHttpErrorNotFound ||
	    c.status == S3StatusErrorNoSuchKey)
		return 0;
	return fail(s, "DELETE", what, &c, err);
}

static int v2_del(tb_store_t *base, const char *key, tb_error_t *err)
{
	v2_store_t *s = (v2_store_t *)base;
	char k[2048];
	int rc;

	/* The object, then the checksum record an earlier build may have
	 * left beside it (absent: nothing to do). */
	full_key(s, key, k, sizeof(k));
	if ((rc = delete_key(s, k, key, err)) < 0)
		return rc;
	sidecar_key(s, key, k, sizeof(k));
	return delete_key(s, k, key, err);
}

static int v2_share(tb_store_t *base, const char *key, unsigned seconds, char **out,
		    tb_error_t *err)
{
	v2_store_t *s = (v2_store_t *)base;
	char k[2048];
	S3Status st;

	full_key(s, key, k, sizeof(k));
	if (!(*out = malloc(S3_MAX_AUTHENTICATED_QUERY_STRING_SIZE)))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	/* libs3 takes the expiry as an absolute time in seconds. */
	st = S3_generate_authenticated_query_string(*out, &s->ctx, k,
						    (int64_t)time(NULL) + (int64_t)seconds, NULL);
	if (st != S3StatusOK) {
		free(*out);
		*out = NULL;
		return tb_error_set(err, TB_EIO, "s3v2 share %s: %s", key, S3_get_status_name(st));
	}
	return 0;
}

static int v2_mkbucket(tb_store_t *base, tb_error_t *err)
{
	v2_store_t *s = (v2_store_t *)base;
	S3ResponseHandler h = { on_props, on_complete };
	v2_call_t c;

	memset(&c, 0, sizeof(c));
	S3_create_bucket(s->ctx.protocol, s->ctx.accessKeyId, s->ctx.secretAccessKey, s->host,
			 s->bucket, S3CannedAclPrivate, NULL, NULL, &h, &c);
	if (c.status == S3StatusOK || c.status == S3StatusErrorBucketAlreadyOwnedByYou)
		return 0;
	return fail(s, "create bucket", "", &c, err);
}

static void v2_close(tb_store_t *base)
{
	v2_store_t *s = (v2_store_t *)base;

	free(s->access_key);
	free(s->secret_key);
	free(s);
}

static const struct tb_store_ops v2_ops = {
	.name = "s3v2",
	.put = v2_put,
	.get = v2_get,
	.range = v2_range,
	.head = v2_head,
	.list = v2_list,
	.del = v2_del,
	.share = v2_share,
	.close = v2_close,
	.mkbucket = v2_mkbucket,
};

static S3Status init_status = S3StatusInternalError;
static void init_once(void)
{
	init_status = S3_initialize("taskbox", S3_INIT_ALL, NULL);
}

int tb_store_s3v2_open(tb_store_t **out, const char *bucket, const char *prefix,
		       const char *endpoint, tb_error_t *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
	const char *token = getenv("AWS_SESSION_TOKEN");
	v2_store_t *s;

	*out = NULL;
	if (!endpoint || !*endpoint)
		return tb_error_set(err, TB_EINVAL,
				    "s3v2 store: store.endpoint is required (Signature V2 is for "
				    "S3-compatible servers; use s3:// for AWS)");
	if (!ak || !*ak || !sk || !*sk)
		return tb_error_set(
		    err, TB_EINVAL,
		    "s3v2 store: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be "
		    "set in the environment of the process that opens the store (the "
		    "worker, or this command)");
	if (token && *token)
		return tb_error_set(
		    err, TB_EINVAL,
		    "s3v2 store: libs3 2.0 cannot send AWS_SESSION_TOKEN; use s3://");
	pthread_once(&once, init_once);
	if (init_status != S3StatusOK)
		return tb_error_set(err, TB_EIO, "s3v2 store: libs3 initialisation failed: %s",
				    S3_get_status_name(init_status));
	if (!(s = calloc(1, sizeof(*s))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	s->base.ops = &v2_ops;
	snprintf(s->bucket, sizeof(s->bucket), "%s", bucket);
	snprintf(s->prefix, sizeof(s->prefix), "%.400s%s", prefix,
		 *prefix && prefix[strlen(prefix) - 1] != '/' ? "/" : "");
	const char *h = strstr(endpoint, "://");
	snprintf(s->host, sizeof(s->host), "%s", h ? h + 3 : endpoint);
	s->host[strcspn(s->host, "/")] = '\0';
	s->access_key = strdup(ak);
	s->secret_key = strdup(sk);
	if (!s->access_key || !s->secret_key) {
		v2_close(&s->base);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	s->ctx =
	    (S3BucketContext){ s->host,
			       s->bucket,
			       !strncmp(endpoint, "https://", 8) ? S3ProtocolHTTPS : S3ProtocolHTTP,
			       S3UriStylePath,
			       s->access_key,
			       s->secret_key };
	snprintf(s->base.describe, sizeof(s->base.describe), "s3v2 %.200s/%s/%.200s (SigV2, libs3)",
		 endpoint, s->bucket, s->prefix);
	*out = &s->base;
	return 0;
}
