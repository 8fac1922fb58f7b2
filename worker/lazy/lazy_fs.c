/*
 * lazy_fs.c: a task's lazy inputs as a read-only FUSE file system
 * (lazy_fs.h).
 *
 * Inode 1 is the directory, inode 2 + i file i. The device, the mount
 * and the threads serving it are fuse_serve.h's (ours, not libfuse's
 * loop: stopping wakes them all at once whatever the sandbox still
 * holds, and their number is fixed). A read is served block by block out of the slots in
 * memory; a block in none is loaded into the least recently used free
 * one, from the cache or with one ranged GET of the whole block, checked,
 * then kept in the cache by a thread of its own (the keeper), so that a
 * fetch does not wait for the disk to write it.
 */
#include "lazy_fs.h"

#include "fuse_serve.h"
#include "tb/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS TB_FUSE_THREADS_MAX
#define SPARE_SLOTS 2 /* hot blocks beyond one per thread */
#define AHEAD 64      /* blocks fetched ahead of a sequential reader */
#define PREFETCHERS 2 /* threads fetching them (with a cache only) */
#define QUEUE AHEAD   /* blocks waiting to be fetched ahead, at most */
#define RUN 32        /* blocks one GET fetches ahead: fewer requests */
#define IDLE_S 2      /* seconds without work after which slots are freed */
#define NEAR 4        /* blocks from the last read's end a sequential one starts */
#define KEEPING AHEAD /* blocks waiting for the keeper, at most */
#define ROOT_INO 1
#define TIMEOUT 86400.0 /* nothing here ever changes */

/* A block in memory: the kernel asks in pieces of 128 KiB, each of which
 * would otherwise cost a whole block's GET; and readers of one block wait
 * for the one fetch of it. */
typedef struct slot {
	size_t file, index; /* which, when state is not EMPTY */
	enum { EMPTY, LOADING, READY } state;
	unsigned pins; /* readers copying out of it, and the keeper */
	uint64_t used; /* the lowest unpinned one is replaced */
	ssize_t len;   /* READY: its length, or -errno */
	uint8_t *data; /* TB_BLOCK_SIZE bytes */
} slot_t;

struct tb_lazy_fs {
	tb_lazy_fs_conf_t c;
	slot_t *slots; /* nslots, under lock */
	size_t nslots;
	uint64_t tick;
	pthread_cond_t changed;   /* a slot became READY or unpinned */
	tb_fuse_server_t *server; /* the device, the mount, the serving threads */
	unsigned nthreads;
	_Atomic uint64_t *fetched; /* per file */
	pthread_mutex_t lock;
	char error[1600]; /* the first failure, under lock: */
	int error_code;   /* its code; TB_EPOISON once a block failed its check */
	/* fetching ahead, under lock: what waits, what is being fetched, and
	 * each file's next block for a sequential reader */
	struct ahead {
		size_t file, index;
	} queue[QUEUE];
	size_t nqueue;
	size_t *next;   /* per file: the block after the last one read */
	size_t *streak; /* per file: blocks read one after another */
	int stopping;
	uint64_t reads;      /* answered: whether the file system is idle */
	pthread_cond_t work; /* queued, or stopping */
	pthread_t prefetchers[PREFETCHERS];
	unsigned nprefetchers;
	/* keeping fetched blocks in the cache, under lock: the slots to
	 * write (each pinned until written), oldest first */
	slot_t *keeping[KEEPING];
	size_t nkeeping;
	int keeper_stopping, has_keeper;
	pthread_cond_t keep_work; /* a slot to write, or stopping */
	pthread_t keeper;
};

static const tb_lazy_file_t *file_of(const tb_lazy_fs_t *fs, fuse_ino_t ino)
{
	return ino >= 2 && ino - 2 < fs->c.nfiles ? &fs->c.files[ino - 2] : NULL;
}

static void attr_of(const tb_lazy_fs_t *fs, fuse_ino_t ino, struct stat *st)
{
	const tb_lazy_file_t *f = file_of(fs, ino);

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = f ? S_IFREG | 0444 : S_IFDIR | 0555;
	st->st_nlink = f ? 1 : 2;
	st->st_size = f ? (off_t)f->blocks->size : 0;
	st->st_blksize = TB_BLOCK_SIZE;
	st->st_blocks = (blkcnt_t)((st->st_size + 511) / 512);
}

/* Keeps the first failure, and the first that is the content's own (a
 * block not the content named, an object gone: TB_EPOISON) over any
 * failure of the store's before it. */
static void failed(tb_lazy_fs_t *fs, const tb_lazy_file_t *f, int code, const tb_error_t *err)
{
	pthread_mutex_lock(&fs->lock);
	if (!fs->error_code || (code == TB_EPOISON && fs->error_code != TB_EPOISON)) {
		fs->error_code = code;
		snprintf(fs->error, sizeof(fs->error), "input %.255s: %s",
			 f->label ? f->label : f->name, err->msg);
	}
	pthread_mutex_unlock(&fs->lock);
}

/* Block @p index of file @p i into @p buf (TB_BLOCK_SIZE bytes): from the
 * cache, or fetched and checked (then @p *fetched is set: the caller keeps
 * it); a failure is kept. Its length, or -errno. */
static ssize_t fetch_block(tb_lazy_fs_t *fs, size_t i, size_t index, uint8_t *buf, int *fetched)
{
	const tb_lazy_file_t *f = &fs->c.files[i];
	uint64_t at = (uint64_t)index * TB_BLOCK_SIZE;
	size_t len = tb_blocks_len(f->blocks, index);
	tb_error_t err;
	size_t got;

	*fetched = 0;
	if (fs->c.cache && tb_block_cache_get(fs->c.cache, f->blocks, index, buf))
		return (ssize_t)len;
	int rc = tb_store_get_range(fs->c.store, f->key, at, len, buf, &got, &err);
	if (rc < 0) { /* gone: it will stay so; else the store's, which may pass */
		failed(fs, f, rc == TB_ENOTFOUND ? TB_EPOISON : rc, &err);
		return -EIO;
	}
	atomic_fetch_add(&fs->fetched[i], got);
	tb_fault_point("lazy-fetched"); /* tests: the worker killed mid-read */
	if (tb_blocks_check(f->blocks, index, buf, got, &err) < 0) {
		failed(fs, f, TB_EPOISON, &err);
		return -EIO;
	}
	*fetched = 1;
	return (ssize_t)len;
}

/* Slot @p s, READY with a block just fetched and checked, handed to the
 * keeper to write into the cache (pinned till then). 0 if the keeper has
 * no room (or there is none): the caller writes it. Under fs->lock. */
static int keep(tb_lazy_fs_t *fs, slot_t *s)
{
	if (!fs->has_keeper || fs->nkeeping == KEEPING)
		return 0;
	s->pins++;
	fs->keeping[fs->nkeeping++] = s;
	pthread_cond_signal(&fs->keep_work);
	return 1;
}

/* The keeper: writes the slots handed to it into the cache, oldest first;
 * once stopping, those still waiting too (a later task's hit). */
static void *keeper(void *arg)
{
	tb_lazy_fs_t *fs = arg;

	pthread_mutex_lock(&fs->lock);
	for (;;) {
		if (!fs->nkeeping) {
			if (fs->keeper_stopping)
				break;
			pthread_cond_wait(&fs->keep_work, &fs->lock);
			continue;
		}
		slot_t *s = fs->keeping[0];
		memmove(fs->keeping, fs->keeping + 1, --fs->nkeeping * sizeof(fs->keeping[0]));
		pthread_mutex_unlock(&fs->lock);
		/* READY and pinned: neither replaced nor changed meanwhile */
		tb_block_cache_put(fs->c.cache, fs->c.files[s->file].blocks, s->index, s->data);
		pthread_mutex_lock(&fs->lock);
		s->pins--;
		pthread_cond_broadcast(&fs->changed);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

/* The slot holding block @p index of file @p i (loading or ready), or
 * NULL; then, in @p lru (if not NULL), the least recently used slot no
 * reader holds and none is loading into (NULL if none is). Its memory is
 * the caller's to take if it has none yet. Under fs->lock. */
static slot_t *find_slot(tb_lazy_fs_t *fs, size_t i, size_t index, slot_t **lru)
{
	slot_t *free_slot = NULL;

	for (size_t k = 0; k < fs->nslots; k++) {
		slot_t *s = &fs->slots[k];
		if (s->state != EMPTY && s->file == i && s->index == index)
			return s;
		if (!s->pins && s->state != LOADING && (!free_slot || s->used < free_slot->used))
			free_slot = s;
	}
	if (lru)
		*lru = free_slot;
	return NULL;
}

static int in_slot(tb_lazy_fs_t *fs, size_t i, size_t index)
{
	return find_slot(fs, i, index, NULL) != NULL;
}

/* The slot holding block @p index of file @p i, READY and pinned (the
 * caller unpins it); fetched into the least recently used free slot if no
 * slot has it. NULL if it could not be fetched (or no memory for it).
 * There are more slots than threads: one is always free, in time. Called
 * and returns under fs->lock. */
static slot_t *pin_block(tb_lazy_fs_t *fs, size_t i, size_t index)
{
	for (;;) {
		slot_t *free_slot = NULL, *s;
		if ((s = find_slot(fs, i, index, &free_slot))) {
			if (s->state == LOADING)
				goto wait;
			s->pins++;
			s->used = ++fs->tick;
			return s;
		}
		if (!free_slot)
			goto wait;
		if (!free_slot->data &&
		    !(free_slot->data = aligned_alloc(TB_BLOCK_ALIGN, TB_BLOCK_SIZE)))
			return NULL; /* out of memory: the read fails */
		free_slot->file = i, free_slot->index = index;
		free_slot->state = LOADING;
		free_slot->pins = 1;
		pthread_mutex_unlock(&fs->lock);
		int fetched;
		ssize_t len = fetch_block(fs, i, index, free_slot->data, &fetched);
		pthread_mutex_lock(&fs->lock);
		free_slot->len = len;
		free_slot->state = len < 0 ? EMPTY : READY; /* a failure is not kept */
		free_slot->used = ++fs->tick;
		pthread_cond_broadcast(&fs->changed);
		if (len < 0) {
			free_slot->pins--;
			return NULL;
		}
		if (fetched && fs->c.cache && !keep(fs, free_slot)) {
			pthread_mutex_unlock(&fs->lock); /* pinned: ours to write */
			tb_block_cache_put(fs->c.cache, fs->c.files[i].blocks, index,
					   free_slot->data);
			pthread_mutex_lock(&fs->lock);
		}
		return free_slot;
	wait:
		pthread_cond_wait(&fs->changed, &fs->lock);
	}
}

static void unpin(tb_lazy_fs_t *fs, slot_t *s)
{
	pthread_mutex_lock(&fs->lock);
	s->pins--;
	pthread_cond_broadcast(&fs->changed);
	pthread_mutex_unlock(&fs->lock);
}

/* Block @p index of file @p i: @p take bytes from @p from into @p out.
 * 0, or -errno. */
static int copy_block(tb_lazy_fs_t *fs, size_t i, size_t index, uint64_t from, uint8_t *out,
		      uint64_t *take)
{
	pthread_mutex_lock(&fs->lock);
	slot_t *s = pin_block(fs, i, index);
	pthread_mutex_unlock(&fs->lock);
	if (!s)
		return -EIO;
	if ((uint64_t)s->len < from + *take)
		*take = (uint64_t)s->len > from ? (uint64_t)s->len - from : 0;
	memcpy(out, s->data + from, *take); /* pinned: not replaced meanwhile */
	unpin(fs, s);
	return 0;
}

/* Whether block @p index of file @p i is in a slot, being fetched, or
 * queued to be. Under fs->lock. */
static int asked(tb_lazy_fs_t *fs, size_t i, size_t index)
{
	if (in_slot(fs, i, index))
		return 1;
	for (size_t q = 0; q < fs->nqueue; q++)
		if (fs->queue[q].file == i && fs->queue[q].index == index)
			return 1;
	return 0;
}

/* A sequential reader of file @p i just read up to block @p last: the
 * blocks after it, not kept yet, are queued to be fetched ahead. Called
 * under fs->lock. */
static void read_ahead(tb_lazy_fs_t *fs, size_t i, size_t first, size_t last)
{
	size_t n = fs->c.files[i].blocks->n;

	fs->reads++;
	/* sequential: reads starting near where the last ended (the threads
	 * answer the kernel's requests in any order, and a reader's reads
	 * straddle blocks) that have moved on into a new block twice; the
	 * kernel's pieces of one block neither count nor break the streak */
	size_t next = fs->next[i];
	if (first + NEAR < next || first > next + NEAR)
		fs->streak[i] = 0;
	else if (last >= next)
		fs->streak[i]++;
	if (last + 1 > next || fs->streak[i] == 0)
		fs->next[i] = last + 1;
	if (!fs->nprefetchers || fs->streak[i] < 2)
		return;
	/* the blocks it has gone past are the first to go from memory, not
	 * those fetched ahead that it has yet to read */
	for (size_t k = 0; k < fs->nslots; k++)
		if (fs->slots[k].state == READY && fs->slots[k].file == i &&
		    fs->slots[k].index < first)
			fs->slots[k].used = 0;
	/* the window's blocks not asked for yet, from its end back to the
	 * first asked for, queued once those not kept make a run, reach the
	 * end of the file, or are all the window holds (nothing else of it
	 * asked for: no more will come by waiting): each GET then fetches
	 * up to RUN blocks, where a block at a time as the reader moves on
	 * cost the store a request each, which took more of its time than
	 * the bytes. Kept blocks are passed over, not stopped at: a cache
	 * warm in places (another task's reads) leaves the gaps to fetch. */
	const tb_blocks_t *bl = fs->c.files[i].blocks;
	size_t end = last + AHEAD < n - 1 ? last + AHEAD : n - 1, from = end + 1, missing = 0;
	while (from - 1 > last && !asked(fs, i, from - 1)) {
		from--;
		missing += !tb_block_cache_has(fs->c.cache, bl, from);
	}
	if (!missing || (missing < RUN && end + 1 < n && from > last + 1))
		return;
	for (size_t k = from; k <= end && fs->nqueue < QUEUE; k++)
		if (!tb_block_cache_has(fs->c.cache, bl, k))
			fs->queue[fs->nqueue++] = (struct ahead){ i, k };
	pthread_cond_broadcast(&fs->work);
}

/* Up to @p n free slots for blocks @p first .. of file @p i, marked
 * LOADING and pinned (the caller's), into @p out; a reserve of free slots
 * is left for the readers (each serving thread may need one). How many.
 * Under fs->lock. */
static size_t take_slots(tb_lazy_fs_t *fs, size_t i, size_t first, size_t n, slot_t **out)
{
	size_t spare = 0, got = 0;

	for (size_t k = 0; k < fs->nslots; k++)
		if (!fs->slots[k].pins && fs->slots[k].state != LOADING)
			spare++;
	while (got < n && spare > fs->nthreads) {
		slot_t *s = NULL;
		find_slot(fs, i, first + got, &s);
		if (!s || (!s->data && !(s->data = aligned_alloc(TB_BLOCK_ALIGN, TB_BLOCK_SIZE))))
			break; /* no memory: fewer, or none */
		s->file = i, s->index = first + got;
		s->state = LOADING;
		s->pins = 1;
		out[got++] = s;
		spare--;
	}
	return got;
}

/* Blocks of file @p i into the @p n LOADING slots @p run (consecutive
 * blocks, pinned by the caller), fetched with one GET straight into their
 * memory; each checked, then READY for its reader and handed to the
 * keeper (or kept here). A block that fails is dropped: its reader
 * fetches it again, and says why. Unpins them all. */
static void fetch_run(tb_lazy_fs_t *fs, size_t i, slot_t **run, size_t n)
{
	const tb_lazy_file_t *f = &fs->c.files[i];
	uint64_t at = (uint64_t)run[0]->index * TB_BLOCK_SIZE;
	struct iovec iov[RUN] = { { 0 } };
	tb_error_t err;
	size_t got = 0;

	for (size_t k = 0; k < n; k++)
		iov[k] = (struct iovec){ run[k]->data, tb_blocks_len(f->blocks, run[k]->index) };
	if (tb_store_get_range_iov(fs->c.store, f->key, at, iov, (int)n, &got, &err) < 0)
		got = 0;
	atomic_fetch_add(&fs->fetched[i], got);
	for (size_t k = 0; k < n; k++) {
		slot_t *s = run[k];
		size_t len = iov[k].iov_len;
		int ok = 0, kept = 0;
		if ((uint64_t)k * TB_BLOCK_SIZE + len <= got) { /* fetched whole */
			tb_fault_point("lazy-fetched");
			ok = tb_blocks_check(f->blocks, s->index, s->data, len, &err) == 0;
		}
		pthread_mutex_lock(&fs->lock);
		s->state = ok ? READY : EMPTY;
		s->len = (ssize_t)len;
		s->used = ++fs->tick;
		kept = ok && keep(fs, s);
		pthread_cond_broadcast(&fs->changed);
		pthread_mutex_unlock(&fs->lock);
		if (ok && !kept) /* the keeper is full: pinned, ours to write */
			tb_block_cache_put(fs->c.cache, f->blocks, s->index, s->data);
		unpin(fs, s);
	}
}

/* The memory of every slot no one holds, given back: the file system
 * has been idle (its blocks are in the cache). Under fs->lock. */
static void free_idle_slots(tb_lazy_fs_t *fs)
{
	for (size_t k = 0; k < fs->nslots; k++) {
		slot_t *s = &fs->slots[k];
		if (!s->pins && s->state != LOADING) {
			free(s->data);
			s->data = NULL;
			s->state = EMPTY;
		}
	}
}

/* A thread fetching queued blocks, oldest first: a run of up to RUN
 * blocks of a file that follow one another at a time, into free slots. */
static void *prefetch(void *arg)
{
	tb_lazy_fs_t *fs = arg;
	uint64_t reads = 0; /* fs->reads when last idle */

	pthread_mutex_lock(&fs->lock);
	while (!fs->stopping) {
		if (!fs->nqueue) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += IDLE_S;
			if (pthread_cond_timedwait(&fs->work, &fs->lock, &until) == ETIMEDOUT &&
			    fs->reads == reads)
				free_idle_slots(fs); /* no read for as long: 70 MiB back */
			reads = fs->reads;
			continue;
		}
		struct ahead a = fs->queue[0];
		const tb_blocks_t *bl = fs->c.files[a.file].blocks;
		size_t n = 0;
		/* the run: queued blocks that follow the first, in no slot and
		 * not kept yet (a kept one ends it: its reader reads the cache) */
		while (n < RUN && n < fs->nqueue && fs->queue[n].file == a.file &&
		       fs->queue[n].index == a.index + n && !in_slot(fs, a.file, a.index + n) &&
		       !tb_block_cache_has(fs->c.cache, bl, a.index + n))
			n++;
		slot_t *run[RUN];
		size_t got = n ? take_slots(fs, a.file, a.index, n, run) : 0;
		if (n && !got) { /* every slot busy: until one is free */
			pthread_cond_wait(&fs->changed, &fs->lock);
			continue;
		}
		size_t done = got ? got : 1; /* taken, or the one that needs none */
		fs->nqueue -= done;
		memmove(fs->queue, fs->queue + done, fs->nqueue * sizeof(fs->queue[0]));
		if (!got)
			continue;
		pthread_mutex_unlock(&fs->lock);
		fetch_run(fs, a.file, run, got);
		pthread_mutex_lock(&fs->lock);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

/* ------------------------------------------------------------ operations */

static void op_init(void *ud, struct fuse_conn_info *conn)
{
	(void)ud;
	/* the kernel may read a block ahead; further ahead is read_ahead()'s */
	conn->max_readahead = TB_BLOCK_SIZE;
	conn->want &= ~(unsigned)FUSE_CAP_SPLICE_READ;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	tb_lazy_fs_t *fs = fuse_req_userdata(req);
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	for (size_t i = 0; parent == ROOT_INO && i < fs->c.nfiles; i++)
		if (!strcmp(fs->c.files[i].name, name)) {
			e.ino = 2 + i;
			e.attr_timeout = e.entry_timeout = TIMEOUT;
			attr_of(fs, e.ino, &e.attr);
			fuse_reply_entry(req, &e);
			return;
		}
	fuse_reply_err(req, ENOENT);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	tb_lazy_fs_t *fs = fuse_req_userdata(req);
	struct stat st;

	(void)fi;
	if (ino != ROOT_INO && !file_of(fs, ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	attr_of(fs, ino, &st);
	fuse_reply_attr(req, &st, TIMEOUT);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	tb_lazy_fs_t *fs = fuse_req_userdata(req);

	if (!file_of(fs, ino))
		fuse_reply_err(req, ino == ROOT_INO ? EISDIR : ENOENT);
	else if ((fi->flags & O_ACCMODE) != O_RDONLY)
		fuse_reply_err(req, EROFS);
	else {
		fi->keep_cache = 1; /* the content never changes: cached pages stay */
		fuse_reply_open(req, fi);
	}
}

/* A read of bytes @p off .. @p end of file @p i, all in its block
 * @p index: answered out of the block's slot, with no copy of ours. */
static void read_one(tb_lazy_fs_t *fs, fuse_req_t req, size_t i, size_t index, uint64_t off,
		     uint64_t end)
{
	uint64_t from = off - (uint64_t)index * TB_BLOCK_SIZE;

	pthread_mutex_lock(&fs->lock);
	slot_t *s = pin_block(fs, i, index);
	read_ahead(fs, i, index, index);
	pthread_mutex_unlock(&fs->lock);
	if (!s) {
		fuse_reply_err(req, EIO);
		return;
	}
	if ((uint64_t)s->len < from + (end - off)) /* never: the length is the list's */
		fuse_reply_err(req, EIO);
	else
		fuse_reply_buf(req, (const char *)s->data + from, end - off);
	unpin(fs, s); /* pinned: not replaced while the kernel copied it */
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	tb_lazy_fs_t *fs = fuse_req_userdata(req);
	const tb_lazy_file_t *f = file_of(fs, ino);
	uint8_t *out;
	size_t have = 0;

	(void)fi;
	if (!f || off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	uint64_t end =
	    (uint64_t)off + size < f->blocks->size ? (uint64_t)off + size : f->blocks->size;
	if ((uint64_t)off >= end) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t first = (size_t)((uint64_t)off / TB_BLOCK_SIZE);
	if ((end - 1) / TB_BLOCK_SIZE == first) { /* the kernel's pieces: one block */
		read_one(fs, req, ino - 2, first, (uint64_t)off, end);
		return;
	}
	if (!(out = malloc(end - (uint64_t)off))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t at = (uint64_t)off; at < end;) {
		size_t index = (size_t)(at / TB_BLOCK_SIZE);
		uint64_t from = at - (uint64_t)index * TB_BLOCK_SIZE;
		uint64_t take = TB_BLOCK_SIZE - from < end - at ? TB_BLOCK_SIZE - from : end - at;
		int rc = copy_block(fs, ino - 2, index, from, out + have, &take);
		if (rc < 0 || take == 0) {
			free(out);
			fuse_reply_err(req, rc < 0 ? -rc : EIO);
			return;
		}
		have += take;
		at += take;
	}
	pthread_mutex_lock(&fs->lock);
	read_ahead(fs, ino - 2, first, (size_t)((end - 1) / TB_BLOCK_SIZE));
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_buf(req, (const char *)out, have);
	free(out);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != ROOT_INO)
		fuse_reply_err(req, ENOTDIR);
	else
		fuse_reply_open(req, fi);
}

/* Entry k of the one directory (tb_fuse_dirent_fn). */
static void dirent_of(void *arg, size_t k, const char **name, struct stat *st)
{
	tb_lazy_fs_t *fs = arg;
	if (k >= 2)
		*name = fs->c.files[k - 2].name;
	attr_of(fs, k < 2 ? ROOT_INO : 2 + (k - 2), st);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	tb_lazy_fs_t *fs = fuse_req_userdata(req);

	(void)fi;
	if (ino != ROOT_INO) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	tb_fuse_reply_dir(req, size, off, fs->c.nfiles + 2, dirent_of, fs);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.open = op_open,
	.read = op_read,
	.opendir = op_opendir,
	.readdir = op_readdir,
};

/* ------------------------------------------------------------ serving */

static int check_names(const tb_lazy_fs_conf_t *c, tb_error_t *err)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		const char *n = c->files[i].name;
		if (!n[0] || strchr(n, '/') || !strcmp(n, ".") || !strcmp(n, "..") ||
		    strlen(n) > 255)
			return tb_error_set(err, TB_EINVAL, "lazy input: a bad file name '%s'", n);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(n, c->files[j].name))
				return tb_error_set(err, TB_EINVAL,
						    "lazy input: two files named '%s'", n);
	}
	return 0;
}

int tb_lazy_fs_start(tb_lazy_fs_t **out, const tb_lazy_fs_conf_t *conf, int *mount_fd,
		     tb_error_t *err)
{
	tb_lazy_fs_t *fs;
	int rc;

	*out = NULL;
	*mount_fd = -1;
	if ((rc = check_names(conf, err)) < 0)
		return rc;
	if (!(fs = calloc(1, sizeof(*fs))) ||
	    !(fs->fetched = calloc(conf->nfiles ? conf->nfiles : 1, sizeof(*fs->fetched)))) {
		free(fs);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	fs->c = *conf;
	pthread_mutex_init(&fs->lock, NULL);
	pthread_cond_init(&fs->changed, NULL);
	pthread_cond_init(&fs->work, NULL);
	pthread_cond_init(&fs->keep_work, NULL);
	if (!(fs->next = calloc(conf->nfiles ? conf->nfiles : 1, sizeof(*fs->next))) ||
	    !(fs->streak = calloc(conf->nfiles ? conf->nfiles : 1, sizeof(*fs->streak)))) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto fail;
	}
	unsigned want = conf->max_threads ? conf->max_threads : 4;
	if (want > MAX_THREADS)
		want = MAX_THREADS;
	/* with a cache, room for the blocks fetched ahead too; each slot's
	 * memory is taken when first used */
	fs->nslots = want + SPARE_SLOTS + (conf->cache ? AHEAD : 0);
	if (!(fs->slots = calloc(fs->nslots, sizeof(*fs->slots)))) {
		fs->nslots = 0;
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto fail;
	}
	fs->nthreads = want;
	tb_fuse_serve_conf_t sc = { .ops = &ops,
				    .userdata = fs,
				    .source = "taskbox-inputs",
				    .rootmode = "40555",
				    .noexec = 1,
				    .threads = want,
				    .readahead_kb = TB_BLOCK_SIZE / 1024 };
	if ((rc = tb_fuse_serve_start(&fs->server, &sc, "lazy inputs", mount_fd, err)) < 0)
		goto fail;
	fs->nthreads = tb_fuse_serve_threads(fs->server);
	/* without a keeper, blocks are written where they were fetched */
	fs->has_keeper = conf->cache && pthread_create(&fs->keeper, NULL, keeper, fs) == 0;
	/* fetching ahead needs somewhere to put what it fetched */
	for (; conf->cache && fs->nprefetchers < PREFETCHERS; fs->nprefetchers++)
		if (pthread_create(&fs->prefetchers[fs->nprefetchers], NULL, prefetch, fs) != 0)
			break;
	*out = fs;
	return 0;
fail:
	tb_lazy_fs_stop(fs);
	return rc;
}

uint64_t tb_lazy_fs_fetched(tb_lazy_fs_t *fs, size_t i)
{
	return i < fs->c.nfiles ? atomic_load(&fs->fetched[i]) : 0;
}

int tb_lazy_fs_error(tb_lazy_fs_t *fs, char *out, size_t cap)
{
	pthread_mutex_lock(&fs->lock);
	snprintf(out, cap, "%s", fs->error);
	int code = fs->error_code;
	pthread_mutex_unlock(&fs->lock);
	return code;
}

void tb_lazy_fs_stop(tb_lazy_fs_t *fs)
{
	if (!fs)
		return;
	tb_fuse_serve_stop(fs->server); /* no request is served past here */
	pthread_mutex_lock(&fs->lock);
	fs->stopping = 1;
	pthread_cond_broadcast(&fs->work);
	pthread_cond_broadcast(&fs->changed); /* one waiting for a free slot */
	pthread_mutex_unlock(&fs->lock);
	for (unsigned i = 0; i < fs->nprefetchers; i++)
		pthread_join(fs->prefetchers[i], NULL);
	if (fs->has_keeper) { /* after all that hand it blocks */
		pthread_mutex_lock(&fs->lock);
		fs->keeper_stopping = 1;
		pthread_cond_signal(&fs->keep_work);
		pthread_mutex_unlock(&fs->lock);
		pthread_join(fs->keeper, NULL);
	}
	pthread_mutex_destroy(&fs->lock);
	pthread_cond_destroy(&fs->changed);
	pthread_cond_destroy(&fs->work);
	pthread_cond_destroy(&fs->keep_work);
	free(fs->next);
	free(fs->streak);
	for (size_t k = 0; k < fs->nslots; k++)
		free(fs->slots[k].data);
	free(fs->slots);
	free(fs->fetched);
	free(fs);
}
