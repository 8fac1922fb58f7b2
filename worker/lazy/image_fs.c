/*
 * image_fs.c: an image's root read on demand through FUSE (image_fs.h).
 *
 * Node numbers are the tree's (image_tree.h; 1 the root, as FUSE's).
 * A file's read is cut at its layer's access points: each piece is
 * copied out of a slot holding that span inflated, loaded through
 * tb_layer_index_read() (each span it needs fetched, from the cache or
 * the layer, and checked before it is inflated; an eStargz layer's
 * spans are its chunks, each checked once inflated, before a byte of it
 * is copied). A slot is loaded, the
 * first time, only as far as its first reader needs when going to the
 * span's end would need the next span too (the byte the two share,
 * when the access point falls inside one): reading a small file fetches
 * only the spans holding it; a later reader wanting more loads it whole.
 */
#include "image_fs.h"

#include "fuse_serve.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPARE_SLOTS 2
#define SLOTS_MAX 64
#define IDLE_S 2        /* seconds without a read after which slots are freed */
#define TIMEOUT 86400.0 /* nothing here ever changes */
#define TAR_BLOCK 512
#define PREFETCH_NICE 19 /* the lowest: readers, and everything else, first */
#define AHEAD_AFTER 2    /* spans come to one after the other before reading ahead */
#define AHEAD 2          /* spans read ahead of such a reader */
#define AHEAD_QUEUE 8
#define AHEADERS 2 /* threads fetching and inflating them, one span each */

typedef struct slot {
	size_t layer, span; /* which, when state is not EMPTY */
	enum { EMPTY, LOADING, READY } state;
	unsigned pins;
	uint64_t used;
	size_t have;   /* READY: bytes inflated from the span's start */
	uint8_t *data; /* fs->slot_bytes, taken when first used */
} slot_t;

struct tb_image_fs {
	tb_image_fs_conf_t c; /* its layers our own copy */
	tb_image_tree_t *tree;
	tb_unpack_stats_t stats;
	tb_fuse_server_t *server;
	slot_t *slots;
	size_t nslots, slot_bytes;
	uint64_t tick;
	_Atomic uint64_t *fetched; /* per layer */
	_Atomic uint8_t *checked;  /* per node: its data's tar header seen */
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a slot became READY or EMPTY, or unpinned */
	char error[1600];       /* the first failure, under lock: */
	int error_code;         /* its code; TB_EPOISON once a span failed */
	/* fetching the rest ahead into the cache */
	pthread_t prefetchers[TB_IMAGE_FS_PREFETCH_MAX];
	unsigned nprefetchers;
	_Atomic size_t next_span; /* over every layer's spans, in order, or
				   * over ahead[] */
	_Atomic int stopping;
	_Atomic size_t prefetched; /* spans done (kept, or given up) */
	_Atomic uint64_t prefetch_bytes;
	tb_read_span_t *ahead; /* conf.order's spans in the layers, once each */
	size_t nahead;         /* ... how many; ahead NULL: every span */
	/* giving memory back when idle, under lock */
	uint64_t reads;      /* spans pinned so far */
	int idle_stopping;   /* the idler is to end */
	pthread_cond_t idle; /* signalled to stop it */
	pthread_t idler;
	int has_idler;
	/* spans being fetched, one flag each, layer after layer */
	_Atomic uint8_t *flying;
	size_t *first_span; /* per layer: its first flag */
	size_t nspans;      /* every layer's */
	pthread_mutex_t flight_lock;
	pthread_cond_t landed; /* a fetch ended */
	/* under flight_lock: */
	unsigned readers;       /* readers' fetches under way or waiting:
				   * no prefetch starts meanwhile */
	uint8_t *seen;          /* per span: a reader needed it */
	tb_read_span_t *read;   /* ... those, in the order first needed */
	size_t nread, read_cap; /* read_cap: at most SPANS_MAX */
	/* reading ahead of a reader going through a layer in order, under
	 * lock: per layer, 1 + the span loaded last and how many loads in a
	 * row went to the next span; the spans to fetch, for one thread */
	struct seq {
		size_t last, run;
	} * seq;
	struct {
		size_t layer, span;
	} rq[AHEAD_QUEUE]; /* the read-ahead queue */
	size_t nrq;
	pthread_cond_t ahead_wake;
	pthread_t aheaders[AHEADERS];
	unsigned has_aheader; /* how many run */
};

/* Keeps the first failure, and the first that is the layer's own over
 * any failure of a fetch's before it. */
static void failed(tb_image_fs_t *fs, size_t l, int code, const char *msg)
{
	const tb_image_fs_layer_t *ly = &fs->c.layers[l];

	pthread_mutex_lock(&fs->lock);
	if (!fs->error_code || (code == TB_EPOISON && fs->error_code != TB_EPOISON)) {
		fs->error_code = code;
		snprintf(fs->error, sizeof(fs->error), "image layer %zu (%.255s): %s", l,
			 ly->label ? ly->label : ly->ix->layer, msg);
	}
	pthread_mutex_unlock(&fs->lock);
}

/* ------------------------------------------------------------ spans */

/* The tar stream's range of span @p i of @p ix. */
static void span_out(const tb_layer_index_t *ix, size_t i, uint64_t *from, uint64_t *to)
{
	*from = ix->points[i].out;
	*to = i + 1 < ix->npoints ? ix->points[i + 1].out : ix->total_out;
}

/* Who asks get_span() for a span. */
typedef enum asker {
	FOR_READER,   /* a reader: counted while it waits and fetches */
	FOR_AHEAD,    /* read ahead of a reader going through a layer in order */
	FOR_PREFETCH, /* in the read order: waits until no reader fetches */
} asker_t;

typedef struct fetch_ctx {
	tb_image_fs_t *fs;
	size_t layer;
	asker_t asker;
} fetch_ctx_t;

/* The flag of span @p i of layer @p l: being got (get_span). */
static _Atomic uint8_t *flying(tb_image_fs_t *fs, size_t l, size_t i)
{
	return &fs->flying[fs->first_span[l] + i];
}

/* A reader needs span @p i of layer @p l: noted the first time, in
 * order. Under flight_lock. */
static void note_read(tb_image_fs_t *fs, size_t l, size_t i)
{
	size_t k = fs->first_span[l] + i;

	if (fs->seen[k])
		return;
	fs->seen[k] = 1;
	if (fs->nread < fs->read_cap)
		fs->read[fs->nread++] = (tb_read_span_t){ (uint32_t)l, (uint32_t)i };
}

/* Span @p i of layer @p l (@p len bytes from @p off) into @p buf: from
 * the cache, or fetched from the layer and kept (if it matches: the
 * cache checks). One at a time for a span, whoever asks (@p who): a
 * second waits for the first, then finds it cached. A reader is counted
 * while it waits and fetches, and a prefetcher waits until none is
 * (readers first); one that is stopped meanwhile fetches nothing (0).
 * Only a prefetcher's bytes count as prefetched. */
static int64_t get_span(tb_image_fs_t *fs, size_t l, size_t i, uint64_t off, void *buf, size_t len,
			asker_t who, tb_error_t *err)
{
	const tb_image_fs_layer_t *ly = &fs->c.layers[l];
	int ahead = who == FOR_PREFETCH;
	int64_t got = (int64_t)len;

	pthread_mutex_lock(&fs->flight_lock);
	if (who == FOR_READER)
		fs->readers++;
	while (atomic_load(flying(fs, l, i)) ||
	       (ahead && fs->readers && !atomic_load(&fs->stopping)))
		pthread_cond_wait(&fs->landed, &fs->flight_lock);
	if (ahead && atomic_load(&fs->stopping)) {
		pthread_mutex_unlock(&fs->flight_lock);
		return 0;
	}
	atomic_store(flying(fs, l, i), 1);
	pthread_mutex_unlock(&fs->flight_lock);
	if (!tb_span_cache_get(fs->c.cache, ly->ix, i, buf)) {
		got = ly->fetch(ly->arg, off, buf, len, err);
		if (got > 0)
			atomic_fetch_add(&fs->fetched[l], (uint64_t)got);
		if (got > 0 && ahead)
			atomic_fetch_add(&fs->prefetch_bytes, (uint64_t)got);
		if (got == (int64_t)len)
			tb_span_cache_put(fs->c.cache, ly->ix, i, buf);
	}
	pthread_mutex_lock(&fs->flight_lock);
	atomic_store(flying(fs, l, i), 0);
	if (who == FOR_READER)
		fs->readers--;
	pthread_cond_broadcast(&fs->landed);
	pthread_mutex_unlock(&fs->flight_lock);
	return got;
}

/* tb_layer_index_read()'s fetch: a span (get_span). It is checked again
 * by the reader before it is inflated. */
static int64_t fetch_span(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	fetch_ctx_t *f = arg;
	const tb_layer_index_t *ix = f->fs->c.layers[f->layer].ix;
	size_t lo = 0, hi = ix->npoints;
	uint64_t from, to;

	while (hi - lo > 1) { /* the span starting at off */
		size_t mid = lo + (hi - lo) / 2;
		tb_layer_index_span(ix, mid, &from, &to);
		if (from <= off)
			lo = mid;
		else
			hi = mid;
	}
	tb_layer_index_span(ix, lo, &from, &to);
	if (from != off || to - from != len) /* never: the reader asks for spans */
		return tb_error_set(err, TB_EINVAL, "a range that is not a span");
	return get_span(f->fs, f->layer, lo, off, buf, len, f->asker, err);
}

/* Span @p i of layer @p l inflated into @p buf, its first @p len bytes.
 * 0, or -EIO with the failure kept. */
static int load(tb_image_fs_t *fs, size_t l, size_t i, uint8_t *buf, size_t len, asker_t who)
{
	const tb_layer_index_t *ix = fs->c.layers[l].ix;
	fetch_ctx_t f = { fs, l, who };
	uint64_t from, to;
	tb_error_t err;

	span_out(ix, i, &from, &to);
	int rc = tb_layer_index_read(ix, fetch_span, &f, from, buf, len, &err);
	/* not the layer's bytes, or not inflating: it stays so. Only a
	 * reader's failure is the attempt's: a span read ahead that failed is
	 * fetched again by its reader, if one comes, which then meets it. */
	if (rc < 0 && who == FOR_READER)
		failed(fs, l, rc == TB_EINVAL ? TB_EPOISON : rc, err.msg);
	return rc < 0 ? -EIO : 0;
}

/* How far to load span @p i of layer @p l for a reader needing @p need
 * bytes of it: all of it, unless that needs the next span too. */
static size_t load_len(const tb_layer_index_t *ix, size_t i, size_t need)
{
	uint64_t from, to;

	span_out(ix, i, &from, &to);
	if (i + 1 < ix->npoints && ix->points[i + 1].bits)
		return need;
	return (size_t)(to - from);
}

/* The slot of span @p i of layer @p l, or NULL; then in @p lru the least
 * recently used slot no one holds or loads. Under fs->lock. */
static slot_t *find_slot(tb_image_fs_t *fs, size_t l, size_t i, slot_t **lru)
{
	*lru = NULL;
	for (size_t k = 0; k < fs->nslots; k++) {
		slot_t *s = &fs->slots[k];
		if (s->state != EMPTY && s->layer == l && s->span == i)
			return s;
		if (!s->pins && s->state != LOADING && (!*lru || s->used < (*lru)->used))
			*lru = s;
	}
	return NULL;
}

/* Loads @p s (pinned, LOADING) with @p len bytes of span @p i of layer
 * @p l. Called and returns under fs->lock; a failure leaves it EMPTY and
 * unpinned. @return s, or NULL. */
static slot_t *fill(tb_image_fs_t *fs, slot_t *s, size_t l, size_t i, size_t len, asker_t who)
{
	pthread_mutex_unlock(&fs->lock);
	int rc = -ENOMEM;
	if (s->data || (s->data = malloc(fs->slot_bytes)))
		rc = load(fs, l, i, s->data, len, who);
	pthread_mutex_lock(&fs->lock);
	s->state = rc < 0 ? EMPTY : READY; /* a failure is not kept */
	s->have = rc < 0 ? 0 : len;
	s->used = ++fs->tick;
	pthread_cond_broadcast(&fs->changed);
	if (rc < 0) {
		s->pins--;
		return NULL;
	}
	return s;
}

/* A reader come to span @p i of layer @p l, noted: once AHEAD_AFTER
 * times in a row it came each to the next span (a reader going through
 * the layer in order, as one reading every file of a layer written in
 * the order it is walked does), the AHEAD spans after it are queued to
 * be fetched and inflated (aheader) while it reads this one, where it
 * would wait for each in turn. A reader of scattered files reads nothing
 * ahead. Under fs->lock. */
static void read_ahead(tb_image_fs_t *fs, size_t l, size_t i)
{
	struct seq *q = &fs->seq[l];

	/* the same span, or the one before (a read the kernel sent ahead
	 * served late): the run goes on */
	if (!fs->has_aheader || q->last == i + 1 || q->last == i + 2)
		return;
	if (q->last != i) { /* not the next: a new run */
		q->run = 0;
		q->last = i + 1;
		return;
	}
	q->run++;
	q->last = i + 1;
	for (size_t k = 1; q->run >= AHEAD_AFTER && k <= AHEAD; k++) {
		size_t n = 0;
		while (n < fs->nrq && (fs->rq[n].layer != l || fs->rq[n].span != i + k))
			n++;
		if (i + k >= fs->c.layers[l].ix->npoints || n < fs->nrq || fs->nrq == AHEAD_QUEUE)
			continue;
		fs->rq[fs->nrq].layer = l;
		fs->rq[fs->nrq++].span = i + k;
		pthread_cond_signal(&fs->ahead_wake);
	}
}

/* The slot holding at least @p need bytes of span @p i of layer @p l,
 * READY and pinned (the caller unpins it); loaded if no slot has them.
 * NULL if it could not be. There are more slots than threads: one is
 * always free, in time. Called and returns under fs->lock. */
static slot_t *pin_span(tb_image_fs_t *fs, size_t l, size_t i, size_t need, int reader)
{
	const tb_layer_index_t *ix = fs->c.layers[l].ix;

	if (reader) {
		read_ahead(fs, l, i);
		pthread_mutex_lock(&fs->flight_lock); /* after fs->lock, never before */
		note_read(fs, l, i);
		pthread_mutex_unlock(&fs->flight_lock);
	}
	for (;;) {
		slot_t *free_slot, *s = find_slot(fs, l, i, &free_slot);
		size_t len = load_len(ix, i, need);
		fs->reads++;
		if (s && s->state == READY && s->have >= need) {
			s->pins++;
			s->used = ++fs->tick;
			return s;
		}
		if (s && s->state == READY && !s->pins) { /* loaded short: whole now */
			uint64_t from, to;
			span_out(ix, i, &from, &to);
			len = (size_t)(to - from);
		} else if (s || !(s = free_slot)) {
			pthread_cond_wait(&fs->changed,
					  &fs->lock); /* loading, held, or none free */
			continue;
		}
		s->layer = l, s->span = i;
		s->state = LOADING;
		s->pins = 1;
		return fill(fs, s, l, i, len, reader ? FOR_READER : FOR_AHEAD);
	}
}

static void unpin(tb_image_fs_t *fs, slot_t *s)
{
	pthread_mutex_lock(&fs->lock);
	s->pins--;
	pthread_cond_broadcast(&fs->changed);
	pthread_mutex_unlock(&fs->lock);
}

/* @p len bytes of layer @p l's tar stream from @p off into @p out, span by
 * span. 0, or -EIO. */
static int read_tar(tb_image_fs_t *fs, size_t l, uint64_t off, uint8_t *out, size_t len)
{
	const tb_layer_index_t *ix = fs->c.layers[l].ix;

	while (len) {
		size_t i = tb_layer_point_before(ix, off);
		uint64_t from, to;
		span_out(ix, i, &from, &to);
		size_t at = (size_t)(off - from);
		size_t take = to - off < len ? (size_t)(to - off) : len;
		if (!take)
			return -EIO; /* never: the tree's offsets are in the stream */
		pthread_mutex_lock(&fs->lock);
		slot_t *s = pin_span(fs, l, i, at + take, 1);
		pthread_mutex_unlock(&fs->lock);
		if (!s)
			return -EIO;
		memcpy(out, s->data + at, take); /* pinned: not replaced meanwhile */
		unpin(fs, s);
		out += take, off += take, len -= take;
	}
	return 0;
}

/* What of an index that lies can be caught when a file is first read:
 * its data must follow a tar header (its checksum right) of a regular
 * file. Not of a layer read from its TOC (eStargz, zstd:chunked): its
 * stream holds no tar header, and each chunk is checked against the
 * TOC's digest of it when read. 0, or
 * -EIO with the failure kept. */
static int check_header(tb_image_fs_t *fs, uint32_t ino, const tb_image_node_t *nd)
{
	uint8_t h[TAR_BLOCK];
	uint64_t sum = 0, want = 0;

	if (atomic_load(&fs->checked[ino]) ||
	    tb_layer_index_kind_toc(fs->c.layers[nd->layer].ix->kind))
		return 0;
	if (read_tar(fs, nd->layer, nd->offset - TAR_BLOCK, h, sizeof(h)) < 0)
		return -EIO;
	for (size_t k = 0; k < TAR_BLOCK; k++)
		sum += k >= 148 && k < 156 ? ' ' : h[k];
	size_t k = 148;
	while (k < 156 && h[k] == ' ')
		k++;
	for (; k < 156 && h[k] >= '0' && h[k] <= '7'; k++)
		want = want * 8 + (uint64_t)(h[k] - '0');
	if (sum != want || (h[156] != '0' && h[156] != '\0' && h[156] != '7')) {
		char msg[200];
		snprintf(msg, sizeof(msg),
			 "the index places a file's data at %llu, where no tar header of a "
			 "file precedes it: the index is not the layer's",
			 (unsigned long long)nd->offset);
		failed(fs, nd->layer, TB_EPOISON, msg);
		return -EIO;
	}
	atomic_store(&fs->checked[ino], 1);
	return 0;
}

/* ------------------------------------------------------------ operations */

static void attr_of(const tb_image_fs_t *fs, const tb_image_node_t *nd, fuse_ino_t ino,
		    struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = nd->mode;
	st->st_nlink = nd->nlink;
	st->st_uid = fs->c.id_base + nd->uid; /* the tree's are below 65536 */
	st->st_gid = fs->c.id_base + nd->gid;
	st->st_size = S_ISREG(nd->mode) || S_ISLNK(nd->mode) ? (off_t)nd->size : 0;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((st->st_size + 511) / 512);
	/* the unpacked tree's: its entry's time, as access and change time too */
	st->st_mtim.tv_sec = (time_t)nd->mtime;
	st->st_mtim.tv_nsec = (long)nd->mtime_ns;
	st->st_atim = st->st_ctim = st->st_mtim;
}

static void op_init(void *ud, struct fuse_conn_info *conn)
{
	(void)ud;
	conn->want &= ~(unsigned)FUSE_CAP_SPLICE_READ;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	tb_image_fs_t *fs = fuse_req_userdata(req);
	struct fuse_entry_param e;
	uint32_t ino = tb_image_tree_lookup(fs->tree, parent, name);

	if (!ino) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = ino;
	e.attr_timeout = e.entry_timeout = TIMEOUT;
	attr_of(fs, tb_image_tree_node(fs->tree, ino), ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	tb_image_fs_t *fs = fuse_req_userdata(req);
	const tb_image_node_t *nd = tb_image_tree_node(fs->tree, ino);
	struct stat st;

	(void)fi;
	if (!nd) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	attr_of(fs, nd, ino, &st);
	fuse_reply_attr(req, &st, TIMEOUT);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	tb_image_fs_t *fs = fuse_req_userdata(req);
	const tb_image_node_t *nd = tb_image_tree_node(fs->tree, ino);

	if (!nd || !S_ISLNK(nd->mode))
		fuse_reply_err(req, nd ? EINVAL : ENOENT);
	else
		fuse_reply_readlink(req, nd->link);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	tb_image_fs_t *fs = fuse_req_userdata(req);
	const tb_image_node_t *nd = tb_image_tree_node(fs->tree, ino);

	if (!nd)
		fuse_reply_err(req, ENOENT);
	else if (S_ISDIR(nd->mode))
		fuse_reply_err(req, EISDIR);
	else if ((fi->flags & O_ACCMODE) != O_RDONLY)
		fuse_reply_err(req, EROFS);
	else {
		fi->keep_cache = 1; /* the content never changes: cached pages stay */
		fuse_reply_open(req, fi);
	}
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	tb_image_fs_t *fs = fuse_req_userdata(req);
	const tb_image_node_t *nd = tb_image_tree_node(fs->tree, ino);
	uint8_t *out;

	(void)fi;
	if (!nd || !S_ISREG(nd->mode) || off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	uint64_t end = (uint64_t)off + size < nd->size ? (uint64_t)off + size : nd->size;
	if ((uint64_t)off >= end) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (check_header(fs, (uint32_t)ino, nd) < 0) {
		fuse_reply_err(req, EIO);
		return;
	}
	if (!(out = malloc(end - (uint64_t)off))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (read_tar(fs, nd->layer, nd->offset + (uint64_t)off, out, end - (uint64_t)off) < 0)
		fuse_reply_err(req, EIO);
	else
		fuse_reply_buf(req, (const char *)out, end - (uint64_t)off);
	free(out);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	tb_image_fs_t *fs = fuse_req_userdata(req);
	const tb_image_node_t *nd = tb_image_tree_node(fs->tree, ino);

	if (!nd || !S_ISDIR(nd->mode))
		fuse_reply_err(req, nd ? ENOTDIR : ENOENT);
	else
		fuse_reply_open(req, fi);
}

typedef struct dir_list {
	const tb_image_fs_t *fs;
	fuse_ino_t ino;
	const tb_image_node_t *nd;
} dir_list_t;

/* Entry k of a directory of the tree (tb_fuse_dirent_fn). */
static void dirent_of(void *arg, size_t k, const char **name, struct stat *st)
{
	const dir_list_t *d = arg;
	if (k >= 2)
		*name = d->nd->kids[k - 2].name;
	st->st_ino = k == 0   ? d->ino
		     : k == 1 ? (d->ino == TB_IMAGE_TREE_ROOT ? d->ino : d->nd->parent)
			      : d->nd->kids[k - 2].ino;
	st->st_mode = tb_image_tree_node(d->fs->tree, st->st_ino)->mode;
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	tb_image_fs_t *fs = fuse_req_userdata(req);
	dir_list_t d = { fs, ino, tb_image_tree_node(fs->tree, ino) };

	(void)fi;
	if (!d.nd || !S_ISDIR(d.nd->mode)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	tb_fuse_reply_dir(req, size, off, (size_t)d.nd->nkids + 2, dirent_of, &d);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.readlink = op_readlink,
	.open = op_open,
	.read = op_read,
	.opendir = op_opendir,
	.readdir = op_readdir,
};

/* ------------------------------------------------------------ prefetch */

/* Span number @p k of those to fetch ahead (the order's, or every
 * layer's in order): its layer into @p l and its number there into
 * @p i. @return 0 past the last. */
static int nth_span(const tb_image_fs_t *fs, size_t k, size_t *l, size_t *i)
{
	if (fs->ahead) {
		if (k >= fs->nahead)
			return 0;
		*l = fs->ahead[k].layer;
		*i = fs->ahead[k].span;
		return 1;
	}
	for (*l = 0; *l < fs->c.nlayers; (*l)++) {
		if (k < fs->c.layers[*l].ix->npoints) {
			*i = k;
			return 1;
		}
		k -= fs->c.layers[*l].ix->npoints;
	}
	return 0;
}

/* Span @p i of layer @p l fetched into the cache if it is not there: a
 * failure is left for a reader to meet (and report). */
static void prefetch_one(tb_image_fs_t *fs, size_t l, size_t i, uint8_t **buf, size_t *cap,
			 asker_t who)
{
	const tb_image_fs_layer_t *ly = &fs->c.layers[l];
	uint64_t from, to;
	tb_error_t err;

	if (tb_span_cache_has(fs->c.cache, ly->ix, i))
		return;
	tb_layer_index_span(ly->ix, i, &from, &to);
	if (to - from > *cap) {
		uint8_t *b = realloc(*buf, to - from);
		if (!b)
			return;
		*buf = b, *cap = to - from;
	}
	get_span(fs, l, i, from, *buf, to - from, who, &err); /* a failure: a reader's to meet */
}

/* A thread fetching every span to fetch ahead not cached yet, in order,
 * into the cache (compressed, as they come: a reader inflates what it
 * reads), at the lowest priority, behind the readers. */
static void *prefetch(void *arg)
{
	tb_image_fs_t *fs = arg;
	uint8_t *buf = NULL;
	size_t cap = 0, l, i;

	/* this thread alone (a thread's id is a process to setpriority) */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PREFETCH_NICE); /* best effort */
	while (!atomic_load(&fs->stopping) &&
	       nth_span(fs, atomic_fetch_add(&fs->next_span, 1), &l, &i)) {
		prefetch_one(fs, l, i, &buf, &cap, FOR_PREFETCH); /* behind the readers */
		atomic_fetch_add(&fs->prefetched, 1);
	}
	free(buf);
	return NULL;
}

/* A thread (of AHEADERS) fetching the spans read_ahead() queues, first
 * queued first, into the cache (those there already skipped), then
 * inflating each into a slot, so that the reader finds it ready: the
 * inflate, most of a reader's time, done on the cores the reader leaves
 * idle, two spans at once. */
static void *aheader(void *arg)
{
	tb_image_fs_t *fs = arg;
	uint8_t *buf = NULL;
	size_t cap = 0;

	pthread_mutex_lock(&fs->lock);
	while (!atomic_load(&fs->stopping)) {
		if (!fs->nrq) {
			pthread_cond_wait(&fs->ahead_wake, &fs->lock);
			continue;
		}
		size_t l = fs->rq[0].layer, i = fs->rq[0].span;
		memmove(&fs->rq[0], &fs->rq[1], --fs->nrq * sizeof(fs->rq[0]));
		pthread_mutex_unlock(&fs->lock);
		prefetch_one(fs, l, i, &buf, &cap, FOR_AHEAD);
		pthread_mutex_lock(&fs->lock);
		/* and inflated into a slot, on a core the reader leaves idle */
		uint64_t from, to;
		span_out(fs->c.layers[l].ix, i, &from, &to);
		slot_t *sl = atomic_load(&fs->stopping) ? NULL : pin_span(fs, l, i, to - from, 0);
		if (sl) {
			sl->pins--;
			pthread_cond_broadcast(&fs->changed);
		}
	}
	pthread_mutex_unlock(&fs->lock);
	free(buf);
	return NULL;
}

/* ------------------------------------------------------------ idle */

/* Gives the memory of every slot no one holds back, once IDLE_S seconds
 * pass without a read (a sandbox that has started reads little more):
 * its spans are in the cache, or fetched again. */
static void *idler(void *arg)
{
	tb_image_fs_t *fs = arg;
	uint64_t seen = 0;

	pthread_mutex_lock(&fs->lock);
	while (!fs->idle_stopping) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += IDLE_S;
		if (pthread_cond_timedwait(&fs->idle, &fs->lock, &until) != ETIMEDOUT)
			continue;
		for (size_t k = 0; fs->reads == seen && k < fs->nslots; k++) {
			slot_t *s = &fs->slots[k];
			if (!s->pins && s->state != LOADING) {
				free(s->data);
				s->data = NULL;
				s->state = EMPTY;
			}
		}
		seen = fs->reads;
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

/* ------------------------------------------------------------ life */

/* The slots' memory: each the largest span's, inflated; refused past
 * max_memory. */
static int size_slots(tb_image_fs_t *fs, unsigned threads, tb_error_t *err)
{
	uint64_t largest = 0,
		 max = fs->c.max_memory ? fs->c.max_memory : TB_IMAGE_FS_MEMORY_DEFAULT;
	size_t where_l = 0, where_i = 0;

	for (size_t l = 0; l < fs->c.nlayers; l++)
		for (size_t i = 0; i < fs->c.layers[l].ix->npoints; i++) {
			uint64_t from, to;
			span_out(fs->c.layers[l].ix, i, &from, &to);
			if (to - from > largest)
				largest = to - from, where_l = l, where_i = i;
		}
	fs->nslots = threads + SPARE_SLOTS;
	if (largest > max / fs->nslots)
		return tb_error_set(err, TB_ETOOBIG,
				    "image layer %zu: span %zu inflates to %llu bytes: %zu of them "
				    "in memory pass %llu",
				    where_l, where_i, (unsigned long long)largest, fs->nslots,
				    (unsigned long long)max);
	/* as many more as max_memory holds: a reader walking the tree by name
	 * goes back and forth between spans (the layer has them in its own
	 * order), and each span dropped is inflated again */
	size_t fit = largest ? (size_t)(max / largest) : 0;
	fs->nslots = fit > SLOTS_MAX ? SLOTS_MAX : fit > fs->nslots ? fit : fs->nslots;
	fs->slot_bytes = largest ? (size_t)largest : 1;
	if (!(fs->slots = calloc(fs->nslots, sizeof(*fs->slots))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	return 0;
}

static int build(tb_image_fs_t *fs, tb_error_t *err)
{
	const tb_layer_index_t **ix = calloc(fs->c.nlayers ? fs->c.nlayers : 1, sizeof(*ix));
	int rc;

	if (!ix)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (size_t l = 0; l < fs->c.nlayers; l++)
		ix[l] = fs->c.layers[l].ix;
	rc = tb_image_tree_build(&fs->tree, ix, fs->c.nlayers, &fs->c.limits, fs->c.max_tree_memory,
				 &fs->stats, err);
	free(ix);
	if (rc < 0)
		return tb_error_prefix(err, "image root");
	uint32_t n = tb_image_tree_end(fs->tree);
	size_t spans = 0, nl = fs->c.nlayers ? fs->c.nlayers : 1;
	if (!(fs->checked = calloc(n, sizeof(*fs->checked))) ||
	    !(fs->fetched = calloc(nl, sizeof(*fs->fetched))) ||
	    !(fs->first_span = calloc(nl, sizeof(*fs->first_span))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (size_t l = 0; l < fs->c.nlayers; l++) {
		fs->first_span[l] = spans;
		spans += fs->c.layers[l].ix->npoints;
	}
	fs->nspans = spans;
	fs->read_cap = spans < TB_READ_ORDER_SPANS_MAX ? spans : TB_READ_ORDER_SPANS_MAX;
	if (!(fs->flying = calloc(spans ? spans : 1, sizeof(*fs->flying))) ||
	    !(fs->seen = calloc(spans ? spans : 1, sizeof(*fs->seen))) ||
	    !(fs->read = calloc(fs->read_cap ? fs->read_cap : 1, sizeof(*fs->read))) ||
	    !(fs->seq = calloc(nl, sizeof(*fs->seq))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	return 0;
}

/* conf->order's spans into fs->ahead: those inside the layers, each
 * once, in its order (a hint: what is not a span of these layers is
 * skipped). */
static int take_order(tb_image_fs_t *fs, const tb_image_fs_conf_t *conf, tb_error_t *err)
{
	uint8_t *taken = calloc(fs->nspans ? fs->nspans : 1, 1);

	fs->ahead = calloc(conf->norder ? conf->norder : 1, sizeof(*fs->ahead));
	if (!taken || !fs->ahead) {
		free(taken);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	for (size_t k = 0; k < conf->norder; k++) {
		const tb_read_span_t *s = &conf->order[k];
		if (s->layer >= fs->c.nlayers || s->span >= fs->c.layers[s->layer].ix->npoints ||
		    taken[fs->first_span[s->layer] + s->span])
			continue;
		taken[fs->first_span[s->layer] + s->span] = 1;
		fs->ahead[fs->nahead++] = *s;
	}
	free(taken);
	return 0;
}

int tb_image_fs_start(tb_image_fs_t **out, const tb_image_fs_conf_t *conf, int *mount_fd,
		      tb_error_t *err)
{
	tb_image_fs_t *fs = calloc(1, sizeof(*fs));
	unsigned threads = conf->max_threads ? conf->max_threads : 4;
	int rc;

	*out = NULL;
	*mount_fd = -1;
	if (!fs)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (conf->id_base > UINT32_MAX - 65536) {
		free(fs);
		return tb_error_set(err, TB_EINVAL, "image root: ids from %u pass 32 bits",
				    conf->id_base);
	}
	fs->c = *conf;
	fs->c.layers = NULL;
	fs->c.order = NULL; /* the caller's: copied into fs->ahead */
	fs->c.norder = 0;
	pthread_mutex_init(&fs->lock, NULL);
	pthread_cond_init(&fs->changed, NULL);
	pthread_cond_init(&fs->idle, NULL);
	pthread_mutex_init(&fs->flight_lock, NULL);
	pthread_cond_init(&fs->landed, NULL);
	pthread_cond_init(&fs->ahead_wake, NULL);
	if (threads > TB_FUSE_THREADS_MAX)
		threads = TB_FUSE_THREADS_MAX;
	tb_image_fs_layer_t *layers = calloc(conf->nlayers ? conf->nlayers : 1, sizeof(*layers));
	if (!layers) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto fail;
	}
	memcpy(layers, conf->layers, conf->nlayers * sizeof(*layers));
	fs->c.layers = layers;
	if ((rc = build(fs, err)) < 0 || (rc = size_slots(fs, threads, err)) < 0 ||
	    (conf->order && (rc = take_order(fs, conf, err)) < 0))
		goto fail;
	tb_fuse_serve_conf_t sc = { .ops = &ops,
				    .userdata = fs,
				    .source = "taskbox-image",
				    .rootmode = "40755",
				    .threads = threads };
	if ((rc = tb_fuse_serve_start(&fs->server, &sc, "image root", mount_fd, err)) < 0)
		goto fail;
	fs->has_idler = pthread_create(&fs->idler, NULL, idler, fs) == 0; /* else kept */
	pthread_mutex_lock(&fs->lock); /* read_ahead() reads it under the lock */
	while (conf->cache && fs->has_aheader < AHEADERS &&
	       pthread_create(&fs->aheaders[fs->has_aheader], NULL, aheader, fs) == 0)
		fs->has_aheader++;
	pthread_mutex_unlock(&fs->lock);
	/* needs somewhere to go, and something to fetch */
	unsigned ahead = conf->cache && (!fs->ahead || fs->nahead) ? conf->prefetch_threads : 0;
	for (; fs->nprefetchers < ahead && fs->nprefetchers < TB_IMAGE_FS_PREFETCH_MAX;
	     fs->nprefetchers++)
		if (pthread_create(&fs->prefetchers[fs->nprefetchers], NULL, prefetch, fs) != 0)
			break;
	*out = fs;
	return 0;
fail:
	tb_image_fs_stop(fs);
	return rc;
}

uint64_t tb_image_fs_memory(tb_image_fs_t *fs)
{
	uint64_t held = 0;
	pthread_mutex_lock(&fs->lock);
	for (size_t k = 0; k < fs->nslots; k++)
		held += fs->slots[k].data ? fs->slot_bytes : 0;
	pthread_mutex_unlock(&fs->lock);
	return held;
}

int tb_image_fs_prefetched(tb_image_fs_t *fs)
{
	size_t all = fs->ahead ? fs->nahead : fs->nspans;
	return fs->nprefetchers && atomic_load(&fs->prefetched) >= all;
}

uint64_t tb_image_fs_prefetched_bytes(tb_image_fs_t *fs)
{
	return atomic_load(&fs->prefetch_bytes);
}

int tb_image_fs_read_order(tb_image_fs_t *fs, tb_read_span_t **out, size_t *n)
{
	int rc = 0;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&fs->flight_lock);
	if (fs->nread && !(*out = malloc(fs->nread * sizeof(**out))))
		rc = TB_ENOMEM;
	else if (fs->nread) {
		memcpy(*out, fs->read, fs->nread * sizeof(**out));
		*n = fs->nread;
	}
	pthread_mutex_unlock(&fs->flight_lock);
	return rc;
}

uint64_t tb_image_fs_fetched(tb_image_fs_t *fs, size_t layer)
{
	return layer < fs->c.nlayers ? atomic_load(&fs->fetched[layer]) : 0;
}

const tb_unpack_stats_t *tb_image_fs_stats(const tb_image_fs_t *fs)
{
	return &fs->stats;
}

int tb_image_fs_error(tb_image_fs_t *fs, char *out, size_t cap)
{
	pthread_mutex_lock(&fs->lock);
	snprintf(out, cap, "%s", fs->error);
	int code = fs->error_code;
	pthread_mutex_unlock(&fs->lock);
	return code;
}

void tb_image_fs_stop(tb_image_fs_t *fs)
{
	if (!fs)
		return;
	tb_fuse_serve_stop(fs->server); /* no request is served past here */
	atomic_store(&fs->stopping, 1); /* each prefetcher ends its fetch */
	if (fs->c.cancel)               /* ... even one under way */
		atomic_store(fs->c.cancel, 1);
	pthread_mutex_lock(&fs->flight_lock); /* ... or its wait for the readers */
	pthread_cond_broadcast(&fs->landed);
	pthread_mutex_unlock(&fs->flight_lock);
	for (unsigned i = 0; i < fs->nprefetchers; i++)
		pthread_join(fs->prefetchers[i], NULL);
	pthread_mutex_lock(&fs->lock);
	pthread_cond_broadcast(&fs->ahead_wake);
	pthread_mutex_unlock(&fs->lock);
	for (unsigned i = 0; i < fs->has_aheader; i++)
		pthread_join(fs->aheaders[i], NULL);
	if (fs->has_idler) {
		pthread_mutex_lock(&fs->lock);
		fs->idle_stopping = 1;
		pthread_cond_signal(&fs->idle);
		pthread_mutex_unlock(&fs->lock);
		pthread_join(fs->idler, NULL);
	}
	tb_image_tree_free(fs->tree);
	for (size_t k = 0; fs->slots && k < fs->nslots; k++)
		free(fs->slots[k].data);
	free(fs->slots);
	free(fs->checked);
	free(fs->fetched);
	free((void *)fs->c.layers);
	pthread_mutex_destroy(&fs->lock);
	pthread_cond_destroy(&fs->changed);
	pthread_cond_destroy(&fs->idle);
	pthread_mutex_destroy(&fs->flight_lock);
	pthread_cond_destroy(&fs->landed);
	pthread_cond_destroy(&fs->ahead_wake);
	free((void *)fs->flying);
	free(fs->seq);
	free(fs->first_span);
	free(fs->seen);
	free(fs->read);
	free(fs->ahead);
	free(fs);
}
