/*
 * server.c: `taskbox view`'s web server (server.h).
 */
#include "server.h"
#include "tb/listen.h"

#include "actions.h"
#include "assets.h"
#include "fleet.h"
#include "history.h"
#include "tb/clock.h"

#include "tb/codec.h"
#include "tb/encoding.h"
#include "tb/json_mpack.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <malloc.h>
#include <microhttpd.h>
#include <net/if.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 128u /* each a thread: bounded */
#define MAX_EVENTS 200000    /* a page's events at most */
#define MAX_MANIFEST (8u << 20)
#define MAX_POST (320u << 10) /* a follow-up's text (256 KiB at most), and the rest */

/* Every answer: the page's own script and style only, nothing framed,
 * nothing sent elsewhere; the browser never guesses a type. */
static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
			  "img-src 'self'; connect-src 'self'; base-uri 'none'; "
			  "form-action 'self'; frame-ancestors 'none'";

struct tb_view_server {
	tb_view_server_conf_t c;
	struct MHD_Daemon *d;
	unsigned port;
	int loopback;
	char csrf[65];
	char *page; /* index.html with the CSRF token in */
	size_t page_len;
	char hosts[4][300]; /* what Host may say, bound to loopback */
	char url[320];      /* http://HOST:PORT, as a browser opens it */
	tb_view_reader_t *reader;
	pthread_mutex_t ledger_lock; /* a ledger connection is one thread's at a time */
};

static void headers(struct MHD_Response *r, const char *type)
{
	MHD_add_response_header(r, "Content-Security-Policy", CSP);
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(r, "X-Frame-Options", "DENY");
	MHD_add_response_header(r, "Cross-Origin-Opener-Policy", "same-origin");
	MHD_add_response_header(r, "Cross-Origin-Resource-Policy", "same-origin");
	if (type)
		MHD_add_response_header(r, "Content-Type", type);
}

static enum MHD_Result send_buf(struct MHD_Connection *c, unsigned status, const char *type,
				void *data, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, data, mode);
	if (!r) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(data);
		return MHD_NO;
	}
	headers(r, type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* @p j (taken) as the answer. */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return MHD_NO;
	return send_buf(c, status, "application/json", text, strlen(text), MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *why)
{
	return send_json(c, status, json_pack("{s:s}", "error", why));
}

static const char *arg(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
}

static uint64_t arg_u64(struct MHD_Connection *c, const char *name)
{
	const char *v = arg(c, name);
	return v ? strtoull(v, NULL, 10) : 0;
}

/* ------------------------------------------------------------ who asks */

/* Constant-time: a token is not guessed a byte at a time. */
static int same(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = la != lb;
	for (size_t i = 0; i < la && i < lb; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

static int authorized(const tb_view_server_t *s, struct MHD_Connection *c)
{
	if (!s->c.token)
		return 1;
	const char *cookie = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, "taskbox_view");
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	return (cookie && same(cookie, s->c.token)) ||
	       (auth && !strncmp(auth, "Bearer ", 7) && same(auth + 7, s->c.token));
}

/* Bound to loopback, only a Host of that address is answered: a page of
 * another site, its name pointed at 127.0.0.1, reads nothing. */
static int host_ok(const tb_view_server_t *s, struct MHD_Connection *c)
{
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	if (!s->loopback || s->c.token)
		return 1;
	for (size_t i = 0; host && i < 4; i++) {
		size_t n = strlen(s->hosts[i]);
		if (n && !strcmp(host, s->hosts[i]))
			return 1;
		/* port 80: browsers leave it out */
		if (n > 3 && s->port == 80 && !strncmp(host, s->hosts[i], n - 3) && !host[n - 3])
			return 1;
	}
	return 0;
}

/* ------------------------------------------------------------ answers */

static enum MHD_Result tasks(tb_view_server_t *s, struct MHD_Connection *c)
{
	tb_view_query_t q = {
		.recipe = arg(c, "recipe"),
		.runtime = arg(c, "runtime"),
		.status = arg(c, "status"),
		.q = arg(c, "q"),
		.since_ms = (int64_t)arg_u64(c, "since"),
		.until_ms = (int64_t)arg_u64(c, "until"),
		.offset = (size_t)arg_u64(c, "offset"),
		.limit = (size_t)arg_u64(c, "limit"),
	};
	json_t *j = tb_view_index_list(s->c.index, &q);
	int caught_up = 0;
	uint64_t messages = 0, skipped = 0;
	tb_view_feed_state(s->c.feed, &caught_up, &messages, &skipped);
	if (j)
		json_object_set_new(j, "caught_up", json_boolean(caught_up));
	return send_json(c, MHD_HTTP_OK, j);
}

/* Manifest @p key of task @p id as JSON, or NULL. */
static json_t *manifest(tb_view_server_t *s, const char *id, const char *key)
{
	char prefix[200];
	char *data = NULL;
	size_t len = 0;
	json_t *j = NULL;
	tb_error_t err;

	snprintf(prefix, sizeof(prefix), "tasks/%s/", id);
	if (!s->c.store || !key || strncmp(key, prefix, strlen(prefix)))
		return NULL;
	if (tb_store_get_bytes(s->c.store, key, MAX_MANIFEST, &data, &len, &err) < 0)
		return json_pack("{s:s}", "unreadable", err.msg);
	if (tb_mpack_to_json(&j, data, len, &err) < 0)
		j = json_pack("{s:s}", "unreadable", err.msg);
	free(data);
	return j;
}

static enum MHD_Result task(tb_view_server_t *s, struct MHD_Connection *c)
{
	const char *id = arg(c, "id");
	uint64_t want = arg_u64(c, "attempt");
	json_t *j = id ? tb_view_index_get(s->c.index, id, NULL) : NULL;
	if (!j)
		return send_error(c, MHD_HTTP_NOT_FOUND, "no such task seen");
	/* the attempt asked for, else the latest with a manifest */
	json_t *list = json_object_get(j, "attempt_list"), *a, *pick = NULL;
	size_t i;
	json_array_foreach(list, i, a)
	{
		uint64_t n = (uint64_t)json_integer_value(json_object_get(a, "attempt"));
		if ((want && n == want) ||
		    (!want && json_is_string(json_object_get(a, "manifest_key"))))
			pick = a;
	}
	if (pick) {
		json_t *m =
		    manifest(s, id, json_string_value(json_object_get(pick, "manifest_key")));
		json_object_set_new(j, "manifest", m ? m : json_null());
		json_object_set(j, "manifest_attempt", json_object_get(pick, "attempt"));
	}
	return send_json(c, MHD_HTTP_OK, j);
}

static enum MHD_Result events(tb_view_server_t *s, struct MHD_Connection *c)
{
	const char *id = arg(c, "id");
	tb_view_span_t span;
	tb_error_t err;
	json_t *summary = id ? tb_view_index_get(s->c.index, id, &span) : NULL;

	if (!summary)
		return send_error(c, MHD_HTTP_NOT_FOUND, "no such task seen");
	json_decref(summary);
	json_t *list =
	    tb_view_history(s->reader, id, &span, arg_u64(c, "attempt"), MAX_EVENTS, &err);
	if (!list)
		return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, err.msg);
	size_t n = json_array_size(list);
	enum MHD_Result rc = send_json(c, MHD_HTTP_OK, list);
	if (n > 1000)
		malloc_trim(0); /* megabytes of JSON freed: given back, not kept */
	return rc;
}

static ssize_t live_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	ssize_t n = tb_view_live_read(cls, buf, max, 15000);
	return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void live_done(void *cls)
{
	tb_view_live_unsubscribe(cls);
}

static enum MHD_Result live(tb_view_server_t *s, struct MHD_Connection *c)
{
	const char *id = arg(c, "id");
	if (!id || !id[0] || strlen(id) > 128)
		return send_error(c, MHD_HTTP_BAD_REQUEST, "id: a task id");
	tb_view_sub_t *sub = tb_view_live_subscribe(s->c.live, id);
	if (!sub)
		return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "too many pages watching");
	struct MHD_Response *r =
	    MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, live_read, sub, live_done);
	if (!r) {
		tb_view_live_unsubscribe(sub);
		return MHD_NO;
	}
	headers(r, "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return rc;
}

/* Whether @p key names a file an attempt saved, exactly:
 * tasks/<task id>/<attempt>/outputs/<relative path>. */
static int artifact_key(const char *key)
{
	char id[200], why[200];
	const char *p;
	size_t n;

	if (!key || strncmp(key, "tasks/", 6) || strlen(key) > 2048)
		return 0;
	p = key + 6;
	n = strcspn(p, "/");
	if (!n || n >= sizeof(id) || p[n] != '/')
		return 0;
	memcpy(id, p, n);
	id[n] = '\0';
	if (tb_check_id(id, why, sizeof(why)) != 0)
		return 0;
	p += n + 1;
	n = strspn(p, "0123456789");
	if (!n || n > 4 || p[0] == '0' || strncmp(p + n, "/outputs/", 9))
		return 0;
	p += n + 9;
	return *p && tb_check_relpath(p, why, sizeof(why)) == 0;
}

static enum MHD_Result artifact(tb_view_server_t *s, struct MHD_Connection *c)
{
	const char *key = arg(c, "key");
	char path[] = "/tmp/taskbox-view-XXXXXX", disp[1200], name[600];
	tb_error_t err;
	struct stat st;

	if (!artifact_key(key))
		return send_error(c, MHD_HTTP_BAD_REQUEST,
				  "key: a saved file's key (tasks/ID/N/outputs/PATH)");
	if (!s->c.store)
		return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no store");
	int fd = mkstemp(path);
	if (fd < 0)
		return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, strerror(errno));
	close(fd);
	int rc = tb_store_get_file(s->c.store, key, path, 0, NULL, &err);
	fd = rc < 0 ? -1 : open(path, O_RDONLY | O_CLOEXEC);
	unlink(path); /* gone with its last descriptor */
	if (rc < 0)
		return send_error(c, rc == TB_ENOTFOUND ? MHD_HTTP_NOT_FOUND : MHD_HTTP_BAD_GATEWAY,
				  err.msg);
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "the download vanished");
	}
	struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	if (!r) {
		close(fd);
		return MHD_NO;
	}
	/* a download, named by its last segment, percent-encoded (RFC 6266) */
	const char *base = strrchr(key, '/') + 1;
	if (tb_percent_encode(name, sizeof(name), base, 0) < 0)
		snprintf(name, sizeof(name), "download");
	snprintf(disp, sizeof(disp), "attachment; filename*=UTF-8''%s", name);
	headers(r, "application/octet-stream");
	MHD_add_response_header(r, "Content-Disposition", disp);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result fleet(tb_view_server_t *s, struct MHD_Connection *c)
{
	int caught_up = 0;
	uint64_t messages = 0, skipped = 0;
	tb_error_t err;

	tb_view_feed_state(s->c.feed, &caught_up, &messages, &skipped);
	json_t *j = json_object();
	json_object_set_new(j, "rates", tb_view_index_rates(s->c.index, (int64_t)tb_wall_ms(), 60));
	json_t *workers = json_array();
	if (s->c.ledger) {
		char **infos = NULL;
		size_t n = 0;
		pthread_mutex_lock(&s->ledger_lock);
		int rc = tb_ledger_workers(s->c.ledger, &infos, &n, &err);
		pthread_mutex_unlock(&s->ledger_lock);
		for (size_t i = 0; rc == 0 && i < n; i++) {
			json_t *w = json_loads(infos[i], 0, NULL);
			json_array_append_new(workers,
					      w ? w : json_pack("{s:s}", "unreadable", infos[i]));
			free(infos[i]);
		}
		free(infos);
		if (rc < 0)
			json_object_set_new(j, "workers_error", json_string(err.msg));
	}
	json_object_set_new(j, "workers", workers);
	json_t *lag = tb_fleet_lag(s->c.cfg, &err);
	json_object_set_new(j, "lag", lag ? lag : json_pack("{s:s}", "error", err.msg));
	json_object_set_new(j, "feed",
			    json_pack("{s:b,s:I,s:I}", "caught_up", caught_up, "messages",
				      (json_int_t)messages, "skipped", (json_int_t)skipped));
	return send_json(c, MHD_HTTP_OK, j);
}

/* ------------------------------------------------------------ changes */

/* A POST's body, gathered over MHD's calls. */
typedef struct post {
	char *data;
	size_t len;
	int too_big;
} post_t;

/* Whether a POST may change anything: it carries the page's CSRF token
 * (a page elsewhere cannot read it, nor set the header without CORS,
 * which this never allows), and an Origin, when the browser sends one,
 * of this very host. */
static int same_origin(const tb_view_server_t *s, struct MHD_Connection *c)
{
	const char *csrf = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Taskbox-CSRF");
	const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	char want[400];

	if (!csrf || !same(csrf, s->csrf))
		return 0;
	if (!origin)
		return 1;
	snprintf(want, sizeof(want), "http://%s", host ? host : "");
	return !strcmp(origin, want);
}

static const char *field(json_t *body, const char *k)
{
	return json_string_value(json_object_get(body, k));
}

static enum MHD_Result followup(tb_view_server_t *s, struct MHD_Connection *c, json_t *body,
				int end)
{
	const char *id = field(body, "id"), *text = field(body, "text");
	uint64_t seq = 0;
	tb_error_t err;

	if (!id || (!end && !text))
		return send_error(c, MHD_HTTP_BAD_REQUEST,
				  end ? "{\"id\"}: the task"
				      : "{\"id\", \"text\"}: the task and the prompt");
	int rc = tb_followup_send(s->c.cfg, id, end ? NULL : text, 0, &seq, &err);
	if (rc < 0)
		return send_error(c, rc == TB_EINVAL ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_BAD_GATEWAY,
				  err.msg);
	return send_json(c, MHD_HTTP_OK, json_pack("{s:I}", "seq", (json_int_t)seq));
}

static enum MHD_Result share(tb_view_server_t *s, struct MHD_Connection *c, json_t *body)
{
	const char *key = field(body, "key");
	json_int_t seconds = json_integer_value(json_object_get(body, "seconds"));
	tb_error_t err;
	char *url = NULL;

	if (!artifact_key(key))
		return send_error(c, MHD_HTTP_BAD_REQUEST,
				  "key: a saved file's key (tasks/ID/N/outputs/PATH)");
	if (!s->c.store)
		return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no store");
	if (seconds <= 0 || seconds > 7 * 86400)
		seconds = 86400;
	if (tb_store_share(s->c.store, key, (unsigned)seconds, &url, &err) < 0)
		return send_error(c, MHD_HTTP_BAD_REQUEST, err.msg);
	json_t *j = json_pack("{s:s,s:I}", "url", url, "seconds", seconds);
	free(url);
	return send_json(c, MHD_HTTP_OK, j);
}

static enum MHD_Result send_back(tb_view_server_t *s, struct MHD_Connection *c, json_t *body)
{
	json_t *p = json_object_get(body, "partition"), *o = json_object_get(body, "offset");
	char task[200];
	tb_error_t err;

	if (!json_is_integer(p) || !json_is_integer(o) || json_integer_value(p) < 0 ||
	    json_integer_value(p) > INT32_MAX || json_integer_value(o) < 0)
		return send_error(c, MHD_HTTP_BAD_REQUEST,
				  "{\"partition\", \"offset\"}: the record");
	int rc = tb_dlq_send_back(s->c.cfg, (int32_t)json_integer_value(p), json_integer_value(o),
				  task, sizeof(task), &err);
	if (rc < 0)
		return send_error(c,
				  rc == TB_ENOTFOUND                   ? MHD_HTTP_NOT_FOUND
				  : rc == TB_EINVAL || rc == TB_ERETRY ? MHD_HTTP_CONFLICT
								       : MHD_HTTP_BAD_GATEWAY,
				  err.msg);
	return send_json(c, MHD_HTTP_OK, json_pack("{s:s}", "task", task));
}

static enum MHD_Result change(tb_view_server_t *s, struct MHD_Connection *c, const char *url,
			      const post_t *p)
{
	json_error_t jerr;

	if (p->too_big)
		return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "the body is over 320 KiB");
	if (!same_origin(s, c))
		return send_error(c, MHD_HTTP_FORBIDDEN,
				  "not from this page (its X-Taskbox-CSRF token, its origin)");
	json_t *body = json_loadb(p->data ? p->data : "", p->len, 0, &jerr);
	if (!json_is_object(body)) {
		json_decref(body);
		return send_error(c, MHD_HTTP_BAD_REQUEST, "the body is not a JSON object");
	}
	enum MHD_Result rc;
	if (!strcmp(url, "/api/followup"))
		rc = followup(s, c, body, 0);
	else if (!strcmp(url, "/api/end"))
		rc = followup(s, c, body, 1);
	else if (!strcmp(url, "/api/share"))
		rc = share(s, c, body);
	else if (!strcmp(url, "/api/dlq/send"))
		rc = send_back(s, c, body);
	else
		rc = send_error(c, MHD_HTTP_NOT_FOUND, "not found");
	json_decref(body);
	return rc;
}

/* Gathers a POST's body; answers once it is whole. */
static enum MHD_Result post(tb_view_server_t *s, struct MHD_Connection *c, const char *url,
			    const char *upload, size_t *upload_size, void **state)
{
	post_t *p = *state;

	if (!p) { /* the headers: the body follows */
		if (!(p = calloc(1, sizeof(*p))))
			return MHD_NO;
		*state = p;
		return MHD_YES;
	}
	if (*upload_size) {
		if (p->len + *upload_size > MAX_POST) {
			p->too_big = 1;
		} else {
			char *more = realloc(p->data, p->len + *upload_size + 1);
			if (!more)
				return MHD_NO;
			memcpy(more + p->len, upload, *upload_size);
			p->data = more;
			p->len += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	return change(s, c, url, p);
}

static void done(void *cls, struct MHD_Connection *c, void **state,
		 enum MHD_RequestTerminationCode why)
{
	post_t *p = *state;

	(void)cls, (void)c, (void)why;
	if (p) {
		free(p->data);
		free(p);
		*state = NULL;
	}
}

static enum MHD_Result asset(tb_view_server_t *s, struct MHD_Connection *c, const char *url)
{
	if (!strcmp(url, "/") || !strncmp(url, "/task/", 6) || !strcmp(url, "/fleet"))
		return send_buf(c, MHD_HTTP_OK, "text/html; charset=utf-8", s->page, s->page_len,
				MHD_RESPMEM_PERSISTENT);
	for (size_t i = 0; i < tb_view_nassets; i++)
		if (!strncmp(url, "/static/", 8) && !strcmp(url + 8, tb_view_assets[i].name))
			return send_buf(c, MHD_HTTP_OK, tb_view_assets[i].type,
					(void *)tb_view_assets[i].data, tb_view_assets[i].len,
					MHD_RESPMEM_PERSISTENT);
	return send_error(c, MHD_HTTP_NOT_FOUND, "not found");
}

/* /login?token=T: the token as a cookie (HttpOnly, SameSite=Strict), then
 * the page. */
static enum MHD_Result login(tb_view_server_t *s, struct MHD_Connection *c)
{
	const char *t = arg(c, "token");
	char cookie[600];

	if (!s->c.token || !t || !same(t, s->c.token))
		return send_error(c, MHD_HTTP_FORBIDDEN, "a wrong token");
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	snprintf(cookie, sizeof(cookie), "taskbox_view=%s; HttpOnly; SameSite=Strict; Path=/",
		 s->c.token);
	headers(r, NULL);
	MHD_add_response_header(r, "Set-Cookie", cookie);
	MHD_add_response_header(r, "Location", "/");
	enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_SEE_OTHER, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **state)
{
	tb_view_server_t *s = cls;

	(void)version;
	if (!host_ok(s, c))
		return send_error(c, MHD_HTTP_MISDIRECTED_REQUEST,
				  "Host is not the address this listens on");
	if (!strcmp(url, "/login") && !strcmp(method, "GET"))
		return login(s, c);
	if (!authorized(s, c))
		return send_error(c, MHD_HTTP_UNAUTHORIZED,
				  "a token is needed: open /login?token=TOKEN");
	if (!strcmp(method, "POST"))
		return post(s, c, url, upload, upload_size, state);
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET, or POST to change");
	if (!strcmp(url, "/api/dlq"))
		return send_json(c, MHD_HTTP_OK, tb_view_index_dead_letters(s->c.index));
	if (!strcmp(url, "/api/tasks"))
		return tasks(s, c);
	if (!strcmp(url, "/api/task"))
		return task(s, c);
	if (!strcmp(url, "/api/events"))
		return events(s, c);
	if (!strcmp(url, "/api/live"))
		return live(s, c);
	if (!strcmp(url, "/api/artifact"))
		return artifact(s, c);
	if (!strcmp(url, "/api/fleet"))
		return fleet(s, c);
	return asset(s, c, url);
}

/* ------------------------------------------------------------ start */

/* index.html with the CSRF token where it says __CSRF__. */
static int make_page(tb_view_server_t *s)
{
	static const char mark[] = "__CSRF__";
	const tb_view_asset_t *a = NULL;
	for (size_t i = 0; i < tb_view_nassets; i++)
		if (!strcmp(tb_view_assets[i].name, "index.html"))
			a = &tb_view_assets[i];
	if (!a)
		return -1;
	const char *text = (const char *)a->data, *at = strstr(text, mark);
	size_t before = at ? (size_t)(at - text) : a->len;
	s->page_len = a->len + (at ? 64 - (sizeof(mark) - 1) : 0);
	if (!(s->page = malloc(s->page_len + 1)))
		return -1;
	memcpy(s->page, text, before);
	if (at) {
		memcpy(s->page + before, s->csrf, 64);
		memcpy(s->page + before + 64, at + sizeof(mark) - 1,
		       a->len - before - (sizeof(mark) - 1));
	}
	s->page[s->page_len] = '\0';
	return 0;
}

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static int is_wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* A wildcard address (0.0.0.0, ::) is nowhere a browser can go: the URL
 * names the machine instead, when its name resolves, else the first
 * address of an interface that is up and not loopback, else loopback
 * (listened on too). */
static void browsable_host(char *out, size_t n)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	struct ifaddrs *ifs = NULL;
	char name[256] = "";

	/* gethostname() may leave a name cut to the buffer unterminated */
	if (gethostname(name, sizeof(name) - 1) == 0 && name[0] &&
	    getaddrinfo(name, NULL, &hints, &ai) == 0) {
		freeaddrinfo(ai);
		snprintf(out, n, "%s", name);
		return;
	}
	snprintf(out, n, "127.0.0.1");
	if (getifaddrs(&ifs) < 0)
		return;
	for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !is_loopback(i->ifa_addr) &&
		    (i->ifa_flags & IFF_UP) &&
		    inet_ntop(AF_INET, &((const struct sockaddr_in *)i->ifa_addr)->sin_addr, out,
			      (socklen_t)n))
			break;
	freeifaddrs(ifs);
}

/* The URL printed at start: the host given, or a browsable one. */
static void set_url(tb_view_server_t *s, const char *host, int wildcard)
{
	char name[256];

	if (wildcard)
		browsable_host(name, sizeof(name));
	else
		snprintf(name, sizeof(name), "%s", host);
	snprintf(s->url, sizeof(s->url), strchr(name, ':') ? "http://[%s]:%u" : "http://%s:%u",
		 name, s->port);
}

int tb_view_server_start(tb_view_server_t **out, const tb_view_server_conf_t *conf, tb_error_t *err)
{
	const char *listen = conf->listen;
	struct addrinfo *ai = NULL;
	char host[256];
	uint8_t raw[32];
	int rc;

	*out = NULL;
	if ((rc = tb_listen_resolve(&ai, host, sizeof(host), "--listen", listen, NULL, err)) < 0)
		return rc;
	tb_view_server_t *s = calloc(1, sizeof(*s));
	if (!s) {
		freeaddrinfo(ai);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	s->c = *conf;
	s->loopback = is_loopback(ai->ai_addr);
	int wildcard = is_wildcard(ai->ai_addr);
	if (conf->token &&
	    (strlen(conf->token) > 256 ||
	     strspn(conf->token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				 "0123456789._~-") != strlen(conf->token))) {
		freeaddrinfo(ai);
		free(s);
		return tb_error_set(err, TB_EINVAL,
				    "--token: letters, digits, '.', '_', '~' and '-' only, at most "
				    "256 (it goes into a cookie)");
	}
	if (!s->loopback && (!conf->token || strlen(conf->token) < 16)) {
		freeaddrinfo(ai);
		free(s);
		return tb_error_set(err, TB_EINVAL,
				    "--listen %s is not loopback: anyone who reaches it would "
				    "read every run; give --token (16 characters or more)",
				    listen);
	}
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		freeaddrinfo(ai);
		free(s);
		return tb_error_set(err, TB_EIO, "view: no randomness for the CSRF token");
	}
	tb_hex(s->csrf, raw, sizeof(raw));
	pthread_mutex_init(&s->ledger_lock, NULL);
	if (make_page(s) < 0 || !(s->reader = tb_view_reader_new(conf->cfg))) {
		freeaddrinfo(ai);
		free(s->page);
		tb_view_reader_free(s->reader);
		free(s);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			 (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, answer, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				MHD_OPTION_CONNECTION_LIMIT, MAX_CONNECTIONS,
				MHD_OPTION_THREAD_STACK_SIZE, (size_t)(256u << 10),
				MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_NOTIFY_COMPLETED,
				done, NULL, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!s->d) {
		free(s->page);
		tb_view_reader_free(s->reader);
		free(s);
		return tb_error_set(err, TB_EIO, "--listen %s: cannot listen there (in use?)",
				    listen);
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : 0;
	snprintf(s->hosts[0], sizeof(s->hosts[0]), "%s:%u", listen[0] == '[' ? "[::1]" : host,
		 s->port);
	snprintf(s->hosts[1], sizeof(s->hosts[1]), "localhost:%u", s->port);
	snprintf(s->hosts[2], sizeof(s->hosts[2]), "127.0.0.1:%u", s->port);
	snprintf(s->hosts[3], sizeof(s->hosts[3]), "[::1]:%u", s->port);
	set_url(s, host, wildcard);
	*out = s;
	return 0;
}

unsigned tb_view_server_port(const tb_view_server_t *s)
{
	return s->port;
}

const char *tb_view_server_url(const tb_view_server_t *s)
{
	return s->url;
}

void tb_view_server_stop(tb_view_server_t *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);
	pthread_mutex_destroy(&s->ledger_lock);
	tb_view_reader_free(s->reader);
	free(s->page);
	free(s);
}
