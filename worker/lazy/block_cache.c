/*
 * block_cache.c: input blocks on local disk, by digest (block_cache.h).
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

typedef struct entry {
	uint8_t sha[32];
	uint64_t size;
	uint64_t used; /* the tick of its last use: the lowest goes first */
} entry_t;

struct tb_block_cache {
	char *dir;
	uint64_t max, bytes, tick;
	entry_t *e;
	size_t n, cap;
	pthread_mutex_t lock;
};

static void path_of(const tb_block_cache_t *c, const uint8_t sha[32], char *out, size_t cap)
{
	char hex[65];

	tb_hex(hex, sha, 32);
	snprintf(out, cap, "%s/%s", c->dir, hex);
}

static entry_t *find(tb_block_cache_t *c, const uint8_t sha[32])
{
	for (size_t i = 0; i < c->n; i++)
		if (!memcmp(c->e[i].sha, sha, 32))
			return &c->e[i];
	return NULL;
}

static void drop(tb_block_cache_t *c, entry_t *e)
{
	char path[4200];

	path_of(c, e->sha, path, sizeof(path));
	unlink(path);
	c->bytes -= e->size;
	*e = c->e[--c->n];
}

static int add(tb_block_cache_t *c, const uint8_t sha[32], uint64_t size)
{
	if (c->n == c->cap) {
		size_t more = c->cap ? c->cap * 2 : 256;
		entry_t *bigger = realloc(c->e, more * sizeof(*bigger));
		if (!bigger)
			return -1;
		c->e = bigger, c->cap = more;
	}
	entry_t *e = &c->e[c->n++];
	memcpy(e->sha, sha, 32);
	e->size = size;
	e->used = ++c->tick;
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

/* What an earlier run left: its blocks kept, unfinished writes removed. */
static void index_dir(tb_block_cache_t *c)
{
	DIR *d = opendir(c->dir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		uint8_t sha[32];
		struct stat st;
		char path[4200];
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", c->dir, de->d_name);
		if (strlen(de->d_name) != 64 || tb_unhex(sha, de->d_name, 32) < 0 ||
		    stat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
		    add(c, sha, (uint64_t)st.st_size) < 0)
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

int tb_block_cache_get(tb_block_cache_t *c, const uint8_t sha[32], void *buf, size_t len)
{
	char path[4200];
	uint8_t sum[32];
	int fd = -1;

	pthread_mutex_lock(&c->lock);
	entry_t *e = find(c, sha);
	if (e && e->size == len) {
		e->used = ++c->tick;
		path_of(c, sha, path, sizeof(path));
		fd = open(path, O_RDONLY | O_CLOEXEC); /* read from, even if evicted */
	}
	pthread_mutex_unlock(&c->lock);
	if (!e)
		return 0;
	/* read and checked outside the lock: a disk, or a file of a dead
	 * worker's write, may hold other bytes than its name says */
	int hit = fd >= 0 && pread(fd, buf, len, 0) == (ssize_t)len && SHA256(buf, len, sum) &&
		  !memcmp(sum, sha, 32);
	if (fd >= 0)
		close(fd);
	if (!hit) {
		pthread_mutex_lock(&c->lock);
		if ((e = find(c, sha)))
			drop(c, e);
		pthread_mutex_unlock(&c->lock);
	}
	return hit;
}

void tb_block_cache_put(tb_block_cache_t *c, const uint8_t sha[32], const void *data, size_t len)
{
	char path[4200], tmp[4300];

	if (len > c->max)
		return;
	pthread_mutex_lock(&c->lock);
	int there = find(c, sha) != NULL;
	unsigned long long n = ++c->tick;
	pthread_mutex_unlock(&c->lock);
	if (there)
		return;
	/* written outside the lock, under a name of this process's own
	 * (workers may share the directory), then renamed into place */
	path_of(c, sha, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp-%d-%llu", path, (int)getpid(), n);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int ok = fd >= 0 && tb_write_all(fd, data, len) == 0;
	if (fd >= 0)
		close(fd);
	pthread_mutex_lock(&c->lock);
	if (ok && !find(c, sha)) {
		make_room(c, len);
		if (rename(tmp, path) == 0 && add(c, sha, len) == 0) {
			pthread_mutex_unlock(&c->lock);
			return;
		}
		unlink(path);
	}
	pthread_mutex_unlock(&c->lock);
	unlink(tmp);
}

int tb_block_cache_has(tb_block_cache_t *c, const uint8_t sha[32])
{
	pthread_mutex_lock(&c->lock);
	int has = find(c, sha) != NULL;
	pthread_mutex_unlock(&c->lock);
	return has;
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
	free(c->e);
	free(c->dir);
	free(c);
}
