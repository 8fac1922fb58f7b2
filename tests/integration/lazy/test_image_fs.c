/*
 * test_image_fs.c: an image's root read on demand (worker/lazy/
 * image_fs.h), as root with /dev/fuse: three gzip layers (files,
 * directories, links written through a link, a hard link, whiteouts, an
 * opaque directory, a set-user-ID file, ids past the map, a device, a
 * FIFO, a file over many spans) indexed, served, and the mounted tree
 * walked against the tree tb_unpack_layer() makes of the same layers:
 * types, modes, ids, sizes, links, link targets, contents byte for byte,
 * modification times to the nanosecond (pax records them with their
 * fractions; a directory no layer names is at 0, one a later layer
 * changes keeps its own);
 * and layers at the corners of the rules (links in parents, loops,
 * hard links to what is not there, things trading places) made, or
 * refused, by both alike.
 * Then what is fetched: one small file fetches only the spans holding
 * it, a second file system on the same cache nothing; concurrent
 * readers of a span wait for its one fetch; prefetching fills the cache
 * so that reading everything fetches nothing more; the order readers
 * needed spans in, noted, and prefetching in such an order fetching
 * exactly its spans, in it, past the lies in one; stopping the root ends
 * a prefetcher's fetch that hangs. And hostile: a span whose
 * bytes are altered fails only its file's reads, with the layer and
 * span kept; an index whose entries lie about where data is.
 * The same layers as eStargz (tests/tools/estargz-convert), read from
 * their TOCs, all of them or mixed with the gzip ones: the tree they
 * serve is the one their eager unpack makes (times aside: an eStargz
 * TOC's are rounded to the second); a small file fetches its one chunk, a second file
 * system on the same span cache nothing; a chunk whose bytes were
 * altered, or whose TOC lies about its digest, fails its file's reads
 * only, the reason kept naming the chunk. The same as zstd:chunked (with
 * libzstd), times and all, and one image of the three kinds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "image_fs.h"
#include "layer_estargz.h"
#include "layer_zstd_chunked.h"
#include "tb/encoding.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define NLAYERS 3
#define BIG (1536u << 10)
#define MAX_FETCHES 4096
#define ESTARGZ_CHUNK 65536
#ifndef TB_PYTHON
#define TB_PYTHON "python3"
#endif

/* One entry of a layer: f file, d dir, l symlink, h hard link, c char
 * device, p FIFO. */
typedef struct spec {
	const char *path;
	char type;
	unsigned mode;
	int64_t uid;
	const char *text; /* a file's content; NULL: size bytes of fill() */
	size_t size;
	const char *link;
} spec_t;

/* past ustar's 100 bytes of a last component: pax records it */
static const char LONG_NAME[] = "long/a-name-long-enough-that-ustar-cannot-hold-it-and-pax-"
				"records-it-before-its-header-0123456789-0123456789.txt";

static const spec_t L0[] = {
	{ "etc/", 'd', 0755, 0, NULL, 0, NULL },
	{ "etc/passwd", 'f', 0644, 0, "root:x:0:0::/root:/bin/sh\n", 0, NULL },
	{ "usr/", 'd', 0755, 0, NULL, 0, NULL },
	{ "usr/bin/", 'd', 0755, 0, NULL, 0, NULL },
	{ "usr/bin/tool", 'f', 04755, 0, "#!/bin/sh\necho tool\n", 0, NULL },
	{ "bin", 'l', 0777, 0, NULL, 0, "usr/bin" },
	{ "big/data", 'f', 0640, 1000, NULL, BIG, NULL },
	{ "small/a", 'f', 0600, 70000, "a small file\n", 0, NULL },
	{ "dev/null", 'c', 0666, 0, NULL, 0, NULL },
	{ "opq/lower1", 'f', 0644, 0, "lower 1\n", 0, NULL },
	{ "opq/sub/", 'd', 0755, 0, NULL, 0, NULL },
	{ "opq/sub/lower2", 'f', 0644, 0, "lower 2\n", 0, NULL },
	{ "gone/x", 'f', 0644, 0, "whited out\n", 0, NULL },
	{ "keep/y", 'f', 0644, 0, "whole dir whited out\n", 0, NULL },
	{ "run/fifo", 'p', 0666, 1000, NULL, 0, NULL },
	{ "linkme", 'f', 0644, 1000, "shared by a hard link\n", 0, NULL },
	{ LONG_NAME, 'f', 0644, 0, "after a pax header\n", 0, NULL },
	{ NULL, 0, 0, 0, NULL, 0, NULL },
};
static const spec_t L1[] = {
	{ "hard", 'h', 0, 0, NULL, 0, "linkme" },
	{ "gone/.wh.x", 'f', 0644, 0, "", 0, NULL },
	{ "opq/.wh..wh..opq", 'f', 0644, 0, "", 0, NULL },
	{ "opq/upper", 'f', 0644, 0, "upper\n", 0, NULL },
	{ "bin/via-link", 'f', 0755, 0, "written through bin -> usr/bin\n", 0, NULL },
	{ "etc/passwd", 'f', 0600, 0, "root:x:0:0::/root:/bin/bash\n", 0, NULL },
	{ "etc/", 'd', 0750, 5, NULL, 0, NULL },
	{ NULL, 0, 0, 0, NULL, 0, NULL },
};
static const spec_t L2[] = {
	{ ".wh.keep", 'f', 0644, 0, "", 0, NULL },
	{ "small/b", 'f', 02755, 1000, "b\n", 0, NULL },
	{ "abs", 'l', 0777, 0, NULL, 0, "/etc/passwd" },
	{ "big2", 'f', 0644, 0, NULL, 200000, NULL },
	{ NULL, 0, 0, 0, NULL, 0, NULL },
};

/* A layer's blob in memory, fetched by range; what was fetched is noted. */
typedef struct blob {
	uint8_t *p;
	size_t n, at;
	char digest[72];
	tb_layer_index_t *ix;
	pthread_mutex_t lock;
	uint64_t offs[MAX_FETCHES]; /* each fetch's offset */
	size_t nfetches;
	uint64_t alter_at;  /* a fetch from here gets a byte flipped; 0: none */
	int slow;           /* ms each fetch takes */
	int layer;          /* its place in F.b (every fetch of F.b's: F.log) */
	int hang;           /* each fetch waits (10 s at most) for F.cancel */
	atomic_int hanging; /* ... and one is waiting */
} blob_t;

/* A fetch of F.b's, in the order fetches happened over every layer. */
typedef struct fetch_seen {
	int layer;
	uint64_t off;
	uint64_t from_us, to_us; /* when it began and ended (CLOCK_MONOTONIC) */
} fetch_seen_t;

static struct {
	char tmp[64];
	blob_t b[NLAYERS];
	blob_t e[NLAYERS];    /* the same layers as eStargz, once made */
	blob_t z[NLAYERS];    /* and as zstd:chunked */
	blob_t *use[NLAYERS]; /* start(): each layer's (NULL: b's) */
	int times;            /* compare(): times too */
	char unpacked[128];
	tb_unpack_stats_t st;
	int n;
	unsigned prefetch;           /* start(): prefetch_threads */
	uint32_t id_base;            /* start(): id_base */
	const tb_read_span_t *order; /* start(): order, norder */
	size_t norder;
	atomic_int *cancel; /* start(): cancel */
	pthread_mutex_t log_lock;
	fetch_seen_t log[MAX_FETCHES];
	size_t nlog;
} F = { .log_lock = PTHREAD_MUTEX_INITIALIZER };

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	static const char *words[] = { "image ", "root ", "span ", "of ", "fuse\n", "layer " };
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n;) {
		x = x * 1103515245u + 12345u;
		if (x & 0x10000) { /* half noise: a few spans' worth compressed */
			p[i++] = (uint8_t)(x >> 20);
			continue;
		}
		for (const char *w = words[(x >> 17) % 6]; *w && i < n; w++)
			p[i++] = (uint8_t)*w;
	}
}

/* An entry's time, from its path and mode (a path named again in a later
 * layer, with another mode, has another time): seconds and a fraction. */
static void time_of(const char *path, unsigned mode, int64_t *sec, long *ns)
{
	uint32_t h = 2166136261u ^ mode;
	for (; *path; path++)
		h = (h ^ (uint8_t)*path) * 16777619u;
	*sec = 1600000000 + (int64_t)(h % 100000000);
	*ns = (long)(h % 999999999) + 1;
}

static void add_entry(struct archive *a, const spec_t *s, uint32_t seed)
{
	struct archive_entry *e = archive_entry_new();
	size_t len = s->text ? strlen(s->text) : s->size;

	archive_entry_set_pathname(e, s->path);
	archive_entry_set_uid(e, s->uid);
	archive_entry_set_gid(e, s->uid);
	archive_entry_set_perm(e, s->mode);
	int64_t sec;
	long ns;
	time_of(s->path, s->mode, &sec, &ns);
	archive_entry_set_mtime(e, (time_t)sec, ns);
	switch (s->type) {
	case 'd':
		archive_entry_set_filetype(e, AE_IFDIR);
		break;
	case 'l':
		archive_entry_set_filetype(e, AE_IFLNK);
		archive_entry_set_symlink(e, s->link);
		break;
	case 'h':
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_hardlink(e, s->link);
		break;
	case 'c':
		archive_entry_set_filetype(e, AE_IFCHR);
		archive_entry_set_rdev(e, makedev(1, 3));
		break;
	case 'p':
		archive_entry_set_filetype(e, AE_IFIFO);
		break;
	default:
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_size(e, (la_int64_t)len);
	}
	assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
	if (s->type == 'f' && len) {
		uint8_t *d = malloc(len);
		assert_non_null(d);
		if (s->text)
			memcpy(d, s->text, len);
		else
			fill(d, len, seed);
		assert_int_equal(archive_write_data(a, d, len), (la_ssize_t)len);
		free(d);
	}
	archive_entry_free(e);
}

/* A gzip layer of @p s into @p b, its digest and its index (decoded from
 * its encoding, pinned, as a consumer has it). */
static void make_layer(blob_t *b, const spec_t *s)
{
	size_t cap = 8u << 20;
	struct archive *a = archive_write_new();
	unsigned char sum[32];

	b->p = malloc(cap);
	assert_non_null(b->p);
	archive_write_set_format_pax(a); /* every time in records, with its fraction */
	archive_write_add_filter_gzip(a);
	assert_int_equal(archive_write_open_memory(a, b->p, cap, &b->n), ARCHIVE_OK);
	for (uint32_t i = 0; s[i].path; i++)
		add_entry(a, &s[i], i + 1);
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	EVP_Digest(b->p, b->n, sum, NULL, EVP_sha256(), NULL);
	memcpy(b->digest, "sha256:", 7);
	tb_hex(b->digest + 7, sum, sizeof(sum));
	pthread_mutex_init(&b->lock, NULL);
}

static int64_t blob_read(void *arg, void *buf, size_t len, tb_error_t *err)
{
	blob_t *b = arg;
	(void)err;
	size_t n = b->n - b->at < len ? b->n - b->at : len;
	memcpy(buf, b->p + b->at, n);
	b->at += n;
	return (int64_t)n;
}

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int64_t blob_fetch(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	blob_t *b = arg;
	uint64_t from = now_us();
	if (off > b->n || len > b->n - off)
		return tb_error_set(err, TB_EINVAL, "a range past the blob");
	if (b->slow)
		usleep((useconds_t)b->slow * 1000);
	if (b->hang) { /* a registry that sends nothing, until the fs is stopped */
		atomic_store(&b->hanging, 1);
		for (int i = 0; i < 1000 && !(F.cancel && atomic_load(F.cancel)); i++)
			usleep(10000);
		if (F.cancel && atomic_load(F.cancel))
			return tb_error_set(err, TB_ERETRY, "its reader stops");
	}
	memcpy(buf, b->p + off, len);
	pthread_mutex_lock(&b->lock);
	if (b->nfetches < MAX_FETCHES)
		b->offs[b->nfetches++] = off;
	if (b->alter_at && off == b->alter_at)
		((uint8_t *)buf)[len / 2] ^= 0x40;
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_lock(&F.log_lock);
	if (F.nlog < MAX_FETCHES)
		F.log[F.nlog++] = (fetch_seen_t){ b->layer, off, from, now_us() };
	pthread_mutex_unlock(&F.log_lock);
	return (int64_t)len;
}

static tb_layer_index_t *index_of(blob_t *b)
{
	tb_layer_index_t *ix, *back;
	tb_error_t err;
	uint8_t *enc;
	size_t len;
	char digest[72];

	b->at = 0;
	if (tb_layer_index_build(b->digest, TB_LAYER_INDEX_SPAN_MIN, blob_read, b, &ix, &err))
		fail_msg("index: %s", err.msg);
	assert_int_equal(tb_layer_index_encode(ix, &enc, &len, digest, &err), 0);
	if (tb_layer_index_decode(enc, len, b->digest, digest, &back, &err))
		fail_msg("decode: %s", err.msg);
	free(enc);
	tb_layer_index_free(ix);
	return back;
}

/* Layers @p b unpacked into @p dir (made), as the eager path does. */
static void unpack_layers(const char *dir, blob_t *const *b, tb_unpack_stats_t *st)
{
	tb_unpack_limits_t lim = { 1u << 30, 100000 };
	tb_error_t err;

	assert_int_equal(mkdir(dir, 0755), 0);
	int root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (int l = 0; l < NLAYERS; l++) {
		int fd = memfd_create("layer", MFD_CLOEXEC);
		assert_int_equal(write(fd, b[l]->p, b[l]->n), (ssize_t)b[l]->n);
		lseek(fd, 0, SEEK_SET);
		if (tb_unpack_layer(root, fd, &lim, st, &err) != 0)
			fail_msg("unpack: %s", err.msg);
		close(fd);
	}
	close(root);
}

static void unpack_all(void)
{
	blob_t *b[NLAYERS] = { &F.b[0], &F.b[1], &F.b[2] };
	snprintf(F.unpacked, sizeof(F.unpacked), "%s/unpacked", F.tmp);
	unpack_layers(F.unpacked, b, &F.st);
}

static int setup(void **state)
{
	const spec_t *specs[NLAYERS] = { L0, L1, L2 };

	(void)state;
	if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) < 0) {
		printf("SKIP: needs root and /dev/fuse\n");
		exit(77);
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	umask(022);
	F.times = 1;
	snprintf(F.tmp, sizeof(F.tmp), "/tmp/tb-imgfs-XXXXXX");
	if (!mkdtemp(F.tmp))
		return -1;
	for (int l = 0; l < NLAYERS; l++) {
		make_layer(&F.b[l], specs[l]);
		F.b[l].ix = index_of(&F.b[l]);
		F.b[l].layer = l;
	}
	unpack_all();
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	for (int l = 0; l < NLAYERS; l++) {
		tb_layer_index_free(F.b[l].ix);
		free(F.b[l].p);
		tb_layer_index_free(F.e[l].ix);
		free(F.e[l].p);
		tb_layer_index_free(F.z[l].ix);
		free(F.z[l].p);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", F.tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ mounting */

typedef struct mounted {
	tb_image_fs_t *fs;
	char at[128];
} mounted_t;

static void reset_fetches(void)
{
	for (int l = 0; l < NLAYERS; l++) {
		F.b[l].nfetches = F.e[l].nfetches = F.z[l].nfetches = 0;
		F.b[l].alter_at = F.e[l].alter_at = F.z[l].alter_at = 0;
		F.b[l].slow = F.e[l].slow = F.z[l].slow = 0;
	}
	pthread_mutex_lock(&F.log_lock);
	F.nlog = 0;
	pthread_mutex_unlock(&F.log_lock);
}

static int start(mounted_t *m, tb_span_cache_t *cache, tb_layer_index_t *const *ix, tb_error_t *err)
{
	tb_image_fs_layer_t layers[NLAYERS];
	int mfd;

	for (int l = 0; l < NLAYERS; l++) {
		blob_t *b = F.use[l] ? F.use[l] : &F.b[l];
		layers[l] = (tb_image_fs_layer_t){ ix ? ix[l] : b->ix, blob_fetch, b, NULL };
	}
	tb_image_fs_conf_t conf = { .layers = layers,
				    .nlayers = NLAYERS,
				    .cache = cache,
				    .limits = { 1u << 30, 100000 },
				    .prefetch_threads = F.prefetch,
				    .id_base = F.id_base,
				    .order = F.order,
				    .norder = F.norder,
				    .cancel = F.cancel };
	int rc = tb_image_fs_start(&m->fs, &conf, &mfd, err);
	if (rc < 0)
		return rc;
	snprintf(m->at, sizeof(m->at), "%s/m%d", F.tmp, F.n++);
	assert_int_equal(mkdir(m->at, 0755), 0);
	if (move_mount(mfd, "", AT_FDCWD, m->at, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		fail_msg("move_mount: %s", strerror(errno));
	close(mfd);
	return 0;
}

static void mount_image(mounted_t *m, tb_span_cache_t *cache)
{
	tb_error_t err;
	if (start(m, cache, NULL, &err) < 0)
		fail_msg("start: %s", err.msg);
}

static void unmount_image(mounted_t *m)
{
	assert_int_equal(umount2(m->at, MNT_DETACH), 0);
	tb_image_fs_stop(m->fs);
}

/* The whole file @p path (malloc'd, its length in @p len), or NULL with
 * errno set. */
static uint8_t *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return NULL;
	uint8_t *p = malloc((size_t)st.st_size + 1);
	size_t done = 0;
	ssize_t n = 1;
	while (p && done < (size_t)st.st_size && (n = read(fd, p + done, 65536)) > 0)
		done += (size_t)n;
	int e = errno;
	close(fd);
	if (n < 0) {
		free(p);
		errno = e;
		return NULL;
	}
	*len = done;
	return p;
}

/* ------------------------------------------------------------ comparing */

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory @p path, sorted, NULL-ended. */
static char **names_in(const char *path, size_t *n)
{
	DIR *d = opendir(path);
	struct dirent *de;
	char **v = calloc(256, sizeof(*v));
	*n = 0;
	assert_non_null(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			assert_true(*n < 255);
			v[(*n)++] = strdup(de->d_name);
		}
	closedir(d);
	qsort(v, *n, sizeof(*v), by_name);
	return v;
}

static void compare_node(const char *a, const char *b, const char *rel, int root);

static void compare_dirs(const char *a, const char *b, const char *rel)
{
	size_t na, nb;
	char **va = names_in(a, &na), **vb = names_in(b, &nb);

	if (na != nb)
		fail_msg("%s: %zu entries unpacked, %zu served", rel, na, nb);
	for (size_t i = 0; i < na; i++) {
		char pa[1024], pb[1024], r[1024];
		if (strcmp(va[i], vb[i]))
			fail_msg("%s: '%s' unpacked, '%s' served", rel, va[i], vb[i]);
		snprintf(pa, sizeof(pa), "%s/%s", a, va[i]);
		snprintf(pb, sizeof(pb), "%s/%s", b, vb[i]);
		snprintf(r, sizeof(r), "%s/%s", rel, va[i]);
		compare_node(pa, pb, r, 0);
		free(va[i]);
		free(vb[i]);
	}
	free(va);
	free(vb);
}

/* Trees @p a (unpacked) and @p b (served) alike from @p rel down; the
 * @p root's own time is the tree's (the unpacked one's, its directory's). */
static void compare_node(const char *a, const char *b, const char *rel, int root)
{
	struct stat sa, sb;

	assert_int_equal(lstat(a, &sa), 0);
	if (lstat(b, &sb) != 0)
		fail_msg("%s: served: %s", rel, strerror(errno));
	if (sa.st_mode != sb.st_mode || sa.st_uid != sb.st_uid || sa.st_gid != sb.st_gid)
		fail_msg("%s: mode %o %u:%u unpacked, %o %u:%u served", rel, sa.st_mode, sa.st_uid,
			 sa.st_gid, sb.st_mode, sb.st_uid, sb.st_gid);
	if (!root && F.times &&
	    (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec || sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec))
		fail_msg("%s: modified at %lld.%09ld unpacked, %lld.%09ld served", rel,
			 (long long)sa.st_mtim.tv_sec, sa.st_mtim.tv_nsec,
			 (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec);
	if (S_ISDIR(sa.st_mode)) {
		compare_dirs(a, b, rel);
		return;
	}
	assert_int_equal(sa.st_nlink, sb.st_nlink);
	assert_int_equal(sa.st_size, sb.st_size);
	if (S_ISLNK(sa.st_mode)) {
		char la[4096] = { 0 }, lb[4096] = { 0 };
		assert_true(readlink(a, la, sizeof(la)) > 0);
		assert_true(readlink(b, lb, sizeof(lb)) > 0);
		assert_string_equal(la, lb);
	} else if (S_ISREG(sa.st_mode)) {
		size_t la, lb;
		uint8_t *da = slurp(a, &la), *db = slurp(b, &lb);
		if (!db)
			fail_msg("%s: served: %s", rel, strerror(errno));
		assert_int_equal(la, lb);
		if (memcmp(da, db, la))
			fail_msg("%s: contents differ", rel);
		free(da);
		free(db);
	}
}

static void compare(const char *a, const char *b, const char *rel)
{
	compare_node(a, b, rel, 1);
}

/* ------------------------------------------------------------ tests */

static void test_image_fs__the_served_tree_is_the_unpacked_tree(void **state)
{
	mounted_t m;

	(void)state;
	reset_fetches();
	mount_image(&m, NULL);
	compare(F.unpacked, m.at, "");
	/* what the rules changed, counted the same */
	const tb_unpack_stats_t *st = tb_image_fs_stats(m.fs);
	assert_int_equal(st->altered.devices, F.st.altered.devices);
	assert_int_equal(st->altered.setid, F.st.altered.setid);
	assert_int_equal(st->altered.ids, F.st.altered.ids);
	assert_int_equal(st->entries, F.st.entries);
	assert_int_equal(st->bytes, F.st.bytes);
	assert_int_equal(F.st.altered.devices, 1);
	assert_int_equal(F.st.altered.setid, 2);
	/* a few of the rules, spelled out */
	char p[256];
	struct stat s;
	snprintf(p, sizeof(p), "%s/usr/bin/via-link", m.at);
	assert_int_equal(stat(p, &s), 0);
	snprintf(p, sizeof(p), "%s/hard", m.at);
	assert_int_equal(stat(p, &s), 0);
	assert_int_equal(s.st_nlink, 2);
	snprintf(p, sizeof(p), "%s/opq/sub", m.at);
	assert_int_equal(stat(p, &s), -1);
	snprintf(p, sizeof(p), "%s/keep", m.at);
	assert_int_equal(stat(p, &s), -1);
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	assert_int_equal(stat(p, &s), 0);
	assert_int_equal(s.st_uid, 65534);
	snprintf(p, sizeof(p), "%s/dev/null", m.at);
	assert_int_equal(lstat(p, &s), -1);
	/* times: an entry's, to the nanosecond; a directory's from the last
	 * layer naming it; 0 for one no layer names */
	int64_t sec;
	long ns;
	time_of("etc/passwd", 0600, &sec, &ns); /* L1's */
	snprintf(p, sizeof(p), "%s/etc/passwd", m.at);
	assert_int_equal(stat(p, &s), 0);
	assert_int_equal(s.st_mtim.tv_sec, sec);
	assert_int_equal(s.st_mtim.tv_nsec, ns);
	time_of("etc/", 0750, &sec, &ns); /* L1's, named after etc/passwd */
	snprintf(p, sizeof(p), "%s/etc", m.at);
	assert_int_equal(stat(p, &s), 0);
	assert_int_equal(s.st_mtim.tv_sec, sec);
	time_of("bin", 0777, &sec, &ns);
	snprintf(p, sizeof(p), "%s/bin", m.at);
	assert_int_equal(lstat(p, &s), 0);
	assert_int_equal(s.st_mtim.tv_nsec, ns);
	snprintf(p, sizeof(p), "%s/big", m.at);
	assert_int_equal(stat(p, &s), 0);
	assert_int_equal(s.st_mtim.tv_sec, 0);
	char msg[256];
	assert_int_equal(tb_image_fs_error(m.fs, msg, sizeof(msg)), 0);
	unmount_image(&m);
	/* a sandbox's range of host ids, for a mount that is not idmapped */
	F.id_base = 200000;
	mount_image(&m, NULL);
	F.id_base = 0;
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	assert_int_equal(stat(p, &s), 0);
	assert_int_equal(s.st_uid, 200000 + 65534);
	snprintf(p, sizeof(p), "%s/big/data", m.at);
	assert_int_equal(stat(p, &s), 0);
	assert_int_equal(s.st_uid, 201000);
	assert_int_equal(s.st_gid, 201000);
	assert_int_equal(stat(m.at, &s), 0);
	assert_int_equal(s.st_uid, 200000);
	unmount_image(&m);
}

/* The spans of layer @p l that hold tar stream bytes [from, to). */
static void spans_of(int l, uint64_t from, uint64_t to, size_t *first, size_t *last)
{
	const tb_layer_index_t *ix = F.b[l].ix;
	*first = *last = 0;
	for (size_t i = 0; i < ix->npoints; i++) {
		if (ix->points[i].out <= from)
			*first = i;
		if (ix->points[i].out < to)
			*last = i;
	}
}

static const tb_layer_entry_t *entry_named(int l, const char *path)
{
	for (size_t i = 0; i < F.b[l].ix->nentries; i++)
		if (!strcmp(F.b[l].ix->entries[i].path, path))
			return &F.b[l].ix->entries[i];
	fail_msg("no entry %s", path);
	return NULL;
}

static uint64_t total_fetches(void)
{
	uint64_t n = 0;
	for (int l = 0; l < NLAYERS; l++)
		n += F.b[l].nfetches;
	return n;
}

static void test_image_fs__one_file_fetches_its_spans_and_a_second_fs_nothing(void **state)
{
	mounted_t m, m2;
	tb_span_cache_t *cache;
	tb_error_t err;
	char dir[128], p[256];
	size_t len, first, last;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/spans", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	mount_image(&m, cache);
	assert_int_equal(total_fetches(), 0); /* the tree is the index's */
	/* a small file inside big files' spans: its own, and its header's */
	const tb_layer_entry_t *e = entry_named(0, "small/a");
	spans_of(0, e->offset - 512, e->offset + e->size, &first, &last);
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	assert_memory_equal(d, "a small file\n", len);
	free(d);
	assert_true(F.b[0].nfetches >= 1);
	for (size_t k = 0; k < F.b[0].nfetches; k++) {
		uint64_t from, to;
		size_t i = 0;
		while (i + 1 < F.b[0].ix->npoints) {
			tb_layer_index_span(F.b[0].ix, i, &from, &to);
			if (from == F.b[0].offs[k])
				break;
			i++;
		}
		/* the span after the last only when they share a byte */
		if (i < first || i > last + 1)
			fail_msg("span %zu fetched for a file in spans %zu..%zu", i, first, last);
	}
	assert_int_equal(F.b[1].nfetches + F.b[2].nfetches, 0);
	assert_true(F.b[0].nfetches < F.b[0].ix->npoints / 2);
	assert_int_equal(tb_image_fs_fetched(m.fs, 0),
			 tb_span_cache_bytes(cache)); /* each fetched span kept */
	unmount_image(&m);

	uint64_t before = total_fetches();
	mount_image(&m2, cache);
	snprintf(p, sizeof(p), "%s/small/a", m2.at);
	d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	assert_int_equal(total_fetches(), before);
	assert_int_equal(tb_image_fs_fetched(m2.fs, 0), 0);
	unmount_image(&m2);
	tb_span_cache_close(cache);
}

typedef struct reader_arg {
	const char *path;
	int ok;
} reader_arg_t;

static void *reader(void *arg)
{
	reader_arg_t *r = arg;
	size_t len;
	uint8_t *d = slurp(r->path, &len);
	r->ok =
	    d && len == strlen("after a pax header\n") && !memcmp(d, "after a pax header\n", len);
	free(d);
	return NULL;
}

static void test_image_fs__readers_of_one_span_wait_for_its_one_fetch(void **state)
{
	mounted_t m;
	pthread_t t[8];
	reader_arg_t r[8];
	char p[512];

	(void)state;
	reset_fetches();
	mount_image(&m, NULL);
	F.b[0].slow = 200; /* every reader arrives while the span is fetched */
	snprintf(p, sizeof(p), "%s/%s", m.at, LONG_NAME);
	for (int i = 0; i < 8; i++) {
		r[i] = (reader_arg_t){ p, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, reader, &r[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		assert_true(r[i].ok);
	}
	/* its span, and the next if they share a byte: once each */
	for (size_t i = 0; i < F.b[0].nfetches; i++)
		for (size_t j = i + 1; j < F.b[0].nfetches; j++)
			assert_true(F.b[0].offs[i] != F.b[0].offs[j]);
	assert_true(F.b[0].nfetches >= 1 && F.b[0].nfetches <= 3);
	unmount_image(&m);
}

static void test_image_fs__an_altered_span_fails_its_file_only(void **state)
{
	mounted_t m;
	char p[256], msg[600], want[64];
	size_t len, first, last;
	uint64_t from, to;

	(void)state;
	reset_fetches();
	const tb_layer_entry_t *e = entry_named(0, "big/data");
	spans_of(0, e->offset + e->size / 2, e->offset + e->size / 2 + 1, &first, &last);
	tb_layer_index_span(F.b[0].ix, first, &from, &to);
	F.b[0].alter_at = from;
	mount_image(&m, NULL);
	snprintf(p, sizeof(p), "%s/big/data", m.at);
	errno = 0;
	assert_null(slurp(p, &len));
	assert_int_equal(errno, EIO);
	/* its first bytes, in spans before the altered one, still read */
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	uint8_t head[4096];
	assert_int_equal(pread(fd, head, sizeof(head), 0), (ssize_t)sizeof(head));
	close(fd);
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	snprintf(p, sizeof(p), "%s/big2", m.at);
	d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	assert_int_equal(tb_image_fs_error(m.fs, msg, sizeof(msg)), TB_EPOISON);
	snprintf(want, sizeof(want), "span %zu ", first);
	if (!strstr(msg, want) || !strstr(msg, F.b[0].digest))
		fail_msg("the kept error: %s", msg);
	unmount_image(&m);
}

static void test_image_fs__an_index_that_lies_about_offsets(void **state)
{
	tb_layer_index_t *ix[NLAYERS] = { F.b[0].ix, F.b[1].ix, F.b[2].ix };
	mounted_t m;
	tb_error_t err;
	char p[512], msg[600];
	size_t len;

	(void)state;
	reset_fetches();
	/* data said to run over the next entry's header: refused at start */
	tb_layer_entry_t *e = (tb_layer_entry_t *)entry_named(0, "etc/passwd");
	uint64_t was = e->offset;
	e->offset = entry_named(0, "usr/")->offset - 512; /* at usr/'s header */
	assert_int_equal(start(&m, NULL, ix, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "etc/passwd"));
	e->offset = was;
	/* moved back into the pax records before its header: caught on read */
	e = (tb_layer_entry_t *)entry_named(0, LONG_NAME);
	was = e->offset;
	e->offset -= 512;
	if (start(&m, NULL, ix, &err) < 0)
		fail_msg("start: %s", err.msg);
	snprintf(p, sizeof(p), "%s/%s", m.at, LONG_NAME);
	errno = 0;
	assert_null(slurp(p, &len));
	assert_int_equal(errno, EIO);
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	assert_int_equal(tb_image_fs_error(m.fs, msg, sizeof(msg)), TB_EPOISON);
	assert_non_null(strstr(msg, "no tar header"));
	unmount_image(&m);
	e->offset = was;
}

static void test_image_fs__a_tree_past_its_memory_cap_is_refused(void **state)
{
	tb_image_fs_layer_t layers[NLAYERS];
	tb_image_fs_t *fs;
	tb_error_t err;
	int mfd;

	(void)state;
	for (int l = 0; l < NLAYERS; l++)
		layers[l] = (tb_image_fs_layer_t){ F.b[l].ix, blob_fetch, &F.b[l], NULL };
	tb_image_fs_conf_t conf = { .layers = layers,
				    .nlayers = NLAYERS,
				    .limits = { 1u << 30, 100000 },
				    .max_tree_memory = 2048 };
	assert_int_equal(tb_image_fs_start(&fs, &conf, &mfd, &err), TB_ETOOBIG);
	assert_non_null(strstr(err.msg, "memory"));
	conf.max_tree_memory = 0;
	conf.max_memory = 64 << 10; /* not even one span per slot */
	assert_int_equal(tb_image_fs_start(&fs, &conf, &mfd, &err), TB_ETOOBIG);
	assert_non_null(strstr(err.msg, "span"));
	conf.max_memory = 0;
	conf.limits.max_entries = 5; /* the eager unpack's caps, the same */
	assert_int_equal(tb_image_fs_start(&fs, &conf, &mfd, &err), TB_ETOOBIG);
}

static void test_image_fs__prefetch_fills_the_cache_and_reads_fetch_nothing_more(void **state)
{
	tb_span_cache_t *cache;
	tb_error_t err;
	mounted_t m;
	char dir[128];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/spans-ahead", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	F.prefetch = 2;
	mount_image(&m, cache);
	F.prefetch = 0;
	for (int i = 0; i < 2000 && !tb_image_fs_prefetched(m.fs); i++)
		usleep(10000);
	assert_true(tb_image_fs_prefetched(m.fs));
	for (int l = 0; l < NLAYERS; l++) {
		for (size_t i = 0; i < F.b[l].ix->npoints; i++)
			assert_true(tb_span_cache_has(cache, F.b[l].ix, i));
		assert_int_equal(F.b[l].nfetches, F.b[l].ix->npoints); /* once each */
		uint64_t from, to; /* every span: all but the gzip header */
		tb_layer_index_span(F.b[l].ix, 0, &from, &to);
		assert_int_equal(tb_image_fs_fetched(m.fs, (size_t)l), F.b[l].n - from);
	}
	uint64_t before = total_fetches();
	compare(F.unpacked, m.at, ""); /* every file read: from the cache */
	assert_int_equal(total_fetches(), before);
	unmount_image(&m);
	tb_span_cache_close(cache);
}

/* A reader going through the first half of big/data, span after span
 * (the kernel's read-ahead off: it reads only what it asks for), has the
 * spans after it fetched into the cache, each span fetched once all
 * told, while a file read alone reads nothing ahead (above: one file
 * fetches its spans, and the span after only when they share a byte). */
static void test_image_fs__a_reader_in_layer_order_has_spans_read_ahead(void **state)
{
	tb_span_cache_t *cache;
	tb_error_t err;
	mounted_t m;
	char dir[128], p[256], buf[65536];
	size_t first, last, done = 0;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/ahead", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	mount_image(&m, cache);
	const tb_layer_entry_t *e = entry_named(0, "big/data");
	const tb_layer_index_t *ix = F.b[0].ix;
	spans_of(0, e->offset, e->offset + e->size / 2, &first, &last);
	if (last < first + 4 || last + 2 >= ix->npoints)
		fail_msg("big/data's first half in spans %zu..%zu of %zu", first, last,
			 ix->npoints);
	snprintf(p, sizeof(p), "%s/big/data", m.at);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
	while (done < e->size / 2) {
		size_t want = e->size / 2 - done < sizeof(buf) ? e->size / 2 - done : sizeof(buf);
		ssize_t n = read(fd, buf, want);
		assert_true(n > 0);
		done += (size_t)n;
	}
	close(fd);
	/* two spans past the last it read, which no reader asked for */
	int ahead = 0;
	for (int t = 0; t < 200 && !(ahead = tb_span_cache_has(cache, ix, last + 2)); t++)
		usleep(10000);
	assert_true(ahead);
	/* the read order has what the reader read, in order, though the
	 * read-ahead inflated most of it before the reader came; and not
	 * what was only read ahead */
	tb_read_span_t *order;
	size_t norder, next = first;
	assert_int_equal(tb_image_fs_read_order(m.fs, &order, &norder), 0);
	for (size_t k = 0; k < norder; k++) {
		if (order[k].layer != 0 || order[k].span < first)
			continue;
		assert_int_equal(order[k].span, next);
		next++;
	}
	assert_int_equal(next, last + 1);
	free(order);
	unmount_image(&m); /* the fetches under way end */
	for (size_t i = 0; i < F.b[0].nfetches; i++)
		for (size_t j = i + 1; j < F.b[0].nfetches; j++)
			assert_true(F.b[0].offs[i] != F.b[0].offs[j]);
	assert_true(F.b[0].nfetches <= last - first + 1 + 2);
	tb_span_cache_close(cache);
}

static void test_image_fs__memory_goes_back_when_reads_stop(void **state)
{
	mounted_t m;
	char p[256];
	size_t len;

	(void)state;
	reset_fetches();
	mount_image(&m, NULL);
	assert_int_equal(tb_image_fs_memory(m.fs), 0); /* taken when first used */
	snprintf(p, sizeof(p), "%s/big/data", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	assert_true(tb_image_fs_memory(m.fs) > 0);
	for (int i = 0; i < 100 && tb_image_fs_memory(m.fs); i++)
		usleep(100000);
	assert_int_equal(tb_image_fs_memory(m.fs), 0);
	snprintf(p, sizeof(p), "%s/small/a", m.at); /* and taken again */
	d = slurp(p, &len);
	assert_non_null(d);
	assert_memory_equal(d, "a small file\n", len);
	free(d);
	unmount_image(&m);
}

static void test_image_fs__readers_and_prefetchers_fetch_a_span_once(void **state)
{
	tb_span_cache_t *cache;
	tb_error_t err;
	mounted_t m;
	char dir[128];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/spans-met", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	for (int l = 0; l < NLAYERS; l++)
		F.b[l].slow = 20; /* readers meet the prefetchers on the way */
	F.prefetch = 3;
	mount_image(&m, cache);
	F.prefetch = 0;
	compare(F.unpacked, m.at, "");
	for (int i = 0; i < 2000 && !tb_image_fs_prefetched(m.fs); i++)
		usleep(10000);
	assert_true(tb_image_fs_prefetched(m.fs));
	for (int l = 0; l < NLAYERS; l++) {
		assert_int_equal(F.b[l].nfetches, F.b[l].ix->npoints);
		for (size_t i = 0; i < F.b[l].nfetches; i++)
			for (size_t j = i + 1; j < F.b[l].nfetches; j++)
				assert_true(F.b[l].offs[i] != F.b[l].offs[j]);
	}
	unmount_image(&m);
	tb_span_cache_close(cache);
	reset_fetches();
}

/* Reads @p n files of @p m (their contents checked against the unpacked
 * tree's). */
static void read_files(const mounted_t *m, const char *const *paths, size_t n)
{
	char p[256], q[256];
	size_t len, want;

	for (size_t k = 0; k < n; k++) {
		snprintf(p, sizeof(p), "%s/%s", m->at, paths[k]);
		snprintf(q, sizeof(q), "%s/%s", F.unpacked, paths[k]);
		uint8_t *d = slurp(p, &len), *u = slurp(q, &want);
		assert_non_null(d);
		assert_non_null(u);
		assert_int_equal(len, want);
		assert_memory_equal(d, u, len);
		free(d);
		free(u);
	}
}

/*
 * The order readers first needed spans in is noted; a second file system
 * given it as its order prefetches exactly those spans, in that order,
 * and no other (one thread, no reader meanwhile: the fetches' order is
 * the order's), so its readers then fetch nothing; an order that lies
 * (spans outside the layers, one twice) has those skipped, and one of
 * nothing but lies prefetches nothing, while every read still gives the
 * layers' bytes.
 */
static void test_image_fs__prefetch_in_a_read_order_fetches_those_spans_in_it(void **state)
{
	static const char *const paths[] = { "big2", "small/a", "etc/passwd", LONG_NAME };
	tb_span_cache_t *cache, *cache2, *cache3;
	tb_read_span_t *read = NULL, *again = NULL;
	size_t nread, nagain;
	tb_error_t err;
	mounted_t m;
	char dir[128];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/spans-order1", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	mount_image(&m, cache);
	read_files(&m, paths, 4);
	assert_int_equal(tb_image_fs_read_order(m.fs, &read, &nread), 0);
	unmount_image(&m);
	tb_span_cache_close(cache);
	/* each span fetched, once, the first of them big2's (layer 2) */
	assert_true(nread >= 3);
	assert_int_equal(read[0].layer, 2);
	assert_int_equal(nread, F.nlog);
	for (size_t k = 0; k < nread; k++) {
		uint64_t from, to;
		size_t j = 0;
		tb_layer_index_span(F.b[read[k].layer].ix, read[k].span, &from, &to);
		while (j < F.nlog && (F.log[j].layer != (int)read[k].layer || F.log[j].off != from))
			j++;
		assert_true(j < F.nlog);
		for (size_t i = 0; i < k; i++)
			assert_false(read[i].layer == read[k].layer &&
				     read[i].span == read[k].span);
	}

	/* the order, with lies among it: prefetched, exactly */
	tb_read_span_t *lying = calloc(nread + 3, sizeof(*lying));
	assert_non_null(lying);
	memcpy(lying, read, nread * sizeof(*read));
	lying[nread] = (tb_read_span_t){ 7, 0 };            /* no such layer */
	lying[nread + 1] = (tb_read_span_t){ 0, 1u << 30 }; /* no such span */
	lying[nread + 2] = read[0];                         /* twice */
	snprintf(dir, sizeof(dir), "%s/spans-order2", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache2, dir, 64u << 20, &err), 0);
	reset_fetches();
	F.prefetch = 1;
	F.order = lying;
	F.norder = nread + 3;
	mount_image(&m, cache2);
	F.prefetch = 0;
	F.order = NULL;
	F.norder = 0;
	for (int i = 0; i < 2000 && !tb_image_fs_prefetched(m.fs); i++)
		usleep(10000);
	assert_true(tb_image_fs_prefetched(m.fs));
	assert_int_equal(F.nlog, nread);
	uint64_t bytes = 0;
	for (size_t k = 0; k < nread; k++) {
		uint64_t from, to;
		tb_layer_index_span(F.b[read[k].layer].ix, read[k].span, &from, &to);
		assert_int_equal(F.log[k].layer, (int)read[k].layer);
		assert_int_equal(F.log[k].off, from);
		bytes += to - from;
	}
	assert_int_equal(tb_image_fs_prefetched_bytes(m.fs), bytes);
	/* the readers then fetch nothing, and are noted as before (the
	 * kernel's reads ahead, served by several threads, may trade places
	 * within a file) */
	read_files(&m, paths, 4);
	assert_int_equal(F.nlog, nread);
	assert_int_equal(tb_image_fs_read_order(m.fs, &again, &nagain), 0);
	assert_int_equal(nagain, nread);
	for (size_t k = 0; k < nread; k++) {
		size_t j = 0;
		while (j < nagain &&
		       (again[j].layer != read[k].layer || again[j].span != read[k].span))
			j++;
		assert_true(j < nagain);
	}
	unmount_image(&m);
	tb_span_cache_close(cache2);

	/* nothing but lies: nothing fetched ahead; reads are the layers' */
	snprintf(dir, sizeof(dir), "%s/spans-order3", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache3, dir, 64u << 20, &err), 0);
	reset_fetches();
	F.prefetch = 2;
	F.order = lying + nread;
	F.norder = 2;
	mount_image(&m, cache3);
	F.prefetch = 0;
	F.order = NULL;
	F.norder = 0;
	usleep(100000);
	assert_int_equal(F.nlog, 0);
	assert_false(tb_image_fs_prefetched(m.fs));
	read_files(&m, paths, 4);
	assert_int_equal(tb_image_fs_prefetched_bytes(m.fs), 0);
	unmount_image(&m);
	tb_span_cache_close(cache3);
	free(lying);
	free(read);
	free(again);
	reset_fetches();
}

/* Readers come first: while a reader's fetch is under way (slow here),
 * the prefetcher starts none of its own (one may start as the reader's
 * does: allowed a few milliseconds), and goes on once it has ended. */
static void test_image_fs__prefetchers_start_no_fetch_while_a_reader_fetches(void **state)
{
	const tb_layer_index_t *ix2 = F.b[2].ix;
	tb_read_span_t *order = calloc(ix2->npoints, sizeof(*order));
	tb_span_cache_t *cache;
	tb_error_t err;
	mounted_t m;
	char dir[128], p[256];
	size_t len;

	(void)state;
	assert_non_null(order);
	assert_true(ix2->npoints >= 3);
	for (size_t i = 0; i < ix2->npoints; i++)
		order[i] = (tb_read_span_t){ 2, (uint32_t)i };
	snprintf(dir, sizeof(dir), "%s/spans-first", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	F.b[2].slow = 60;  /* each span ahead */
	F.b[0].slow = 300; /* the reader's */
	F.prefetch = 1;
	F.order = order;
	F.norder = ix2->npoints;
	mount_image(&m, cache);
	F.prefetch = 0;
	F.order = NULL;
	F.norder = 0;
	usleep(20000); /* the prefetcher in its first fetch */
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	assert_memory_equal(d, "a small file\n", len);
	free(d);
	for (int i = 0; i < 2000 && !tb_image_fs_prefetched(m.fs); i++)
		usleep(10000);
	assert_true(tb_image_fs_prefetched(m.fs));
	unmount_image(&m);
	tb_span_cache_close(cache);
	size_t readers = 0, after = 0;
	for (size_t r = 0; r < F.nlog; r++) {
		if (F.log[r].layer != 0)
			continue;
		readers++;
		for (size_t k = 0; k < F.nlog; k++) {
			if (F.log[k].layer != 2)
				continue;
			if (F.log[k].from_us > F.log[r].from_us + 15000 &&
			    F.log[k].from_us < F.log[r].to_us)
				fail_msg(
				    "a span ahead began %llu us into a reader's fetch of %llu us",
				    (unsigned long long)(F.log[k].from_us - F.log[r].from_us),
				    (unsigned long long)(F.log[r].to_us - F.log[r].from_us));
			after += F.log[k].from_us >= F.log[r].to_us;
		}
	}
	assert_true(readers >= 1);
	assert_true(after >= 1); /* and it went on */
	free(order);
	reset_fetches();
}

/* Stopping the root does not wait out a prefetcher's fetch that hangs
 * (a registry that sends nothing): tb_image_fs_stop sets the conf's
 * cancel, which the layers' fetches watch, before it waits for them. */
static void test_image_fs__stopping_ends_a_fetch_under_way(void **state)
{
	const tb_layer_index_t *ix2 = F.b[2].ix;
	tb_read_span_t order[1] = { { 2, 0 } };
	atomic_int cancel = 0;
	tb_span_cache_t *cache;
	tb_error_t err;
	mounted_t m;
	char dir[128];

	(void)state;
	assert_true(ix2->npoints >= 1);
	snprintf(dir, sizeof(dir), "%s/spans-hang", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	F.b[2].hang = 1;
	atomic_store(&F.b[2].hanging, 0);
	F.cancel = &cancel;
	F.prefetch = 1;
	F.order = order;
	F.norder = 1;
	mount_image(&m, cache);
	F.prefetch = 0;
	F.order = NULL;
	F.norder = 0;
	for (int i = 0; i < 500 && !atomic_load(&F.b[2].hanging); i++)
		usleep(10000);
	assert_true(atomic_load(&F.b[2].hanging)); /* the prefetcher in its fetch */
	uint64_t t0 = now_us();
	unmount_image(&m);
	uint64_t took = now_us() - t0;
	printf("  stopped %llu ms into a hung fetch\n", (unsigned long long)took / 1000);
	assert_int_equal(atomic_load(&cancel), 1);
	assert_true(took < 2000000);
	F.b[2].hang = 0;
	F.cancel = NULL;
	tb_span_cache_close(cache);
	reset_fetches();
}

/* ------------------------------------------------------------ shapes */

#define END                                                                                        \
	{                                                                                          \
		NULL, 0, 0, 0, NULL, 0, NULL                                                       \
	}
#define F_(path, text)                                                                             \
	{                                                                                          \
		path, 'f', 0644, 0, text, 0, NULL                                                  \
	}
#define D_(path)                                                                                   \
	{                                                                                          \
		path, 'd', 0755, 0, NULL, 0, NULL                                                  \
	}
#define L_(path, to)                                                                               \
	{                                                                                          \
		path, 'l', 0777, 0, NULL, 0, to                                                    \
	}
#define H_(path, to)                                                                               \
	{                                                                                          \
		path, 'h', 0, 0, NULL, 0, to                                                       \
	}

/* Layers whose tree is a corner of the rules: each must come out of the
 * eager unpack and the index the same, or be refused by both. */
typedef struct shape {
	const char *what;
	const spec_t *layers[3];
	int ok;
} shape_t;

static const spec_t ABS1[] = { D_("b/"), L_("a", "/b"), END }, ABS2[] = { F_("a/f", "x\n"), END };
static const spec_t DOTDOT[] = { L_("x", "../../.."), F_("x/etc/f", "up\n"), END };
static const spec_t LOOP[] = { L_("l1", "l2"), L_("l2", "l1"), F_("l1/f", "x\n"), END };
static const spec_t FILE_DIR[] = { F_("f", "x\n"), F_("f/g", "y\n"), END };
static const spec_t HARD_DIR[] = { D_("d/"), H_("h", "d"), END };
static const spec_t HARD_NONE[] = { H_("h", "nothing"), END };
static const spec_t HARD_OUT[] = { F_("t", "x\n"), H_("h", "../t"), END };
static const spec_t DANGLING[] = { L_("d", "nowhere"), F_("d/f", "x\n"), END };
static const spec_t WHL1[] = { F_("real/x", "x\n"), F_("real/y", "y\n"), L_("lnk", "real"), END },
		    WHL2[] = { F_("lnk/.wh.x", ""), END };
static const spec_t REP1[] = { D_("a/"), F_("a/in", "in\n"), F_("b", "b\n"), END },
		    REP2[] = { F_("a", "now a file\n"), D_("b/"), F_("b/in", "in b\n"), END };
static const spec_t HREP1[] = { F_("t", "old\n"), H_("h", "t"), END },
		    HREP2[] = { F_("t", "new\n"), END };
static const spec_t ROOT1[] = { { "./", 'd', 0700, 0, NULL, 0, NULL },
				F_(".wh..wh..plnk", ""),
				F_("k", "k\n"),
				END },
		    ROOT2[] = { F_(".wh..wh..opq", ""), F_("new", "new\n"), END };
static const spec_t DEV1[] = { F_("f", "kept\n"), END },
		    DEV2[] = { { "f", 'c', 0666, 0, NULL, 0, NULL }, END };
static const spec_t OPQ1[] = { F_("o/sub/lower", "l\n"), F_("o/top", "t\n"), END },
		    OPQ2[] = { D_("o/sub/"), F_("o/.wh..wh..opq", ""), F_("o/sub/upper", "u\n"),
			       END };
static const spec_t HTHRU[] = { F_("real/t", "t\n"), L_("lnk", "real"), H_("h", "lnk/t"), END };
static const spec_t HSYM[] = { L_("s", "anywhere"), H_("h", "s"), END };
static const spec_t SELF[] = { F_("t", "t\n"), H_("t", "t"), END };

static const shape_t SHAPES[] = {
	{ "an absolute link followed within the root", { ABS1, ABS2 }, 1 },
	{ "'..' stops at the root", { DOTDOT }, 1 },
	{ "a loop of links", { LOOP }, 0 },
	{ "a file where a directory should be", { FILE_DIR }, 0 },
	{ "a hard link to a directory", { HARD_DIR }, 0 },
	{ "a hard link to nothing", { HARD_NONE }, 0 },
	{ "a hard link out of the tree", { HARD_OUT }, 0 },
	{ "a parent that is a link to nowhere", { DANGLING }, 0 },
	{ "a whiteout through a link", { WHL1, WHL2 }, 1 },
	{ "a directory and a file trading places", { REP1, REP2 }, 1 },
	{ "a hard link's target replaced", { HREP1, HREP2 }, 1 },
	{ "the root's own entry, aufs's and an opaque root", { ROOT1, ROOT2 }, 1 },
	{ "a device over a file", { DEV1, DEV2 }, 1 },
	{ "an opaque directory over a directory named again", { OPQ1, OPQ2 }, 1 },
	{ "a hard link through a link", { HTHRU }, 1 },
	{ "a hard link to a symbolic link", { HSYM }, 1 },
	{ "a hard link to itself", { SELF }, 0 },
};

/* Layers @p b unpacked into a fresh directory @p dir. */
static int unpack_into(blob_t *b, size_t n, char *dir, size_t cap, tb_error_t *err)
{
	tb_unpack_limits_t lim = { 1u << 30, 100000 };
	tb_unpack_stats_t st = { 0 };
	int rc = 0;

	snprintf(dir, cap, "%s/shape%d", F.tmp, F.n++);
	assert_int_equal(mkdir(dir, 0755), 0);
	int root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (size_t l = 0; l < n && rc == 0; l++) {
		int fd = memfd_create("layer", MFD_CLOEXEC);
		assert_int_equal(write(fd, b[l].p, b[l].n), (ssize_t)b[l].n);
		lseek(fd, 0, SEEK_SET);
		rc = tb_unpack_layer(root, fd, &lim, &st, err);
		close(fd);
	}
	close(root);
	return rc;
}

static void differ(const shape_t *sh)
{
	blob_t b[3];
	tb_image_fs_layer_t layers[3];
	tb_error_t eu = { 0 }, ef = { 0 };
	tb_image_fs_t *fs;
	char dir[160], at[160];
	size_t n = 0;
	int mfd;

	memset(b, 0, sizeof(b));
	for (; n < 3 && sh->layers[n]; n++) {
		make_layer(&b[n], sh->layers[n]);
		layers[n] = (tb_image_fs_layer_t){ index_of(&b[n]), blob_fetch, &b[n], NULL };
	}
	int ru = unpack_into(b, n, dir, sizeof(dir), &eu);
	tb_image_fs_conf_t conf = { .layers = layers,
				    .nlayers = n,
				    .limits = { 1u << 30, 100000 } };
	int rf = tb_image_fs_start(&fs, &conf, &mfd, &ef);
	if ((ru == 0) != (rf == 0) || (ru == 0) != sh->ok)
		fail_msg("%s: unpacked %d (%s), served %d (%s)", sh->what, ru, ru ? eu.msg : "", rf,
			 rf ? ef.msg : "");
	if (rf == 0) {
		snprintf(at, sizeof(at), "%s/m%d", F.tmp, F.n++);
		assert_int_equal(mkdir(at, 0755), 0);
		assert_int_equal(move_mount(mfd, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH), 0);
		close(mfd);
		compare(dir, at, sh->what);
		assert_int_equal(umount2(at, MNT_DETACH), 0);
		tb_image_fs_stop(fs);
	}
	for (size_t l = 0; l < n; l++) {
		tb_layer_index_free((tb_layer_index_t *)layers[l].ix);
		free(b[l].p);
		pthread_mutex_destroy(&b[l].lock);
	}
}

static void test_image_fs__corners_of_the_rules_come_out_as_unpacked(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(SHAPES) / sizeof(SHAPES[0]); i++)
		differ(&SHAPES[i]);
}

/* ------------------------------------------------------------ eStargz */

/* Layer @p b written again by tests/tools/@p tool (chunks of
 * ESTARGZ_CHUNK, with @p options: "" or a hostile one) into @p e: its
 * bytes and digest; its descriptor's annotations returned (json_decref). */
static json_t *convert_layer(const char *tool, blob_t *e, const blob_t *b, const char *options)
{
	char in[160], out[160], desc[170], cmd[1024];
	unsigned char sum[32];

	snprintf(in, sizeof(in), "%s/layer.tar.gz", F.tmp);
	snprintf(out, sizeof(out), "%s/layer.out", F.tmp);
	snprintf(desc, sizeof(desc), "%s.json", out);
	FILE *f = fopen(in, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/tools/%s' --chunk-size %d %s %s %s", TB_PYTHON,
		 TB_SOURCE_DIR, tool, ESTARGZ_CHUNK, options, in, out);
	if (system(cmd) != 0)
		fail_msg("failed: %s", cmd);
	memset(e, 0, sizeof(*e));
	e->p = slurp(out, &e->n);
	assert_non_null(e->p);
	json_t *d = json_load_file(desc, 0, NULL);
	json_t *notes = json_incref(json_object_get(d, "annotations"));
	assert_non_null(notes);
	json_decref(d);
	EVP_Digest(e->p, e->n, sum, NULL, EVP_sha256(), NULL);
	memcpy(e->digest, "sha256:", 7);
	tb_hex(e->digest + 7, sum, sizeof(sum));
	pthread_mutex_init(&e->lock, NULL);
	unlink(in);
	unlink(out);
	unlink(desc);
	return notes;
}

/* Layer @p b as eStargz (tests/tools/estargz-convert) into @p e, its
 * index opened from its TOC by range as a worker does. */
static void make_estargz(blob_t *e, const blob_t *b, const char *options)
{
	tb_error_t err;
	json_t *notes = convert_layer("estargz-convert", e, b, options);
	tb_estargz_layer_t l = {
		e->digest, e->n,
		json_string_value(json_object_get(notes, TB_ESTARGZ_ANNOTATION_TOC)), NULL
	};
	if (tb_estargz_open(&l, blob_fetch, e, &e->ix, &err) != 0)
		fail_msg("open: %s", err.msg);
	json_decref(notes);
	e->nfetches = 0;
}

#ifdef TB_HAVE_ZSTD_CHUNKED
/* Layer @p b as zstd:chunked (tests/tools/zstd-chunked-convert) into
 * @p e, its index opened from its TOC by range as a worker does. */
static void make_zstd_chunked(blob_t *e, const blob_t *b, const char *options)
{
	tb_error_t err;
	json_t *notes = convert_layer("zstd-chunked-convert", e, b, options);
	tb_zstd_chunked_layer_t l = {
		e->digest, e->n,
		json_string_value(json_object_get(notes, TB_ZSTD_CHUNKED_ANNOTATION_CHECKSUM)),
		json_string_value(json_object_get(notes, TB_ZSTD_CHUNKED_ANNOTATION_POSITION)), NULL
	};
	if (tb_zstd_chunked_open(&l, blob_fetch, e, &e->ix, &err) != 0)
		fail_msg("open: %s", err.msg);
	json_decref(notes);
	e->nfetches = 0;
}
#endif

static void estargz_layers(void)
{
	for (int l = 0; l < NLAYERS && !F.e[l].p; l++)
		make_estargz(&F.e[l], &F.b[l], "");
}

/* The entry @p path of index @p ix. */
static const tb_layer_entry_t *entry_of(const tb_layer_index_t *ix, const char *path)
{
	for (size_t i = 0; i < ix->nentries; i++)
		if (!strcmp(ix->entries[i].path, path))
			return &ix->entries[i];
	fail_msg("no entry %s", path);
	return NULL;
}

static void serve_as_unpacked(blob_t *const *set, const char *name, int times)
{
	tb_unpack_stats_t st = { 0 };
	char dir[160];
	mounted_t m;

	snprintf(dir, sizeof(dir), "%s/unpacked-%s", F.tmp, name);
	unpack_layers(dir, set, &st);
	for (int l = 0; l < NLAYERS; l++)
		F.use[l] = set[l];
	reset_fetches();
	mount_image(&m, NULL);
	F.times = times; /* an eStargz TOC's are rounded to the second */
	compare(dir, m.at, "");
	F.times = 1;
	const tb_unpack_stats_t *got = tb_image_fs_stats(m.fs);
	assert_int_equal(got->altered.devices, st.altered.devices);
	assert_int_equal(got->altered.setid, st.altered.setid);
	assert_int_equal(got->altered.ids, st.altered.ids);
	assert_int_equal(got->entries, st.entries);
	assert_int_equal(got->bytes, st.bytes);
	char msg[256];
	assert_int_equal(tb_image_fs_error(m.fs, msg, sizeof(msg)), 0);
	unmount_image(&m);
	memset(F.use, 0, sizeof(F.use));
}

static void test_image_fs__estargz_layers_serve_the_unpacked_tree(void **state)
{
	(void)state;
	estargz_layers();
	assert_int_equal(F.e[0].ix->kind, TB_LAYER_INDEX_ESTARGZ);
	assert_true(F.e[0].ix->npoints > BIG / ESTARGZ_CHUNK); /* big/data's chunks */
	blob_t *all[NLAYERS] = { &F.e[0], &F.e[1], &F.e[2] };
	blob_t *mixed[NLAYERS] = { &F.b[0], &F.e[1], &F.b[2] };
	serve_as_unpacked(all, "estargz", 0);
	serve_as_unpacked(mixed, "mixed", 0);
	/* an eStargz entry's time: the TOC's, its seconds rounded */
	struct stat a, b;
	char pa[256], pb[256];
	mounted_t m;
	for (int l = 0; l < NLAYERS; l++)
		F.use[l] = &F.e[l];
	mount_image(&m, NULL);
	snprintf(pa, sizeof(pa), "%s/unpacked-estargz/etc/passwd", F.tmp);
	snprintf(pb, sizeof(pb), "%s/etc/passwd", m.at);
	assert_int_equal(lstat(pa, &a), 0);
	assert_int_equal(lstat(pb, &b), 0);
	assert_int_equal(b.st_mtim.tv_sec, a.st_mtim.tv_sec + (a.st_mtim.tv_nsec >= 500000000));
	assert_int_equal(b.st_mtim.tv_nsec, 0);
	unmount_image(&m);
	memset(F.use, 0, sizeof(F.use));
}

static uint64_t estargz_fetches(void)
{
	uint64_t n = 0;
	for (int l = 0; l < NLAYERS; l++)
		n += F.e[l].nfetches;
	return n;
}

static void test_image_fs__estargz_chunks_are_fetched_alone_and_kept(void **state)
{
	tb_span_cache_t *cache;
	tb_error_t err;
	char dir[128], p[256];
	mounted_t m, m2;
	size_t len;

	(void)state;
	estargz_layers();
	for (int l = 0; l < NLAYERS; l++)
		F.use[l] = &F.e[l];
	snprintf(dir, sizeof(dir), "%s/spans-estargz", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	mount_image(&m, cache);
	assert_int_equal(estargz_fetches(), 0); /* the tree is the TOC's */
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	assert_memory_equal(d, "a small file\n", len);
	free(d);
	assert_int_equal(estargz_fetches(), 1); /* its one chunk's member */
	snprintf(p, sizeof(p), "%s/big/data", m.at);
	d = slurp(p, &len);
	assert_non_null(d);
	assert_int_equal(len, BIG);
	free(d);
	/* the chunks read ahead past big/data's end (a reader going through
	 * the layer in order) landed too, or the second mount reads them
	 * ahead again: fetches still for 100 ms, within 5 s */
	for (int t = 0, still = 0; t < 250 && still < 5; t++) {
		uint64_t n = estargz_fetches();
		usleep(20000);
		still = estargz_fetches() == n ? still + 1 : 0;
	}
	assert_int_equal(tb_image_fs_fetched(m.fs, 0), tb_span_cache_bytes(cache));
	unmount_image(&m);
	/* kept by their chunks' names */
	DIR *dd = opendir(dir);
	struct dirent *de;
	size_t chunks = 0;
	assert_non_null(dd);
	while ((de = readdir(dd)))
		chunks += strstr(de->d_name, ".c") != NULL;
	closedir(dd);
	assert_true(chunks >= 2);
	uint64_t before = estargz_fetches();
	mount_image(&m2, cache);
	snprintf(p, sizeof(p), "%s/big/data", m2.at);
	d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	assert_int_equal(estargz_fetches(), before);
	assert_int_equal(tb_image_fs_fetched(m2.fs, 0), 0);
	unmount_image(&m2);
	tb_span_cache_close(cache);
	memset(F.use, 0, sizeof(F.use));
}

/* Reading big/data through @p e as layer 0 fails with EIO, other files
 * still read, and the reason kept names the layer, and @p why. */
static void big_fails(blob_t *e, const char *why)
{
	char p[256], msg[600];
	mounted_t m;
	size_t len;

	F.use[0] = e;
	mount_image(&m, NULL);
	snprintf(p, sizeof(p), "%s/big/data", m.at);
	errno = 0;
	assert_null(slurp(p, &len));
	assert_int_equal(errno, EIO);
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	assert_int_equal(tb_image_fs_error(m.fs, msg, sizeof(msg)), TB_EPOISON);
	if (!strstr(msg, e->digest) || !strstr(msg, "'big/data'") || !strstr(msg, why))
		fail_msg("the kept error: %s", msg);
	unmount_image(&m);
	F.use[0] = NULL;
}

static void test_image_fs__an_estargz_chunk_that_does_not_match_fails_its_file(void **state)
{
	blob_t lying;

	(void)state;
	estargz_layers();
	reset_fetches();
	/* the chunk's member altered at the source */
	const tb_layer_index_t *ix = F.e[0].ix;
	const tb_layer_entry_t *e = entry_of(ix, "big/data");
	uint64_t from, to;
	tb_layer_index_span(ix, tb_layer_point_before(ix, e->offset + e->size / 2), &from, &to);
	F.e[0].alter_at = from;
	big_fails(&F.e[0], "chunk");
	F.e[0].alter_at = 0;
	/* a TOC that lies about the first chunk's digest (the annotation
	 * that lying TOC's: the image's author lied) */
	make_estargz(&lying, &F.b[0], "--lie-digest big/data");
	big_fails(&lying, "does not match its digest in the TOC");
	tb_layer_index_free(lying.ix);
	free(lying.p);
	pthread_mutex_destroy(&lying.lock);
}

#ifdef TB_HAVE_ZSTD_CHUNKED
/* zstd:chunked: the same, its chunks zstd frames; one image of the
 * three kinds; a small file's one frame kept; a TOC that lies. */
static void test_image_fs__zstd_chunked_layers_serve_the_unpacked_tree(void **state)
{
	tb_span_cache_t *cache;
	tb_error_t err;
	char dir[128], p[256];
	mounted_t m;
	size_t len;

	(void)state;
	estargz_layers();
	for (int l = 0; l < NLAYERS && !F.z[l].p; l++)
		make_zstd_chunked(&F.z[l], &F.b[l], "");
	assert_int_equal(F.z[0].ix->kind, TB_LAYER_INDEX_ZSTD_CHUNKED);
	blob_t *all[NLAYERS] = { &F.z[0], &F.z[1], &F.z[2] };
	blob_t *three[NLAYERS] = { &F.b[0], &F.e[1], &F.z[2] };
	serve_as_unpacked(all, "zstd-chunked", 1); /* to the nanosecond */
	serve_as_unpacked(three, "three-kinds", 0);
	for (int l = 0; l < NLAYERS; l++)
		F.use[l] = &F.z[l];
	snprintf(dir, sizeof(dir), "%s/spans-zstd", F.tmp);
	assert_int_equal(tb_span_cache_open(&cache, dir, 64u << 20, &err), 0);
	reset_fetches();
	mount_image(&m, cache);
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	uint8_t *d = slurp(p, &len);
	assert_non_null(d);
	assert_memory_equal(d, "a small file\n", len);
	free(d);
	assert_int_equal(F.z[0].nfetches, 1);
	assert_int_equal(tb_image_fs_fetched(m.fs, 0), tb_span_cache_bytes(cache));
	unmount_image(&m);
	mount_image(&m, cache);
	snprintf(p, sizeof(p), "%s/small/a", m.at);
	d = slurp(p, &len);
	assert_non_null(d);
	free(d);
	assert_int_equal(F.z[0].nfetches, 1); /* from the cache */
	unmount_image(&m);
	tb_span_cache_close(cache);
	memset(F.use, 0, sizeof(F.use));
	blob_t lying;
	make_zstd_chunked(&lying, &F.b[0], "--lie-digest big/data");
	big_fails(&lying, "does not match its digest in the TOC");
	tb_layer_index_free(lying.ix);
	free(lying.p);
	pthread_mutex_destroy(&lying.lock);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_image_fs__the_served_tree_is_the_unpacked_tree),
		cmocka_unit_test(test_image_fs__one_file_fetches_its_spans_and_a_second_fs_nothing),
		cmocka_unit_test(test_image_fs__readers_of_one_span_wait_for_its_one_fetch),
		cmocka_unit_test(test_image_fs__an_altered_span_fails_its_file_only),
		cmocka_unit_test(test_image_fs__an_index_that_lies_about_offsets),
		cmocka_unit_test(test_image_fs__a_tree_past_its_memory_cap_is_refused),
		cmocka_unit_test(
		    test_image_fs__prefetch_fills_the_cache_and_reads_fetch_nothing_more),
		cmocka_unit_test(test_image_fs__corners_of_the_rules_come_out_as_unpacked),
		cmocka_unit_test(test_image_fs__memory_goes_back_when_reads_stop),
		cmocka_unit_test(test_image_fs__readers_and_prefetchers_fetch_a_span_once),
		cmocka_unit_test(test_image_fs__estargz_layers_serve_the_unpacked_tree),
		cmocka_unit_test(test_image_fs__estargz_chunks_are_fetched_alone_and_kept),
		cmocka_unit_test(
		    test_image_fs__an_estargz_chunk_that_does_not_match_fails_its_file),
#ifdef TB_HAVE_ZSTD_CHUNKED
		cmocka_unit_test(test_image_fs__zstd_chunked_layers_serve_the_unpacked_tree),
#endif
		cmocka_unit_test(test_image_fs__prefetch_in_a_read_order_fetches_those_spans_in_it),
		cmocka_unit_test(test_image_fs__prefetchers_start_no_fetch_while_a_reader_fetches),
		cmocka_unit_test(test_image_fs__a_reader_in_layer_order_has_spans_read_ahead),
		cmocka_unit_test(test_image_fs__stopping_ends_a_fetch_under_way),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
