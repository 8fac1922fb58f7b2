/*
 * recording_read.c: an egress recording read back (recording.h,
 * schemas/recording.md), for a replay and for whoever looks at one.
 */
#include "recording.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of @p key in map @p o, or NULL. */
static const msgpack_object *get(const msgpack_object *o, const char *key)
{
	size_t kl = strlen(key);

	if (o->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == kl &&
		    !memcmp(kv->key.via.str.ptr, key, kl))
			return &kv->val;
	}
	return NULL;
}

static uint64_t u64(const msgpack_object *o, const char *key)
{
	const msgpack_object *v = get(o, key);
	return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? v->via.u64 : 0;
}

/* A str or bin value as a NUL-terminated copy ("" when absent); aborts
 * without memory (docs/architecture.md, "Conventions"). */
static char *text(const msgpack_object *v)
{
	const char *p = "";
	size_t n = 0;

	if (v && v->type == MSGPACK_OBJECT_STR)
		p = v->via.str.ptr, n = v->via.str.size;
	else if (v && v->type == MSGPACK_OBJECT_BIN)
		p = v->via.bin.ptr, n = v->via.bin.size;
	char *s = malloc(n + 1);
	if (!s)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

static char *text_of(const msgpack_object *o, const char *key)
{
	return text(get(o, key));
}

/* A bin value's bytes, copied (NULL and 0 when empty or absent). */
static uint8_t *bytes(const msgpack_object *v, size_t *len)
{
	*len = 0;
	if (!v || v->type != MSGPACK_OBJECT_BIN || !v->via.bin.size)
		return NULL;
	uint8_t *b = malloc(v->via.bin.size);
	if (!b)
		abort();
	memcpy(b, v->via.bin.ptr, v->via.bin.size);
	*len = v->via.bin.size;
	return b;
}

/* A "headers" list of [name, value] pairs. */
static tb_rec_header_t *headers(const msgpack_object *v, size_t *n)
{
	*n = 0;
	if (!v || v->type != MSGPACK_OBJECT_ARRAY || !v->via.array.size)
		return NULL;
	tb_rec_header_t *h = calloc(v->via.array.size, sizeof(*h));
	if (!h)
		abort();
	for (uint32_t i = 0; i < v->via.array.size; i++) {
		const msgpack_object *pair = &v->via.array.ptr[i];
		if (pair->type != MSGPACK_OBJECT_ARRAY || pair->via.array.size != 2)
			continue;
		h[*n].name = text(&pair->via.array.ptr[0]);
		h[*n].value = text(&pair->via.array.ptr[1]);
		(*n)++;
	}
	return h;
}

/* Exchange @p x of @p r, made on first sight. */
static tb_rec_exchange_read_t *exchange(tb_recording_t *r, uint64_t x)
{
	for (size_t i = r->n; i-- > 0;)
		if (r->xs[i].x == x)
			return &r->xs[i];
	tb_rec_exchange_read_t *more = realloc(r->xs, (r->n + 1) * sizeof(*more));
	if (!more)
		abort();
	r->xs = more;
	tb_rec_exchange_read_t *e = &r->xs[r->n++];
	memset(e, 0, sizeof(*e));
	e->x = x;
	return e;
}

static void request(tb_rec_exchange_read_t *e, const msgpack_object *o)
{
	char *sha = text_of(o, "body_sha256");

	e->has_request = 1;
	e->endpoint = text_of(o, "endpoint");
	e->method = text_of(o, "method");
	e->target = text_of(o, "target");
	e->at = u64(o, "at");
	e->headers = headers(get(o, "headers"), &e->nheaders);
	e->body = bytes(get(o, "body"), &e->body_len);
	e->body_bytes = u64(o, "body_bytes");
	snprintf(e->body_sha256, sizeof(e->body_sha256), "%s", sha);
	free(sha);
}

static void response(tb_rec_exchange_read_t *e, const msgpack_object *o)
{
	const msgpack_object *stream = get(o, "stream");

	e->has_response = 1;
	e->status = (long)u64(o, "status");
	e->response_ms = u64(o, "at_ms");
	e->rheaders = headers(get(o, "headers"), &e->nrheaders);
	e->stream = stream && stream->type == MSGPACK_OBJECT_BOOLEAN && stream->via.boolean;
}

static void piece(tb_rec_exchange_read_t *e, const msgpack_object *o)
{
	tb_rec_piece_t *more = realloc(e->pieces, (e->npieces + 1) * sizeof(*more));
	if (!more)
		abort();
	e->pieces = more;
	tb_rec_piece_t *p = &e->pieces[e->npieces++];
	p->at_ms = u64(o, "at_ms");
	p->data = bytes(get(o, "data"), &p->len);
}

static void end(tb_rec_exchange_read_t *e, const msgpack_object *o)
{
	e->ended = 1;
	e->end_ms = u64(o, "at_ms");
	e->answer_bytes = u64(o, "body_bytes");
	e->answer_cut = u64(o, "body_cut");
	if (get(o, "error"))
		e->error = text_of(o, "error");
}

/* One record after the header. @return 0, or -1 when it is none. */
static int record(tb_recording_t *r, const msgpack_object *o)
{
	char *type = text_of(o, "type");
	int rc = 0;

	if (!strcmp(type, "full")) {
		r->full = 1;
	} else if (!get(o, "x")) {
		rc = -1;
	} else {
		tb_rec_exchange_read_t *e = exchange(r, u64(o, "x"));
		if (!strcmp(type, "request"))
			request(e, o);
		else if (!strcmp(type, "response"))
			response(e, o);
		else if (!strcmp(type, "chunk"))
			piece(e, o);
		else if (!strcmp(type, "end"))
			end(e, o);
		/* a type this reader does not know: skipped, as event types are */
	}
	free(type);
	return rc;
}

static int header(tb_recording_t *r, const msgpack_object *o, tb_error_t *err)
{
	char *schema = text_of(o, "schema");
	int ok = !strcmp(schema, "recording") && u64(o, "v") == 1;
	free(schema);
	if (!ok)
		return tb_error_set(err, TB_EINVAL,
				    "not an egress recording: its first value is not a "
				    "{\"schema\": \"recording\", \"v\": 1} header");
	r->task_id = text_of(o, "task_id");
	r->attempt = u64(o, "attempt");
	r->started_at = u64(o, "started_at");
	const msgpack_object *task = get(o, "task");
	if (task && task->type == MSGPACK_OBJECT_MAP) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_object(&pk, *task);
		r->task_len = sb.size;
		r->task = (uint8_t *)msgpack_sbuffer_release(&sb);
	}
	return 0;
}

static int by_x(const void *a, const void *b)
{
	uint64_t x = ((const tb_rec_exchange_read_t *)a)->x,
		 y = ((const tb_rec_exchange_read_t *)b)->x;
	return x < y ? -1 : x > y;
}

int tb_recording_read(tb_recording_t *out, const void *data, size_t len, tb_error_t *err)
{
	msgpack_unpacked u;
	size_t off = 0;
	int rc = 0, first = 1;

	memset(out, 0, sizeof(*out));
	msgpack_unpacked_init(&u);
	while (off < len && rc == 0) {
		size_t at = off;
		msgpack_unpack_return ur = msgpack_unpack_next(&u, data, len, &off);
		if (ur == MSGPACK_UNPACK_CONTINUE) { /* cut inside a record */
			out->truncated = 1;
			break;
		}
		if (ur != MSGPACK_UNPACK_SUCCESS || u.data.type != MSGPACK_OBJECT_MAP)
			rc = tb_error_set(err, TB_EINVAL,
					  "egress recording: byte %zu holds no record (a map)", at);
		else if (first)
			rc = header(out, &u.data, err);
		else if (record(out, &u.data) < 0)
			rc = tb_error_set(err, TB_EINVAL,
					  "egress recording: the record at byte %zu names no "
					  "exchange ('x')",
					  at);
		first = 0;
	}
	msgpack_unpacked_destroy(&u);
	if (rc == 0 && first)
		rc = tb_error_set(err, TB_EINVAL, "not an egress recording: it is empty");
	if (rc < 0)
		tb_recording_free(out);
	else if (out->n)
		qsort(out->xs, out->n, sizeof(*out->xs), by_x);
	return rc;
}

static void free_headers(tb_rec_header_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(h[i].name);
		free(h[i].value);
	}
	free(h);
}

void tb_recording_free(tb_recording_t *r)
{
	for (size_t i = 0; i < r->n; i++) {
		tb_rec_exchange_read_t *e = &r->xs[i];
		free(e->endpoint);
		free(e->method);
		free(e->target);
		free_headers(e->headers, e->nheaders);
		free_headers(e->rheaders, e->nrheaders);
		free(e->body);
		for (size_t k = 0; k < e->npieces; k++)
			free(e->pieces[k].data);
		free(e->pieces);
		free(e->error);
	}
	free(r->xs);
	free(r->task_id);
	free(r->task);
	memset(r, 0, sizeof(*r));
}
