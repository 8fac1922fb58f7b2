/*
 * store_s3.c: the artifact store on S3 with Signature V4, over libcurl.
 *
 * Requests are signed by sigv4.c (not CURLOPT_AWS_SIGV4: see sigv4.h).
 * Bodies stream from the caller's file descriptor with pread, responses
 * stream into one; only small XML answers (errors, listings, multipart
 * bookkeeping) are held in memory, capped. Objects of MULTIPART_MIN or more go
 * up in MULTIPART_PART parts, each signed with its own payload hash (the
 * parts' SHA-256s, computed before the upload: store_prepass.c), so
 * memory stays flat whatever the size. Up to PARALLEL_PARTS parts are in flight
 * at once, each on its own thread and easy handle: a part's answer comes
 * only after the server has stored it, and waiting for each in turn left
 * the link idle (each part is still read by offset, never held). Easy
 * handles are pooled so connections are reused across requests and
 * threads.
 *
 * Addressing: with an endpoint (an S3-compatible server), path style
 * http(s)://endpoint/bucket/key; without one, AWS virtual-hosted style.
 */
#include "tb/encoding.h"
#include "tb/fsutil.h"
#include "tb/store.h"
#include "tb/sys/store.h"

#include "tb/sigv4.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MULTIPART_MIN (64ull << 20)
#define MULTIPART_PART (16ull << 20)
#define PARALLEL_PARTS 4
_Static_assert(PARALLEL_PARTS >= 2, "the caller sends parts too: at least one helper");
#define XML_MAX (4u << 20)
#define RECV_CHUNK (256L << 10)
#define ATTEMPTS 5
#define POOL_MAX 16

typedef struct s3_store {
	tb_store_t base;
	char bucket[64];
	char prefix[512];
	char origin[512]; /* scheme://host[:port] */
	char host[256];
	int path_style;
	tb_sigv4_creds_t creds;
	char *access_key, *secret_key, *token, *region;
	pthread_mutex_t lock;
	CURL *pool[POOL_MAX];
	int npool;
} s3_store_t;

typedef struct s3_req {
	const char *method;
	const char *key;   /* object key below the prefix; NULL: the bucket */
	const char *query; /* already encoded, "" for none */
	/* body: a file range, or memory, or nothing */
	int body_fd;
	uint64_t body_off, body_len;
	const char *body_mem;
	size_t body_mem_len;
	const char *payload_sha;      /* hex, or NULL to compute (memory / empty) */
	const tb_object_info_t *meta; /* its sums: x-amz-meta-sha256, -crc32c */
	int create_only;              /* If-None-Match: * */
	const char *range;            /* "bytes=A-B", a ranged GET's, or NULL */
	const struct iovec *out_iov;  /* a ranged GET's body into these, else: */
	int out_iovcnt;
	size_t out_cap, out_len;
	int out_fd;                  /* response body into this fd, else memory */
	tb_store_hasher_t *out_hash; /* what goes to out_fd, hashed */
	char *wbuf;                  /* a large download's pieces, gathered */
	size_t wlen;
	const atomic_int *cancel; /* non-zero: stop (a sibling part failed) */
	/* results */
	long status;
	int attempts; /* made by s3_do, retries included */
	char etag[128];
	char resp_sha[65];
	char resp_crc[9];
	uint64_t length;
	char *xml;
	size_t xml_len;
	uint64_t sent;
} s3_req_t;

static CURL *take(s3_store_t *s)
{
	CURL *c = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->npool > 0)
		c = s->pool[--s->npool];
	pthread_mutex_unlock(&s->lock);
	return c ? c : curl_easy_init();
}

static void give(s3_store_t *s, CURL *c)
{
	pthread_mutex_lock(&s->lock);
	if (s->npool < POOL_MAX) {
		s->pool[s->npool++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	if (c)
		curl_easy_cleanup(c);
}

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
	s3_req_t *r = ud;
	uint64_t left = (r->body_mem ? r->body_mem_len : r->body_len) - r->sent;
	size_t want = size * n < left ? size * n : (size_t)left;
	ssize_t got;

	if (want == 0)
		return 0;
	if (r->body_mem) {
		memcpy(buf, r->body_mem + r->sent, want);
		got = (ssize_t)want;
	} else {
		do
			got = pread(r->body_fd, buf, want, (off_t)(r->body_off + r->sent));
		while (got < 0 && errno == EINTR);
		if (got <= 0)
			return CURL_READFUNC_ABORT;
	}
	r->sent += (uint64_t)got;
	return (size_t)got;
}

/* curl rewinds the body to resend it (a pooled connection the server had
 * closed): the body is read by offset, so a rewind only moves the offset. */
static int on_seek(void *ud, curl_off_t offset, int origin)
{
	s3_req_t *r = ud;
	uint64_t len = r->body_mem ? r->body_mem_len : r->body_len;

	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > len)
		return CURL_SEEKFUNC_CANTSEEK;
	r->sent = (uint64_t)offset;
	return CURL_SEEKFUNC_OK;
}

/* Writes @p len bytes of the download to its file, and hashes them. */
static int out_write(s3_req_t *r, const char *buf, size_t len)
{
	if (tb_write_all(r->out_fd, buf, len) < 0)
		return -1;
	if (r->out_hash) /* what is in the file, in order */
		tb_store_hasher_update(r->out_hash, buf, len);
	return 0;
}

/* Writes out what on_write gathered. */
static int out_flush(s3_req_t *r)
{
	int rc = r->wlen ? out_write(r, r->wbuf, r->wlen) : 0;
	r->wlen = 0;
	return rc;
}

/* libcurl hands the body over in pieces of at most CURL_MAX_WRITE_SIZE
 * (16 KiB) whatever its receive buffer; a large object's are gathered into
 * RECV_CHUNK writes: a sixteenth of the writes and of the hasher's
 * wake-ups. Without the memory, pieces are written as they come. */
static size_t on_write(char *buf, size_t size, size_t n, void *ud)
{
	s3_req_t *r = ud;
	size_t len = size * n;

	if (r->out_iov && r->status / 100 == 2) {
		if (len > r->out_cap - r->out_len)
			return 0; /* more than was asked for: abort */
		tb_iov_put(r->out_iov, r->out_iovcnt, r->out_len, buf, len);
		r->out_len += len;
		return len;
	}
	if (r->out_fd >= 0 && r->status / 100 == 2) {
		if (!r->wbuf && r->length > RECV_CHUNK)
			r->wbuf = malloc(RECV_CHUNK);
		if (r->wlen + len > RECV_CHUNK && out_flush(r) < 0)
			return 0; /* aborts the transfer */
		if (!r->wbuf || len > RECV_CHUNK)
			return out_write(r, buf, len) < 0 ? 0 : len;
		memcpy(r->wbuf + r->wlen, buf, len);
		r->wlen += len;
		return len;
	}
	if (r->xml_len + len > XML_MAX)
		return 0; /* an answer we would not hold: abort */
	char *bigger = realloc(r->xml, r->xml_len + len + 1);
	if (!bigger)
		return 0;
	r->xml = bigger;
	memcpy(r->xml + r->xml_len, buf, len);
	r->xml_len += len;
	r->xml[r->xml_len] = '\0';
	return len;
}

/* Stops a transfer once a sibling part of the same upload has failed. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	const s3_req_t *r = ud;

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return atomic_load(r->cancel) != 0;
}

static void copy_value(char *out, size_t cap, const char *v, size_t n)
{
	while (n && (*v == ' ' || *v == '\t'))
		v++, n--;
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(out, v, n);
	out[n] = '\0';
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
	s3_req_t *r = ud;
	size_t len = size * n;
	char num[32];

	if (len > 5 && !strncmp(buf, "HTTP/", 5)) {
		const char *sp = memchr(buf, ' ', len);
		r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
	} else if (len > 5 && !strncasecmp(buf, "etag:", 5)) {
		copy_value(r->etag, sizeof(r->etag), buf + 5, len - 5);
	} else if (len > 18 && !strncasecmp(buf, "x-amz-meta-sha256:", 18)) {
		copy_value(r->resp_sha, sizeof(r->resp_sha), buf + 18, len - 18);
	} else if (len > 18 && !strncasecmp(buf, "x-amz-meta-crc32c:", 18)) {
		char v[64];
		copy_value(v, sizeof(v), buf + 18, len - 18);
		tb_store_take_crc32c(r->resp_crc, v);
	} else if (len > 15 && !strncasecmp(buf, "content-length:", 15)) {
		copy_value(num, sizeof(num), buf + 15, len - 15);
		r->length = strtoull(num, NULL, 10);
	}
	return len;
}

/* The text of <tag>...</tag> after @p from, unescaped, into @p out. */
/*
 * Copies the content of the first <tag> after @p from into @p out,
 * decoding entities if @p decode (an element holding elements is copied
 * raw, so its children are decoded once, when read). Returns the text
 * after </tag>, or NULL if there is none.
 */
static const char *xml_get(const char *from, const char *tag, char *out, size_t cap, int decode)
{
	char open[64], close[64];
	const char *a, *b;
	size_t o = 0;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	if (!from || !(a = strstr(from, open)) || !(b = strstr(a, close)))
		return NULL;
	for (const char *p = a + strlen(open); p < b && o + 1 < cap; p++) {
		static const struct {
			const char *ent;
			char c;
		} ents[] = { { "&amp;", '&' },
			     { "&lt;", '<' },
			     { "&gt;", '>' },
			     { "&quot;", '"' },
			     { "&apos;", '\'' } };
		char c = *p;
		for (size_t e = 0; decode && e < sizeof(ents) / sizeof(ents[0]); e++)
			if (!strncmp(p, ents[e].ent, strlen(ents[e].ent))) {
				c = ents[e].c;
				p += strlen(ents[e].ent) - 1;
				break;
			}
		out[o++] = c;
	}
	out[o] = '\0';
	return b + strlen(close);
}

static const char *xml_text(const char *from, const char *tag, char *out, size_t cap)
{
	return xml_get(from, tag, out, cap, 1);
}

static void build_path(const s3_store_t *s, const char *key, char *out, size_t cap)
{
	if (s->path_style)
		snprintf(out, cap, "/%s%s%s%s", s->bucket, key ? "/" : "", key ? s->prefix : "",
			 key ? key : "");
	else
		snprintf(out, cap, "/%s%s", key ? s->prefix : "", key ? key : "");
}

static int retryable(CURLcode rc, long status)
{
	switch (rc) {
	case CURLE_OK:
		return status == 500 || status == 502 || status == 503 || status == 504 ||
		       status == 429;
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_SEND_FAIL_REWIND:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_COULDNT_RESOLVE_HOST:
		return 1;
	default:
		return 0;
	}
}

/* One attempt. */
/* The headers of @p r that are not signed (S3 needs only host and the
 * x-amz-* ones signed), appended to @p hl; @p range is their room. */
static struct curl_slist *unsigned_headers(const s3_req_t *r, struct curl_slist *hl, char *range,
					   size_t cap)
{
	if (r->create_only)
		hl = curl_slist_append(hl, "If-None-Match: *");
	if (r->range) {
		snprintf(range, cap, "Range: %s", r->range);
		hl = curl_slist_append(hl, range);
	}
	/* No "Expect: 100-continue" round trip, no chunked encoding. */
	hl = curl_slist_append(hl, "Expect:");
	return curl_slist_append(hl, "Transfer-Encoding:");
}

static CURLcode attempt(s3_store_t *s, CURL *c, s3_req_t *r, tb_error_t *err, int *prep_rc)
{
	char path[3072], url[8192], auth[TB_SIGV4_AUTH_MAX], date[TB_SIGV4_DATE_LEN], sha[65];
	char h_auth[TB_SIGV4_AUTH_MAX + 32], h_date[64], h_sha[128], h_meta[128], h_crc[64];
	char h_token[4200], h_range[96];
	char encoded[6200];
	struct curl_slist *hl = NULL;
	tb_sigv4_header_t sh[7];
	size_t nh = 0;
	CURLcode rc;

	*prep_rc = 0;
	build_path(s, r->key, path, sizeof(path));
	if (tb_percent_encode(encoded, sizeof(encoded), path, 1) < 0) {
		*prep_rc = tb_error_set(err, TB_EINVAL, "s3: key too long");
		return CURLE_OK;
	}
	snprintf(url, sizeof(url), "%s%s%s%s", s->origin, encoded, r->query[0] ? "?" : "",
		 r->query);
	tb_sigv4_date(date, time(NULL));
	if (r->payload_sha)
		snprintf(sha, sizeof(sha), "%s", r->payload_sha);
	else
		tb_sha256_hex(sha, r->body_mem ? r->body_mem : "",
			      r->body_mem ? r->body_mem_len : 0);
	sh[nh++] = (tb_sigv4_header_t){ "host", s->host };
	sh[nh++] = (tb_sigv4_header_t){ "x-amz-content-sha256", sha };
	sh[nh++] = (tb_sigv4_header_t){ "x-amz-date", date };
	if (r->meta) {
		sh[nh++] = (tb_sigv4_header_t){ "x-amz-meta-sha256", r->meta->sha256 };
		if (r->meta->crc32c[0])
			sh[nh++] = (tb_sigv4_header_t){ "x-amz-meta-crc32c", r->meta->crc32c };
	}
	if (s->creds.session_token)
		sh[nh++] = (tb_sigv4_header_t){ "x-amz-security-token", s->creds.session_token };
	if ((*prep_rc = tb_sigv4_authorization(auth, sizeof(auth), &s->creds, r->method, path,
					       r->query, sh, nh, sha, date, err)) < 0)
		return CURLE_OK;
	snprintf(h_auth, sizeof(h_auth), "Authorization: %s", auth);
	snprintf(h_date, sizeof(h_date), "x-amz-date: %s", date);
	snprintf(h_sha, sizeof(h_sha), "x-amz-content-sha256: %s", sha);
	hl = curl_slist_append(hl, h_auth);
	hl = curl_slist_append(hl, h_date);
	hl = curl_slist_append(hl, h_sha);
	if (r->meta) {
		snprintf(h_meta, sizeof(h_meta), "x-amz-meta-sha256: %s", r->meta->sha256);
		snprintf(h_crc, sizeof(h_crc), "x-amz-meta-crc32c: %s", r->meta->crc32c);
		hl = curl_slist_append(hl, h_meta);
		if (r->meta->crc32c[0])
			hl = curl_slist_append(hl, h_crc);
	}
	if (s->creds.session_token) {
		snprintf(h_token, sizeof(h_token), "x-amz-security-token: %s",
			 s->creds.session_token);
		hl = curl_slist_append(hl, h_token);
	}
	hl = unsigned_headers(r, hl, h_range, sizeof(h_range));

	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* stalled: give up */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	/* Receives in RECV_CHUNK reads, not libcurl's 16 KiB: a sixteenth of
	 * the reads (the writes: on_write). */
	if (r->out_fd >= 0)
		curl_easy_setopt(c, CURLOPT_BUFFERSIZE, RECV_CHUNK);
	if (r->cancel) {
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	}
	if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(r->method, "PUT") || !strcmp(r->method, "POST")) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(c, CURLOPT_READDATA, r);
		curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(c, CURLOPT_SEEKDATA, r);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)(r->body_mem ? r->body_mem_len : r->body_len));
		if (!strcmp(r->method, "POST"))
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "POST");
	} else if (strcmp(r->method, "GET") != 0) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
	}
	rc = curl_easy_perform(c);
	curl_slist_free_all(hl);
	return rc;
}

/* Runs @p r with retries. @return 0 with r->status set (any status), or
 * TB_EIO when no answer came after ATTEMPTS tries. */
static int s3_do(s3_store_t *s, s3_req_t *r, tb_error_t *err)
{
	CURL *c = take(s);
	CURLcode rc = CURLE_OK;
	unsigned backoff = 100;
	int prep = 0, i;

	if (!c)
		return tb_error_set(err, TB_ENOMEM, "s3: cannot create a curl handle");
	for (i = 1; i <= ATTEMPTS; i++) {
		r->status = 0;
		r->sent = 0;
		r->etag[0] = r->resp_sha[0] = r->resp_crc[0] = '\0';
		r->length = 0;
		r->wlen = 0; /* a failed attempt's gathered pieces: dropped */
		r->out_len = 0;
		free(r->xml);
		r->xml = NULL;
		r->xml_len = 0;
		if (r->out_fd >= 0 &&
		    (ftruncate(r->out_fd, 0) < 0 || lseek(r->out_fd, 0, SEEK_SET) < 0)) {
			prep = tb_error_errno(err, TB_EIO, errno, "s3: reset download file");
			break;
		}
		if (r->out_hash)
			tb_store_hasher_reset(r->out_hash);
		rc = attempt(s, c, r, err, &prep);
		if (prep < 0)
			break;
		if (rc == CURLE_OK && out_flush(r) < 0)
			rc = CURLE_WRITE_ERROR; /* as if on_write had failed */
		if (!retryable(rc, r->status) || i == ATTEMPTS ||
		    (r->cancel && atomic_load(r->cancel)))
			break;
		/* Back off: 100, 200, 400, 800 ms, with up to 50 % jitter. */
		usleep((useconds_t)(backoff + (unsigned)(rand() % (int)(backoff / 2 + 1))) * 1000);
		backoff *= 2;
	}
	give(s, c);
	free(r->wbuf);
	r->wbuf = NULL;
	r->attempts = i <= ATTEMPTS ? i : ATTEMPTS;
	if (prep < 0)
		return prep;
	if (rc != CURLE_OK)
		return tb_error_set(err, TB_EIO, "s3 %s %s: %s (attempt %d of %d)", r->method,
				    r->key ? r->key : s->bucket, curl_easy_strerror(rc), i,
				    ATTEMPTS);
	return 0;
}

/* An S3 error answer as text: "HTTP 403 SignatureDoesNotMatch: ..." */
/* Whether the server's answer @p status / @p code is about the object
 * named (its key), not about the store: the object is refused. */
static int refuses_object(long status, const char *code)
{
	static const char *const codes[] = { "InvalidRequest", "InvalidArgument", "KeyTooLongError",
					     "InvalidURI", "XMinioInvalidObjectName" };

	if (status == 414)
		return 1;
	for (size_t i = 0; status == 400 && i < sizeof(codes) / sizeof(codes[0]); i++)
		if (!strcmp(code, codes[i]))
			return 1;
	return 0;
}

static int s3_fail(const s3_store_t *s, s3_req_t *r, tb_error_t *err)
{
	char code[128] = "", msg[512] = "", tries[48] = "";

	xml_text(r->xml, "Code", code, sizeof(code));
	xml_text(r->xml, "Message", msg, sizeof(msg));
	if (r->attempts > 1)
		snprintf(tries, sizeof(tries), " (attempt %d of %d)", r->attempts, ATTEMPTS);
	return tb_error_set(err,
			    r->status == 404                            ? TB_ENOTFOUND
			    : r->key && refuses_object(r->status, code) ? TB_EINVAL
									: TB_EIO,
			    "s3 %s %s: HTTP %ld%s%s%s%s%s", r->method, r->key ? r->key : s->bucket,
			    r->status, code[0] ? " " : "", code, msg[0] ? ": " : "", msg, tries);
}

static s3_req_t req_init(const char *method, const char *key, const char *query)
{
	return (s3_req_t){ .method = method,
			   .key = key,
			   .query = query ? query : "",
			   .body_fd = -1,
			   .out_fd = -1 };
}

/* One multipart upload's parts, shared by the threads sending them. */
typedef struct mp_job {
	s3_store_t *s;
	const char *key;
	const char *enc_id; /* the upload id, encoded for the query */
	int fd;
	uint64_t size;
	size_t parts;
	const tb_part_sums_t *sums; /* each part's SHA-256 */
	char (*etags)[128];         /* etags[i]: part i + 1's, written by its sender */
	pthread_mutex_t lock;
	size_t next;       /* the next part to send */
	atomic_int failed; /* set on the first final failure */
	int rc;            /* that failure */
	tb_error_t err;
} mp_job_t;

/* Sends part @p i (0-based), with retries (s3_do). */
static int put_part(mp_job_t *j, size_t i, tb_error_t *err)
{
	uint64_t off = (uint64_t)i * MULTIPART_PART;
	uint64_t len = j->size - off < MULTIPART_PART ? j->size - off : MULTIPART_PART;
	char query[1700];
	int rc;

	snprintf(query, sizeof(query), "partNumber=%zu&uploadId=%s", i + 1, j->enc_id);
	s3_req_t p = req_init("PUT", j->key, query);
	p.body_fd = j->fd, p.body_off = off, p.body_len = len, p.payload_sha = j->sums->sha256[i];
	p.cancel = &j->failed;
	rc = s3_do(j->s, &p, err);
	if (rc == 0 && (p.status != 200 || !p.etag[0]))
		rc = s3_fail(j->s, &p, err);
	snprintf(j->etags[i], sizeof(j->etags[i]), "%s", p.etag);
	free(p.xml);
	if (rc < 0)
		tb_error_prefix(err, "part %zu of %zu", i + 1, j->parts);
	return rc;
}

/* Sends parts until none is left or one has failed for good; the first
 * final failure is kept for the caller, later ones (transfers stopped
 * because of it) are dropped. */
static void *part_sender(void *ud)
{
	mp_job_t *j = ud;
	tb_error_t err;

	for (size_t turn = 0; turn < j->parts; turn++) {
		size_t i = j->parts;
		pthread_mutex_lock(&j->lock);
		if (j->next < j->parts && !atomic_load(&j->failed))
			i = j->next++;
		pthread_mutex_unlock(&j->lock);
		if (i == j->parts)
			break;
		int rc = put_part(j, i, &err);
		if (rc < 0) {
			pthread_mutex_lock(&j->lock);
			if (!atomic_load(&j->failed)) {
				j->rc = rc;
				j->err = err;
				atomic_store(&j->failed, 1);
			}
			pthread_mutex_unlock(&j->lock);
			break;
		}
	}
	return NULL;
}

/* Sends every part, PARALLEL_PARTS at a time: the calling thread and up to
 * PARALLEL_PARTS - 1 helpers (fewer if threads cannot be made). */
static int put_parts(mp_job_t *j, tb_error_t *err)
{
	pthread_t helpers[PARALLEL_PARTS - 1];
	size_t nh = 0;

	for (size_t k = 0; k + 1 < PARALLEL_PARTS && k + 1 < j->parts; k++)
		if (pthread_create(&helpers[nh], NULL, part_sender, j) == 0)
			nh++;
	part_sender(j);
	for (size_t k = 0; k < nh; k++)
		pthread_join(helpers[k], NULL);
	if (atomic_load(&j->failed)) {
		*err = j->err;
		return j->rc;
	}
	return 0;
}

/* @p part_sums: each MULTIPART_PART part's SHA-256, its signed payload
 * hash. */
static int put_multipart(s3_store_t *s, const char *key, int fd, const tb_object_info_t *sums,
			 const tb_part_sums_t *part_sums, tb_error_t *err)
{
	uint64_t size = sums->size;
	char upload_id[512], query[1700], enc_id[1600];
	size_t parts = part_sums->n;
	char(*etags)[128] = calloc(parts, sizeof(*etags));
	char *xml = NULL;
	int rc;

	if (!etags)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	s3_req_t r = req_init("POST", key, "uploads");
	r.meta = sums;
	if ((rc = s3_do(s, &r, err)) < 0)
		goto out;
	if (r.status != 200 || !xml_text(r.xml, "UploadId", upload_id, sizeof(upload_id))) {
		rc = s3_fail(s, &r, err);
		goto out;
	}
	tb_percent_encode(enc_id, sizeof(enc_id), upload_id, 0);
	mp_job_t job = { .s = s,
			 .key = key,
			 .enc_id = enc_id,
			 .fd = fd,
			 .size = size,
			 .parts = parts,
			 .sums = part_sums,
			 .etags = etags };
	pthread_mutex_init(&job.lock, NULL);
	atomic_init(&job.failed, 0);
	rc = put_parts(&job, err);
	pthread_mutex_destroy(&job.lock);
	if (rc < 0)
		goto abort;
	size_t cap = 128 + parts * 200, o = 0;
	if (!(xml = malloc(cap))) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto abort;
	}
	o += (size_t)snprintf(xml + o, cap - o, "<CompleteMultipartUpload>");
	for (size_t i = 0; i < parts; i++)
		o += (size_t)snprintf(xml + o, cap - o,
				      "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>",
				      i + 1, etags[i]);
	o += (size_t)snprintf(xml + o, cap - o, "</CompleteMultipartUpload>");
	snprintf(query, sizeof(query), "uploadId=%s", enc_id);
	s3_req_t done = req_init("POST", key, query);
	done.body_mem = xml, done.body_mem_len = o;
	rc = s3_do(s, &done, err);
	/* S3 may answer 200 with an <Error> body for a failed completion. */
	if (rc == 0 && (done.status != 200 || (done.xml && strstr(done.xml, "<Error>"))))
		rc = s3_fail(s, &done, err);
	free(done.xml);
	if (rc == 0)
		goto out;
abort:;
	/* Leave no half-written upload behind: every sender has stopped, so
	 * no part can land after this. */
	snprintf(query, sizeof(query), "uploadId=%s", enc_id);
	s3_req_t ab = req_init("DELETE", key, query);
	tb_error_t ignored;
	s3_do(s, &ab, &ignored);
	free(ab.xml);
out:
	free(r.xml);
	free(xml);
	free(etags);
	return rc;
}

static int s3_head(tb_store_t *base, const char *key, tb_object_info_t *out, tb_error_t *err)
{
	s3_store_t *s = (s3_store_t *)base;
	int rc;

	s3_req_t r = req_init("HEAD", key, "");
	if ((rc = s3_do(s, &r, err)) == 0 && r.status != 200)
		rc = r.status == 404 ? tb_error_set(err, TB_ENOTFOUND, "s3: %s not found", key)
				     : s3_fail(s, &r, err);
	if (rc == 0) {
		out->size = r.length;
		snprintf(out->sha256, sizeof(out->sha256), "%s", r.resp_sha);
		snprintf(out->crc32c, sizeof(out->crc32c), "%s", r.resp_crc);
	}
	free(r.xml);
	return rc;
}

static int s3_put(tb_store_t *base, const char *key, int fd, const tb_object_info_t *sums,
		  const tb_part_sums_t *parts, tb_error_t *err)
{
	uint64_t size = sums->size;
	s3_store_t *s = (s3_store_t *)base;
	int rc;

	if (size >= MULTIPART_MIN) {
		/* Large: an existence check costs nothing next to the upload,
		 * and not every server takes conditions on completion. */
		tb_object_info_t have;
		rc = s3_head(base, key, &have, err);
		if (rc == 0)
			return tb_error_set(err, TB_EEXIST, "s3: %s exists", key);
		if (rc != TB_ENOTFOUND)
			return rc;
		if (parts && parts->part_size == MULTIPART_PART &&
		    parts->n == (size + MULTIPART_PART - 1) / MULTIPART_PART)
			return put_multipart(s, key, fd, sums, parts, err);
		tb_part_sums_t own;
		if ((rc = tb_store_hash_parts(fd, size, MULTIPART_PART, &own, err)) < 0)
			return rc;
		rc = put_multipart(s, key, fd, sums, &own, err);
		tb_part_sums_free(&own);
		return rc;
	}
	/* Create-only in one request: the server answers 412 if the key is
	 * there (AWS since 2024, SeaweedFS, MinIO). */
	s3_req_t r = req_init("PUT", key, "");
	r.body_fd = fd, r.body_len = size, r.payload_sha = sums->sha256, r.meta = sums;
	r.create_only = 1;
	if ((rc = s3_do(s, &r, err)) == 0 && r.status == 412)
		rc = tb_error_set(err, TB_EEXIST, "s3: %s exists", key);
	else if (rc == 0 && r.status != 200)
		rc = s3_fail(s, &r, err);
	free(r.xml);
	return rc;
}

static int s3_get(tb_store_t *base, const char *key, int fd, tb_store_hasher_t *h,
		  tb_object_info_t *out, tb_error_t *err)
{
	s3_store_t *s = (s3_store_t *)base;
	int rc;

	s3_req_t r = req_init("GET", key, "");
	r.out_fd = fd;
	r.out_hash = h;
	if ((rc = s3_do(s, &r, err)) == 0 && r.status != 200)
		rc = s3_fail(s, &r, err);
	if (rc == 0) {
		out->size = r.length;
		snprintf(out->sha256, sizeof(out->sha256), "%s", r.resp_sha);
		snprintf(out->crc32c, sizeof(out->crc32c), "%s", r.resp_crc);
	}
	free(r.xml);
	return rc;
}

static int s3_range(tb_store_t *base, const char *key, uint64_t off, const struct iovec *iov,
		    int iovcnt, size_t len, size_t *got, tb_error_t *err)
{
	s3_store_t *s = (s3_store_t *)base;
	char range[64];
	int rc;

	snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)off,
		 (unsigned long long)(off + len - 1));
	s3_req_t r = req_init("GET", key, "");
	r.range = range;
	r.out_iov = iov, r.out_iovcnt = iovcnt, r.out_cap = len;
	if ((rc = s3_do(s, &r, err)) < 0)
		goto out;
	if (r.status == 206 || (r.status == 200 && off == 0)) /* 200: the whole, and it fit */
		*got = r.out_len;
	else if (r.status == 416) /* at or past its end */
		*got = 0;
	else if (r.status == 200)
		rc = tb_error_set(err, TB_EIO, "s3 GET %s: the server ignored the range %s", key,
				  range);
	else
		rc = s3_fail(s, &r, err);
out:
	free(r.xml);
	return rc;
}

static int s3_list(tb_store_t *base, const char *prefix, tb_store_list_fn fn, void *ud,
		   tb_error_t *err)
{
	s3_store_t *s = (s3_store_t *)base;
	char token[1024] = "", full[1600], enc_prefix[5000], enc_token[3100], query[8300];
	size_t skip = strlen(s->prefix);
	int rc = 0, more = 1, stop = 0;

	snprintf(full, sizeof(full), "%s%s", s->prefix, prefix);
	if (tb_percent_encode(enc_prefix, sizeof(enc_prefix), full, 0) < 0)
		return tb_error_set(err, TB_EINVAL, "s3: prefix too long");
	for (int page = 0; more && !stop && page < 100000; page++) {
		tb_percent_encode(enc_token, sizeof(enc_token), token, 0);
		snprintf(query, sizeof(query), "list-type=2&prefix=%s%s%s", enc_prefix,
			 token[0] ? "&continuation-token=" : "", token[0] ? enc_token : "");
		s3_req_t r = req_init("GET", NULL, query);
		if ((rc = s3_do(s, &r, err)) == 0 && r.status != 200)
			rc = s3_fail(s, &r, err);
		if (rc < 0) {
			free(r.xml);
			return rc;
		}
		const char *p = r.xml;
		char entry[8192], key[2048], size[32];
		while (!stop && (p = xml_get(p, "Contents", entry, sizeof(entry), 0))) {
			tb_object_info_t info = { 0 };
			if (!xml_text(entry, "Key", key, sizeof(key)) || strlen(key) < skip)
				continue;
			if (xml_text(entry, "Size", size, sizeof(size)))
				info.size = strtoull(size, NULL, 10);
			stop = fn(ud, key + skip, &info) != 0;
		}
		char trunc[16] = "";
		xml_text(r.xml, "IsTruncated", trunc, sizeof(trunc));
		more = !strcmp(trunc, "true") &&
		       xml_text(r.xml, "NextContinuationToken", token, sizeof(token));
		free(r.xml);
	}
	return 0;
}

static int s3_del(tb_store_t *base, const char *key, tb_error_t *err)
{
	s3_store_t *s = (s3_store_t *)base;
	int rc;

	s3_req_t r = req_init("DELETE", key, "");
	if ((rc = s3_do(s, &r, err)) == 0 && r.status != 204 && r.status != 200 && r.status != 404)
		rc = s3_fail(s, &r, err);
	free(r.xml);
	return rc;
}

static int s3_share(tb_store_t *base, const char *key, unsigned seconds, char **out,
		    tb_error_t *err)
{
	s3_store_t *s = (s3_store_t *)base;
	char path[3072], date[TB_SIGV4_DATE_LEN];
	size_t cap = 16384;
	int rc;

	build_path(s, key, path, sizeof(path));
	tb_sigv4_date(date, time(NULL));
	if (!(*out = malloc(cap)))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if ((rc = tb_sigv4_presign(*out, cap, &s->creds, s->origin, s->host, path, seconds, date,
				   err)) < 0) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

static void s3_close(tb_store_t *base)
{
	s3_store_t *s = (s3_store_t *)base;

	for (int i = 0; i < s->npool; i++)
		curl_easy_cleanup(s->pool[i]);
	pthread_mutex_destroy(&s->lock);
	if (s->secret_key)
		OPENSSL_cleanse(s->secret_key, strlen(s->secret_key));
	free(s->access_key);
	free(s->secret_key);
	free(s->token);
	free(s->region);
	free(s);
}

static int s3_mkbucket(tb_store_t *base, tb_error_t *err)
{
	s3_store_t *s = (s3_store_t *)base;
	int rc;

	s3_req_t r = req_init("PUT", NULL, "");
	if ((rc = s3_do(s, &r, err)) == 0 && r.status != 200 &&
	    !(r.xml && strstr(r.xml, "BucketAlreadyOwnedByYou")))
		rc = s3_fail(s, &r, err);
	free(r.xml);
	return rc;
}

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const struct tb_store_ops s3_ops = {
	.name = "s3",
	.put = s3_put,
	.get = s3_get,
	.range = s3_range,
	.head = s3_head,
	.list = s3_list,
	.del = s3_del,
	.share = s3_share,
	.close = s3_close,
	.mkbucket = s3_mkbucket,
};

int tb_store_s3_open(tb_store_t **out, const char *bucket, const char *prefix, const char *endpoint,
		     const char *region, tb_error_t *err)
{
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
	const char *tok = getenv("AWS_SESSION_TOKEN");
	static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
	s3_store_t *s;

	*out = NULL;
	if (!ak || !*ak || !sk || !*sk)
		return tb_error_set(
		    err, TB_EINVAL,
		    "s3 store: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set "
		    "in the environment of the process that opens the store (the "
		    "worker, or this command)");
	if (strlen(prefix) > 400)
		return tb_error_set(err, TB_EINVAL, "s3 store: prefix too long");
	pthread_once(&curl_once, curl_init_once);
	if (!(s = calloc(1, sizeof(*s))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	s->base.ops = &s3_ops;
	s->base.part_size = MULTIPART_PART;
	s->base.multipart_min = MULTIPART_MIN;
	pthread_mutex_init(&s->lock, NULL);
	snprintf(s->bucket, sizeof(s->bucket), "%s", bucket);
	/* The prefix is a directory: "runs" and "runs/" both mean "runs/". */
	snprintf(s->prefix, sizeof(s->prefix), "%s%s", prefix,
		 *prefix && prefix[strlen(prefix) - 1] != '/' ? "/" : "");
	s->access_key = strdup(ak);
	s->secret_key = strdup(sk);
	s->token = tok && *tok ? strdup(tok) : NULL;
	s->region = strdup(region ? region : "us-east-1");
	if (endpoint && *endpoint) {
		const char *h = strstr(endpoint, "://");
		snprintf(s->origin, sizeof(s->origin), "%s", endpoint);
		size_t n = strlen(s->origin);
		if (n && s->origin[n - 1] == '/')
			s->origin[n - 1] = '\0';
		snprintf(s->host, sizeof(s->host), "%s", h ? h + 3 : endpoint);
		s->host[strcspn(s->host, "/")] = '\0';
		s->path_style = 1;
	} else {
		snprintf(s->host, sizeof(s->host), "%s.s3.%s.amazonaws.com", bucket, s->region);
		snprintf(s->origin, sizeof(s->origin), "https://%s", s->host);
	}
	s->creds = (tb_sigv4_creds_t){ s->access_key, s->secret_key, s->token, s->region, "s3" };
	if (!s->access_key || !s->secret_key || !s->region) {
		s3_close(&s->base);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	snprintf(s->base.describe, sizeof(s->base.describe), "s3 %.200s/%s/%.200s (SigV4, %.32s)",
		 s->origin, s->bucket, s->prefix, s->region);
	*out = &s->base;
	return 0;
}
