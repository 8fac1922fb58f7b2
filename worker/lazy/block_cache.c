/*
 * block_cache.c: input blocks on local disk, one sparse file per content
 * (block_cache.h).
 */
#include "block_cache.h"

#include "tb/encoding.h"
#include "tb/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUFFIX ".blocks"

/* A content's file: which of its blocks are held, and writes under way
 * (which keep the file while nothing is held yet). */
typedef struct content {
	char digest[65]; /* its blocks digest; "" when the record is free */
	uint32_t *at;    /* per block: its entry's index + 1, or 0 */
	size_t nat;      /* blocks `at` covers */
	size_t held, writing;
} content_t;

/* A block held. */
typedef struct entry {
	size_t content, index;
	uint64_t size;
	uint64_t used; /* the tick of its last use: the lowest goes first */
} entry_t;

struct tb_block_cache {
	char *dir;
	uint64_t max, bytes, tick; /* bytes: held, and being written */
	entry_t *e;
	size_t n, cap;
	content_t *ct;
	size_t nct;
	pthread_mutex_t lock;
};

static void path_of(const tb_block_cache_t *c, const char *digest, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s" SUFFIX, c->dir, digest);
}

/* The record of content @p digest, made if @p make; its number, or -1. */
static long content_of(tb_block_cache_t *c, const char *digest, int make)
{
	size_t free_rec = c->nct;

	for (size_t i = 0; i < c->nct; i++) {
		if (!strcmp(c->ct[i].digest, digest))
			return (long)i;
		if (!c->ct[i].digest[0] && free_rec == c->nct)
			free_rec = i;
	}
	if (!make)
		return -1;
	if (free_rec == c->nct) {
		content_t *more = realloc(c->ct, (c->nct + 1) * sizeof(*more));
		if (!more)
			return -1;
		c->ct = more;
		c->nct++;
	}
	memset(&c->ct[free_rec], 0, sizeof(c->ct[free_rec]));
	snprintf(c->ct[free_rec].digest, sizeof(c->ct[free_rec].digest), "%s", digest);
	return (long)free_rec;
}

static entry_t *find(tb_block_cache_t *c, long content, size_t index)
{
	if (content < 0)
		return NULL;
	const content_t *ct = &c->ct[content];
	return index < ct->nat && ct->at[index] ? &c->e[ct->at[index] - 1] : NULL;
}

/* Content @p content's file, once it holds nothing and nothing is being
 * written to it: removed, and the record freed. */
static void forget_if_empty(tb_block_cache_t *c, size_t content)
{
	content_t *ct = &c->ct[content];
	char path[4200];

	if (ct->held || ct->writing)
		return;
	path_of(c, ct->digest, path, sizeof(path));
	unlink(path);
	free(ct->at);
	memset(ct, 0, sizeof(*ct));
}

/* Entry @p e's block: its hole punched, the entry dropped. */
static void drop(tb_block_cache_t *c, entry_t *e)
{
	content_t *ct = &c->ct[e->content];
	size_t content = e->content;
	char path[4200];

	path_of(c, ct->digest, path, sizeof(path));
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) { /* failing, it stays a miss: the bytes are checked on read */
		(void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				(off_t)e->index * TB_BLOCK_SIZE, (off_t)e->size);
		close(fd);
	}
	c->bytes -= e->size;
	ct->at[e->index] = 0;
	ct->held--;
	*e = c->e[--c->n]; /* the last entry moves into its place */
	if (e != &c->e[c->n])
		c->ct[e->content].at[e->index] = (uint32_t)(e - c->e) + 1;
	forget_if_empty(c, content);
}

/* Block @p index of content @p content, @p size bytes, held. 0, or -1
 * (no memory: not held). */
static int add(tb_block_cache_t *c, size_t content, size_t index, uint64_t size)
{
	content_t *ct = &c->ct[content];

	if (index >= ct->nat) {
		size_t more = index + 1 > ct->nat * 2 ? index + 1 : ct->nat * 2;
		uint32_t *bigger = realloc(ct->at, more * sizeof(*bigger));
		if (!bigger)
			return -1;
		memset(bigger + ct->nat, 0, (more - ct->nat) * sizeof(*bigger));
		ct->at = bigger, ct->nat = more;
	}
	if (c->n == c->cap) {
		size_t more = c->cap ? c->cap * 2 : 256;
		entry_t *bigger = realloc(c->e, more * sizeof(*bigger));
		if (!bigger)
			return -1;
		c->e = bigger, c->cap = more;
	}
	c->e[c->n] = (entry_t){ content, index, size, ++c->tick };
	ct->at[index] = (uint32_t)++c->n;
	ct->held++;
	c->bytes += size;
	return 0;
}

/* Evicts the least recently used until @p room more bytes fit. */
static void make_room(tb_block_cache_t *c, uint64_t room)
{
	while (c->n && c->bytes + room > c->max) {
		size_t old = 0;
		for (size_t i = 1; i < c->n; i++)
			if (c->e[i].used < c->e[old].used)
				old = i;
		drop(c, &c->e[old]);
	}
}

/* The blocks of file @p name (a content's, by its name) that hold data
 * from their first byte, as entries first in line for eviction: whether
 * they are its blocks is checked when read. 0 if it holds none. */
static size_t index_file(tb_block_cache_t *c, const char *name, const char *path)
{
	char digest[65];
	uint8_t raw[32];
	struct stat st;
	size_t found = 0;

	if (strlen(name) != 64 + strlen(SUFFIX) || strcmp(name + 64, SUFFIX))
		return 0;
	memcpy(digest, name, 64);
	digest[64] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long content =
	    tb_unhex(raw, digest, 32) < 0 || fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)
		? -1
		: content_of(c, digest, 1);
	for (uint64_t at = 0; content >= 0 && at < (uint64_t)st.st_size; at += TB_BLOCK_SIZE) {
		uint64_t size = (uint64_t)st.st_size - at < TB_BLOCK_SIZE
				    ? (uint64_t)st.st_size - at
				    : TB_BLOCK_SIZE;
		if (lseek(fd, (off_t)at, SEEK_DATA) == (off_t)at &&
		    add(c, (size_t)content, (size_t)(at / TB_BLOCK_SIZE), size) == 0) {
			c->e[c->n - 1].used = 0;
			found++;
		}
	}
	if (fd >= 0)
		close(fd);
	if (content >= 0 && !found)
		forget_if_empty(c, (size_t)content);
	return found;
}

/* What an earlier run left: its blocks kept, any other file removed. */
static void index_dir(tb_block_cache_t *c)
{
	DIR *d = opendir(c->dir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char path[4200];
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", c->dir, de->d_name);
		if (!index_file(c, de->d_name, path))
			unlink(path);
	}
	if (d)
		closedir(d);
	make_room(c, 0);
}

int tb_block_cache_open(tb_block_cache_t **out, const char *dir, uint64_t max_bytes,
			tb_error_t *err)
{
	tb_block_cache_t *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c || !(c->dir = strdup(dir))) {
		free(c);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || chmod(dir, 0700) < 0) {
		int e = errno;
		free(c->dir);
		free(c);
		return tb_error_errno(err, TB_EIO, e, "block cache: %s", dir);
	}
	c->max = max_bytes;
	pthread_mutex_init(&c->lock, NULL);
	index_dir(c);
	*out = c;
	return 0;
}

int tb_block_cache_get(tb_block_cache_t *c, const tb_blocks_t *b, size_t index, void *buf)
{
	size_t len = tb_blocks_len(b, index);
	char path[4200];
	uint8_t sum[32];
	int fd = -1;

	pthread_mutex_lock(&c->lock);
	entry_t *e = find(c, content_of(c, b->digest, 0), index);
	if (e && e->size == len) {
		e->used = ++c->tick;
		path_of(c, b->digest, path, sizeof(path));
		fd = open(path, O_RDONLY | O_CLOEXEC); /* read from, even if evicted */
	}
	pthread_mutex_unlock(&c->lock);
	if (!e)
		return 0;
	/* read and checked outside the lock: a disk, a write cut short or
	 * another worker's eviction may leave other bytes than the block */
	int hit = fd >= 0 && pread(fd, buf, len, (off_t)index * TB_BLOCK_SIZE) == (ssize_t)len &&
		  SHA256(buf, len, sum) && !memcmp(sum, b->sha + 32 * index, 32);
	if (fd >= 0)
		close(fd);
	if (!hit) {
		pthread_mutex_lock(&c->lock);
		if ((e = find(c, content_of(c, b->digest, 0), index)))
			drop(c, e);
		pthread_mutex_unlock(&c->lock);
	}
	return hit;
}

int tb_block_cache_has(tb_block_cache_t *c, const tb_blocks_t *b, size_t index)
{
	pthread_mutex_lock(&c->lock);
	int has = find(c, content_of(c, b->digest, 0), index) != NULL;
	pthread_mutex_unlock(&c->lock);
	return has;
}

/* @p len bytes of @p data at @p at of file @p path (made if missing).
 * The whole pages of a page-aligned @p data go around the page cache
 * (O_DIRECT): a block kept is for later tasks, the page cache's copy of
 * it would only take memory, and filling fresh page-cache pages is what
 * made keeping a block cost more than fetching it. The rest, and all of a
 * file system without O_DIRECT, are written through it. A write that
 * fails gives its room back. 0, or -1. */
static int write_block(const char *path, off_t at, const uint8_t *data, size_t len)
{
	size_t direct =
	    (uintptr_t)data % TB_BLOCK_ALIGN ? 0 : len / TB_BLOCK_ALIGN * TB_BLOCK_ALIGN;
	int ok = 1, fd;

	if (direct && (fd = open(path, O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600)) >= 0) {
		ok = lseek(fd, at, SEEK_SET) == at && tb_write_all(fd, data, direct) == 0;
		close(fd);
	} else
		direct = 0;
	if (ok && direct < len) {
		off_t rest = at + (off_t)direct;
		fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		ok = fd >= 0 && lseek(fd, rest, SEEK_SET) == rest &&
		     tb_write_all(fd, data + direct, len - direct) == 0;
		if (fd >= 0)
			close(fd);
	}
	if (!ok && (fd = open(path, O_WRONLY | O_CLOEXEC)) >= 0) {
		(void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, (off_t)len);
		close(fd);
	}
	return ok ? 0 : -1;
}

void tb_block_cache_put(tb_block_cache_t *c, const tb_blocks_t *b, size_t index, const void *data)
{
	size_t len = tb_blocks_len(b, index);
	char path[4200];

	if (len > c->max)
		return;
	pthread_mutex_lock(&c->lock);
	if (find(c, content_of(c, b->digest, 0), index)) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	/* room first (it may remove this content's file), then the write
	 * counted, so that nothing removes the file under it */
	make_room(c, len);
	long content = content_of(c, b->digest, 1);
	if (content < 0) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->ct[content].writing++;
	c->bytes += len;
	path_of(c, b->digest, path, sizeof(path));
	pthread_mutex_unlock(&c->lock);
	/* written outside the lock, into the content's file at the block's
	 * offset: another worker's write of it is the same bytes */
	int ok = write_block(path, (off_t)index * TB_BLOCK_SIZE, data, len) == 0;
	pthread_mutex_lock(&c->lock);
	c->ct[content].writing--;
	c->bytes -= len;
	if (ok && !find(c, content, index))
		(void)add(c, (size_t)content, index, len); /* no memory: a miss later */
	forget_if_empty(c, (size_t)content);
	pthread_mutex_unlock(&c->lock);
}

uint64_t tb_block_cache_bytes(tb_block_cache_t *c)
{
	pthread_mutex_lock(&c->lock);
	uint64_t b = c->bytes;
	pthread_mutex_unlock(&c->lock);
	return b;
}

void tb_block_cache_close(tb_block_cache_t *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	for (size_t i = 0; i < c->nct; i++)
		free(c->ct[i].at);
	free(c->ct);
	free(c->e);
	free(c->dir);
	free(c);
}
