/*
 * test_registry.c: images pulled from a registry (worker/image/registry.c)
 * served by the test itself on loopback (libmicrohttpd): the distribution
 * API over an OCI layout the test writes, anonymous, with HTTP Basic, and
 * with the Bearer token challenge and its token endpoint; blobs redirected
 * to "storage" on another loopback address, which must see no
 * Authorization header; a blob whose bytes are not its digest's, one
 * longer than its descriptor says, a missing manifest, a layer that
 * stalls, a decompression bomb; a second image
 * sharing all but its top layer fetches only that layer; a cached image
 * served only to a runtime whose own login the registry takes (asked with
 * a HEAD, the answer remembered a while); a stalled pull interrupted by a
 * worker that stops; a blob read by ranges, and registries that answer a
 * range wrong; a stalled range ended by its reader. As root (the tree keeps the
 * layers' owners); skips otherwise.
 */
#include "image.h"
#include "oci_testlib.h"
#include "source.h"

#include "tb/encoding.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define TOKEN "tok-9f8e7d"
#define USER_PASS "puller:s3cret"
#define WRONG_PASS "puller:guess"

/* This run's own directory, and every cache it removes is under it:
 * other runs (other builds, other checkouts) share /tmp. Not named
 * "tb-registry-test-": copies of this test from before remove every
 * /tmp/tb-registry-test-<any>/cache, and would remove this run's. */
static char base[64] = "/tmp/tb-registry-unit-XXXXXX";
static char layout[128], cache_dir[128], creds[128], wrong_creds[128];

/* How the fake registry behaves, set by each test. */
static struct {
	enum { OPEN, BASIC, BEARER } auth;
	int redirect;         /* blobs: 307 to the storage daemon */
	char tamper[80];      /* this digest's blob is served altered */
	char endless[80];     /* this digest's blob is served too long */
	char stall[80];       /* this digest's blob stops after a few bytes */
	char stall_range[80]; /* ... a range of this one's (a 206) */
	atomic_int stop;      /* teardown: stalled responses end */
	atomic_int leaked;    /* storage saw an Authorization header */
	atomic_int blob_gets;
	atomic_int heads;   /* HEAD requests for a manifest, answered or not */
	atomic_int revoked; /* every login refused */
	int head_status;    /* not 0: every HEAD answered this */
	char cut[80];       /* this digest's blob: each answer ends after cut_after bytes */
	size_t cut_after;
	int no_range; /* Range is ignored: the whole blob every time */
	/* a ranged read (Range: bytes=a-b) answered wrong: */
	enum { RANGE_RIGHT, RANGE_WHOLE, RANGE_SHIFTED, RANGE_SHORT } range_lie;
	atomic_long served; /* blob bytes sent of the digest below (not manifests) */
	char counted[80];   /* ... "": of every blob */
} fake;

/* A blob answer that ends (as a dropped connection) after cut_after
 * bytes: @p cls is the bytes from where it starts, to the blob's end. */
typedef struct cut_body {
	char *buf;
	size_t len;
} cut_body_t;

static ssize_t cut_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	cut_body_t *b = cls;
	if (pos >= fake.cut_after || pos >= b->len)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	size_t n = b->len - (size_t)pos;
	if (n > fake.cut_after - (size_t)pos)
		n = fake.cut_after - (size_t)pos;
	if (n > max)
		n = max;
	memcpy(buf, b->buf + pos, n);
	atomic_fetch_add(&fake.served, (long)n);
	return (ssize_t)n;
}

static void cut_free(void *cls)
{
	cut_body_t *b = cls;
	free(b->buf);
	free(b);
}

static struct MHD_Daemon *registry, *storage;
static unsigned registry_port, storage_port;

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *text,
				 const char *hname, const char *hvalue)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
	if (hname)
		MHD_add_response_header(r, hname, hvalue);
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* A stalled blob: a byte, then nothing for up to 10 s (bounded; the
 * client is meant to give up long before), then an aborted response.
 * (curl averages its speed over the last few seconds: more bytes first
 * would only make it wait longer to see the stall.) */
static ssize_t stalled(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)cls;
	if (pos == 0 && max >= 1) {
		buf[0] = 's';
		return 1;
	}
	for (int i = 0; i < 200 && !atomic_load(&fake.stop); i++)
		usleep(50000);
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* The blob @p digest of the layout, as a response (altered if asked). */
static enum MHD_Result send_blob(struct MHD_Connection *c, const char *digest, int manifest)
{
	char path[300], *buf;
	struct stat st;

	snprintf(path, sizeof(path), "%s/blobs/sha256/%.64s", layout, digest + 7);
	int fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return send_text(c, 404, "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}", NULL,
				 NULL);
	}
	const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
	unsigned long long lo, hi;
	if (!strcmp(fake.stall_range, digest) && asked &&
	    sscanf(asked, "bytes=%llu-%llu", &lo, &hi) == 2 && lo <= hi) {
		char cr[100];
		close(fd);
		snprintf(cr, sizeof(cr), "bytes %llu-%llu/%lld", lo, hi, (long long)st.st_size);
		struct MHD_Response *r =
		    MHD_create_response_from_callback(hi - lo + 1, 64, stalled, NULL, NULL);
		MHD_add_response_header(r, "Content-Range", cr);
		enum MHD_Result rc = MHD_queue_response(c, 206, r);
		MHD_destroy_response(r);
		return rc;
	}
	if (!strcmp(fake.stall, digest)) {
		close(fd);
		struct MHD_Response *r = MHD_create_response_from_callback((uint64_t)st.st_size, 64,
									   stalled, NULL, NULL);
		enum MHD_Result rc = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return rc;
	}
	size_t extra = !strcmp(fake.endless, digest) ? (size_t)st.st_size + 65536 : 0;
	buf = calloc(1, (size_t)st.st_size + extra + 1);
	if (read(fd, buf, (size_t)st.st_size) != st.st_size)
		fail_msg("read %s", path);
	close(fd);
	/* a layer's rest from where it was asked (a 206), unless ranges are
	 * ignored; cut part-way when asked to */
	const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
	unsigned long long from = 0, to = (unsigned long long)st.st_size - 1;
	if (!manifest && range && !fake.no_range && fake.range_lie != RANGE_WHOLE &&
	    sscanf(range, "bytes=%llu-%llu", &from, &to) >= 1 &&
	    from < (unsigned long long)st.st_size) {
		char cr[100];
		if (to >= (unsigned long long)st.st_size)
			to = (unsigned long long)st.st_size - 1;
		size_t n = (size_t)(to - from + 1);
		memmove(buf, buf + from, n);
		if (fake.range_lie == RANGE_SHIFTED)
			from++, to++; /* the bytes asked, said to be others */
		snprintf(cr, sizeof(cr), "bytes %llu-%llu/%lld", from, to, (long long)st.st_size);
		if (fake.range_lie == RANGE_SHORT && n > 1)
			n /= 2; /* half the bytes its Content-Range says, and no more */
		cut_body_t *cb = malloc(sizeof(*cb));
		*cb = (cut_body_t){ buf, n };
		if (strcmp(fake.cut, digest))
			fake.cut_after = (size_t)-1 / 2;
		struct MHD_Response *r =
		    MHD_create_response_from_callback(cb->len, 1 << 16, cut_reader, cb, cut_free);
		MHD_add_response_header(r, "Content-Range", cr);
		enum MHD_Result rc = MHD_queue_response(c, 206, r);
		MHD_destroy_response(r);
		return rc;
	}
	if (!manifest && !strcmp(fake.cut, digest)) {
		cut_body_t *cb = malloc(sizeof(*cb));
		*cb = (cut_body_t){ buf, (size_t)st.st_size };
		struct MHD_Response *r =
		    MHD_create_response_from_callback(cb->len, 1 << 16, cut_reader, cb, cut_free);
		enum MHD_Result rc = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return rc;
	}
	if (!manifest && (!fake.counted[0] || !strcmp(fake.counted, digest)))
		atomic_fetch_add(&fake.served, (long)st.st_size);
	if (!strcmp(fake.tamper, digest))
		buf[0] ^= 0x55;
	memset(buf + st.st_size, 'x', extra);
	struct MHD_Response *r =
	    MHD_create_response_from_buffer((size_t)st.st_size + extra, buf, MHD_RESPMEM_MUST_FREE);
	if (manifest && strstr(buf, "image.index"))
		MHD_add_response_header(r, "Content-Type",
					"application/vnd.oci.image.index.v1+json");
	else if (manifest)
		MHD_add_response_header(r, "Content-Type",
					"application/vnd.oci.image.manifest.v1+json");
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
}

static int authorized(struct MHD_Connection *c)
{
	char want[200], b64[100];
	const char *got = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");

	if (atomic_load(&fake.revoked))
		return 0;
	if (fake.auth == OPEN)
		return 1;
	if (fake.auth == BEARER)
		return got && !strcmp(got, "Bearer " TOKEN);
	tb_base64_encode(b64, sizeof(b64), USER_PASS, strlen(USER_PASS), 0);
	snprintf(want, sizeof(want), "Basic %s", b64);
	return got && !strcmp(got, want);
}

static enum MHD_Result on_registry(void *cls, struct MHD_Connection *c, const char *url,
				   const char *method, const char *version, const char *data,
				   size_t *size, void **state)
{
	char challenge[300], loc[300];
	(void)cls, (void)version, (void)data, (void)size, (void)state;

	if (!strcmp(url, "/token")) { /* the Bearer challenge's realm */
		char b64[100], want[200];
		const char *got = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
		tb_base64_encode(b64, sizeof(b64), USER_PASS, strlen(USER_PASS), 0);
		snprintf(want, sizeof(want), "Basic %s", b64);
		const char *scope = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "scope");
		if (!got || strcmp(got, want) || !scope ||
		    strcmp(scope, "repository:team/app:pull"))
			return send_text(c, 401, "{}", NULL, NULL);
		return send_text(c, 200, "{\"token\":\"" TOKEN "\"}", "Content-Type",
				 "application/json");
	}
	if (!strcmp(method, "HEAD") && strstr(url, "/manifests/")) {
		atomic_fetch_add(&fake.heads, 1);
		if (fake.head_status)
			return send_text(c, (unsigned)fake.head_status, "", NULL, NULL);
	}
	if (!authorized(c)) {
		if (fake.auth == BEARER)
			snprintf(challenge, sizeof(challenge),
				 "Bearer realm=\"http://127.0.0.1:%u/token\",service=\"fake\","
				 "scope=\"repository:team/app:pull\"",
				 registry_port);
		else
			snprintf(challenge, sizeof(challenge), "Basic realm=\"fake\"");
		return send_text(c, 401, "{\"errors\":[]}", "WWW-Authenticate", challenge);
	}
	const char *m = strstr(url, "/manifests/"), *b = strstr(url, "/blobs/");
	if (strncmp(url, "/v2/team/app/", 13) || (!m && !b))
		return send_text(c, 404, "{}", NULL, NULL);
	if (m)
		return send_blob(c, m + 11, 1);
	atomic_fetch_add(&fake.blob_gets, 1);
	if (!fake.redirect)
		return send_blob(c, b + 7, 0);
	snprintf(loc, sizeof(loc), "http://127.0.0.2:%u/storage/%s", storage_port, b + 7);
	return send_text(c, 307, "", "Location", loc);
}

static enum MHD_Result on_storage(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *size, void **state)
{
	(void)cls, (void)method, (void)version, (void)data, (void)size, (void)state;
	if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"))
		atomic_store(&fake.leaked, 1);
	if (strncmp(url, "/storage/", 9))
		return send_text(c, 404, "{}", NULL, NULL);
	return send_blob(c, url + 9, 0);
}

static struct MHD_Daemon *serve(const char *ip, MHD_AccessHandlerCallback fn, unsigned *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	inet_pton(AF_INET, ip, &a.sin_addr);
	/* a thread per connection: a stalled response holds its own only */
	struct MHD_Daemon *d =
	    MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
			     NULL, NULL, fn, NULL, MHD_OPTION_SOCK_ADDR, &a, MHD_OPTION_END);
	assert_non_null(d);
	*port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
	return d;
}

static tb_image_ref_t ref_of(const char *digest)
{
	char text[300];
	tb_image_ref_t r;
	tb_error_t err;
	snprintf(text, sizeof(text), "127.0.0.1:%u/team/app@%s", registry_port, digest);
	if (tb_image_ref_parse(&r, text, &err) < 0)
		fail_msg("%s", err.msg);
	return r;
}

static const char *const bottom[] = { "bin/", "bin/tool=v1", "usr/share/big=bbbbbbbbbbbbbbbb",
				      NULL };
static const char *const top1[] = { "etc/one=1", NULL };
static const char *const top2[] = { "etc/two=2", NULL };

/* Pulls @p digest into a fresh cache, giving up on a registry silent for
 * a second, at most @p max_unpacked bytes unpacked. @return tb_image_get's rc. */
static int pull_at_most(const char *digest, uint64_t max_unpacked, tb_image_t *img, tb_error_t *err)
{
	tb_image_cache_t *c;
	tb_image_ref_t r = ref_of(digest);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, err), 0);
	tb_image_cache_set_stall(c, 1);
	int rc = tb_image_get(c, &r, max_unpacked, NULL, img, err);
	tb_image_cache_close(c);
	return rc;
}

/* Pulls @p digest into a fresh cache. @return tb_image_get's rc. */
static int pull(const char *digest, const char *credentials, tb_image_t *img, tb_error_t *err)
{
	tb_image_cache_t *c;
	tb_image_ref_t r = ref_of(digest);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, err), 0);
	int rc = tb_image_get(c, &r, 64 << 20, credentials, img, err);
	tb_image_cache_close(c); /* img keeps its tree and lock */
	return rc;
}

static int fresh_cache(void **state);

static void test_registry__anonymous_bearer_basic_and_redirects(void **state)
{
	const char *const *layers[] = { bottom, top1 };
	tb_image_t img;
	tb_error_t err;
	char d[72];
	(void)state;
	oci_image(layout, layers, 2, NULL, d);
	/* anonymous */
	fake.auth = OPEN;
	if (pull(d, NULL, &img, &err) != 0)
		fail_msg("%s", err.msg);
	assert_true(img.fetched > 0);
	tb_image_release(&img);
	/* Bearer: the token from its realm, with the credentials, then
	 * blobs redirected to storage elsewhere, which sees no login */
	assert_int_equal(fresh_cache(NULL), 0);
	fake.auth = BEARER;
	fake.redirect = 1;
	assert_int_equal(pull(d, NULL, &img, &err), TB_EPOISON); /* no credentials */
	assert_non_null(strstr(err.msg, "token service answered 401"));
	if (pull(d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	char path[4200];
	snprintf(path, sizeof(path), "%s/bin/tool", img.tree);
	assert_int_equal(access(path, R_OK), 0);
	tb_image_release(&img);
	assert_int_equal(atomic_load(&fake.leaked), 0);
	/* Basic */
	assert_int_equal(fresh_cache(NULL), 0);
	fake.auth = BASIC;
	fake.redirect = 0;
	assert_int_equal(pull(d, NULL, &img, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "wants a login"));
	if (pull(d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	tb_image_release(&img);
}

static void test_registry__what_a_registry_gets_wrong_is_said(void **state)
{
	static const char *const other[] = { "etc/other=1", NULL };
	const char *const *layers[] = { other };
	char d[72], layer[80];
	tb_image_t img;
	tb_error_t err;
	(void)state;
	fake.auth = OPEN;
	oci_image(layout, layers, 1, NULL, d);
	/* the layer's digest, from the manifest */
	oci_first_layer(layout, d, layer);
	snprintf(fake.tamper, sizeof(fake.tamper), "%s", layer);
	assert_int_equal(pull(d, NULL, &img, &err), TB_ERETRY);
	assert_non_null(strstr(err.msg, "the bytes received are"));
	fake.tamper[0] = '\0';
	snprintf(fake.endless, sizeof(fake.endless), "%s", layer);
	assert_int_equal(pull(d, NULL, &img, &err), TB_ERETRY);
	assert_non_null(strstr(err.msg, "more than the"));
	fake.endless[0] = '\0';
	/* a manifest whose bytes are not its digest's (a cache without it) */
	assert_int_equal(fresh_cache(NULL), 0);
	snprintf(fake.tamper, sizeof(fake.tamper), "%s", d);
	assert_int_equal(pull(d, NULL, &img, &err), TB_ERETRY);
	if (!strstr(err.msg, "the bytes received are"))
		fail_msg("a tampered manifest said: %s", err.msg);
	fake.tamper[0] = '\0';
	assert_int_equal(
	    pull("sha256:1111111111111111111111111111111111111111111111111111111111111111", NULL,
		 &img, &err),
	    TB_EPOISON);
	assert_non_null(strstr(err.msg, "has no manifest"));
	/* and right again once the registry is */
	assert_int_equal(pull(d, NULL, &img, &err), 0);
	tb_image_release(&img);
}

/*
 * A registry that stops sending in the middle of a layer is given up on
 * after image_stall_seconds (here 1 s; each of the three tries), the
 * platform's failure; a layer that inflates past max_unpacked (a 1000:1
 * decompression bomb, small on the wire) stops at the cap and makes the
 * image poison. Neither leaves anything in the cache's trees.
 */
static void test_registry__a_stall_and_a_bomb_end_in_reasons(void **state)
{
	static char bomb[1 << 20];
	static char entry[(1 << 20) + 16];
	const char *bomb_files[] = { entry, NULL };
	const char *const *layers[] = { bomb_files };
	char d[72], layer[80], cmd[300];
	tb_image_t img;
	tb_error_t err;
	(void)state;
	fake.auth = OPEN;
	memset(bomb, 'z', sizeof(bomb) - 1);
	snprintf(entry, sizeof(entry), "big=%s", bomb);
	oci_image(layout, layers, 1, NULL, d);
	oci_first_layer(layout, d, layer);

	snprintf(fake.stall, sizeof(fake.stall), "%s", layer);
	assert_int_equal(pull_at_most(d, 64 << 20, &img, &err), TB_ERETRY);
	if (!strstr(err.msg, "stalled, under a byte a second for 1 s"))
		fail_msg("a stall said: %s", err.msg);
	fake.stall[0] = '\0';

	assert_int_equal(pull_at_most(d, 256 << 10, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "262144"))
		fail_msg("a bomb said: %s", err.msg);
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/images/trees)\"", cache_dir);
	assert_int_equal(system(cmd), 0);
	/* and the same image under a cap it fits */
	assert_int_equal(pull_at_most(d, 64 << 20, &img, &err), 0);
	assert_true(img.bytes >= sizeof(bomb) - 1);
	tb_image_release(&img);
}

static void test_registry__a_shared_layer_is_not_fetched_again(void **state)
{
	const char *const *one[] = { bottom, top1 }, *const * two[] = { bottom, top2 };
	tb_image_cache_t *c;
	tb_image_t a, b;
	tb_error_t err;
	char da[72], db[72];
	(void)state;
	fake.auth = OPEN;
	oci_image(layout, one, 2, NULL, da);
	oci_image(layout, two, 2, NULL, db);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	tb_image_ref_t ra = ref_of(da), rb = ref_of(db);
	assert_int_equal(tb_image_get(c, &ra, 64 << 20, NULL, &a, &err), 0);
	int gets = atomic_load(&fake.blob_gets);
	assert_int_equal(tb_image_get(c, &rb, 64 << 20, NULL, &b, &err), 0);
	/* the top layer only: the bottom one and the config (the same
	 * bytes in both images) were there */
	assert_int_equal(atomic_load(&fake.blob_gets) - gets, 1);
	assert_true(b.fetched < a.fetched);
	printf("  fetched: %llu bytes for the first image, %llu for the second\n",
	       (unsigned long long)a.fetched, (unsigned long long)b.fetched);
	tb_image_release(&a);
	tb_image_release(&b);
	tb_image_cache_close(c);
}

/* tb_image_get on cache @p c, for @p digest, with @p credentials. */
static int get(tb_image_cache_t *c, const char *digest, const char *credentials, tb_image_t *img,
	       tb_error_t *err)
{
	tb_image_ref_t r = ref_of(digest);
	return tb_image_get(c, &r, 64 << 20, credentials, img, err);
}

/*
 * An image one runtime pulled with the registry's login is not served
 * from the cache to a runtime with no login or a wrong one, on the same
 * worker (the same cache) or another (a cache opened anew): the registry
 * is asked with each one's own credentials and refuses them in the words
 * of a pull; with Basic, and with a Bearer challenge.
 */
static void test_registry__a_cached_image_asks_for_each_runtimes_login(void **state)
{
	const char *const *layers[] = { bottom, top1 };
	tb_image_cache_t *c, *other;
	tb_image_t img;
	tb_error_t err;
	char d[72];
	(void)state;
	oci_image(layout, layers, 2, NULL, d);
	for (int bearer = 0; bearer < 2; bearer++) {
		const char *refusal = bearer ? "token service answered 401" : "wants a login";
		assert_int_equal(fresh_cache(NULL), 0);
		fake.auth = bearer ? BEARER : BASIC;
		assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
		if (get(c, d, creds, &img, &err) != 0)
			fail_msg("%s", err.msg);
		assert_int_equal(img.cached, 0);
		tb_image_release(&img);
		int heads = atomic_load(&fake.heads);
		assert_int_equal(get(c, d, NULL, &img, &err), TB_EPOISON);
		if (!strstr(err.msg, refusal))
			fail_msg("no login, cached, said: %s", err.msg);
		assert_int_equal(get(c, d, wrong_creds, &img, &err), TB_EPOISON);
		if (!strstr(err.msg,
			    bearer ? refusal : "wants a login: the credentials given do not pass"))
			fail_msg("a wrong login, cached, said: %s", err.msg);
		assert_true(atomic_load(&fake.heads) > heads); /* the registry was asked */
		/* another worker on the host: its cache remembers nothing */
		assert_int_equal(tb_image_cache_open(&other, cache_dir, 1 << 30, &err), 0);
		assert_int_equal(get(other, d, NULL, &img, &err), TB_EPOISON);
		if (get(other, d, creds, &img, &err) != 0)
			fail_msg("the right login, cached, said: %s", err.msg);
		assert_int_equal(img.cached, 1);
		assert_int_equal(img.fetched, 0);
		tb_image_release(&img);
		tb_image_cache_close(other);
		/* the login that pulled it, again: remembered, not asked */
		heads = atomic_load(&fake.heads);
		assert_int_equal(get(c, d, creds, &img, &err), 0);
		assert_int_equal(img.cached, 1);
		assert_int_equal(atomic_load(&fake.heads), heads);
		tb_image_release(&img);
		tb_image_cache_close(c);
	}
}

/*
 * The registry's yes is remembered for the cache's authorization time:
 * a login revoked meanwhile still gets the cached image until then, and
 * is refused after. A cached image the registry no longer has is poison;
 * a registry that fails on the HEAD, the platform's failure.
 */
static void test_registry__a_registrys_yes_is_remembered_a_while(void **state)
{
	const char *const *layers[] = { bottom, top2 };
	tb_image_cache_t *c;
	tb_image_t img;
	tb_error_t err;
	char d[72];
	(void)state;
	fake.auth = BASIC;
	oci_image(layout, layers, 2, NULL, d);
	assert_int_equal(tb_image_cache_open(&c, cache_dir, 1 << 30, &err), 0);
	tb_image_cache_set_authorization_ms(c, 400);
	if (get(c, d, creds, &img, &err) != 0)
		fail_msg("%s", err.msg);
	tb_image_release(&img);
	atomic_store(&fake.revoked, 1);
	int heads = atomic_load(&fake.heads);
	assert_int_equal(get(c, d, creds, &img, &err), 0);
	assert_int_equal(atomic_load(&fake.heads), heads);
	tb_image_release(&img);
	usleep(600000);
	assert_int_equal(get(c, d, creds, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "wants a login: the credentials given do not pass"))
		fail_msg("a revoked login said: %s", err.msg);
	atomic_store(&fake.revoked, 0);
	tb_image_cache_set_authorization_ms(c, 0); /* asked every time */
	fake.head_status = 404;
	assert_int_equal(get(c, d, creds, &img, &err), TB_EPOISON);
	if (!strstr(err.msg, "has no manifest"))
		fail_msg("a manifest gone said: %s", err.msg);
	fake.head_status = 503;
	assert_int_equal(get(c, d, creds, &img, &err), TB_ERETRY);
	fake.head_status = 0;
	assert_int_equal(get(c, d, creds, &img, &err), 0);
	assert_int_equal(img.cached, 1);
	tb_image_release(&img);
	tb_image_cache_close(c);
}
/* One tb_image_get in a thread of its own, timed. */
typedef struct pull_job {
	tb_image_cache_t *c;
	const char *digest;
	int rc;
	tb_error_t err;
	tb_image_t img;
} pull_job_t;

static void *pull_thread(void *arg)
{
	pull_job_t *j = arg;
	j->rc = get(j->c, j->digest, NULL, &j->img, &j->err);
	return NULL;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * A worker that stops interrupts a pull stalled in the middle of a layer
 * (the registry silent, far from image_stall_seconds): it ends within
 * about a second as the platform's failure, not tried again, and the
 * next pull of this cache fails at once too.
 */
static void test_registry__a_stalled_pull_ends_when_the_worker_stops(void **state)
{
	static const char *const lone[] = { "etc/lone=1", NULL };
	const char *const *layers[] = { lone };
	pull_job_t j = { 0 };
	pthread_t t;
	char d[72], layer[80];
	(void)state;
	fake.auth = OPEN;
	oci_image(layout, layers, 1, NULL, d);
	oci_first_layer(layout, d, layer);
	snprintf(fake.stall, sizeof(fake.stall), "%s", layer);
	assert_int_equal(tb_image_cache_open(&j.c, cache_dir, 1 << 30, &j.err), 0);
	tb_image_cache_set_stall(j.c, 30);
	j.digest = d;
	assert_int_equal(pthread_create(&t, NULL, pull_thread, &j), 0);
	usleep(700000); /* the layer's first byte, then silence */
	uint64_t t0 = now_ms();
	tb_image_cache_interrupt(j.c);
	pthread_join(t, NULL);
	uint64_t took = now_ms() - t0;
	printf("  interrupted: ended %llu ms later\n", (unsigned long long)took);
	assert_int_equal(j.rc, TB_ERETRY);
	if (!strstr(j.err.msg, "the worker stops"))
		fail_msg("an interrupted pull said: %s", j.err.msg);
	assert_true(took < 2500);
	fake.stall[0] = '\0';
	t0 = now_ms();
	assert_int_equal(get(j.c, d, NULL, &j.img, &j.err), TB_ERETRY);
	assert_true(now_ms() - t0 < 1000);
	tb_image_cache_close(j.c);
}

static void noisy_image(char d[72], char layer[80], unsigned seed);

/* A ranged read through a blob whose reads its reader cancels. */
typedef struct cancel_job {
	tb_source_blob_t blob;
	int64_t rc;
	tb_error_t err;
} cancel_job_t;

static void *cancel_thread(void *arg)
{
	cancel_job_t *j = arg;
	char buf[1000];
	j->rc = tb_image_source_fetch(&j->blob, 100, buf, sizeof(buf), &j->err);
	return NULL;
}

/*
 * A ranged read stalled in the middle (the registry silent, far from
 * image_stall_seconds, the worker not stopping) ends within about a
 * second once its reader cancels it (the blob's cancel: an image's root
 * stopped), saying so; the source serves other reads after.
 */
static void test_registry__a_stalled_range_ends_when_its_reader_cancels(void **state)
{
	char d[72], layer[80], buf[100];
	atomic_int cancel = 0;
	tb_image_source_t *src;
	tb_error_t err;
	pthread_t t;
	(void)state;
	fake.auth = OPEN;
	noisy_image(d, layer, 13);
	tb_image_ref_t r = ref_of(d);
	snprintf(fake.stall_range, sizeof(fake.stall_range), "%s", layer);
	assert_int_equal(tb_registry_open(&src, &r, NULL, 30, NULL, &err), 0);
	cancel_job_t j = { .blob = { .src = src, .cancel = &cancel } };
	snprintf(j.blob.digest, sizeof(j.blob.digest), "%.71s", layer);
	assert_int_equal(pthread_create(&t, NULL, cancel_thread, &j), 0);
	usleep(700000); /* the range's first byte, then silence */
	uint64_t t0 = now_ms();
	atomic_store(&cancel, 1);
	pthread_join(t, NULL);
	uint64_t took = now_ms() - t0;
	printf("  cancelled: ended %llu ms later: %s\n", (unsigned long long)took, j.err.msg);
	assert_int_equal(j.rc, TB_ERETRY);
	if (!strstr(j.err.msg, "its reader stops"))
		fail_msg("a cancelled read said: %s", j.err.msg);
	assert_true(took < 2500);
	fake.stall_range[0] = '\0';
	assert_int_equal(src->read_range(src, layer, 0, buf, sizeof(buf), NULL, &err),
			 (int64_t)sizeof(buf));
	src->close(src);
}

static int fresh_cache(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", cache_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/*
 * A layer whose transfers are cut part-way is resumed where each one
 * stopped (a Range request, a 206), not fetched again from its start: the
 * pull succeeds within its three tries and the registry serves the layer
 * about once. A part a dead worker left is taken up by the next pull; a
 * registry that ignores Range sends the whole layer, and the part starts
 * over.
 */
static void test_registry__a_cut_layer_is_resumed_where_it_stopped(void **state)
{
	static char noise[60000]; /* its layer within oci_layer()'s 64 KiB */
	const char *files[] = { noise, NULL };
	const char *const *layers[] = { files };
	char d[72], layer[80], path[300], part[300];
	struct stat st;
	tb_image_t img;
	tb_error_t err;

	(void)state;
	fake.auth = OPEN;
	srand(7);
	memcpy(noise, "noise=", 6); /* a file that gzip cannot shrink much */
	for (size_t i = 6; i < sizeof(noise) - 1; i++)
		noise[i] = (char)('!' + rand() % 90);
	oci_image(layout, layers, 1, NULL, d);
	oci_first_layer(layout, d, layer);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, layer + 7);
	assert_int_equal(stat(path, &st), 0);
	size_t size = (size_t)st.st_size;

	/* each answer cut after a third: three tries, each going on */
	snprintf(fake.cut, sizeof(fake.cut), "%s", layer);
	snprintf(fake.counted, sizeof(fake.counted), "%s", layer);
	fake.cut_after = size / 3 + 1;
	atomic_store(&fake.served, 0);
	if (pull(d, NULL, &img, &err) != 0)
		fail_msg("a cut layer: %s", err.msg);
	tb_image_release(&img);
	long served = atomic_load(&fake.served);
	if (served != (long)size) /* each byte once */
		fail_msg("served %ld bytes for a layer of %zu", served, size);
	fake.cut[0] = '\0';

	/* a dead worker's part: the next pull fetches only the rest */
	snprintf(part, sizeof(part), "%s/images/blobs/.part-%s", cache_dir, layer + 7);
	for (int ignore = 0; ignore < 2; ignore++) {
		char cmd[800];
		snprintf(cmd, sizeof(cmd), "rm -rf %s/images/trees/* %s/images/blobs/%s", cache_dir,
			 cache_dir, layer + 7);
		assert_int_equal(system(cmd), 0);
		snprintf(cmd, sizeof(cmd), "head -c %zu %s > %s", size / 2, path, part);
		assert_int_equal(system(cmd), 0);
		fake.no_range = ignore;
		atomic_store(&fake.served, 0);
		if (pull(d, NULL, &img, &err) != 0)
			fail_msg("after a part (ranges %s): %s", ignore ? "ignored" : "kept",
				 err.msg);
		tb_image_release(&img);
		served = atomic_load(&fake.served);
		if (ignore ? served != (long)size : served != (long)(size - size / 2))
			fail_msg("ranges %s: served %ld bytes of %zu with half kept",
				 ignore ? "ignored" : "kept", served, size);
		assert_int_not_equal(stat(part, &st), 0); /* kept whole now, the part gone */
	}
	fake.no_range = 0;
	fake.counted[0] = '\0';
}

/* The bytes of blob @p digest in the layout, malloc'd; its size in *@p n. */
static char *layout_blob(const char *digest, size_t *n)
{
	char path[300];
	struct stat st;
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, digest + 7);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0 && fstat(fd, &st) == 0);
	char *buf = malloc((size_t)st.st_size);
	assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
	close(fd);
	*n = (size_t)st.st_size;
	return buf;
}

/* A layer of about 50 KiB that gzip cannot shrink much; its digest into
 * @p layer, the image's into @p d. */
static void noisy_image(char d[72], char layer[80], unsigned seed)
{
	static char noise[60000]; /* its layer within oci_layer()'s 64 KiB */
	const char *files[] = { noise, NULL };
	const char *const *layers[] = { files };
	srand(seed);
	memcpy(noise, "noise=", 6);
	for (size_t i = 6; i < sizeof(noise) - 1; i++)
		noise[i] = (char)('!' + rand() % 90);
	oci_image(layout, layers, 1, NULL, d);
	oci_first_layer(layout, d, layer);
}

/* Ranges read by several threads at once through one source. */
typedef struct range_job {
	tb_source_blob_t blob;
	const char *want;
	size_t size;
	unsigned seed;
	int bad;
	tb_error_t err;
} range_job_t;

static void *range_thread(void *arg)
{
	range_job_t *j = arg;
	char buf[9000];
	for (int i = 0; i < 40 && !j->bad; i++) {
		uint64_t off = (uint64_t)rand_r(&j->seed) % j->size;
		size_t len = 1 + (size_t)rand_r(&j->seed) % sizeof(buf);
		size_t expect = off + len > j->size ? j->size - off : len;
		int64_t got = tb_image_source_fetch(&j->blob, off, buf, len, &j->err);
		if (got != (int64_t)expect || memcmp(buf, j->want + off, expect))
			j->bad = 1 + (got < 0);
	}
	return NULL;
}

/*
 * A blob is read by ranges (a layer read through its index) with the
 * logins and redirects of a whole GET: anonymous, Basic, Bearer with
 * blobs in storage elsewhere (which sees no login), by four threads at
 * once through one source, each range the blob's own bytes, and fewer at
 * its end. What a registry gets wrong is refused, naming it: a 200 (the
 * whole blob), another Content-Range, a body shorter than its
 * Content-Range, one cut off; a layout reads its file at the offset.
 */
static void test_registry__a_blob_is_read_by_ranges(void **state)
{
	char d[72], layer[80], buf[4096];
	tb_image_source_t *src;
	tb_error_t err;
	size_t size;
	(void)state;
	noisy_image(d, layer, 11);
	char *want = layout_blob(layer, &size);
	tb_image_ref_t r = ref_of(d);
	static const struct {
		int auth, redirect;
	} ways[] = { { OPEN, 0 }, { BASIC, 0 }, { BEARER, 1 } };
	for (size_t w = 0; w < sizeof(ways) / sizeof(ways[0]); w++) {
		fake.auth = ways[w].auth;
		fake.redirect = ways[w].redirect;
		assert_int_equal(tb_registry_open(&src, &r, creds, 2, NULL, &err), 0);
		range_job_t jobs[4];
		pthread_t t[4];
		for (unsigned i = 0; i < 4; i++) {
			jobs[i] = (range_job_t){ .want = want, .size = size, .seed = 7 * i + 1 };
			jobs[i].blob.src = src;
			snprintf(jobs[i].blob.digest, sizeof(jobs[i].blob.digest), "%.71s", layer);
			assert_int_equal(pthread_create(&t[i], NULL, range_thread, &jobs[i]), 0);
		}
		for (unsigned i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
			if (jobs[i].bad)
				fail_msg("ranges, auth %d: %s", ways[w].auth,
					 jobs[i].bad > 1 ? jobs[i].err.msg : "other bytes");
		}
		/* the last bytes, asked past the end: fewer */
		assert_int_equal(src->read_range(src, layer, size - 10, buf, 100, NULL, &err), 10);
		assert_memory_equal(buf, want + size - 10, 10);
		assert_false(atomic_load(&fake.leaked));
		src->close(src);
	}
	fake.redirect = 0;
	fake.auth = OPEN;
	assert_int_equal(tb_registry_open(&src, &r, NULL, 2, NULL, &err), 0);
	static const struct {
		int lie;
		const char *said;
	} lies[] = {
		{ RANGE_WHOLE, "answered 200 (the whole blob) to a request for bytes 100-1099" },
		{ RANGE_SHIFTED, "sent bytes 101-1100 (Content-Range) where 100-1099 were asked" },
		{ RANGE_SHORT, "a short answer, 500 of the 1000 bytes its Content-Range says" },
	};
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		fake.range_lie = lies[i].lie;
		assert_true(src->read_range(src, layer, 100, buf, 1000, NULL, &err) < 0);
		if (!strstr(err.msg, lies[i].said))
			fail_msg("lie %d said: %s", lies[i].lie, err.msg);
	}
	fake.range_lie = RANGE_RIGHT;
	snprintf(fake.cut, sizeof(fake.cut), "%s", layer); /* the connection dropped */
	fake.cut_after = 300;
	assert_true(src->read_range(src, layer, 100, buf, 1000, NULL, &err) < 0);
	fake.cut[0] = '\0';
	assert_int_equal(src->read_range(src,
					 "sha256:"
					 "0123456789abcdef0123456789abcdef"
					 "0123456789abcdef0123456789abcdef",
					 0, buf, 10, NULL, &err),
			 TB_ENOTFOUND);
	src->close(src);
	/* a layout: the file at the offset */
	tb_image_ref_t lr;
	char text[300];
	snprintf(text, sizeof(text), "oci-layout:%s@%s", layout, d);
	if (tb_image_ref_parse(&lr, text, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(tb_layout_open(&src, &lr, &err), 0);
	assert_int_equal(src->read_range(src, layer, 5, buf, 2000, NULL, &err), 2000);
	assert_memory_equal(buf, want + 5, 2000);
	assert_int_equal(src->read_range(src, layer, size - 3, buf, 2000, NULL, &err), 3);
	src->close(src);
	free(want);
}

static int setup(void **state)
{
	char host[40];
	(void)state;
	if (!mkdtemp(base))
		return -1;
	snprintf(layout, sizeof(layout), "%s/layout", base);
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", base);
	snprintf(creds, sizeof(creds), "%s/auth.json", base);
	snprintf(wrong_creds, sizeof(wrong_creds), "%s/wrong.json", base);
	registry = serve("127.0.0.1", on_registry, &registry_port);
	storage = serve("127.0.0.2", on_storage, &storage_port);
	if (oci_layout_init(layout) < 0)
		return -1;
	snprintf(host, sizeof(host), "127.0.0.1:%u", registry_port);
	oci_auth_file(creds, host, USER_PASS);
	oci_auth_file(wrong_creds, host, WRONG_PASS);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	atomic_store(&fake.stop, 1);
	MHD_stop_daemon(registry);
	MHD_stop_daemon(storage);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_registry__anonymous_bearer_basic_and_redirects,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__what_a_registry_gets_wrong_is_said,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__a_stall_and_a_bomb_end_in_reasons,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__a_shared_layer_is_not_fetched_again,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__a_cached_image_asks_for_each_runtimes_login,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__a_registrys_yes_is_remembered_a_while,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__a_stalled_pull_ends_when_the_worker_stops,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__a_cut_layer_is_resumed_where_it_stopped,
				       fresh_cache),
		cmocka_unit_test_setup(test_registry__a_blob_is_read_by_ranges, fresh_cache),
		cmocka_unit_test_setup(test_registry__a_stalled_range_ends_when_its_reader_cancels,
				       fresh_cache),
	};
	if (geteuid() != 0) {
		printf("SKIP: the tree keeps the layers' owners: needs root\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
