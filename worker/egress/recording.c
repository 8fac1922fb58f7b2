/*
 * recording.c: the egress recording (recording.h, schemas/recording.md).
 */
#include "recording.h"
#include "tb/encoding.h"

#include "tb/clock.h"
#include "tb/codec.h"
#include "tb/fsutil.h"

#include <msgpack.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <unistd.h>

#define FLUSH_AT (64u << 10) /* an exchange's buffered records are written past this */

struct tb_recorder {
	int fd;
	uint64_t max_body, max_bytes;
	pthread_mutex_t lock;
	uint64_t bytes;   /* written so far */
	uint64_t next_x;  /* the next exchange's number */
	int full, broken; /* stopped: at max_bytes, or a write failed */
};

struct tb_rec_exchange {
	tb_recorder_t *r;
	const tb_endpoint_t *ep;
	uint64_t x, t0;
	msgpack_sbuffer buf; /* records not yet written */
	msgpack_packer pk;
	/* the request, until its record is written */
	char *method, *target;
	uint64_t at;
	msgpack_sbuffer headers; /* its headers' record fields, packed */
	EVP_MD_CTX *md;
	char *body;
	size_t body_len;
	uint64_t body_bytes;
	int request_written;
	uint64_t answer_bytes, answer_cut;
};

static EVP_MD *sha256;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
	sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

const EVP_MD *tb_rec_sha256(void)
{
	pthread_once(&sha256_once, sha256_fetch);
	return sha256 ? sha256 : EVP_sha256();
}

/* ------------------------------------------------------------ packing */

static void str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* Text as a str when it is UTF-8, else as bin: header values may be any
 * bytes. */
static void text(msgpack_packer *pk, const char *s, size_t len)
{
	if (tb_utf8_valid((const uint8_t *)s, len))
		msgpack_pack_str_with_body(pk, s, len);
	else
		msgpack_pack_bin_with_body(pk, s, len);
}

static void kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
	str(pk, k);
	msgpack_pack_uint64(pk, v);
}

static void kv_str(msgpack_packer *pk, const char *k, const char *v)
{
	str(pk, k);
	str(pk, v);
}

/* ------------------------------------------------------------ writing */

/* Writes @p len bytes as one record group, unless the stream stopped or
 * this would take it past max_bytes (then a "full" record, once). Under
 * no lock: takes the recorder's. */
static void put(tb_recorder_t *r, const char *data, size_t len)
{
	pthread_mutex_lock(&r->lock);
	if (r->full || r->broken) {
		pthread_mutex_unlock(&r->lock);
		return;
	}
	if (r->bytes + len > r->max_bytes) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 3);
		kv_str(&pk, "type", "full");
		kv_u64(&pk, "at", tb_wall_ms());
		kv_u64(&pk, "max_bytes", r->max_bytes);
		r->full = 1;
		if (tb_write_all(r->fd, sb.data, sb.size) < 0)
			r->broken = 1;
		else
			r->bytes += sb.size;
		msgpack_sbuffer_destroy(&sb);
		pthread_mutex_unlock(&r->lock);
		return;
	}
	if (tb_write_all(r->fd, data, len) < 0)
		r->broken = 1; /* a torn record, maybe: the stream stops here */
	else
		r->bytes += len;
	pthread_mutex_unlock(&r->lock);
}

/* The exchange's buffered records, written whole. */
static void flush(tb_rec_exchange_t *x)
{
	if (x->buf.size)
		put(x->r, x->buf.data, x->buf.size);
	msgpack_sbuffer_clear(&x->buf);
}

int tb_recorder_new(tb_recorder_t **out, int fd, const tb_recording_conf_t *conf,
		    const char *task_id, uint64_t attempt, const tb_bytes_t *task, tb_error_t *err)
{
	tb_recorder_t *r = calloc(1, sizeof(*r));
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int n = 5 + (task && task->len);

	*out = NULL;
	if (!r)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	r->fd = fd;
	r->max_body = conf->max_body_kib << 10;
	r->max_bytes = conf->max_mb << 20;
	pthread_mutex_init(&r->lock, NULL);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, (size_t)n);
	kv_str(&pk, "schema", "recording");
	kv_u64(&pk, "v", 1);
	kv_str(&pk, "task_id", task_id);
	kv_u64(&pk, "attempt", attempt);
	kv_u64(&pk, "started_at", tb_wall_ms());
	if (task && task->len) { /* already MessagePack: copied as is */
		str(&pk, "task");
		msgpack_sbuffer_write(&sb, (const char *)task->data, task->len);
	}
	int rc = tb_write_all(fd, sb.data, sb.size);
	r->bytes = sb.size;
	msgpack_sbuffer_destroy(&sb);
	if (rc < 0) {
		tb_recorder_free(r);
		return tb_error_errno(err, TB_EIO, errno, "egress recording: its header");
	}
	*out = r;
	return 0;
}

void tb_recorder_free(tb_recorder_t *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	free(r);
}

uint64_t tb_recorder_bytes(tb_recorder_t *r, int *cut)
{
	pthread_mutex_lock(&r->lock);
	uint64_t n = r->bytes;
	if (cut)
		*cut = r->full || r->broken;
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* ------------------------------------------------------------ headers */

/* Whether request header @p name carries a credential, or is one the
 * endpoint names secret. */
static int secret_header(const tb_endpoint_t *ep, const char *name, size_t len, int answer)
{
	static const char *const asked[] = { "Authorization", "Proxy-Authorization", "Cookie",
					     "X-Taskbox-Token" };
	const char *cred = ep->credential.header;

	for (size_t i = 0; !answer && i < sizeof(asked) / sizeof(asked[0]); i++)
		if (strlen(asked[i]) == len && !strncasecmp(name, asked[i], len))
			return 1;
	if (answer && len == 10 && !strncasecmp(name, "Set-Cookie", 10))
		return 1;
	if (!answer && cred && strlen(cred) == len && !strncasecmp(name, cred, len))
		return 1;
	for (size_t i = 0; i < ep->secret_headers.n; i++) {
		const char *s = ep->secret_headers.items[i];
		if (strlen(s) == len && !strncasecmp(name, s, len))
			return 1;
	}
	return 0;
}

/* One header line "Name: value" (no line end) into @p kept or @p removed. */
typedef struct header_lists {
	msgpack_sbuffer kept, removed;
	msgpack_packer kp, rp;
	size_t nkept, nremoved;
} header_lists_t;

static void lists_init(header_lists_t *h)
{
	memset(h, 0, sizeof(*h));
	msgpack_sbuffer_init(&h->kept);
	msgpack_sbuffer_init(&h->removed);
	msgpack_packer_init(&h->kp, &h->kept, msgpack_sbuffer_write);
	msgpack_packer_init(&h->rp, &h->removed, msgpack_sbuffer_write);
}

static void lists_add(header_lists_t *h, const tb_endpoint_t *ep, const char *name, size_t nl,
		      const char *v, size_t vl, int answer)
{
	if (secret_header(ep, name, nl, answer)) {
		text(&h->rp, name, nl);
		h->nremoved++;
		return;
	}
	msgpack_pack_array(&h->kp, 2);
	text(&h->kp, name, nl);
	text(&h->kp, v, vl);
	h->nkept++;
}

/* "headers" and "removed" into @p pk, @p h freed. */
static void lists_pack(msgpack_packer *pk, msgpack_sbuffer *sb, header_lists_t *h)
{
	str(pk, "headers");
	msgpack_pack_array(pk, h->nkept);
	msgpack_sbuffer_write(sb, h->kept.data, h->kept.size);
	str(pk, "removed");
	msgpack_pack_array(pk, h->nremoved);
	msgpack_sbuffer_write(sb, h->removed.data, h->removed.size);
	msgpack_sbuffer_destroy(&h->kept);
	msgpack_sbuffer_destroy(&h->removed);
}

/* ---------------------------------------------------------- exchanges */

tb_rec_exchange_t *tb_rec_begin(tb_recorder_t *r, const tb_endpoint_t *ep, const char *method,
				const char *target, const tb_http_request_t *req)
{
	tb_rec_exchange_t *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->r = r, x->ep = ep;
	x->t0 = tb_mono_ms();
	x->at = tb_wall_ms();
	x->method = strdup(method);
	x->target = strdup(target);
	if (!x->method || !x->target) {
		free(x->method);
		free(x->target);
		free(x);
		return NULL;
	}
	pthread_mutex_lock(&r->lock);
	x->x = r->next_x++;
	pthread_mutex_unlock(&r->lock);
	msgpack_sbuffer_init(&x->buf);
	msgpack_packer_init(&x->pk, &x->buf, msgpack_sbuffer_write);
	header_lists_t h;
	lists_init(&h);
	for (size_t i = 0; i < req->nheaders; i++)
		lists_add(&h, ep, req->headers[i].name, strlen(req->headers[i].name),
			  req->headers[i].value, strlen(req->headers[i].value), 0);
	msgpack_sbuffer_init(&x->headers);
	msgpack_packer hp;
	msgpack_packer_init(&hp, &x->headers, msgpack_sbuffer_write);
	lists_pack(&hp, &x->headers, &h);
	return x;
}

void tb_rec_request_body(tb_rec_exchange_t *x, const void *data, size_t len)
{
	if (!x || x->request_written || !len)
		return;
	if (!x->md) { /* on the first byte: most requests have none */
		if (!(x->md = EVP_MD_CTX_new()) ||
		    !EVP_DigestInit_ex(x->md, tb_rec_sha256(), NULL)) {
			EVP_MD_CTX_free(x->md);
			x->md = NULL;
			x->body_bytes += len; /* counted, its hash lost: it matches nothing */
			return;
		}
	}
	EVP_DigestUpdate(x->md, data, len);
	x->body_bytes += len;
	size_t room = x->r->max_body > x->body_len ? (size_t)(x->r->max_body - x->body_len) : 0;
	size_t keep = len < room ? len : room;
	if (!keep)
		return;
	char *more = realloc(x->body, x->body_len + keep);
	if (!more)
		return; /* counted, not kept */
	x->body = more;
	memcpy(x->body + x->body_len, data, keep);
	x->body_len += keep;
}

/* The request's record, once: before its answer's, or at its end. */
static void request_record(tb_rec_exchange_t *x)
{
	unsigned char sum[32];
	char sha[65];
	msgpack_packer *pk = &x->pk;

	if (x->request_written)
		return;
	x->request_written = 1;
	if (!x->md) {
		snprintf(sha, sizeof(sha), "%s", x->body_bytes ? "" : TB_REC_EMPTY_SHA256);
	} else {
		EVP_DigestFinal_ex(x->md, sum, NULL);
		tb_hex(sha, sum, sizeof(sum));
	}
	msgpack_pack_map(pk, 12);
	kv_str(pk, "type", "request");
	kv_u64(pk, "x", x->x);
	kv_u64(pk, "at", x->at);
	kv_str(pk, "endpoint", x->ep->name);
	kv_str(pk, "method", x->method);
	kv_str(pk, "target", x->target);
	msgpack_sbuffer_write(&x->buf, x->headers.data, x->headers.size); /* headers, removed */
	str(pk, "body");
	msgpack_pack_bin_with_body(pk, x->body ? x->body : "", x->body_len);
	kv_u64(pk, "body_bytes", x->body_bytes);
	kv_str(pk, "body_sha256", sha);
	kv_u64(pk, "body_cut", x->body_bytes - x->body_len);
	free(x->body);
	x->body = NULL;
	msgpack_sbuffer_destroy(&x->headers);
	msgpack_sbuffer_init(&x->headers);
}

void tb_rec_response(tb_rec_exchange_t *x, long status, const char *head, size_t len, int stream)
{
	header_lists_t h;
	msgpack_packer *pk;

	if (!x)
		return;
	request_record(x);
	lists_init(&h);
	for (const char *p = head, *end = head + len; p < end;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *line_end = eol ? eol : end;
		const char *colon = memchr(p, ':', (size_t)(line_end - p));
		if (colon) {
			const char *v = colon + 1, *ve = line_end;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			lists_add(&h, x->ep, p, (size_t)(colon - p), v, (size_t)(ve - v), 1);
		}
		p = eol ? eol + 1 : end;
	}
	pk = &x->pk;
	msgpack_pack_map(pk, 7);
	kv_str(pk, "type", "response");
	kv_u64(pk, "x", x->x);
	kv_u64(pk, "at_ms", tb_mono_ms() - x->t0);
	kv_u64(pk, "status", (uint64_t)status);
	lists_pack(pk, &x->buf, &h);
	str(pk, "stream");
	if (stream)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
	if (x->buf.size >= FLUSH_AT)
		flush(x);
}

void tb_rec_chunk(tb_rec_exchange_t *x, const void *data, size_t len)
{
	if (!x || !len)
		return;
	uint64_t room = x->r->max_body > x->answer_bytes - x->answer_cut
			    ? x->r->max_body - (x->answer_bytes - x->answer_cut)
			    : 0;
	size_t keep = len < room ? len : (size_t)room;
	x->answer_bytes += len;
	x->answer_cut += len - keep;
	if (!keep)
		return;
	msgpack_packer *pk = &x->pk;
	msgpack_pack_map(pk, 4);
	kv_str(pk, "type", "chunk");
	kv_u64(pk, "x", x->x);
	kv_u64(pk, "at_ms", tb_mono_ms() - x->t0);
	str(pk, "data");
	msgpack_pack_bin_with_body(pk, data, keep);
	if (x->buf.size >= FLUSH_AT)
		flush(x);
}

void tb_rec_end(tb_rec_exchange_t *x, const char *error)
{
	if (!x)
		return;
	request_record(x);
	msgpack_packer *pk = &x->pk;
	msgpack_pack_map(pk, 5 + (error != NULL));
	kv_str(pk, "type", "end");
	kv_u64(pk, "x", x->x);
	kv_u64(pk, "at_ms", tb_mono_ms() - x->t0);
	kv_u64(pk, "body_bytes", x->answer_bytes);
	kv_u64(pk, "body_cut", x->answer_cut);
	if (error) {
		str(pk, "error");
		text(pk, error, strlen(error));
	}
	flush(x);
	msgpack_sbuffer_destroy(&x->buf);
	msgpack_sbuffer_destroy(&x->headers);
	EVP_MD_CTX_free(x->md);
	free(x->body);
	free(x->method);
	free(x->target);
	free(x);
}
