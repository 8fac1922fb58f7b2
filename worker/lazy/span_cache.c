/*
 * span_cache.c: layers' spans on local disk (span_cache.h).
 *
 * What is held is listed in memory (name, bytes, last use), looked up
 * by a scan: a cache holds thousands of spans, not millions (a 10 GiB
 * bound is some 5,000 of them). The disk is touched outside the lock.
 */
#include "span_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_LEN 96 /* "<64 hex>.<span>" */

typedef struct held {
	char name[NAME_LEN];
	uint64_t bytes, used;
} held_t;

struct tb_span_cache {
	int dir;
	uint64_t max_bytes, bytes, tick;
	held_t *held;
	size_t n, cap;
	pthread_mutex_t lock;
};

static _Atomic unsigned tmp_counter;

/* "<hex>.<span>" for a gzip index's span, "<hex>.c<span>" for an eStargz
 * chunk's, "<hex>.z<span>" for a zstd:chunked chunk's: a layer that is
 * two of them (an eStargz layer is gzip) may be read through either, and
 * its spans are not the same bytes. */
static void name_of(const tb_layer_index_t *ix, size_t span, char out[NAME_LEN])
{
	const char *hex = strchr(ix->layer, ':');
	snprintf(out, NAME_LEN, "%.64s.%s%zu", hex ? hex + 1 : ix->layer,
		 ix->kind == TB_LAYER_INDEX_ESTARGZ        ? "c"
		 : ix->kind == TB_LAYER_INDEX_ZSTD_CHUNKED ? "z"
							   : "",
		 span);
}

/* Under lock. */
static held_t *find(tb_span_cache_t *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (!strcmp(c->held[i].name, name))
			return &c->held[i];
	return NULL;
}

/* Under lock: forgets @p h (the file is the caller's). */
static void forget(tb_span_cache_t *c, held_t *h)
{
	c->bytes -= h->bytes;
	*h = c->held[--c->n];
}

/* Under lock. @return 0, or -1 out of memory. */
static int add(tb_span_cache_t *c, const char *name, uint64_t bytes, uint64_t used)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		held_t *h = realloc(c->held, cap * sizeof(*h));
		if (!h)
			return -1;
		c->held = h, c->cap = cap;
	}
	held_t *h = &c->held[c->n++];
	snprintf(h->name, sizeof(h->name), "%s", name);
	h->bytes = bytes, h->used = used;
	c->bytes += bytes;
	return 0;
}

/* Under lock: the least recently used spans removed until @p room more
 * bytes fit. */
static void evict(tb_span_cache_t *c, uint64_t room)
{
	while (c->n && c->bytes + room > c->max_bytes) {
		held_t *old = &c->held[0];
		for (size_t i = 1; i < c->n; i++)
			if (c->held[i].used < old->used)
				old = &c->held[i];
		unlinkat(c->dir, old->name, 0);
		forget(c, old);
	}
}

/* What a restarted worker left: spans kept, by age; temporaries removed. */
static int scan(tb_span_cache_t *c, tb_error_t *err)
{
	int fd = openat(c->dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	struct stat st;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return tb_error_errno(err, TB_EIO, errno, "span cache: read its directory");
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (strlen(de->d_name) >= NAME_LEN || !strchr(de->d_name, '.') ||
		    fstatat(c->dir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode)) {
			unlinkat(c->dir, de->d_name, 0);
			continue;
		}
		if (add(c, de->d_name, (uint64_t)st.st_size, (uint64_t)st.st_mtime) < 0) {
			closedir(d);
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		}
	}
	rewinddir(d);
	while ((de = readdir(d))) /* temporaries: a put cut short */
		if (!strncmp(de->d_name, ".tmp.", 5))
			unlinkat(c->dir, de->d_name, 0);
	closedir(d);
	pthread_mutex_lock(&c->lock);
	evict(c, 0);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int tb_span_cache_open(tb_span_cache_t **out, const char *dir, uint64_t max_bytes, tb_error_t *err)
{
	tb_span_cache_t *c = calloc(1, sizeof(*c));
	int rc;

	*out = NULL;
	if (!c)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	pthread_mutex_init(&c->lock, NULL);
	c->max_bytes = max_bytes;
	if ((mkdir(dir, 0700) < 0 && errno != EEXIST) ||
	    (c->dir = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "span cache: open %s", dir);
		c->dir = -1;
		goto fail;
	}
	if (fchmod(c->dir, 0700) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "span cache: %s", dir);
		goto fail;
	}
	if ((rc = scan(c, err)) < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	tb_span_cache_close(c);
	return rc;
}

/* Whether @p data is span @p span of @p ix, as a reader would check it
 * (tb_layer_index_check_span: a gzip span by its SHA-256; an eStargz
 * chunk inflated, by the SHA-256 of its bytes). */
static int matches(const tb_layer_index_t *ix, size_t span, const void *data, size_t len)
{
	tb_error_t err;
	return tb_layer_index_check_span(ix, span, data, len, &err) == 0;
}

static size_t span_len(const tb_layer_index_t *ix, size_t span)
{
	uint64_t from, to;
	tb_layer_index_span(ix, span, &from, &to);
	return (size_t)(to - from);
}

/* The whole file @p name into @p buf of @p len bytes: @return 0 if it is
 * exactly that long. */
static int read_whole(int dir, const char *name, uint8_t *buf, size_t len)
{
	int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	size_t done = 0;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != len) {
		close(fd);
		return -1;
	}
	while (done < len) {
		ssize_t n = pread(fd, buf + done, len - done, (off_t)done);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	close(fd);
	return done == len ? 0 : -1;
}

int tb_span_cache_get(tb_span_cache_t *c, const tb_layer_index_t *ix, size_t span, void *buf)
{
	char name[NAME_LEN];
	size_t len = span_len(ix, span);

	if (!c || span >= ix->npoints)
		return 0;
	name_of(ix, span, name);
	pthread_mutex_lock(&c->lock);
	int there = find(c, name) != NULL;
	pthread_mutex_unlock(&c->lock);
	if (!there)
		return 0;
	int ok = read_whole(c->dir, name, buf, len) == 0 && matches(ix, span, buf, len);
	pthread_mutex_lock(&c->lock);
	held_t *h = find(c, name);
	int hit = h && ok;
	if (hit)
		h->used = ((uint64_t)1 << 40) + ++c->tick; /* after any found at open */
	else if (h) { /* gone (another worker's eviction) or not its bytes */
		unlinkat(c->dir, name, 0);
		forget(c, h);
	}
	pthread_mutex_unlock(&c->lock);
	return hit;
}

int tb_span_cache_has(tb_span_cache_t *c, const tb_layer_index_t *ix, size_t span)
{
	char name[NAME_LEN];

	if (!c)
		return 0;
	name_of(ix, span, name);
	pthread_mutex_lock(&c->lock);
	int there = find(c, name) != NULL;
	pthread_mutex_unlock(&c->lock);
	return there;
}

/* @p data into a temporary file of the cache, renamed to @p name. */
static int write_atomic(tb_span_cache_t *c, const char *name, const uint8_t *data, size_t len)
{
	char tmp[NAME_LEN + 32];
	size_t done = 0;

	snprintf(tmp, sizeof(tmp), ".tmp.%d.%u", (int)getpid(), atomic_fetch_add(&tmp_counter, 1));
	int fd = openat(c->dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	while (done < len) {
		ssize_t n = write(fd, data + done, len - done);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	int rc = done == len && close(fd) == 0 ? renameat(c->dir, tmp, c->dir, name) : -1;
	if (done != len)
		close(fd);
	if (rc < 0)
		unlinkat(c->dir, tmp, 0);
	return rc;
}

void tb_span_cache_put(tb_span_cache_t *c, const tb_layer_index_t *ix, size_t span,
		       const void *data)
{
	char name[NAME_LEN];
	size_t len;

	if (!c || span >= ix->npoints || (len = span_len(ix, span)) > c->max_bytes ||
	    !matches(ix, span, data, len))
		return;
	name_of(ix, span, name);
	pthread_mutex_lock(&c->lock);
	int there = find(c, name) != NULL;
	if (!there)
		evict(c, len);
	pthread_mutex_unlock(&c->lock);
	if (there || write_atomic(c, name, data, len) < 0)
		return;
	pthread_mutex_lock(&c->lock);
	if (!find(c, name) && add(c, name, len, ((uint64_t)1 << 40) + ++c->tick) < 0)
		unlinkat(c->dir, name, 0);
	pthread_mutex_unlock(&c->lock);
}

uint64_t tb_span_cache_bytes(tb_span_cache_t *c)
{
	pthread_mutex_lock(&c->lock);
	uint64_t b = c->bytes;
	pthread_mutex_unlock(&c->lock);
	return b;
}

void tb_span_cache_close(tb_span_cache_t *c)
{
	if (!c)
		return;
	if (c->dir >= 0)
		close(c->dir);
	pthread_mutex_destroy(&c->lock);
	free(c->held);
	free(c);
}
