/*
 * registry.c: a registry as a source of blobs (source.h), over the OCI
 * distribution API with libcurl: GET /v2/<repository>/manifests/<digest>
 * and /v2/<repository>/blobs/<digest>, redirects followed (to blob
 * storage: curl drops the Authorization header on a move to another
 * host), anonymous access, HTTP Basic, and the Bearer token challenge
 * public registries use (WWW-Authenticate: Bearer realm=...,service=...,
 * scope=...), the token kept for the source's later requests. Asked
 * whether it would serve an image (authorize, for a cache hit: source.h),
 * it is sent HEAD /v2/<repository>/manifests/<digest> through the same
 * logins. A blob is also read by ranges (read_range, for a layer read
 * through its index: layer_index.h): the same GET with `Range:
 * bytes=a-b`, the same logins and redirects, and nothing but a 206
 * whose Content-Range is the range asked (or its part before the blob's
 * end) with as many bytes is taken: a 200 (the whole blob), another
 * range or a short body is an error naming it.
 *
 * Several threads may use one source at once (a file system serving a
 * root reads from several): every request has a curl handle of its own,
 * made for it and cleaned up after, and the source's handles share one
 * pool of connections, DNS answers and TLS sessions (a CURLSH, locked by
 * the source's mutexes), so that ranged reads do not each connect anew.
 * The Bearer token is kept under the source's lock.
 *
 * Registries are spoken to over https, except one on loopback
 * (localhost, 127.0.0.0/8, [::1]), which is spoken to over http: a test
 * registry or a node-local mirror. A registry that stalls (under one byte
 * a second for the worker's image_stall_seconds) is given up on, and one that sends more than a blob's
 * descriptor says is cut off (blob.h): both are the platform's failure,
 * tried again later; a registry that has no such image, or refuses it, is
 * the image's (poison). A worker that stops ends every transfer under way
 * (a progress callback sees its flag, curl calling it at least about
 * once a second even while nothing arrives): a stalled pull does not
 * hold the worker's drain.
 */
#include "source.h"

#include "tb/encoding.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ERROR_BODY_MAX 20480 /* an error's text, or a token answer (TOKEN_MAX and more) */
#define TOKEN_MAX 8192

typedef struct registry {
	tb_image_source_t base;
	char url[600];          /* scheme://host[:port]/v2/<repository> */
	char base_url[300];     /* scheme://host[:port]/ */
	char registry[256];     /* host[:port], as named */
	long stall;             /* seconds under a byte a second: given up on */
	const atomic_int *stop; /* set: the worker stops, every transfer ends */
	char repository[256];
	char basic[900]; /* "Authorization: Basic ...", "" without credentials */
	pthread_mutex_t lock;
	char bearer[TOKEN_MAX + 32]; /* "Authorization: Bearer ...", once one is got */
	CURLSH *share;               /* connections, DNS, TLS sessions: every request's */
	pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
} registry_t;

/* Where a ranged read's bytes go (read_range). */
typedef struct range_want {
	uint8_t *buf;
	size_t len; /* asked for: bytes off .. off + len - 1 */
	uint64_t off;
	size_t got;
} range_want_t;

/* One response: its status, content type and challenge, and where its
 * body goes (the blob on a 200, a small buffer otherwise). */
typedef struct reply {
	long stall;               /* seconds under a byte a second: given up on */
	const atomic_int *stop;   /* the source's (may be NULL) */
	const atomic_int *cancel; /* this read's asker's (may be NULL) */
	CURLSH *share;            /* the source's connections (may be NULL) */
	range_want_t *range;      /* a ranged read: its bytes go there, not to blob */
	long status;
	char where[600]; /* the URL that answered (after redirects) */
	char type[160];
	char challenge[1024];
	tb_blob_t *blob;
	int blob_rc;
	int began;            /* the blob's first bytes of this response came */
	long long range_from; /* its Content-Range's first byte; -1: none */
	long long range_to;   /* ... and last */
	tb_error_t *err;
	char body[ERROR_BODY_MAX];
	size_t nbody;
} reply_t;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Loopback: localhost, 127.x.y.z or [::1], with any port, and nothing
 * more (not localhost.example.com), up to the end or a '/'. */
static int loopback(const char *host)
{
	size_t n = strcspn(host, ":/");
	if (!strncmp(host, "[::1]", 5))
		return host[5] == '\0' || host[5] == ':' || host[5] == '/';
	if (n == 9 && !strncmp(host, "localhost", 9))
		return 1;
	return n >= 7 && !strncmp(host, "127.", 4) && strspn(host, "0123456789.") == n;
}

/* A header line: the status line of each response (after a redirect,
 * the next one's), its Content-Type and WWW-Authenticate. */
static size_t on_header(char *b, size_t size, size_t n, void *ud)
{
	reply_t *r = ud;
	size_t len = size * n;
	int code;

	if (len > 5 && !strncmp(b, "HTTP/", 5) && sscanf(b, "HTTP/%*s %d", &code) == 1) {
		r->status = code;
		r->type[0] = r->challenge[0] = '\0';
		r->nbody = 0;
		r->began = 0;
		r->range_from = r->range_to = -1;
	} else if (len > 14 && !strncasecmp(b, "Content-Range:", 14)) {
		long long from, to = -1;
		if (sscanf(b + 14, " bytes %lld-%lld", &from, &to) >= 1) {
			r->range_from = from;
			r->range_to = to;
		}
	} else if (len > 13 && !strncasecmp(b, "Content-Type:", 13)) {
		snprintf(r->type, sizeof(r->type), "%.*s", (int)(len - 13), b + 13);
	} else if (len > 17 && !strncasecmp(b, "WWW-Authenticate:", 17)) {
		snprintf(r->challenge, sizeof(r->challenge), "%.*s", (int)(len - 17), b + 17);
	}
	return len;
}

/* The first bytes of a blob's answer: a 206 must start where the rest
 * was asked from; a 200 where the rest was asked is the whole blob (a
 * registry or storage that ignores Range), so the part starts over.
 * @return 0, or -1 with r->blob_rc set. */
static int resumed_as_asked(reply_t *r)
{
	tb_blob_t *b = r->blob;

	if (r->status == 200 && b->n)
		return (r->blob_rc = tb_blob_restart(b, r->err)) < 0 ? -1 : 0;
	if (r->status == 206 && r->range_from != (long long)b->n) {
		b->keep = 0; /* nothing to trust the part by */
		r->blob_rc =
		    tb_error_set(r->err, TB_ERETRY,
				 "blob %.80s: the registry sent bytes from %lld where %llu "
				 "were asked",
				 b->want, r->range_from, (unsigned long long)b->n);
		return -1;
	}
	return 0;
}

/* The first bytes of a ranged read's answer: a 206 for the range asked
 * (its last byte may be the blob's, before the range's end). @return 0,
 * or -1 with r->blob_rc set. */
static int range_as_asked(reply_t *r)
{
	const range_want_t *w = r->range;
	unsigned long long a = w->off, b = w->off + w->len - 1;

	if (r->status == 200)
		r->blob_rc = tb_error_set(r->err, TB_EIO,
					  "the registry answered 200 (the whole blob) to a "
					  "request for bytes %llu-%llu: it serves no ranges",
					  a, b);
	else if (r->range_from != (long long)a || r->range_to < r->range_from ||
		 (unsigned long long)r->range_to > b)
		r->blob_rc = tb_error_set(r->err, TB_EIO,
					  "the registry sent bytes %lld-%lld (Content-Range) "
					  "where %llu-%llu were asked",
					  r->range_from, r->range_to, a, b);
	else
		return 0;
	return -1;
}

/* A ranged read's bytes, at most those of its Content-Range. */
static size_t range_body(reply_t *r, const char *data, size_t len)
{
	range_want_t *w = r->range;

	if (!r->began && range_as_asked(r) < 0)
		return 0; /* stops the transfer */
	r->began = 1;
	if (len > (size_t)(r->range_to - r->range_from + 1) - w->got) {
		r->blob_rc = tb_error_set(r->err, TB_EIO,
					  "the registry sent more than the %lld bytes its "
					  "Content-Range says",
					  r->range_to - r->range_from + 1);
		return 0;
	}
	memcpy(w->buf + w->got, data, len);
	w->got += len;
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
	reply_t *r = ud;
	size_t len = size * n;

	if ((r->status == 200 || r->status == 206) && r->range)
		return range_body(r, data, len);
	if ((r->status == 200 || r->status == 206) && r->blob) {
		if (!r->began && resumed_as_asked(r) < 0)
			return 0; /* stops the transfer */
		r->began = 1;
		if ((r->blob_rc = tb_blob_write(r->blob, data, len, r->err)) < 0)
			return 0; /* stops the transfer */
		return len;
	}
	size_t room = sizeof(r->body) - 1 - r->nbody; /* an error's text, kept short */
	memcpy(r->body + r->nbody, data, len < room ? len : room);
	r->nbody += len < room ? len : room;
	return len;
}

/* Whether @p r's transfer is to end: the source's worker stops, or the
 * read's asker does. */
static int ended(const reply_t *r)
{
	return (r->stop && atomic_load(r->stop)) || (r->cancel && atomic_load(r->cancel));
}

/* curl's progress callback: non-zero ends the transfer. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	const reply_t *r = ud;
	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return ended(r);
}

/* GET (HEAD with @p head) @p url; the body into @p r (see reply_t).
 * @return 0 when the transfer itself worked (whatever the status),
 * TB_ERETRY otherwise. */
static int request(const char *url, int head, const char *auth, const char *accept, reply_t *r,
		   tb_error_t *err)
{
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();
	CURLcode cc;

	if (!c)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (auth && auth[0])
		h = curl_slist_append(h, auth);
	if (accept)
		h = curl_slist_append(h, accept);
	char range[64];
	if (!head && r->range) { /* a ranged read */
		snprintf(range, sizeof(range), "Range: bytes=%llu-%llu",
			 (unsigned long long)r->range->off,
			 (unsigned long long)(r->range->off + r->range->len - 1));
		h = curl_slist_append(h, range);
	} else if (!head && r->blob && r->blob->n) { /* the rest of a layer a fetch began */
		snprintf(range, sizeof(range), "Range: bytes=%llu-",
			 (unsigned long long)r->blob->n);
		h = curl_slist_append(h, range);
	}
	if (r->share)
		curl_easy_setopt(c, CURLOPT_SHARE, r->share);
	curl_easy_setopt(c, CURLOPT_URL, url);
	if (head)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, r->stall);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "taskbox");
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
	cc = ended(r) ? CURLE_ABORTED_BY_CALLBACK : curl_easy_perform(c);
	char *eff = NULL;
	if (curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff)
		snprintf(r->where, sizeof(r->where), "%s", eff);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (r->blob_rc < 0)
		return r->blob_rc; /* the blob said why */
	if (cc == CURLE_ABORTED_BY_CALLBACK)
		return tb_error_set(err, TB_ERETRY, "registry: %s: given up on, %s", url,
				    r->stop && atomic_load(r->stop) ? "the worker stops"
								    : "its reader stops");
	if (cc == CURLE_OPERATION_TIMEDOUT)
		return tb_error_set(err, TB_ERETRY,
				    "registry: %s: stalled, under a byte a second for %ld s "
				    "(image_stall_seconds)",
				    url, r->stall);
	if (cc != CURLE_OK)
		return tb_error_set(err, TB_ERETRY, "registry: %s: %s", url,
				    curl_easy_strerror(cc));
	return 0;
}

/* The value of key @p key in a challenge's "k=v,k2="v2"" list. */
static int param(const char *challenge, const char *key, char *out, size_t cap)
{
	size_t klen = strlen(key);
	for (const char *p = challenge; (p = strcasestr(p, key)); p += klen) {
		if ((p != challenge && p[-1] != ' ' && p[-1] != ',') || p[klen] != '=')
			continue;
		const char *v = p + klen + 1, *end;
		if (*v == '"')
			end = strchr(++v, '"');
		else
			end = v + strcspn(v, ", \r\n");
		if (!end || (size_t)(end - v) >= cap)
			return -1;
		memcpy(out, v, (size_t)(end - v));
		out[end - v] = '\0';
		return 0;
	}
	return -1;
}

/* Answers a Bearer challenge: a token from its realm (with the
 * credentials, if any), kept in r->bearer. */
static int get_token(registry_t *g, const char *challenge, tb_error_t *err)
{
	char realm[512], service[256] = "", scope[512] = "", url[4096];
	char esc_service[3 * sizeof(service)], esc_scope[3 * sizeof(scope)];
	reply_t r = { .err = err, .stall = g->stall, .stop = g->stop };
	int rc;

	/* the login goes to the realm only over https (or to loopback) */
	if (param(challenge, "realm", realm, sizeof(realm)) < 0 ||
	    (strncmp(realm, "https://", 8) &&
	     (strncmp(realm, "http://", 7) || !loopback(realm + 7))))
		return tb_error_set(err, TB_EPOISON,
				    "registry %s: a Bearer challenge with no realm, or one not "
				    "over https",
				    g->registry);
	param(challenge, "service", service, sizeof(service));
	param(challenge, "scope", scope, sizeof(scope));
	/* (each at most three times its size: fits) */
	tb_percent_encode(esc_service, sizeof(esc_service), service, 0);
	tb_percent_encode(esc_scope, sizeof(esc_scope), scope, 0);
	snprintf(url, sizeof(url), "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?",
		 esc_service, esc_scope);
	if ((rc = request(url, 0, g->basic, NULL, &r, err)) < 0)
		return rc;
	if (r.status != 200)
		return tb_error_set(err,
				    r.status >= 500 || r.status == 429 ? TB_ERETRY : TB_EPOISON,
				    "registry %s: its token service answered %ld%s", g->registry,
				    r.status, g->basic[0] ? "" : " (no credentials given)");
	r.body[r.nbody] = '\0';
	json_t *o = json_loads(r.body, 0, NULL);
	const char *tok = json_string_value(json_object_get(o, "token"));
	if (!tok)
		tok = json_string_value(json_object_get(o, "access_token"));
	if (!tok || strlen(tok) > TOKEN_MAX || strpbrk(tok, "\r\n")) {
		json_decref(o);
		return tb_error_set(err, TB_ERETRY, "registry %s: its token service gave no token",
				    g->registry);
	}
	pthread_mutex_lock(&g->lock);
	snprintf(g->bearer, sizeof(g->bearer), "Authorization: Bearer %s", tok);
	pthread_mutex_unlock(&g->lock);
	json_decref(o);
	return 0;
}

/* What is asked of the registry: a manifest or a blob, whole (into
 * blob, or nothing with head) or a range of it. */
typedef struct asked {
	const char *digest;
	int manifest, head;
	tb_blob_t *blob;
	range_want_t *range;
	const atomic_int *cancel; /* a ranged read's asker's (may be NULL) */
	char *ct;                 /* a manifest's content type, when ctlen */
	size_t ctlen;
} asked_t;

/* An answer that is what was asked: the content type kept; a ranged
 * read's bytes counted against its Content-Range. @return 1 taken, 0 not
 * an answer of that kind, or a negative TB_E* with @p err set. */
static int taken(registry_t *g, const asked_t *q, const reply_t *r, tb_error_t *err)
{
	if (q->range) {
		if (r->status != 206 && r->status != 200)
			return 0;
		if (r->status == 200 || r->range_from < 0) /* 200 with no body, or no range */
			return tb_error_set(err, TB_EIO,
					    "registry %s: blob %s: answered %ld with no "
					    "Content-Range to a request for a range",
					    g->registry, q->digest, r->status);
		if (q->range->got != (size_t)(r->range_to - r->range_from + 1))
			return tb_error_set(err, TB_EIO,
					    "registry %s: blob %s: a short answer, %zu of the "
					    "%lld bytes its Content-Range says",
					    g->registry, q->digest, q->range->got,
					    r->range_to - r->range_from + 1);
		return 1;
	}
	if (!(r->status == 200 || (r->status == 206 && q->blob && q->blob->partial)))
		return 0;
	if (q->ctlen)
		snprintf(q->ct, q->ctlen, "%.*s", (int)strcspn(r->type, "\r\n"), r->type);
	while (q->ctlen && q->ct[0] == ' ')
		memmove(q->ct, q->ct + 1, strlen(q->ct));
	return 1;
}

/* Why a registry's answer @p status is not what was asked. */
static int refused(registry_t *g, const asked_t *q, long status, tb_error_t *err)
{
	/* 403: a login the registry knows, without this repository */
	if (status == 401 || status == 403)
		return tb_error_set(err, TB_EPOISON, "registry %s refused %s: it wants a login%s",
				    g->registry, g->repository,
				    g->basic[0]
					? ": the credentials given do not pass"
					: " (sandbox.images.credentials names none for it)");
	if (status == 404)
		return tb_error_set(err, TB_ENOTFOUND, "registry %s has no %s %s in %s",
				    g->registry, q->manifest ? "manifest" : "blob", q->digest,
				    g->repository);
	return tb_error_set(err, status >= 500 || status == 429 ? TB_ERETRY : TB_EPOISON,
			    "registry %s answered %ld for %s%s", g->registry, status, q->digest,
			    status == 416 ? " (a range past the blob's end)" : "");
}

/* GET (or HEAD) what @p q asks, with the source's login: Basic as given,
 * or the token a Bearer challenge leads to. */
static int ask(registry_t *g, const asked_t *q, tb_error_t *err)
{
	static const char accept[] = "Accept: application/vnd.oci.image.index.v1+json, "
				     "application/vnd.oci.image.manifest.v1+json, "
				     "application/vnd.docker.distribution.manifest.list.v2+json, "
				     "application/vnd.docker.distribution.manifest.v2+json";
	char url[800], auth[sizeof(g->bearer)];
	int rc;

	snprintf(url, sizeof(url), "%s/%s/%s", g->url, q->manifest ? "manifests" : "blobs",
		 q->digest);
	for (int round = 0; round < 2; round++) {
		reply_t r = { .blob = q->blob,
			      .range = q->range,
			      .err = err,
			      .stall = g->stall,
			      .stop = g->stop,
			      .cancel = q->cancel,
			      .share = g->share,
			      .range_from = -1,
			      .range_to = -1 };
		if (q->range)
			q->range->got = 0;
		pthread_mutex_lock(&g->lock);
		snprintf(auth, sizeof(auth), "%s", g->bearer[0] ? g->bearer : g->basic);
		pthread_mutex_unlock(&g->lock);
		if ((rc = request(url, q->head, auth, q->manifest ? accept : NULL, &r, err)) < 0)
			return rc;
		if ((rc = taken(g, q, &r, err)) != 0)
			return rc < 0 ? rc : 0;
		/* an answer counts only from the registry itself, not from the
		 * storage a blob was redirected to (its challenge least of all) */
		if (strncmp(r.where, g->base_url, strlen(g->base_url)) != 0)
			return tb_error_set(err, TB_ERETRY,
					    "registry %s: its blob storage answered %ld for %s",
					    g->registry, r.status, q->digest);
		if (r.status == 401 && round == 0 && strcasestr(r.challenge, "bearer")) {
			if ((rc = get_token(g, r.challenge, err)) < 0)
				return rc;
			continue;
		}
		return refused(g, q, r.status, err);
	}
	return tb_error_set(err, TB_EPOISON, "registry %s: the token it gave does not pass",
			    g->registry);
}

static int registry_fetch(tb_image_source_t *s, const char *digest, int manifest, tb_blob_t *b,
			  char *ct, size_t ctlen, tb_error_t *err)
{
	asked_t q = { .digest = digest, .manifest = manifest, .blob = b, .ct = ct, .ctlen = ctlen };
	return ask((registry_t *)s, &q, err);
}

static int registry_authorize(tb_image_source_t *s, const char *digest, tb_error_t *err)
{
	asked_t q = { .digest = digest, .manifest = 1, .head = 1 };
	return ask((registry_t *)s, &q, err);
}

static int64_t registry_read_range(tb_image_source_t *s, const char *digest, uint64_t off,
				   void *buf, size_t len, const atomic_int *cancel, tb_error_t *err)
{
	range_want_t w = { .buf = buf, .len = len, .off = off };
	asked_t q = { .digest = digest, .range = &w, .cancel = cancel };
	int rc;

	if (!len || off + len < off)
		return tb_error_set(err, TB_EINVAL, "blob %.80s: an empty range", digest);
	if ((rc = ask((registry_t *)s, &q, err)) < 0)
		return tb_error_prefix(err, "bytes %llu-%llu", (unsigned long long)off,
				       (unsigned long long)(off + len - 1));
	return (int64_t)w.got;
}

/* The share's locks, one mutex for each kind of data it shares. */
static void share_lock(CURL *c, curl_lock_data data, curl_lock_access access, void *ud)
{
	registry_t *g = ud;
	(void)c, (void)access;
	pthread_mutex_lock(&g->share_lock[data]);
}

static void share_unlock(CURL *c, curl_lock_data data, void *ud)
{
	registry_t *g = ud;
	(void)c;
	pthread_mutex_unlock(&g->share_lock[data]);
}

/* Every request's pool of connections, DNS answers and TLS sessions.
 * Without one (out of memory), each request connects on its own. */
static void share_open(registry_t *g)
{
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&g->share_lock[i], NULL);
	if (!(g->share = curl_share_init()))
		return;
	curl_share_setopt(g->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(g->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(g->share, CURLSHOPT_USERDATA, g);
	curl_share_setopt(g->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	curl_share_setopt(g->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(g->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
}

static void registry_close(tb_image_source_t *s)
{
	registry_t *g = (registry_t *)s;
	if (!g)
		return;
	if (g->share)
		curl_share_cleanup(g->share); /* no request left: the source is closed */
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&g->share_lock[i]);
	pthread_mutex_destroy(&g->lock);
	explicit_bzero(g->basic, sizeof(g->basic));
	explicit_bzero(g->bearer, sizeof(g->bearer));
	free(g);
}

/* The registry's login from a docker config.json's "auths" (the entry
 * for "host[:port]", or "https://host[:port]" and the like). */
static int credentials(registry_t *g, const char *file, tb_error_t *err)
{
	json_error_t je;
	json_t *o = json_load_file(file, JSON_REJECT_DUPLICATES, &je), *entry = NULL;
	const char *key;
	json_t *v;
	char user_pass[600] = "", b64[820];

	if (!o)
		return tb_error_set(err, TB_EIO, "registry credentials %s: %s", file, je.text);
	json_object_foreach(json_object_get(o, "auths"), key, v)
	{
		const char *host = strstr(key, "://") ? strstr(key, "://") + 3 : key;
		size_t n = strcspn(host, "/");
		if (n == strlen(g->registry) && !strncmp(host, g->registry, n))
			entry = v;
	}
	const char *auth = json_string_value(json_object_get(entry, "auth"));
	const char *user = json_string_value(json_object_get(entry, "username"));
	const char *pass = json_string_value(json_object_get(entry, "password"));
	if (auth && strlen(auth) < sizeof(b64)) {
		ssize_t n =
		    tb_base64_decode(user_pass, sizeof(user_pass) - 1, auth, strlen(auth), 0);
		user_pass[n > 0 ? n : 0] = '\0';
	} else if (user && pass) {
		snprintf(user_pass, sizeof(user_pass), "%s:%s", user, pass);
	}
	json_decref(o);
	if (user_pass[0]) {
		tb_base64_encode(b64, sizeof(b64), user_pass, strlen(user_pass), 0);
		snprintf(g->basic, sizeof(g->basic), "Authorization: Basic %s", b64);
	}
	explicit_bzero(user_pass, sizeof(user_pass));
	return 0;
}

/* Who asks (source.h): the registry, repository and login, hashed, so
 * the login itself is kept nowhere else. */
static void principal(registry_t *g)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	EVP_MD_CTX *x = EVP_MD_CTX_new();

	if (x && EVP_DigestInit_ex(x, EVP_sha256(), NULL) &&
	    EVP_DigestUpdate(x, g->registry, strlen(g->registry) + 1) &&
	    EVP_DigestUpdate(x, g->repository, strlen(g->repository) + 1) &&
	    EVP_DigestUpdate(x, g->basic, strlen(g->basic)) && EVP_DigestFinal_ex(x, md, &n))
		tb_hex(g->base.principal, md, n);
	else
		g->base.principal[0] = '\0'; /* not remembered: asked every time */
	EVP_MD_CTX_free(x);
}

int tb_registry_open(tb_image_source_t **out, const tb_image_ref_t *ref, const char *creds,
		     unsigned stall_seconds, const atomic_int *stop, tb_error_t *err)
{
	registry_t *g = calloc(1, sizeof(*g));
	int rc;

	if (!g)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	pthread_once(&curl_once, curl_init_once);
	pthread_mutex_init(&g->lock, NULL);
	share_open(g);
	g->stall = stall_seconds ? stall_seconds : 30;
	g->stop = stop;
	g->base.fetch = registry_fetch;
	g->base.authorize = registry_authorize;
	g->base.read_range = registry_read_range;
	g->base.close = registry_close;
	snprintf(g->registry, sizeof(g->registry), "%s", ref->registry);
	snprintf(g->repository, sizeof(g->repository), "%s", ref->repository);
	/* Docker Hub's name is not where its API is */
	const char *host =
	    !strcmp(ref->registry, "docker.io") ? "registry-1.docker.io" : ref->registry;
	snprintf(g->base_url, sizeof(g->base_url), "%s://%s/", loopback(host) ? "http" : "https",
		 host);
	snprintf(g->url, sizeof(g->url), "%sv2/%s", g->base_url, ref->repository);
	if (creds && (rc = credentials(g, creds, err)) < 0) {
		registry_close(&g->base);
		return rc;
	}
	principal(g);
	*out = &g->base;
	return 0;
}
