/*
 * test_store.c: the artifact store, the same tests on every backend: a
 * local directory always, and S3 with Signature V4 against the real
 * S3-compatible server when TASKBOX_TEST_S3_* is set (tests/run sets it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb/sys/store.h" /* a backend of its own, or one called bypassing the checks */
#include "tb/encoding.h"
#include "tb/crc32c.h"
#include "tb/sigv4.h"
#include "tb/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>

typedef struct fixture {
	tb_store_t *store;
	char dir[128];
	char bucket[64];
	const char *scheme; /* "s3" or "s3v2" */
	int s3;
} fixture_t;

static char tmpdir[64] = "/tmp/tb-store-test-XXXXXX";
static int counter;

static const char *unique_key(const char *name)
{
	static char key[256];
	snprintf(key, sizeof(key), "tasks/t-%d-%d/1/outputs/%s", getpid(), ++counter, name);
	return key;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *read_file(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int open_dir(void **state)
{
	fixture_t *fx = calloc(1, sizeof(*fx));
	tb_error_t err;

	snprintf(fx->dir, sizeof(fx->dir), "%s/dirstore", tmpdir);
	if (tb_store_dir_open(&fx->store, fx->dir, &err) != 0)
		return -1;
	*state = fx;
	return 0;
}

static int open_s3_scheme(void **state, const char *scheme)
{
	fixture_t *fx = calloc(1, sizeof(*fx));
	const char *endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	tb_store_config_t cfg = { 0 };
	char url[128];
	tb_error_t err;

	if (!endpoint) {
		free(fx);
		*state = NULL;
		return 0;
	}
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	fx->scheme = scheme;
	snprintf(fx->bucket, sizeof(fx->bucket), "tb-%s-%d", scheme, getpid());
	snprintf(url, sizeof(url), "%s://%s/runs", scheme, fx->bucket);
	cfg.url = url;
	cfg.endpoint = (char *)endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(&fx->store, &cfg, &err) != 0 ||
	    tb_store_create_bucket(fx->store, &err) != 0) {
		fprintf(stderr, "s3 setup: %s\n", err.msg);
		return -1;
	}
	fx->s3 = 1;
	*state = fx;
	return 0;
}

static int open_s3(void **state)
{
	return open_s3_scheme(state, "s3");
}

static int open_s3v2(void **state)
{
	return open_s3_scheme(state, "s3v2");
}

static int close_store(void **state)
{
	fixture_t *fx = *state;
	if (fx) {
		tb_store_close(fx->store);
		free(fx);
	}
	return 0;
}

#define NEED(fx)                                                                                   \
	do {                                                                                       \
		if (!(fx)) {                                                                       \
			printf("SKIP: TASKBOX_TEST_S3_ENDPOINT not set (tests/run sets it)\n");    \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

static int collect_keys(void *ud, const char *key, const tb_object_info_t *info)
{
	char *acc = ud;
	size_t n = strlen(acc);
	snprintf(acc + n, 4096 - n, "%s:%llu;", key, (unsigned long long)info->size);
	return 0;
}

static void test_store__put_get_head_list_delete(void **state)
{
	fixture_t *fx = *state;
	char src[128], dst[128], prefix[128], listing[4096] = "";
	tb_object_info_t info;
	tb_error_t err;

	NEED(fx);
	const char *key = unique_key("report.md");
	snprintf(src, sizeof(src), "%s/src.txt", tmpdir);
	snprintf(dst, sizeof(dst), "%s/dst.txt", tmpdir);
	write_file(src, "hello artifacts\n");
	if (tb_store_put_file(fx->store, key, src, &info, &err) != 0)
		fail_msg("put: %s", err.msg);
	assert_int_equal(info.size, 16);
	assert_int_equal(tb_store_head(fx->store, key, &info, &err), 0);
	assert_int_equal(info.size, 16);
	/* Every store knows the content's checksum: SHA-256, or (libs3) the
	 * MD5 the server computed. */
	assert_true(strlen(info.sha256) == 64 || strlen(info.md5) == 32);
	if (tb_store_get_file(fx->store, key, dst, 0, &info, &err) != 0)
		fail_msg("get: %s", err.msg);
	assert_string_equal(read_file(dst), "hello artifacts\n");

	/* A second object under the same task, then the listing. Its name
	 * holds what XML escapes, "&amp;" itself included: decoded once. */
	snprintf(prefix, sizeof(prefix), "%.*s", (int)(strrchr(key, '/') - key + 1), key);
	char second[256];
	snprintf(second, sizeof(second), "%smore/data&amp;<x>.bin", prefix);
	assert_int_equal(tb_store_put_bytes(fx->store, second, "12345", 5, NULL, &err), 0);
	assert_int_equal(tb_store_list(fx->store, prefix, collect_keys, listing, &err), 0);
	char want[1024];
	snprintf(want, sizeof(want), "%smore/data&amp;<x>.bin:5;%s:16;", prefix, key);
	assert_string_equal(listing, want);

	assert_int_equal(tb_store_delete(fx->store, key, &err), 0);
	assert_int_equal(tb_store_head(fx->store, key, &info, &err), TB_ENOTFOUND);
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), TB_ENOTFOUND);
	assert_int_equal(tb_store_delete(fx->store, key, &err), 0); /* already gone: fine */
	assert_int_equal(tb_store_delete(fx->store, second, &err), 0);
}

/* Ranged reads (inputs read on demand): the bytes asked for, fewer at the
 * object's end, none past it. */
static void test_store__ranges_read_what_was_asked(void **state)
{
	fixture_t *fx = *state;
	const size_t size = (3u << 20) + 123;
	char src[128];
	tb_error_t err;
	size_t got;

	NEED(fx);
	const char *key = unique_key("big.bin");
	snprintf(src, sizeof(src), "%s/ranges.bin", tmpdir);
	unsigned char *data = malloc(size), *buf = malloc(1u << 20);
	assert_non_null(data);
	assert_non_null(buf);
	for (size_t i = 0; i < size; i++)
		data[i] = (unsigned char)((i * 2654435761u) >> 13);
	FILE *f = fopen(src, "we");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, size, f), size);
	fclose(f);
	if (tb_store_put_file(fx->store, key, src, NULL, &err) != 0)
		fail_msg("put: %s", err.msg);

	const struct {
		uint64_t off;
		size_t len, want;
	} cases[] = {
		{ 0, 10, 10 },         { (1u << 20) + 7, 1u << 20, 1u << 20 }, /* from the middle */
		{ size - 5, 100, 5 },                                          /* its end */
		{ size, 10, 0 },                                               /* at its end */
		{ size + 100, 10, 0 },                                         /* past it */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(buf, 0, 1u << 20);
		if (tb_store_get_range(fx->store, key, cases[i].off, cases[i].len, buf, &got,
				       &err) != 0)
			fail_msg("range %zu: %s", i, err.msg);
		assert_int_equal(got, cases[i].want);
		if (got)
			assert_memory_equal(buf, data + cases[i].off, got);
	}
	/* into several buffers, in order: uneven ones, one of them empty,
	 * the range crossing each; and one running past the object's end */
	{
		const size_t lens[] = { 1, 4096 - 1, 0, 70000, (1u << 20) - 4096 - 70000 };
		struct iovec iov[5];
		size_t at = 0;
		for (int k = 0; k < 5; k++) {
			iov[k] = (struct iovec){ buf + at, lens[k] };
			at += lens[k];
		}
		memset(buf, 0, 1u << 20);
		if (tb_store_get_range_iov(fx->store, key, 333, iov, 5, &got, &err) != 0)
			fail_msg("range into buffers: %s", err.msg);
		assert_int_equal(got, 1u << 20);
		assert_memory_equal(buf, data + 333, got);
		memset(buf, 0, 1u << 20);
		if (tb_store_get_range_iov(fx->store, key, size - 5000, iov, 5, &got, &err) != 0)
			fail_msg("range into buffers at the end: %s", err.msg);
		assert_int_equal(got, 5000);
		assert_memory_equal(buf, data + size - 5000, got);
		assert_int_equal(tb_store_get_range_iov(fx->store, key, 0, iov, 0, &got, &err),
				 TB_EINVAL);
	}
	assert_int_equal(tb_store_get_range(fx->store, key, 0, 0, buf, &got, &err), TB_EINVAL);
	assert_int_equal(tb_store_get_range(fx->store, unique_key("none"), 0, 10, buf, &got, &err),
			 TB_ENOTFOUND);
	assert_int_equal(tb_store_delete(fx->store, key, &err), 0);
	free(data);
	free(buf);
}

static void test_store__never_overwrites_other_content(void **state)
{
	fixture_t *fx = *state;
	tb_error_t err;

	NEED(fx);
	const char *key = unique_key("verdict.msgpack");
	assert_int_equal(tb_store_put_bytes(fx->store, key, "first", 5, NULL, &err), 0);
	/* A replay writing the same bytes succeeds ... */
	assert_int_equal(tb_store_put_bytes(fx->store, key, "first", 5, NULL, &err), 0);
	/* ... other bytes under the same key never replace them. */
	assert_int_equal(tb_store_put_bytes(fx->store, key, "second", 6, NULL, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "exists with other content"));
	tb_store_delete(fx->store, key, &err);
}

/* PUTs @p body at @p key with SigV4, behind the store's back: its
 * x-amz-meta-sha256 @p meta, x-amz-meta-crc32c @p crc if not NULL, and
 * Content-Type @p type if not NULL. */
static void raw_s3_put_crc(const fixture_t *fx, const char *key, const char *body, const char *meta,
			   const char *crc, const char *type)
{
	const char *endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	tb_sigv4_creds_t c = { getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), NULL,
			       getenv("TASKBOX_TEST_S3_REGION"), "s3" };
	char path[512], url[1024], date[TB_SIGV4_DATE_LEN], sha[65], auth[TB_SIGV4_AUTH_MAX];
	char h[6][TB_SIGV4_AUTH_MAX + 32];
	const char *host = strstr(endpoint, "://") + 3;
	tb_error_t err;

	snprintf(path, sizeof(path), "/%s/runs/%s", fx->bucket, key);
	snprintf(url, sizeof(url), "%s%s", endpoint, path);
	tb_sigv4_date(date, time(NULL));
	tb_sha256_hex(sha, body, strlen(body));
	tb_sigv4_header_t sh[] = { { "host", host },
				   { "x-amz-content-sha256", sha },
				   { "x-amz-date", date },
				   { "x-amz-meta-sha256", meta },
				   { "x-amz-meta-crc32c", crc } };
	size_t nh = crc ? 5 : 4;
	assert_int_equal(tb_sigv4_authorization(auth, sizeof(auth), &c, "PUT", path, "", sh, nh,
						sha, date, &err),
			 0);
	snprintf(h[0], sizeof(h[0]), "Authorization: %s", auth);
	snprintf(h[1], sizeof(h[1]), "x-amz-date: %s", date);
	snprintf(h[2], sizeof(h[2]), "x-amz-content-sha256: %s", sha);
	snprintf(h[3], sizeof(h[3]), "x-amz-meta-sha256: %s", meta);
	snprintf(h[4], sizeof(h[4]), "Content-Type: %s", type ? type : "application/octet-stream");
	snprintf(h[5], sizeof(h[5]), "x-amz-meta-crc32c: %s", crc ? crc : "");
	struct curl_slist *hl = NULL;
	for (size_t i = 0; i < nh + 1; i++)
		hl = curl_slist_append(hl, h[i]);
	CURL *cu = curl_easy_init();
	long status = 0;
	curl_easy_setopt(cu, CURLOPT_URL, url);
	curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, "PUT");
	curl_easy_setopt(cu, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(cu, CURLOPT_HTTPHEADER, hl);
	assert_int_equal(curl_easy_perform(cu), CURLE_OK);
	curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(cu);
	curl_slist_free_all(hl);
	assert_int_equal(status, 200);
}

static void raw_s3_put(const fixture_t *fx, const char *key, const char *body, const char *meta,
		       const char *type)
{
	raw_s3_put_crc(fx, key, body, meta, NULL, type);
}

/* Stores @p body at @p key with checksums of our choosing (@p crc "" for
 * none), behind the wrapper's back, as a damaged store would hold it. */
static void put_with_sums(const fixture_t *fx, const char *key, const char *body, const char *sha,
			  const char *crc)
{
	if (fx->s3) {
		char type[200];
		if (crc[0])
			snprintf(type, sizeof(type), "application/octet-stream; taskbox-sums=%s.%s",
				 crc, sha);
		else
			snprintf(type, sizeof(type), "application/octet-stream; taskbox-sha256=%s",
				 sha);
		raw_s3_put_crc(fx, key, body, sha, crc[0] ? crc : NULL, type);
		return;
	}
	char path[128];
	tb_object_info_t sums = { .size = strlen(body) };
	tb_error_t err;
	snprintf(path, sizeof(path), "%s/sums.txt", tmpdir);
	write_file(path, body);
	snprintf(sums.sha256, sizeof(sums.sha256), "%s", sha);
	snprintf(sums.crc32c, sizeof(sums.crc32c), "%s", crc);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fx->store->ops->put(fx->store, key, fd, &sums, NULL, &err), 0);
	close(fd);
}

static void test_store__checksum_mismatch_is_detected(void **state)
{
	fixture_t *fx = *state;
	char path[128], dst[128];
	tb_object_info_t info;
	tb_error_t err;
	int fd;

	NEED(fx);
	snprintf(path, sizeof(path), "%s/tamper.txt", tmpdir);
	snprintf(dst, sizeof(dst), "%s/tamper-out.txt", tmpdir);
	/* First the good ones: objects of earlier builds (a SHA-256, no
	 * CRC-32C), or with a CRC-32C in a form we never write, are
	 * verified by their SHA-256. */
	const char *body = "the real content", *crcs[] = { "", "AAAAAA==" };
	char sha[65];
	tb_sha256_hex(sha, body, strlen(body));
	for (int i = 0; i < 2; i++) {
		const char *old = unique_key("earlier.txt");
		put_with_sums(fx, old, body, sha, crcs[i]);
		if (tb_store_get_file(fx->store, old, dst, 0, &info, &err) != 0)
			fail_msg("an earlier build's object (crc32c '%s'): %s", crcs[i], err.msg);
		assert_string_equal(read_file(dst), body);
		assert_string_equal(info.sha256, sha);
		tb_store_delete(fx->store, old, &err);
	}
	const char *key = unique_key("tampered.txt");
	if (fx->scheme && !strcmp(fx->scheme, "s3v2")) {
		/* Through libs3 the checksum is read from the Content-Type,
		 * else from an earlier build's sidecar record: make each
		 * disagree with the object in turn. */
		const char *zeros =
		    "0000000000000000000000000000000000000000000000000000000000000000";
		char type[160], side[512], rec[80];
		snprintf(type, sizeof(type), "application/octet-stream; taskbox-sha256=%s", zeros);
		raw_s3_put(fx, key, "the real content", zeros, type);
		write_file(dst, "untouched");
		assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), TB_EIO);
		assert_non_null(strstr(err.msg, "checksum mismatch"));
		assert_string_equal(read_file(dst), "untouched");
		assert_int_equal(tb_store_delete(fx->store, key, &err), 0);
		/* an earlier build's object: no checksum in its type, a
		 * sidecar beside it */
		raw_s3_put(fx, key, "the real content", zeros, NULL);
		snprintf(side, sizeof(side), ".taskbox-sha256/%s", key);
		snprintf(rec, sizeof(rec), "%s 16\n", zeros);
		raw_s3_put(fx, side, rec, "x", NULL);
		assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), TB_EIO);
		assert_non_null(strstr(err.msg, "checksum mismatch"));
		assert_string_equal(read_file(dst), "untouched");
		/* the delete takes the sidecar along: the key can be written
		 * again, and reads back verified */
		assert_int_equal(tb_store_delete(fx->store, key, &err), 0);
		assert_int_equal(
		    tb_store_put_bytes(fx->store, key, "the real content", 16, NULL, &err), 0);
		assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), 0);
		assert_string_equal(read_file(dst), "the real content");
		assert_int_equal(tb_store_delete(fx->store, key, &err), 0);
		return;
	}
	snprintf(path, sizeof(path), "%s/tamper.txt", tmpdir);
	snprintf(dst, sizeof(dst), "%s/tamper-out.txt", tmpdir);
	write_file(path, "the real content");
	write_file(dst, "untouched");
	/* Store bytes under a checksum that is not theirs, behind the
	 * wrapper's back, as a corrupted store would. */
	if (fx->s3) {
		raw_s3_put(fx, key, "the real content",
			   "0000000000000000000000000000000000000000000000000000000000000000",
			   NULL);
	} else {
		tb_object_info_t sums = { .size = 16 };
		memset(sums.sha256, '0', 64);
		fd = open(path, O_RDONLY);
		assert_int_equal(fx->store->ops->put(fx->store, key, fd, &sums, NULL, &err), 0);
		close(fd);
	}
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "checksum mismatch"));
	assert_string_equal(read_file(dst), "untouched"); /* not replaced */
	tb_store_delete(fx->store, key, &err);
}

/* Names in @p dir that are unfinished downloads (".partial-"). */
static int partials_in(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".partial-") != NULL;
	closedir(d);
	return n;
}

/* How many names with ".partial-" in them the inotify @p watch (on
 * IN_DELETE) saw deleted since it was last read. */
static int partials_deleted(int watch)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int n = 0;

	for (int turn = 0; turn < 100; turn++) {
		ssize_t got = read(watch, buf, sizeof(buf));
		if (got <= 0)
			break;
		for (char *p = buf; p < buf + got;) {
			const struct inotify_event *e = (const struct inotify_event *)p;
			if (e->len && strstr(e->name, ".partial-"))
				n++;
			p += sizeof(*e) + e->len;
		}
	}
	return n;
}

/* Whether @p dir's file system can swap two names (RENAME_EXCHANGE). */
static int exchange_works(const char *dir)
{
	char a[256], b[256];

	snprintf(a, sizeof(a), "%s/swap-a", dir);
	snprintf(b, sizeof(b), "%s/swap-b", dir);
	write_file(a, "a");
	write_file(b, "b");
	int ok = renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0;
	if (!ok)
		printf("no RENAME_EXCHANGE here (%s): downloads rename instead\n", strerror(errno));
	unlink(a);
	unlink(b);
	return ok;
}

/* Pages of the file open on @p fd (@p len bytes) in the page cache. */
static size_t cached_pages(int fd, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page, in = 0;
	unsigned char *vec = malloc(n);
	void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

	assert_non_null(vec);
	assert_true(m != MAP_FAILED);
	assert_int_equal(mincore(m, len, vec), 0);
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	munmap(m, len);
	free(vec);
	return in;
}

/* A download replaces a file in one step, leaving nothing behind; it
 * never replaces a directory. It replaces a file by exchanging names
 * with it (RENAME_EXCHANGE), which inotify tells from a rename; and the
 * old file's cached pages are given back first, not kept beside the
 * new copy's. */
static void test_store__a_download_replaces_a_file_and_nothing_else(void **state)
{
	fixture_t *fx = *state;
	char dir[160], dst[200], sub[256];
	tb_error_t err;

	NEED(fx);
	const char *key = unique_key("replace.txt");
	snprintf(dir, sizeof(dir), "%s/replace-%d", tmpdir, counter);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(dst, sizeof(dst), "%s/out.txt", dir);
	assert_int_equal(tb_store_put_bytes(fx->store, key, "new", 3, NULL, &err), 0);
	/* the old file: 1 MiB, written out (clean pages can be dropped),
	 * read back into the page cache, and held open to look at after */
	const size_t old_len = 1u << 20;
	char *old = malloc(old_len);
	assert_non_null(old);
	memset(old, 'o', old_len);
	int ofd = open(dst, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(ofd >= 0);
	assert_int_equal(write(ofd, old, old_len), (ssize_t)old_len);
	assert_int_equal(fsync(ofd), 0);
	assert_int_equal(pread(ofd, old, old_len, 0), (ssize_t)old_len);
	free(old);
	int exchange = exchange_works(dir);
	int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(watch >= 0);
	assert_true(inotify_add_watch(watch, dir, IN_DELETE) >= 0);
	assert_true(cached_pages(ofd, old_len) > 0);
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, NULL, &err), 0);
	assert_string_equal(read_file(dst), "new");
	/* (a tmpfs file is its pages: nothing to give back there) */
	struct statfs fs;
	assert_int_equal(fstatfs(ofd, &fs), 0);
	if (fs.f_type != TMPFS_MAGIC)
		assert_int_equal(cached_pages(ofd, old_len), 0);
	else
		printf("%s is tmpfs: the old file's pages stay (they are the file)\n", dir);
	close(ofd);
	assert_int_equal(partials_in(dir), 0);
	/* by exchange, where the file system has it: the old file took the
	 * temporary name and was deleted under it (a rename over it deletes
	 * no name) */
	assert_int_equal(partials_deleted(watch), exchange ? 1 : 0);
	/* a fresh name: renamed into place, nothing deleted */
	unlink(dst);
	assert_int_equal(partials_deleted(watch), 0); /* (drains dst's) */
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, NULL, &err), 0);
	assert_string_equal(read_file(dst), "new");
	assert_int_equal(partials_deleted(watch), 0);
	close(watch);
	/* a directory in the way: refused, left as it was */
	snprintf(sub, sizeof(sub), "%s/inside", dst);
	unlink(dst);
	assert_int_equal(mkdir(dst, 0755), 0);
	write_file(sub, "kept");
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, NULL, &err), TB_EIO);
	assert_string_equal(read_file(sub), "kept");
	assert_int_equal(partials_in(dir), 0);
	unlink(sub);
	rmdir(dst);
	rmdir(dir);
	tb_store_delete(fx->store, key, &err);
}

/* A download is verified by the CRC-32C the store records; the SHA-256
 * of what arrived is computed when the caller asks for it. */
static void test_store__downloads_are_verified_by_crc32c(void **state)
{
	fixture_t *fx = *state;
	const char *body = "the real content";
	char dst[128], sha[65], crc[9];
	tb_object_info_t info, head;
	tb_error_t err;

	NEED(fx);
	snprintf(dst, sizeof(dst), "%s/crc-out.txt", tmpdir);
	tb_sha256_hex(sha, body, strlen(body));
	snprintf(crc, sizeof(crc), "%08x", (unsigned)tb_crc32c(0, body, strlen(body)));

	/* What the store records, for what it was given. */
	const char *key = unique_key("crc-ok.txt");
	assert_int_equal(tb_store_put_bytes(fx->store, key, body, strlen(body), &info, &err), 0);
	assert_string_equal(info.crc32c, crc);
	assert_string_equal(info.sha256, sha);
	assert_int_equal(tb_store_head(fx->store, key, &head, &err), 0);
	assert_string_equal(head.crc32c, crc);
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), 0);
	assert_string_equal(info.crc32c, crc);
	assert_string_equal(info.sha256, sha);
	tb_store_delete(fx->store, key, &err);

	/* Content that does not match its CRC-32C, though it matches its
	 * SHA-256: refused, the file left alone. */
	key = unique_key("crc-bad.txt");
	put_with_sums(fx, key, body, sha, "00000000");
	write_file(dst, "untouched");
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "checksum mismatch"));
	assert_non_null(strstr(err.msg, "crc32c 00000000"));
	assert_string_equal(read_file(dst), "untouched");
	char *bytes = NULL;
	size_t len = 0;
	assert_int_equal(tb_store_get_bytes(fx->store, key, 1024, &bytes, &len, &err), TB_EIO);
	assert_null(bytes);
	tb_store_delete(fx->store, key, &err);

	/* A recorded SHA-256 that is not the content's: the CRC-32C
	 * passes, so a plain download reports the recorded one; asked for
	 * the SHA-256 of what arrived, the store computes it and refuses. */
	key = unique_key("sha-bad.txt");
	char wrong[65];
	memset(wrong, 'f', 64);
	wrong[64] = '\0';
	put_with_sums(fx, key, body, wrong, crc);
	assert_int_equal(tb_store_get_file(fx->store, key, dst, 0, &info, &err), 0);
	assert_string_equal(info.sha256, wrong);
	write_file(dst, "untouched");
	assert_int_equal(tb_store_get_file(fx->store, key, dst, TB_STORE_GET_SHA256, &info, &err),
			 TB_EIO);
	assert_non_null(strstr(err.msg, "sha256"));
	assert_string_equal(read_file(dst), "untouched");
	tb_store_delete(fx->store, key, &err);
}

static void test_store__bad_keys_are_refused(void **state)
{
	fixture_t *fx = *state;
	tb_error_t err;

	NEED(fx);
	assert_int_equal(tb_store_put_bytes(fx->store, "../escape", "x", 1, NULL, &err), TB_EINVAL);
	assert_int_equal(tb_store_put_bytes(fx->store, "/abs", "x", 1, NULL, &err), TB_EINVAL);
	assert_int_equal(tb_store_put_bytes(fx->store, "a//b", "x", 1, NULL, &err), TB_EINVAL);
}

static size_t to_buf(char *p, size_t size, size_t n, void *ud)
{
	char *buf = ud;
	size_t have = strlen(buf), len = size * n;
	if (have + len < 4096) {
		memcpy(buf + have, p, len);
		buf[have + len] = '\0';
	}
	return len;
}

static long fetch(const char *url, char *body)
{
	CURL *c = curl_easy_init();
	long status = 0;

	body[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, to_buf);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	return status;
}

static void test_s3__signed_url_works_until_it_expires(void **state)
{
	fixture_t *fx = *state;
	char body[4096], *url = NULL;
	tb_error_t err;

	NEED(fx);
	const char *key = unique_key("shared file.txt");
	assert_int_equal(tb_store_put_bytes(fx->store, key, "shared!", 7, NULL, &err), 0);
	assert_int_equal(tb_store_share(fx->store, key, 60, &url, &err), 0);
	assert_int_equal(fetch(url, body), 200);
	assert_string_equal(body, "shared!");
	free(url);
	assert_int_equal(tb_store_share(fx->store, key, 1, &url, &err), 0);
	sleep(2);
	assert_int_equal(fetch(url, body), 403);
	free(url);
	assert_int_equal(tb_store_share(fx->store, key, 0, &url, &err), TB_EINVAL);
	tb_store_delete(fx->store, key, &err);
}

static void test_s3__wrong_credentials_are_rejected(void **state)
{
	fixture_t *fx = *state;
	tb_store_config_t cfg = { 0 };
	tb_store_t *bad;
	tb_error_t err;
	char url[128];

	NEED(fx);
	char *secret = strdup(getenv("AWS_SECRET_ACCESS_KEY"));
	setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
	snprintf(url, sizeof(url), "%s://%s/runs", fx->scheme, fx->bucket);
	cfg.url = url;
	cfg.endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&bad, &cfg, &err), 0);
	setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
	free(secret);
	assert_int_equal(tb_store_put_bytes(bad, unique_key("nope"), "x", 1, NULL, &err), TB_EIO);
	printf("wrong credentials: %s\n", err.msg);
	assert_true(strstr(err.msg, "403") || strstr(err.msg, "SignatureDoesNotMatch") ||
		    strstr(err.msg, "AccessDenied"));
	tb_store_close(bad);
}

static void test_s3__dead_server_is_retried_then_a_clear_error(void **state)
{
	fixture_t *fx = *state;
	tb_store_config_t cfg = { 0 };
	tb_store_t *dead;
	tb_error_t err;

	NEED(fx);
	/* Nothing listens on port 1 of the loopback. */
	cfg.url = strcmp(fx->scheme, "s3") ? "s3v2://tb-dead-bucket" : "s3://tb-dead-bucket";
	cfg.endpoint = "http://127.0.0.1:1";
	cfg.region = "us-east-1";
	assert_int_equal(tb_store_open(&dead, &cfg, &err), 0);
	assert_int_equal(tb_store_put_bytes(dead, unique_key("lost"), "x", 1, NULL, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "(attempt 5 of 5)"));
	printf("dead server: %s\n", err.msg);
	tb_store_close(dead);
}

/* A loopback proxy to the S3 server that forwards one connection, cuts it
 * after `cut` bytes from the client, and then stops listening: the server
 * "stopped mid-upload" as far as the client can tell. */
struct cutter {
	int listen_fd;
	int port;
	long cut;
	int target_port;
};

static void *cutter_main(void *p)
{
	struct cutter *c = p;
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)c->target_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	long moved = 0;
	char buf[16384];

	/* Bounded: at most 20 connections, each relayed until the cut. */
	for (int conn = 0; conn < 20 && moved < c->cut; conn++) {
		struct pollfd lp = { c->listen_fd, POLLIN, 0 };
		if (poll(&lp, 1, 10000) <= 0)
			break;
		int cl = accept(c->listen_fd, NULL, NULL), up = socket(AF_INET, SOCK_STREAM, 0);
		if (cl < 0 || connect(up, (struct sockaddr *)&a, sizeof(a)) < 0) {
			close(cl);
			close(up);
			break;
		}
		for (int open_ = 1; open_ && moved < c->cut;) {
			struct pollfd fds[2] = { { cl, POLLIN, 0 }, { up, POLLIN, 0 } };
			if (poll(fds, 2, 10000) <= 0)
				break;
			for (int i = 0; i < 2 && open_; i++) {
				if (!fds[i].revents)
					continue;
				ssize_t n = read(fds[i].fd, buf, sizeof(buf));
				if (n <= 0 || write(i ? cl : up, buf, (size_t)n) != n)
					open_ = 0;
				else if (i == 0)
					moved += n;
			}
		}
		close(cl);
		close(up);
	}
	close(c->listen_fd); /* gone: from now on, connection refused */
	return NULL;
}

static void test_s3__server_gone_mid_upload_leaves_nothing(void **state)
{
	fixture_t *fx = *state;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	struct cutter c = { .cut = 8 << 20 };
	tb_store_config_t cfg = { 0 };
	tb_object_info_t info;
	tb_store_t *via;
	pthread_t t;
	tb_error_t err;
	char src[128], endpoint[64], url[128];

	NEED(fx);
	const char *key = unique_key("interrupted.bin");
	snprintf(src, sizeof(src), "%s/interrupted.bin", tmpdir);
	FILE *f = fopen(src, "w");
	for (int i = 0; i < 32; i++) { /* 32 MiB: one streamed request on both paths */
		static char block[1 << 20];
		memset(block, 'a' + i % 26, sizeof(block));
		assert_int_equal(fwrite(block, sizeof(block), 1, f), 1);
	}
	fclose(f);
	c.target_port = (int)strtol(strrchr(getenv("TASKBOX_TEST_S3_ENDPOINT"), ':') + 1, NULL, 10);
	c.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(c.listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(c.listen_fd, 1), 0);
	getsockname(c.listen_fd, (struct sockaddr *)&a, &len);
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));
	snprintf(url, sizeof(url), "%s://%s/runs", fx->scheme, fx->bucket);
	cfg.url = url, cfg.endpoint = endpoint, cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&via, &cfg, &err), 0);
	/* The existence check gets through; the upload is cut mid-body and
	 * every retry is refused. */
	c.cut = 64 << 10;
	pthread_create(&t, NULL, cutter_main, &c);
	int rc = tb_store_put_file(via, key, src, NULL, &err);
	pthread_join(t, NULL);
	printf("server gone: %s\n", err.msg);
	assert_int_equal(rc, TB_EIO);
	assert_non_null(strstr(err.msg, "(attempt 5 of 5)")); /* retried */
	/* Nothing half-written: the key does not exist on the real server. */
	assert_int_equal(tb_store_head(fx->store, key, &info, &err), TB_ENOTFOUND);
	tb_store_close(via);
	unlink(src);
}

static void test_s3__large_file_goes_up_in_parts_with_flat_memory(void **state)
{
	fixture_t *fx = *state;
	char src[128], dst[128];
	tb_object_info_t up, down;
	struct rusage ru;
	tb_error_t err;
	uint32_t x = 12345;

	NEED(fx);
	const char *key = unique_key("big.bin");
	snprintf(src, sizeof(src), "%s/big.bin", tmpdir);
	snprintf(dst, sizeof(dst), "%s/big-out.bin", tmpdir);
	FILE *f = fopen(src, "w");
	static uint32_t block[16384];
	for (int b = 0; b < 4096; b++) { /* 256 MiB of xorshift */
		for (size_t i = 0; i < 16384; i++) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			block[i] = x;
		}
		assert_int_equal(fwrite(block, sizeof(block), 1, f), 1);
	}
	fclose(f);
	getrusage(RUSAGE_SELF, &ru);
	long before = ru.ru_maxrss;
	if (tb_store_put_file(fx->store, key, src, &up, &err) != 0)
		fail_msg("put: %s", err.msg);
	/* the SHA-256 of what arrives too: hashed by the thread behind the
	 * writer */
	if (tb_store_get_file(fx->store, key, dst, TB_STORE_GET_SHA256, &down, &err) != 0)
		fail_msg("get: %s", err.msg);
	getrusage(RUSAGE_SELF, &ru);
	assert_int_equal(up.size, 256u << 20);
	assert_string_equal(up.sha256, down.sha256);
	assert_string_equal(up.crc32c, down.crc32c);
	printf("256 MiB through S3: peak RSS grew by %ld KiB\n", ru.ru_maxrss - before);
	assert_true(ru.ru_maxrss - before < 64 * 1024); /* flat: far below the file's size */
	unlink(src);
	unlink(dst);
	tb_store_delete(fx->store, key, &err);
}

/* A loopback relay to the S3 server, one thread per connection: it counts
 * how many connections are open at once, and cuts every connection whose
 * client stream holds `cut_on` (a request line: "?partNumber=3&"), so
 * that one part fails on every attempt while the others, and the abort,
 * get through. */
struct relay {
	int listen_fd;
	int target_port;
	const char *cut_on;  /* NULL: relay everything */
	long cut_down_at;    /* > 0: one answer is cut after this many bytes */
	int busy;            /* the first this many connections are answered
			     * 503 SlowDown, one request each... */
	const char *busy_on; /* ...or, if set, the first this many requests
			      * that start with it, on any connection */
	const char *lose_on; /* the first request that starts with this has
			      * its final answer lost: it is done, and the
			      * client never hears of it */
	atomic_int stop, live, max_live, cuts, down_cut, refused, seen_once, lost;
	atomic_int lose_on_seen; /* requests starting with lose_on */
	char seen[4096];         /* the head of the first request answered busy */
	pthread_t acceptor;
	pthread_t conns[64];
	int nconns;
	char endpoint[64];
};

struct relay_conn {
	struct relay *r;
	int cl, up;
};

static int write_all(int fd, const char *p, size_t n)
{
	for (size_t done = 0, turns = 0; done < n && turns < n; turns++) {
		ssize_t w = write(fd, p + done, n - done);
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

/* Reads one request from @p fd (its head, after the @p npre bytes of it
 * already read, and its body unless the client waits for "100
 * Continue") and answers it as a busy S3 server does: 503 SlowDown, then
 * closes. The first such request's head is kept in r->seen. */
static void answer_busy(struct relay *r, int fd, const char *pre, size_t npre)
{
	static const char xml[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
				  "<Error><Code>SlowDown</Code><Message>Please reduce your request "
				  "rate.</Message><RequestId>tb-test</RequestId></Error>";
	char head[16384], answer[512];
	size_t have = npre < sizeof(head) - 1 ? npre : sizeof(head) - 1;
	char *end;

	memcpy(head, pre, have); /* what the relay read already */
	head[have] = '\0';
	end = strstr(head, "\r\n\r\n");

	/* Bounded: a full buffer, a silent client or a closed one ends it. */
	while (!end && have + 1 < sizeof(head)) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t n =
		    poll(&p, 1, 5000) > 0 ? read(fd, head + have, sizeof(head) - 1 - have) : -1;
		if (n <= 0)
			return;
		have += (size_t)n;
		head[have] = '\0';
		end = strstr(head, "\r\n\r\n");
	}
	if (!end)
		return;
	size_t past = have - (size_t)(end + 4 - head); /* body bytes already read */
	end[2] = '\0';                                 /* the head alone from here */
	int is_head = !strncmp(head, "HEAD ", 5);
	if (atomic_exchange(&r->seen_once, 1) == 0)
		snprintf(r->seen, sizeof(r->seen), "%.4000s", head);
	const char *cl = strcasestr(head, "\r\ncontent-length:");
	long body = cl ? strtol(cl + 17, NULL, 10) - (long)past : 0;
	if (strcasestr(head, "\r\nexpect: 100-continue"))
		body = 0; /* it may send no body after a final answer */
	for (int turn = 0; body > 0 && turn < 10000; turn++) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t n = poll(&p, 1, 5000) > 0 ? read(fd, head, sizeof(head)) : -1;
		if (n <= 0)
			return;
		body -= n;
	}
	int len = snprintf(answer, sizeof(answer),
			   "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
			   "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			   sizeof(xml) - 1);
	send(fd, answer, (size_t)len, MSG_NOSIGNAL);
	if (!is_head)
		send(fd, xml, sizeof(xml) - 1, MSG_NOSIGNAL);
	/* Closed after the client, so that it reads the answer before any
	 * reset: whatever it still sends is read and dropped (bounded). */
	shutdown(fd, SHUT_WR);
	for (int turn = 0; turn < 1000; turn++) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, 2000) <= 0 || read(fd, head, sizeof(head)) <= 0)
			break;
	}
}

static void *relay_conn_main(void *arg)
{
	struct relay_conn *c = arg;
	struct relay *r = c->r;

	int lose = 0;

	/* Busy for any request: the connection's first is answered. */
	if (r->busy > 0 && !r->busy_on) {
		if (atomic_fetch_add(&r->refused, 1) < r->busy) {
			answer_busy(r, c->cl, "", 0);
			close(c->cl);
			close(c->up);
			free(c);
			return NULL;
		}
		atomic_fetch_sub(&r->refused, 1); /* counts the refused only */
	}
	size_t plen = r->cut_on ? strlen(r->cut_on) : 0, keep = 0;
	long down = 0; /* bytes of answers relayed */
	char *buf = malloc((64 << 10) + 64);
	int now = atomic_fetch_add(&r->live, 1) + 1;

	for (int m = atomic_load(&r->max_live);
	     now > m && !atomic_compare_exchange_weak(&r->max_live, &m, now);)
		;
	/* Bounded: each turn moves at least one byte or ends the relay. */
	for (long turn = 0; buf && turn < (1L << 24); turn++) {
		struct pollfd fds[2] = { { c->cl, POLLIN, 0 }, { c->up, POLLIN, 0 } };
		if (poll(fds, 2, 10000) <= 0)
			break;
		if (fds[0].revents) {
			/* The last plen - 1 bytes stay in front, so a match across
			 * two reads is seen. */
			ssize_t n = read(c->cl, buf + keep, 64 << 10);
			if (n <= 0)
				break;
			/* A request that starts this read (clients reuse
			 * connections: each request is looked at), busy_on or
			 * lose_on. */
			const char *req = buf + keep;
			if (r->busy_on && (size_t)n >= strlen(r->busy_on) &&
			    !memcmp(req, r->busy_on, strlen(r->busy_on))) {
				if (atomic_fetch_add(&r->refused, 1) < r->busy) {
					answer_busy(r, c->cl, req, (size_t)n);
					break;
				}
				atomic_fetch_sub(&r->refused, 1);
			}
			if (r->lose_on && (size_t)n >= strlen(r->lose_on) &&
			    !memcmp(req, r->lose_on, strlen(r->lose_on)) &&
			    atomic_fetch_add(&r->lose_on_seen, 1) >= 0 &&
			    atomic_exchange(&r->lost, 1) == 0)
				lose = 1;
			if (plen && memmem(buf, keep + (size_t)n, r->cut_on, plen)) {
				atomic_fetch_add(&r->cuts, 1);
				break;
			}
			if (write_all(c->up, buf + keep, (size_t)n) < 0)
				break;
			size_t have = keep + (size_t)n, tail = plen ? plen - 1 : 0;
			keep = have < tail ? have : tail;
			memmove(buf, buf + have - keep, keep);
		}
		if (fds[1].revents) {
			char back[16384];
			ssize_t n = read(c->up, back, sizeof(back));
			if (n <= 0)
				break;
			/* The final answer lost: what comes before it (a
			 * "100 Continue") still goes through. */
			const char *fin = lose ? memmem(back, (size_t)n, "HTTP/1.1 2", 10) : NULL;
			if (fin) {
				write_all(c->cl, back, (size_t)(fin - back));
				break;
			}
			/* The first connection whose answer passes cut_down_at
			 * is cut there, once: a download broken mid-body. */
			if (r->cut_down_at > 0 && down + n > r->cut_down_at &&
			    atomic_exchange(&r->down_cut, 1) == 0) {
				write_all(c->cl, back, (size_t)(r->cut_down_at - down));
				break;
			}
			down += n;
			if (write_all(c->cl, back, (size_t)n) < 0)
				break;
		}
	}
	atomic_fetch_sub(&r->live, 1);
	free(buf);
	close(c->cl);
	close(c->up);
	free(c);
	return NULL;
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)r->target_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	/* Bounded: 64 connections, and a stop checked every 100 ms. */
	for (int idle = 0; r->nconns < 64 && !atomic_load(&r->stop) && idle < 6000;) {
		struct pollfd lp = { r->listen_fd, POLLIN, 0 };
		if (poll(&lp, 1, 100) <= 0) {
			idle++;
			continue;
		}
		struct relay_conn *c = calloc(1, sizeof(*c));
		c->r = r;
		c->cl = accept(r->listen_fd, NULL, NULL);
		c->up = socket(AF_INET, SOCK_STREAM, 0);
		if (c->cl < 0 || connect(c->up, (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    pthread_create(&r->conns[r->nconns], NULL, relay_conn_main, c) != 0) {
			close(c->cl);
			close(c->up);
			free(c);
			continue;
		}
		r->nconns++;
	}
	for (int i = 0; i < r->nconns; i++)
		pthread_join(r->conns[i], NULL);
	return NULL;
}

/* Starts a relay that cuts on @p cut_on (or not: NULL), answers 503
 * SlowDown to the first @p busy connections, or with @p busy_on to the
 * first @p busy requests starting with it, and loses the answer to the
 * first request starting with @p lose_on (NULL: none). */
static void relay_start_with(struct relay *r, const char *cut_on, int busy, const char *busy_on,
			     const char *lose_on)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	memset(r, 0, sizeof(*r));
	r->cut_on = cut_on;
	r->busy = busy;
	r->busy_on = busy_on;
	r->lose_on = lose_on;
	r->target_port =
	    (int)strtol(strrchr(getenv("TASKBOX_TEST_S3_ENDPOINT"), ':') + 1, NULL, 10);
	r->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(r->listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(r->listen_fd, 16), 0);
	getsockname(r->listen_fd, (struct sockaddr *)&a, &len);
	snprintf(r->endpoint, sizeof(r->endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));
	assert_int_equal(pthread_create(&r->acceptor, NULL, relay_main, r), 0);
}

static void relay_start(struct relay *r, const char *cut_on)
{
	relay_start_with(r, cut_on, 0, NULL, NULL);
}

/* Stops the relay once its clients have closed their connections. */
static void relay_stop(struct relay *r)
{
	atomic_store(&r->stop, 1);
	pthread_join(r->acceptor, NULL);
	close(r->listen_fd);
}

static tb_store_t *open_via(fixture_t *fx, const char *endpoint)
{
	tb_store_config_t cfg = { 0 };
	tb_store_t *via;
	tb_error_t err;
	char url[128];

	snprintf(url, sizeof(url), "%s://%s/runs", fx->scheme, fx->bucket);
	cfg.url = url, cfg.endpoint = (char *)endpoint,
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	assert_int_equal(tb_store_open(&via, &cfg, &err), 0);
	return via;
}

/* 64 MiB, the smallest multipart upload: four 16 MiB parts, each a
 * different letter, so parts assembled out of order change the checksum
 * (and no part's bytes hold a request line). */
static void write_four_parts(const char *path)
{
	static char block[1 << 20];
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	for (int i = 0; i < 64; i++) {
		memset(block, 'a' + i / 16, sizeof(block));
		block[0] = (char)('0' + i % 10);
		assert_int_equal(fwrite(block, sizeof(block), 1, f), 1);
	}
	fclose(f);
}

/* Whether the real server still holds an unfinished multipart upload for
 * @p key (ListMultipartUploads, signed by libcurl; the query is written
 * sorted and encoded, as libcurl 7.88 signs it as written). */
static int upload_pending(fixture_t *fx, const char *key)
{
	char url[1024], enc[512], sigv4[128], user[512], body[4096];
	struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	CURL *c = curl_easy_init();
	long status = 0;
	char full[300];

	snprintf(full, sizeof(full), "runs/%s", key);
	assert_int_equal(tb_percent_encode(enc, sizeof(enc), full, 0), 0);
	snprintf(url, sizeof(url), "%s/%s?prefix=%s&uploads=", getenv("TASKBOX_TEST_S3_ENDPOINT"),
		 fx->bucket, enc);
	snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", getenv("TASKBOX_TEST_S3_REGION"));
	snprintf(user, sizeof(user), "%s:%s", getenv("AWS_ACCESS_KEY_ID"),
		 getenv("AWS_SECRET_ACCESS_KEY"));
	body[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(c, CURLOPT_USERPWD, user);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, to_buf);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (status != 200 || !strstr(body, "<ListMultipartUploadsResult"))
		fail_msg("list multipart uploads: HTTP %ld: %s", status, body);
	return strstr(body, "<Upload>") != NULL;
}

/* A server that asks to slow down (503 SlowDown) is asked again after a
 * back-off: here it refuses the PUTs twice (on s3v2 each retry looks
 * first with a HEAD, which it lets through); one that keeps refusing
 * everything gets a clear, final error (on s3v2 at the HEAD, whose 503
 * comes without a body). */
static void test_s3__a_busy_server_is_retried_then_a_clear_error(void **state)
{
	fixture_t *fx = *state;
	struct relay r;
	tb_error_t err;
	char key[256], *back = NULL;
	size_t len = 0;

	NEED(fx);
	snprintf(key, sizeof(key), "%s", unique_key("busy.txt"));
	relay_start_with(&r, NULL, 2, "PUT ", NULL);
	tb_store_t *via = open_via(fx, r.endpoint);
	int rc = tb_store_put_bytes(via, key, "slow but sure", 13, NULL, &err);
	tb_store_close(via);
	relay_stop(&r);
	if (rc != 0)
		fail_msg("put through a busy server: %s", err.msg);
	assert_int_equal(atomic_load(&r.refused), 2);
	assert_int_equal(tb_store_get_bytes(fx->store, key, 100, &back, &len, &err), 0);
	assert_int_equal(len, 13);
	assert_memory_equal(back, "slow but sure", 13);
	free(back);
	tb_store_delete(fx->store, key, &err);

	/* Busy for good: every attempt made, then an error that says so. */
	relay_start_with(&r, NULL, 1000, NULL, NULL);
	via = open_via(fx, r.endpoint);
	rc = tb_store_put_bytes(via, unique_key("never.txt"), "never", 5, NULL, &err);
	tb_store_close(via);
	relay_stop(&r);
	printf("busy server: %s\n", err.msg);
	assert_int_equal(rc, TB_EIO);
	assert_int_equal(atomic_load(&r.refused), 5);
	assert_non_null(strstr(err.msg, "SlowDown"));
	assert_non_null(strstr(err.msg, "(attempt 5 of 5)"));
}

/* A put that reached the server but whose answer was lost is retried,
 * finds its own object there (SigV4: the conditional PUT answers 412;
 * s3v2: the HEAD before the retry), and succeeds without writing again;
 * another writer's content would have been found the same way, not
 * overwritten. */
static void test_s3__a_put_whose_answer_is_lost_is_not_written_twice(void **state)
{
	fixture_t *fx = *state;
	struct relay r;
	tb_object_info_t up;
	tb_error_t err;
	char key[256], *back = NULL;
	size_t len = 0;

	NEED(fx);
	snprintf(key, sizeof(key), "%s", unique_key("lost-answer.txt"));
	relay_start_with(&r, NULL, 0, NULL, "PUT ");
	tb_store_t *via = open_via(fx, r.endpoint);
	int rc = tb_store_put_bytes(via, key, "landed once", 11, &up, &err);
	tb_store_close(via);
	relay_stop(&r);
	if (rc != 0)
		fail_msg("put with its answer lost: %s", err.msg);
	assert_int_equal(atomic_load(&r.lost), 1);
	/* SigV4: the retry is a second PUT, conditional, answered 412;
	 * s3v2: the HEAD finds the object and no second PUT is sent. */
	assert_int_equal(atomic_load(&r.lose_on_seen), strcmp(fx->scheme, "s3") ? 1 : 2);
	assert_int_equal(tb_store_get_bytes(fx->store, key, 100, &back, &len, &err), 0);
	assert_int_equal(len, 11);
	assert_memory_equal(back, "landed once", 11);
	free(back);
	tb_store_delete(fx->store, key, &err);
}

/* AWS_SESSION_TOKEN (temporary credentials) goes with every SigV4
 * request, signed, and into shared URLs; libs3 2.0 cannot send one, so
 * the s3v2 store refuses to open rather than fail each request. */
static void test_s3__a_session_token_goes_with_every_request(void **state)
{
	fixture_t *fx = *state;
	tb_store_config_t cfg = { 0 };
	struct relay r;
	tb_store_t *via;
	tb_error_t err;
	char url[128], *shared = NULL;

	NEED(fx);
	setenv("AWS_SESSION_TOKEN", "tb-session/token+1", 1);
	if (strcmp(fx->scheme, "s3") != 0) {
		snprintf(url, sizeof(url), "s3v2://%s/runs", fx->bucket);
		cfg.url = url, cfg.endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
		int rc = tb_store_open(&via, &cfg, &err);
		unsetenv("AWS_SESSION_TOKEN");
		assert_int_equal(rc, TB_EINVAL);
		assert_non_null(strstr(err.msg, "AWS_SESSION_TOKEN"));
		return;
	}
	/* The first request is answered busy and kept; its retry goes on to
	 * the server, which may or may not know the token: not the point. */
	relay_start_with(&r, NULL, 1, NULL, NULL);
	via = open_via(fx, r.endpoint);
	unsetenv("AWS_SESSION_TOKEN");
	const char *key = unique_key("token.txt");
	tb_store_put_bytes(via, key, "t", 1, NULL, &err);
	assert_int_equal(tb_store_share(via, key, 60, &shared, &err), 0);
	tb_store_close(via);
	relay_stop(&r);
	printf("with a session token: %s\n", r.seen);
	assert_non_null(strcasestr(r.seen, "\r\nx-amz-security-token: tb-session/token+1\r\n"));
	const char *signed_headers = strstr(r.seen, "SignedHeaders=");
	assert_non_null(signed_headers);
	assert_non_null(strstr(signed_headers, "x-amz-security-token"));
	assert_non_null(strstr(shared, "X-Amz-Security-Token=tb-session%2Ftoken%2B1"));
	free(shared);
	tb_store_delete(fx->store, key, &err);
}

struct key_counts {
	const char *base; /* the keys: <base>/a-NN.txt and <base>/a/NN.txt */
	int n[60];
	int others;
};

static int count_key(void *ud, const char *key, const tb_object_info_t *info)
{
	struct key_counts *k = ud;
	size_t b = strlen(k->base);
	int i;

	(void)info;
	if (strncmp(key, k->base, b) || sscanf(key + b + 3, "%d", &i) != 1 || i < 0 || i >= 60)
		k->others++;
	else
		k->n[i]++;
	return 0;
}

/* A listing whose answer is cut midway is asked again, and every key is
 * handed over once, whatever order the server lists in ("a/NN" and
 * "a-NN" side by side: servers that walk directories list them otherwise
 * than by bytes). */
static void test_s3__a_listing_cut_midway_hands_every_key_over_once(void **state)
{
	fixture_t *fx = *state;
	struct key_counts k = { 0 };
	struct relay r;
	tb_error_t err;
	char base[256], key[320];

	NEED(fx);
	snprintf(base, sizeof(base), "%s", unique_key("listing"));
	k.base = base;
	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "%s/%s%02d.txt", base, i % 2 ? "a-" : "a/", i);
		assert_int_equal(tb_store_put_bytes(fx->store, key, "x", 1, NULL, &err), 0);
	}
	relay_start(&r, NULL);
	r.cut_down_at = 6000; /* some 20 keys into the answer */
	tb_store_t *via = open_via(fx, r.endpoint);
	int rc = tb_store_list(via, base, count_key, &k, &err);
	tb_store_close(via);
	relay_stop(&r);
	if (rc != 0)
		fail_msg("list: %s", err.msg);
	assert_int_equal(atomic_load(&r.down_cut), 1);
	assert_int_equal(k.others, 0);
	for (int i = 0; i < 60; i++)
		if (k.n[i] != 1)
			fail_msg("key %d handed over %d times", i, k.n[i]);
	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "%s/%s%02d.txt", base, i % 2 ? "a-" : "a/", i);
		tb_store_delete(fx->store, key, &err);
	}
}

static void test_s3__parts_go_up_in_parallel_and_in_order(void **state)
{
	fixture_t *fx = *state;
	tb_object_info_t up, down;
	struct relay r;
	tb_error_t err;
	char src[128], dst[128];

	NEED(fx);
	const char *key = unique_key("parallel.bin");
	snprintf(src, sizeof(src), "%s/parallel.bin", tmpdir);
	snprintf(dst, sizeof(dst), "%s/parallel-out.bin", tmpdir);
	write_four_parts(src);
	relay_start(&r, NULL);
	tb_store_t *via = open_via(fx, r.endpoint);
	int rc = tb_store_put_file(via, key, src, &up, &err);
	tb_store_close(via);
	relay_stop(&r);
	if (rc != 0)
		fail_msg("put: %s", err.msg);
	printf("parts in flight at once: %d\n", atomic_load(&r.max_live));
	assert_true(atomic_load(&r.max_live) >= 2);
	/* Assembled in order: the checksums of the file match the content
	 * read back. */
	if (tb_store_get_file(fx->store, key, dst, TB_STORE_GET_SHA256, &down, &err) != 0)
		fail_msg("get: %s", err.msg);
	assert_int_equal(down.size, 64u << 20);
	assert_string_equal(up.sha256, down.sha256);
	assert_string_equal(up.crc32c, down.crc32c);
	assert_int_equal(upload_pending(fx, key), 0);
	tb_store_delete(fx->store, key, &err);
	/* A put given no part hashes computes them itself: the server
	 * checks each signed part against its body. */
	char again[256];
	snprintf(again, sizeof(again), "%s", unique_key("parallel-again.bin"));
	int fd = open(src, O_RDONLY);
	assert_true(fd >= 0);
	if (fx->store->ops->put(fx->store, again, fd, &up, NULL, &err) != 0)
		fail_msg("put without part hashes: %s", err.msg);
	close(fd);
	if (tb_store_get_file(fx->store, again, dst, TB_STORE_GET_SHA256, &down, &err) != 0)
		fail_msg("get: %s", err.msg);
	assert_string_equal(up.sha256, down.sha256);
	tb_store_delete(fx->store, again, &err);
	unlink(src);
	unlink(dst);
}

/* A download broken mid-body is retried from the start, and its checksums,
 * computed as the body is written, cover the retried body only. */
static void test_s3__a_download_cut_midway_is_retried_and_verified(void **state)
{
	fixture_t *fx = *state;
	tb_object_info_t up, down;
	struct relay r;
	tb_error_t err;
	char src[128], dst[128];

	NEED(fx);
	const char *key = unique_key("cut-download.bin");
	snprintf(src, sizeof(src), "%s/cut-download.bin", tmpdir);
	snprintf(dst, sizeof(dst), "%s/cut-download-out.bin", tmpdir);
	FILE *f = fopen(src, "w");
	assert_non_null(f);
	for (int i = 0; i < (2 << 20) / 8; i++)
		fprintf(f, "%07d\n", i);
	fclose(f);
	if (tb_store_put_file(fx->store, key, src, &up, &err) != 0)
		fail_msg("put: %s", err.msg);
	relay_start(&r, NULL);
	r.cut_down_at = 1 << 20;
	tb_store_t *via = open_via(fx, r.endpoint);
	int rc = tb_store_get_file(via, key, dst, TB_STORE_GET_SHA256, &down, &err);
	tb_store_close(via);
	relay_stop(&r);
	if (rc != 0)
		fail_msg("get: %s", err.msg);
	assert_int_equal(atomic_load(&r.down_cut), 1);
	assert_int_equal(down.size, 2u << 20);
	assert_string_equal(up.sha256, down.sha256);
	assert_string_equal(up.crc32c, down.crc32c);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "cmp -s %s %s", src, dst);
	assert_int_equal(system(cmd), 0);
	tb_store_delete(fx->store, key, &err);
	unlink(src);
	unlink(dst);
}

static void test_s3__a_part_failing_for_good_aborts_the_upload(void **state)
{
	fixture_t *fx = *state;
	tb_object_info_t info;
	struct relay r;
	tb_error_t err;
	char src[128];

	NEED(fx);
	const char *key = unique_key("part-fails.bin");
	snprintf(src, sizeof(src), "%s/part-fails.bin", tmpdir);
	write_four_parts(src);
	relay_start(&r, "?partNumber=3&");
	tb_store_t *via = open_via(fx, r.endpoint);
	int rc = tb_store_put_file(via, key, src, NULL, &err);
	tb_store_close(via);
	relay_stop(&r);
	printf("part 3 cut every time: %s\n", err.msg);
	assert_int_equal(rc, TB_EIO);
	assert_non_null(strstr(err.msg, "part 3 of 4"));
	assert_non_null(strstr(err.msg, "(attempt 5 of 5)"));
	/* Five attempts (libcurl may also retry a reused connection once). */
	assert_true(atomic_load(&r.cuts) >= 5);
	/* Nothing left behind: no object, and the upload was aborted. */
	assert_int_equal(tb_store_head(fx->store, key, &info, &err), TB_ENOTFOUND);
	assert_int_equal(upload_pending(fx, key), 0);
	unlink(src);
}

static void test_store__open_explains_bad_urls(void **state)
{
	tb_store_config_t cfg = { 0 };
	tb_store_t *s;
	tb_error_t err;

	(void)state;
	cfg.url = "ftp://x";
	assert_int_equal(tb_store_open(&s, &cfg, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "expected dir:///path, s3://bucket"));
	cfg.url = "dir://relative";
	assert_int_equal(tb_store_open(&s, &cfg, &err), TB_EINVAL);
	cfg.url = "s3://ab";
	assert_int_equal(tb_store_open(&s, &cfg, &err), TB_EINVAL);
}

int main(void)
{
	const struct CMUnitTest dir_tests[] = {
		cmocka_unit_test(test_store__open_explains_bad_urls),
		cmocka_unit_test(test_store__put_get_head_list_delete),
		cmocka_unit_test(test_store__ranges_read_what_was_asked),
		cmocka_unit_test(test_store__never_overwrites_other_content),
		cmocka_unit_test(test_store__checksum_mismatch_is_detected),
		cmocka_unit_test(test_store__downloads_are_verified_by_crc32c),
		cmocka_unit_test(test_store__a_download_replaces_a_file_and_nothing_else),
		cmocka_unit_test(test_store__bad_keys_are_refused),
	};
	const struct CMUnitTest s3_tests[] = {
		cmocka_unit_test(test_store__put_get_head_list_delete),
		cmocka_unit_test(test_store__ranges_read_what_was_asked),
		cmocka_unit_test(test_store__never_overwrites_other_content),
		cmocka_unit_test(test_store__checksum_mismatch_is_detected),
		cmocka_unit_test(test_store__downloads_are_verified_by_crc32c),
		cmocka_unit_test(test_store__a_download_replaces_a_file_and_nothing_else),
		cmocka_unit_test(test_store__bad_keys_are_refused),
		cmocka_unit_test(test_s3__signed_url_works_until_it_expires),
		cmocka_unit_test(test_s3__wrong_credentials_are_rejected),
		cmocka_unit_test(test_s3__dead_server_is_retried_then_a_clear_error),
		cmocka_unit_test(test_s3__a_busy_server_is_retried_then_a_clear_error),
		cmocka_unit_test(test_s3__a_put_whose_answer_is_lost_is_not_written_twice),
		cmocka_unit_test(test_s3__a_listing_cut_midway_hands_every_key_over_once),
		cmocka_unit_test(test_s3__a_session_token_goes_with_every_request),
		cmocka_unit_test(test_s3__server_gone_mid_upload_leaves_nothing),
		cmocka_unit_test(test_s3__large_file_goes_up_in_parts_with_flat_memory),
		cmocka_unit_test(test_s3__a_download_cut_midway_is_retried_and_verified),
	};
	/* SigV4 only: libs3 has no multipart upload */
	const struct CMUnitTest multipart_tests[] = {
		cmocka_unit_test(test_s3__parts_go_up_in_parallel_and_in_order),
		cmocka_unit_test(test_s3__a_part_failing_for_good_aborts_the_upload),
	};
	int rc;

	if (!mkdtemp(tmpdir))
		return 1;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = cmocka_run_group_tests_name("dir store", dir_tests, open_dir, close_store);
	rc |= cmocka_run_group_tests_name("s3 store (SigV4)", s3_tests, open_s3, close_store);
	rc |= cmocka_run_group_tests_name("s3 store (SigV4): multipart", multipart_tests, open_s3,
					  close_store);
	rc |= cmocka_run_group_tests_name("s3v2 store (SigV2, libs3)", s3_tests, open_s3v2,
					  close_store);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	if (system(cmd) != 0)
		rc |= 1;
	curl_global_cleanup();
	return rc;
}
