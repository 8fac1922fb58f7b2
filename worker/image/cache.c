/*
 * cache.c: images made ready and kept (image.h): the order of the work
 * (manifest, config, layers, unpacking, the tree renamed into place, its
 * record written last), the locks that let slots and workers share it,
 * the authorization a cache hit needs (each asker's own, remembered a
 * short while), and eviction.
 */
#include "cache_int.h"

#include "blob.h"
#include "layer_index_store.h"
#include "source.h"
#include "tb/clock.h"
#include "tb/fault.h"
#include "tb/fsutil.h"
#include "tb/log.h"
#include "tb/metrics.h"
#include "unpack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define META_MAX (1u << 20)
#define TRIM_LOCK ".trim" /* shared while an image is made; eviction takes it alone */
#define AUTH_SLOTS 512    /* authorizations remembered, at most */
#define AUTH_TTL_MS 60000 /* ... each for this long (image.h) */

/* A registry's yes to one asker (source.h, principal) for one image. */
typedef struct auth_memo {
	char principal[65];
	char digest[72];
	uint64_t until; /* tb_mono_ms(); 0: a free slot */
} auth_memo_t;

struct tb_image_cache {
	char path[4096]; /* <cache_dir>/images */
	int root, blobs, trees, tmp, locks;
	uint64_t max;
	atomic_uint stall_seconds;   /* a registry's (tb_image_cache_set_stall) */
	tb_toc_budget_t lazy_budget; /* an image's, read on demand (set_lazy_budget) */
	atomic_int stopping;         /* tb_image_cache_interrupt: no more fetching */
	/* what the last trim found (tb_image_cache_usage): counted there, not
	 * by every reader, since counting lists every image and blob */
	atomic_uint_fast64_t images, bytes;
	pthread_mutex_t auth_lock;
	auth_memo_t auth[AUTH_SLOTS];
	atomic_uint_fast64_t auth_ttl_ms;
	tb_layer_indexes_t indexes;      /* where layer indexes go; store NULL: nowhere */
	tb_layer_index_queue_t *indexer; /* ... and who puts them there */
	tb_image_later_t *later;         /* images pulled whole in the background */
};

static atomic_uint tmp_counter;

/* --------------------------------------------------------------- open */

static int open_dir(int at, const char *name, tb_error_t *err, const char *path)
{
	if (mkdirat(at, name, 0700) < 0 && errno != EEXIST)
		return tb_error_errno(err, TB_EIO, errno, "image cache: cannot make %s/%s", path,
				      name);
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "image cache: cannot open %s/%s", path,
				      name);
	return fd;
}

/* An flock on @p name in @p dir (made if missing). @return the fd, or -1
 * (EWOULDBLOCK with LOCK_NB: somebody holds it). */
static int lock_at(int dir, const char *name, int how)
{
	int fd = openat(dir, name, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	while (flock(fd, how) < 0) {
		if (errno == EINTR)
			continue;
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Whether nobody holds an flock on @p name in @p dir now. */
static int unheld(int dir, const char *name, int flags)
{
	int fd = openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	int free_ = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return free_;
}

#define PART_MAX_AGE_S (24 * 3600) /* a layer's part not resumed since is dropped */

/* Whether the part @p name in @p dir has not grown for PART_MAX_AGE_S. */
static int stale_part(int dir, const char *name)
{
	struct stat st;
	return fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       time(NULL) - st.st_mtime > PART_MAX_AGE_S;
}

/* What a crash left: temporary entries nobody holds, trees with no record,
 * parts of layers not resumed for a day. */
static void sweep(tb_image_cache_t *c)
{
	struct dirent *de;
	int fd;
	DIR *d;

	if ((fd = dup(c->tmp)) >= 0 && (d = fdopendir(fd))) {
		rewinddir(d); /* a dup shares the offset: from the start */
		while ((de = readdir(d)))
			if (de->d_name[0] != '.' && unheld(c->tmp, de->d_name, O_RDONLY))
				tb_remove_tree(c->tmp, de->d_name);
		closedir(d);
	}
	if ((fd = dup(c->blobs)) >= 0 && (d = fdopendir(fd))) {
		rewinddir(d);
		while ((de = readdir(d)))
			if ((!strncmp(de->d_name, TB_BLOB_TMP_PREFIX, strlen(TB_BLOB_TMP_PREFIX)) ||
			     (!strncmp(de->d_name, TB_BLOB_PART_PREFIX,
				       strlen(TB_BLOB_PART_PREFIX)) &&
			      stale_part(c->blobs, de->d_name))) &&
			    unheld(c->blobs, de->d_name, O_RDONLY))
				unlinkat(c->blobs, de->d_name, 0);
		closedir(d);
	}
	if ((fd = dup(c->trees)) >= 0 && (d = fdopendir(fd))) {
		rewinddir(d);
		while ((de = readdir(d))) {
			char meta[300];
			struct stat st;
			if (de->d_name[0] == '.' || strchr(de->d_name, '.'))
				continue;
			snprintf(meta, sizeof(meta), "%s.json", de->d_name);
			int lock;
			if (fstatat(c->trees, meta, &st, 0) == 0 ||
			    (lock = lock_at(c->locks, de->d_name, LOCK_EX | LOCK_NB)) < 0)
				continue;
			tb_remove_tree(c->trees, de->d_name);
			close(lock);
		}
		closedir(d);
	}
}

int tb_image_cache_open(tb_image_cache_t **out, const char *cache_dir, uint64_t max_bytes,
			tb_error_t *err)
{
	tb_image_cache_t *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	c->root = c->blobs = c->trees = c->tmp = c->locks = -1;
	c->max = max_bytes;
	atomic_init(&c->stall_seconds, 30);
	tb_image_cache_set_lazy_budget(c, 0, 0);
	atomic_init(&c->auth_ttl_ms, AUTH_TTL_MS);
	pthread_mutex_init(&c->auth_lock, NULL);
	snprintf(c->path, sizeof(c->path), "%s/images", cache_dir);
	if (tb_mkdir_parents(c->path) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: cannot make %s", cache_dir);
		goto fail;
	}
	if ((rc = c->root = open_dir(AT_FDCWD, c->path, err, "")) < 0 ||
	    (rc = c->blobs = open_dir(c->root, "blobs", err, c->path)) < 0 ||
	    (rc = c->trees = open_dir(c->root, "trees", err, c->path)) < 0 ||
	    (rc = c->tmp = open_dir(c->root, "tmp", err, c->path)) < 0 ||
	    (rc = c->locks = open_dir(c->root, "locks", err, c->path)) < 0)
		goto fail;
	if ((rc = tb_image_later_open(&c->later, c, err)) < 0)
		goto fail;
	fchmod(c->root, 0700); /* images keep their modes: no host user in */
	sweep(c);
	tb_image_cache_trim(c); /* the bound, and the counts, from the start */
	*out = c;
	return 0;
fail:
	tb_image_cache_close(c);
	return rc;
}

void tb_image_cache_close(tb_image_cache_t *c)
{
	if (!c)
		return;
	/* a background pull ends at once (it may queue indexes: first) */
	atomic_store(&c->stopping, 1);
	tb_image_later_stop(c->later);
	tb_layer_index_queue_stop(c->indexer); /* reads from blobs: first */
	int fds[] = { c->root, c->blobs, c->trees, c->tmp, c->locks };
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	pthread_mutex_destroy(&c->auth_lock);
	free(c);
}

/* ---------------------------------------------------------- the record */

/* What unpacking dropped or changed, as the record keeps it: so that a
 * cache hit says it too. */
static json_t *altered_json(const tb_unpack_altered_t *a)
{
	return json_pack("{s:I,s:I,s:I,s:s,s:s,s:s}", "devices", (json_int_t)a->devices, "setid",
			 (json_int_t)a->setid, "ids", (json_int_t)a->ids, "device_path",
			 a->device_path, "setid_path", a->setid_path, "ids_path", a->ids_path);
}

static void altered_read(json_t *o, tb_unpack_altered_t *a)
{
	const char *s;

	memset(a, 0, sizeof(*a));
	a->devices = (uint64_t)json_integer_value(json_object_get(o, "devices"));
	a->setid = (uint64_t)json_integer_value(json_object_get(o, "setid"));
	a->ids = (uint64_t)json_integer_value(json_object_get(o, "ids"));
	if ((s = json_string_value(json_object_get(o, "device_path"))))
		snprintf(a->device_path, sizeof(a->device_path), "%s", s);
	if ((s = json_string_value(json_object_get(o, "setid_path"))))
		snprintf(a->setid_path, sizeof(a->setid_path), "%s", s);
	if ((s = json_string_value(json_object_get(o, "ids_path"))))
		snprintf(a->ids_path, sizeof(a->ids_path), "%s", s);
}

/* The record of a complete tree: what tb_image_t says of it. */
static int write_meta(tb_image_cache_t *c, const char *hex, const char *top,
		      const tb_oci_manifest_t *m, const tb_image_t *img, tb_error_t *err)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "digest", img->digest, "top", top, "config",
			      m->config.digest, "bytes", (json_int_t)img->bytes);
	json_t *layers = json_array(), *env = json_array();
	char name[300], tmp[320];
	int rc = 0;

	for (size_t i = 0; i < m->nlayers; i++)
		json_array_append_new(layers, json_string(m->layers[i].digest));
	for (size_t i = 0; i < img->config.nenv; i++)
		json_array_append_new(env, json_string(img->config.env[i]));
	json_object_set_new(o, "layers", layers);
	json_object_set_new(o, "env", env);
	if (img->config.workdir)
		json_object_set_new(o, "workdir", json_string(img->config.workdir));
	if (img->config.user)
		json_object_set_new(o, "user", json_string(img->config.user));
	json_object_set_new(o, "altered", altered_json(&img->altered));
	snprintf(name, sizeof(name), "%s.json", hex);
	snprintf(tmp, sizeof(tmp), ".%s.%d", name, (int)getpid());
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	int fd = text ? openat(c->trees, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
	if (fd < 0 || tb_write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0 ||
	    renameat(c->trees, tmp, c->trees, name) < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: the record of %.20s", hex);
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		unlinkat(c->trees, tmp, 0);
	free(text);
	return rc;
}

static char *str_dup(json_t *v)
{
	const char *s = json_string_value(v);
	return s ? strdup(s) : NULL;
}

/* Fills @p img from the record of tree @p hex. @return 1 read, 0 none. */
static int read_meta(tb_image_cache_t *c, const char *hex, tb_image_t *img)
{
	char name[300];
	json_t *o, *v;
	size_t i;

	snprintf(name, sizeof(name), "%s.json", hex);
	int fd = openat(c->trees, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	o = json_loadfd(fd, 0, NULL);
	close(fd);
	if (!o)
		return 0;
	json_t *layers = json_object_get(o, "layers"), *env = json_object_get(o, "env");
	img->bytes = (uint64_t)json_integer_value(json_object_get(o, "bytes"));
	altered_read(json_object_get(o, "altered"), &img->altered);
	img->layers.items = calloc(json_array_size(layers) + 1, sizeof(char *));
	img->config.env = calloc(json_array_size(env) + 1, sizeof(char *));
	json_array_foreach(layers, i, v) if (img->layers.items) img->layers.items[img->layers.n++] =
	    str_dup(v);
	json_array_foreach(env, i, v) if (img->config.env) img->config.env[img->config.nenv++] =
	    str_dup(v);
	img->config.workdir = str_dup(json_object_get(o, "workdir"));
	img->config.user = str_dup(json_object_get(o, "user"));
	json_decref(o);
	/* the least recently used go first: this one was used now */
	utimensat(c->trees, name, NULL, 0);
	return 1;
}

/* ------------------------------------------------------------- making */

/* Blob @p digest into the cache (unless there), checked; fetched by one
 * slot or worker at a time (the others wait, then find it), and tried
 * again twice, after a pause, when the source failed. A manifest's
 * content type (the source's, if it says one) into @p ct; whether this
 * call's source gave the bytes kept into *@p served (may be NULL). */
static int ensure_blob(tb_image_cache_t *c, tb_image_source_t *src, const char *digest,
		       uint64_t size, uint64_t max, int manifest, char *ct, size_t ctlen,
		       atomic_uint_fast64_t *fetched, int *served, tb_error_t *err)
{
	char name[80];
	tb_blob_t b;
	int rc = 0, lock = -1;

	if (ctlen)
		ct[0] = '\0';
	if (tb_blob_have(c->blobs, digest))
		return 0;
	snprintf(name, sizeof(name), "blob-%.64s", digest + 7);
	if ((lock = lock_at(c->locks, name, LOCK_EX)) < 0)
		return tb_error_errno(err, TB_EIO, errno, "image cache: the lock of %.20s", name);
	for (int attempt = 0; attempt < 3 && !tb_blob_have(c->blobs, digest); attempt++) {
		if (attempt && atomic_load(&c->stopping))
			break; /* rc: the failure the interruption caused */
		if (attempt)
			usleep(500000u << attempt); /* 1 s, then 2 s */
		/* a layer goes on from what a failed fetch (or a dead worker)
		 * left of it; a manifest or config is small: fetched whole */
		rc = !manifest && size ? tb_blob_resume(&b, c->blobs, digest, size, max, err)
				       : tb_blob_begin(&b, c->blobs, digest, size, max, err);
		if (rc < 0)
			break;
		if ((rc = src->fetch(src, digest, manifest, &b, ct, ctlen, err)) == 0 &&
		    (rc = tb_blob_commit(&b, err)) == 0 && served)
			*served = 1;
		atomic_fetch_add(fetched, b.n - b.from);
		tb_blob_abort(&b);
		if (rc != TB_ERETRY)
			break;
	}
	close(lock);
	return rc;
}

/* The layers' blobs, fetched by up to FETCHERS threads at once, bottom
 * first, while the layers already fetched are unpacked in order
 * (build()): on a slow link the unpacking hides behind the fetching. */
#define FETCHERS 4

typedef struct fetch_job {
	tb_image_cache_t *c;
	tb_image_source_t *src;
	const tb_oci_manifest_t *m;
	atomic_size_t next;
	atomic_uint_fast64_t fetched;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a layer fetched, or a failure */
	unsigned char done[TB_OCI_MAX_LAYERS];
	int rc; /* the first failure */
	tb_error_t err;
	pthread_t threads[FETCHERS];
	int started;
} fetch_job_t;

static void *fetcher(void *arg)
{
	fetch_job_t *j = arg;
	size_t i;
	tb_error_t err;

	while ((i = atomic_fetch_add(&j->next, 1)) < j->m->nlayers) {
		const tb_oci_desc_t *d = &j->m->layers[i];
		int rc = ensure_blob(j->c, j->src, d->digest, d->size, d->size, 0, NULL, 0,
				     &j->fetched, NULL, &err);
		pthread_mutex_lock(&j->lock);
		if (rc < 0 && j->rc == 0) {
			j->rc = rc;
			j->err = err;
			atomic_store(&j->next, j->m->nlayers); /* the rest would be wasted */
		}
		j->done[i] = rc == 0;
		pthread_cond_broadcast(&j->cond);
		pthread_mutex_unlock(&j->lock);
	}
	return NULL;
}

/* Starts fetching @p m's layers; fetch_finish() must follow. */
static void fetch_start(fetch_job_t *j, tb_image_cache_t *c, tb_image_source_t *src,
			const tb_oci_manifest_t *m)
{
	memset(j, 0, sizeof(*j));
	j->c = c;
	j->src = src;
	j->m = m;
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->cond, NULL);
	for (int i = 0; i < FETCHERS && (size_t)i < m->nlayers; i++)
		if (pthread_create(&j->threads[j->started], NULL, fetcher, j) == 0)
			j->started++;
	if (!j->started)
		fetcher(j); /* no thread to be had: this one does it all */
}

/* Waits until layer @p i is in the cache. @return 0, or the first
 * failure of any layer (nothing more is worth unpacking). */
static int fetch_wait(fetch_job_t *j, size_t i, tb_error_t *err)
{
	int rc;

	pthread_mutex_lock(&j->lock);
	while (!j->done[i] && j->rc == 0)
		pthread_cond_wait(&j->cond, &j->lock);
	if ((rc = j->rc) < 0)
		*err = j->err;
	pthread_mutex_unlock(&j->lock);
	return rc;
}

/* Stops handing out layers, waits for the fetches under way; the bytes
 * fetched added to @p fetched. @return the first failure, or 0. */
static int fetch_finish(fetch_job_t *j, uint64_t *fetched, tb_error_t *err)
{
	atomic_store(&j->next, j->m->nlayers);
	for (int i = 0; i < j->started; i++)
		pthread_join(j->threads[i], NULL);
	pthread_cond_destroy(&j->cond);
	pthread_mutex_destroy(&j->lock);
	*fetched += atomic_load(&j->fetched);
	if (j->rc < 0)
		*err = j->err;
	return j->rc;
}

/* The image's manifest for this platform: through its index if it has
 * one. *@p served: whether @p src gave the reference's own manifest (or
 * index) now, rather than the cache having it. */
static int find_manifest(tb_image_cache_t *c, tb_image_source_t *src, const tb_image_ref_t *ref,
			 tb_oci_manifest_t *m, char *digest, uint64_t *fetched, int *served,
			 tb_error_t *err)
{
	char ct[160], *doc = NULL;
	tb_oci_kind_t kind;
	tb_oci_desc_t d;
	size_t len;
	int rc;

	snprintf(digest, 72, "%s", ref->digest);
	for (int depth = 0; depth < 2; depth++) {
		atomic_uint_fast64_t got = 0;
		rc = ensure_blob(c, src, digest, 0, TB_OCI_DOC_MAX, 1, ct, sizeof(ct), &got,
				 depth ? NULL : served, err);
		*fetched += atomic_load(&got);
		if (rc < 0 ||
		    (rc = tb_blob_read(c->blobs, digest, TB_OCI_DOC_MAX, &doc, &len, err)) < 0 ||
		    (rc = tb_oci_kind(&kind, doc, len, ct[0] ? ct : NULL, err)) < 0)
			break;
		if (kind == TB_OCI_MANIFEST) {
			rc = tb_oci_manifest(m, doc, len, err);
			break;
		}
		if (depth || (rc = tb_oci_pick(&d, doc, len, err)) < 0) {
			if (depth)
				rc =
				    tb_error_set(err, TB_EINVAL, "image index names another index");
			break;
		}
		snprintf(digest, 72, "%s", d.digest);
		free(doc);
		doc = NULL;
	}
	free(doc);
	return rc;
}

/* Unpacks layer @p i of @p m, from the cache, into @p rootfd. */
static int unpack_one(tb_image_cache_t *c, const tb_oci_manifest_t *m, size_t i, int rootfd,
		      const tb_unpack_limits_t *lim, tb_unpack_stats_t *st, tb_error_t *err)
{
	int rc, fd = openat(c->blobs, m->layers[i].digest + 7, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "image cache: layer %zu", i);
	rc = tb_unpack_layer(rootfd, fd, lim, st, err);
	close(fd);
	if (rc < 0)
		tb_error_prefix(err, "layer %zu (%.19s)", i, m->layers[i].digest);
	return rc;
}

/* The worker's log says, once, when the image is made, what of its
 * layers its tree does not keep as it was (the record and each task's
 * manifest say it again: tb_image_t altered). */
static void say_altered(const char *hex, const tb_unpack_altered_t *a)
{
	if (a->devices)
		tb_warn(NULL, "image %.12s: %llu device nodes or sockets left out (first '%s')",
			hex, (unsigned long long)a->devices, a->device_path);
	if (a->setid)
		tb_warn(NULL,
			"image %.12s: %llu set-user-ID or set-group-ID bits dropped (first '%s')",
			hex, (unsigned long long)a->setid, a->setid_path);
	if (a->ids)
		tb_warn(NULL,
			"image %.12s: %llu entries owned by ids no sandbox maps, made nobody "
			"(first '%s')",
			hex, (unsigned long long)a->ids, a->ids_path);
}

/* @p m's gzip layers, pulled whole: their indexes built and published
 * for the fleet after the pull, unless it has them (layer_index_store.h). */
static void queue_indexes(tb_image_cache_t *c, const tb_oci_manifest_t *m)
{
	for (size_t i = 0; c->indexer && i < m->nlayers; i++)
		if (m->layers[i].compression == TB_OCI_GZIP)
			tb_layer_index_queue_add(c->indexer, m->layers[i].digest);
}

/* Fetches the config and every layer, unpacks them in order as they
 * arrive into a temporary tree and renames it into trees/<hex>; the
 * record last. */
static int build(tb_image_cache_t *c, tb_image_source_t *src, const tb_oci_manifest_t *m,
		 const char *hex, const char *top, uint64_t max_unpacked, tb_image_t *img,
		 tb_error_t *err)
{
	char tmp[128] = "", *doc = NULL;
	tb_unpack_stats_t st = { 0 };
	tb_unpack_limits_t lim = { max_unpacked, TB_IMAGE_MAX_ENTRIES };
	size_t len;
	int rc, dir = -1, rootfd = -1;

	uint64_t total = 0;
	for (size_t i = 0; i < m->nlayers; i++)
		total += m->layers[i].size;
	if (total > max_unpacked) { /* compressed, already over what may unpack */
		rc = tb_error_set(err, TB_ETOOBIG, "the image's layers are %llu bytes: over %llu",
				  (unsigned long long)total, (unsigned long long)max_unpacked);
		goto out;
	}
	atomic_uint_fast64_t got = 0;
	rc = ensure_blob(c, src, m->config.digest, m->config.size, TB_OCI_DOC_MAX, 0, NULL, 0, &got,
			 NULL, err);
	img->fetched += atomic_load(&got);
	if (rc < 0 ||
	    (rc = tb_blob_read(c->blobs, m->config.digest, TB_OCI_DOC_MAX, &doc, &len, err)) < 0 ||
	    (rc = tb_oci_config(&img->config, doc, len, err)) < 0)
		goto out;
	fetch_job_t *j = malloc(sizeof(*j));
	if (!j) {
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
		goto out;
	}
	fetch_start(j, c, src, m);
	snprintf(tmp, sizeof(tmp), "%s.%d.%u", hex, (int)getpid(),
		 atomic_fetch_add(&tmp_counter, 1));
	if (mkdirat(c->tmp, tmp, 0755) < 0 ||
	    (dir = openat(c->tmp, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    flock(dir, LOCK_EX) < 0 ||
	    (rootfd = openat(dir, ".", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: a directory to unpack into");
	for (size_t i = 0; i < m->nlayers && rc == 0; i++) {
		if ((rc = fetch_wait(j, i, err)) < 0)
			break;
		if (i + 1 == m->nlayers)
			tb_fault_point("image-fetched"); /* the tree not yet complete */
		rc = unpack_one(c, m, i, rootfd, &lim, &st, err);
	}
	tb_error_t ferr;
	int frc = fetch_finish(j, &img->fetched, &ferr);
	free(j);
	if (rc == 0 && frc < 0) {
		*err = ferr;
		rc = frc;
	}
	if (rc < 0)
		goto out;
	tb_fault_point("image-unpacked"); /* complete, not yet in place */
	img->bytes = st.bytes;
	img->altered = st.altered;
	say_altered(hex, &st.altered);
	tb_remove_tree(c->trees, hex); /* a tree with no record: half made */
	if (renameat(c->tmp, tmp, c->trees, hex) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: keeping the tree");
		goto out;
	}
	tmp[0] = '\0';
	if ((rc = write_meta(c, hex, top, m, img, err)) == 0)
		queue_indexes(c, m);
	tb_oci_config_free(&img->config); /* read back with the rest: read_meta() */
out:
	if (rc < 0 && tmp[0] && dir >= 0)
		tb_remove_tree(c->tmp, tmp);
	if (rootfd >= 0)
		close(rootfd);
	if (dir >= 0)
		close(dir);
	free(doc);
	return rc;
}

/* ------------------------------------------------------ authorization */

/* Whether @p principal was let have @p digest by its source lately. */
static int auth_remembered(tb_image_cache_t *c, const char *principal, const char *digest)
{
	uint64_t now = tb_mono_ms();
	int yes = 0;

	pthread_mutex_lock(&c->auth_lock);
	for (size_t i = 0; i < AUTH_SLOTS && !yes; i++)
		yes = c->auth[i].until > now && !strcmp(c->auth[i].principal, principal) &&
		      !strcmp(c->auth[i].digest, digest);
	pthread_mutex_unlock(&c->auth_lock);
	return yes;
}

/* Remembers that @p principal was let have @p digest: in its own slot,
 * else a free or lapsed one, else the one that lapses first. */
static void auth_remember(tb_image_cache_t *c, const char *principal, const char *digest)
{
	uint64_t now = tb_mono_ms(), ttl = atomic_load(&c->auth_ttl_ms);
	size_t pick = 0;

	if (!principal[0] || !ttl)
		return; /* a source asked every time (a layout) */
	pthread_mutex_lock(&c->auth_lock);
	for (size_t i = 0; i < AUTH_SLOTS; i++) {
		auth_memo_t *a = &c->auth[i];
		if (!strcmp(a->principal, principal) && !strcmp(a->digest, digest)) {
			pick = i;
			break;
		}
		if (a->until < c->auth[pick].until)
			pick = i;
	}
	snprintf(c->auth[pick].principal, sizeof(c->auth[pick].principal), "%s", principal);
	snprintf(c->auth[pick].digest, sizeof(c->auth[pick].digest), "%s", digest);
	c->auth[pick].until = now + ttl;
	pthread_mutex_unlock(&c->auth_lock);
}

/*
 * Whether the image @p ref names may be served to whoever opened @p src,
 * @p served by it in this call, or the cache having it from somebody
 * else (or from this asker, earlier): the cache is the host's, a
 * registry's login is each runtime's. Asked of
 * the source (a registry: a HEAD with these credentials; a layout: it
 * holds the manifest), or remembered from its answer for the cache's
 * authorization time.
 */
static int authorize(tb_image_cache_t *c, tb_image_source_t *src, const tb_image_ref_t *ref,
		     int served, tb_error_t *err)
{
	int rc;

	if (served) { /* the source gave it in this call, to this asker */
		auth_remember(c, src->principal, ref->digest);
		return 0;
	}
	if (src->principal[0] && auth_remembered(c, src->principal, ref->digest))
		return 0;
	/* the source's own words: a refusal reads the same whether or not
	 * the cache had the image (which is nobody else's business) */
	if ((rc = src->authorize(src, ref->digest, err)) < 0)
		return rc;
	auth_remember(c, src->principal, ref->digest);
	return 0;
}

/* What a failure means for the task: the image's own fault is poison
 * (it will never work), a source or cache failure is the platform's. */
static int classify(int rc, tb_error_t *err)
{
	/* (a blob that does not match its digest says TB_ERETRY: blob.h) */
	if (rc == TB_ENOTFOUND || rc == TB_ETOOBIG || rc == TB_EINVAL || rc == TB_EPOISON)
		return err->code = TB_EPOISON;
	return rc;
}

/* Where @p ref's blobs come from, for this asker. */
static int open_source(tb_image_cache_t *c, const tb_image_ref_t *ref, const char *credentials,
		       tb_image_source_t **out, tb_error_t *err)
{
	if (ref->layout)
		return tb_layout_open(out, ref, err);
	return tb_registry_open(out, ref, credentials, atomic_load(&c->stall_seconds), &c->stopping,
				err);
}

int tb_image_get(tb_image_cache_t *c, const tb_image_ref_t *ref, uint64_t max_unpacked,
		 const char *credentials, tb_image_t *out, tb_error_t *err)
{
	tb_image_source_t *src = NULL;
	tb_oci_manifest_t *m = malloc(sizeof(*m));
	uint64_t t0 = tb_mono_ms();
	int rc, building = -1, served = 0;

	memset(out, 0, sizeof(*out));
	out->lock = -1;
	if (!m)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	rc = open_source(c, ref, credentials, &src, err);
	/* shared while anything is made: eviction waits for no blob in use */
	if (rc == 0 && (building = lock_at(c->locks, TRIM_LOCK, LOCK_SH)) < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: its lock");
	if (rc == 0 &&
	    (rc = find_manifest(c, src, ref, m, out->digest, &out->fetched, &served, err)) == 0)
		rc = authorize(c, src, ref, served, err);
	const char *hex = out->digest + 7;
	if (rc == 0 && (out->lock = lock_at(c->locks, hex, LOCK_SH)) < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: the lock of %.20s", hex);
	if (rc == 0 && read_meta(c, hex, out)) {
		out->cached = 1;
	} else if (rc == 0) {
		/* made here, once: other slots and workers wait for its builder
		 * (a lock of its own: the shared one is held by every user, and
		 * no one waits for users to go) */
		char name[80];
		snprintf(name, sizeof(name), "%.64s.build", hex);
		int builder = lock_at(c->locks, name, LOCK_EX);
		if (builder < 0)
			rc = tb_error_errno(err, TB_EIO, errno, "image cache: the lock of %.20s",
					    hex);
		else if (read_meta(c, hex, out))
			out->cached = 1;
		else if ((rc = build(c, src, m, hex, ref->digest, max_unpacked, out, err)) == 0 &&
			 !read_meta(c, hex, out))
			rc = tb_error_set(err, TB_EIO, "image cache: the record of %.20s is gone",
					  hex);
		if (builder >= 0)
			close(builder);
	}
	if (rc == 0 &&
	    snprintf(out->tree, sizeof(out->tree), "%.3900s/trees/%.64s", c->path, hex) < 0)
		rc = tb_error_set(err, TB_EIO, "image cache: a path too long");
	out->ms = tb_mono_ms() - t0;
	if (building >= 0)
		close(building);
	if (src)
		src->close(src);
	free(m);
	if (rc < 0) {
		tb_image_release(out);
		rc = classify(rc, err);
		tb_metrics_image(rc == TB_EPOISON ? "refused" : "failed", out->fetched);
		return rc;
	}
	tb_metrics_image(out->cached ? "cached" : "made", out->fetched);
	if (!out->cached) /* a hit adds nothing: no listing of the cache on it */
		tb_image_cache_trim(c);
	return 0;
}

/* ------------------------------------------------------------- on demand */

/* @p m's config into @p l, fetched (unless the cache has it) and checked. */
static int lazy_config(tb_image_cache_t *c, tb_image_lazy_t *l, const tb_oci_manifest_t *m,
		       tb_error_t *err)
{
	atomic_uint_fast64_t got = 0;
	char *doc = NULL;
	size_t len;
	int rc = ensure_blob(c, l->src, m->config.digest, m->config.size, TB_OCI_DOC_MAX, 0, NULL,
			     0, &got, NULL, err);

	l->fetched += atomic_load(&got);
	if (rc == 0 &&
	    (rc = tb_blob_read(c->blobs, m->config.digest, TB_OCI_DOC_MAX, &doc, &len, err)) == 0)
		rc = tb_oci_config(&l->config, doc, len, err);
	free(doc);
	return rc;
}

/* Describing a lazy image's layers, several at once (lazy_layers). */
#define FIND_THREADS 4

typedef struct finding {
	tb_image_cache_t *c;
	tb_image_lazy_t *l;
	const tb_oci_manifest_t *m;
	atomic_size_t next; /* the next layer to describe */
	int *rc;            /* per layer */
	uint64_t *fetched;  /* per layer: the bytes its TOC took */
	tb_error_t *errs;   /* per layer */
	pthread_mutex_t lock;
	tb_toc_budget_t left; /* under lock: what the layers described leave */
} finding_t;

/* Layer @p i described (tb_image_lazy_layer) within the image's budget:
 * a layer with a TOC is parsed under the lock, one at a time, so that no
 * two TOCs together pass it; a pinned index's entries are counted once
 * it is loaded. @return as tb_image_lazy_layer. */
static int describe(finding_t *f, size_t i)
{
	const tb_oci_desc_t *d = &f->m->layers[i];
	tb_layer_index_t **ix = &f->l->ix[i];
	int toc = d->toc_digest[0] != '\0', rc;
	tb_toc_budget_t mine;

	pthread_mutex_lock(&f->lock);
	mine = f->left;
	if (!toc)
		pthread_mutex_unlock(&f->lock);
	rc = tb_image_lazy_layer(f->c, d, &f->l->blobs[i], toc ? &f->left : &mine, ix,
				 &f->fetched[i], &f->errs[i]);
	if (!toc)
		pthread_mutex_lock(&f->lock);
	if (rc == 0 && (*ix)->nentries > f->left.entries) {
		tb_error_set(&f->errs[i], TB_EINVAL,
			     "the image's layers list more than %llu entries together",
			     (unsigned long long)f->c->lazy_budget.entries);
		rc = 1; /* pulled whole */
	} else if (rc == 0) {
		f->left.entries -= (*ix)->nentries;
	}
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static void *find_some(void *arg)
{
	finding_t *f = arg;
	size_t i;

	while ((i = atomic_fetch_add(&f->next, 1)) < f->l->layers.n)
		f->rc[i] = describe(f, i);
	return NULL;
}

/* Each layer of @p m described into l->ix (tb_image_lazy_layer: its TOC
 * or its pinned index), FIND_THREADS at a time (each is a pin and a GET,
 * or a TOC's ranges: one after another they were most of the time to a
 * lazy image's first instruction), within the image's budget
 * (c->lazy_budget: its layers' TOC bytes and entries together, so no
 * index is made past it). @return 0; 1 naming the first layer with
 * neither to trust, or past the budget (in @p err); TB_ENOMEM. */
static int describe_layers(tb_image_cache_t *c, tb_image_lazy_t *l, const tb_oci_manifest_t *m,
			   tb_error_t *err)
{
	size_t n = l->layers.n, nt = 0;
	finding_t f = { .c = c,
			.l = l,
			.m = m,
			.rc = calloc(n + 1, sizeof(int)),
			.fetched = calloc(n + 1, sizeof(uint64_t)),
			.errs = calloc(n + 1, sizeof(tb_error_t)),
			.left = c->lazy_budget };
	pthread_t t[FIND_THREADS];
	int rc = 0;

	atomic_init(&f.next, 0);
	pthread_mutex_init(&f.lock, NULL);
	if (!f.rc || !f.fetched || !f.errs)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	for (; rc == 0 && nt + 1 < FIND_THREADS && nt + 1 < n; nt++)
		if (pthread_create(&t[nt], NULL, find_some, &f) != 0)
			break;
	if (rc == 0)
		find_some(&f); /* this thread too (alone if none started) */
	for (size_t k = 0; k < nt; k++)
		pthread_join(t[k], NULL);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		l->fetched += f.fetched[i];
		if (f.rc[i] != 0) {
			*err = f.errs[i];
			rc =
			    f.rc[i] < 0
				? f.rc[i]
				: (tb_error_prefix(err, "layer %zu (%.19s)", i, l->layers.items[i]),
				   1);
		}
	}
	pthread_mutex_destroy(&f.lock);
	free(f.rc);
	free(f.fetched);
	free(f.errs);
	return rc;
}

/* Each layer of @p m with what describes it into @p l: its eStargz or
 * zstd:chunked TOC or its pinned index, within the image's budget
 * (describe_layers). @return 0; 1 when one has neither to trust, or the
 * image's layers list more than its budget (the reason in @p err);
 * TB_ENOMEM. */
static int lazy_layers(tb_image_cache_t *c, tb_image_lazy_t *l, const tb_oci_manifest_t *m,
		       tb_error_t *err)
{
	l->layers.items = calloc(m->nlayers + 1, sizeof(char *));
	l->ix = calloc(m->nlayers + 1, sizeof(*l->ix));
	l->blobs = calloc(m->nlayers + 1, sizeof(*l->blobs));
	if (!l->layers.items || !l->ix || !l->blobs)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (size_t i = 0; i < m->nlayers; i++) {
		const char *d = m->layers[i].digest;
		if (!(l->layers.items[i] = strdup(d)))
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		l->layers.n++;
		l->blobs[i].src = l->src;
		l->blobs[i].cancel = &l->cancel;
		snprintf(l->blobs[i].digest, sizeof(l->blobs[i].digest), "%s", d);
		if (m->layers[i].compression == TB_OCI_TAR) {
			tb_error_set(err, TB_EINVAL, "layer %zu (%.19s) is not compressed", i, d);
			return 1;
		}
	}
	return describe_layers(c, l, m, err);
}

/* Whether the cache has tree @p hex complete (its record). */
static int have_tree(tb_image_cache_t *c, const char *hex)
{
	char name[80];
	snprintf(name, sizeof(name), "%.64s.json", hex);
	return faccessat(c->trees, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

int tb_image_lazy_open(tb_image_cache_t *c, const tb_image_ref_t *ref, const char *credentials,
		       tb_image_lazy_t **out, tb_error_t *err)
{
	tb_image_lazy_t *l = calloc(1, sizeof(*l));
	tb_oci_manifest_t *m = malloc(sizeof(*m));
	uint64_t t0 = tb_mono_ms();
	int rc = 0, served = 0, building = -1;

	*out = NULL;
	if (!l || !m)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	if (rc == 0) {
		l->ref = *ref;
		rc = open_source(c, ref, credentials, &l->src, err);
	}
	/* shared while blobs are put in: eviction waits */
	if (rc == 0 && (building = lock_at(c->locks, TRIM_LOCK, LOCK_SH)) < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "image cache: its lock");
	if (rc == 0 &&
	    (rc = find_manifest(c, l->src, ref, m, l->digest, &l->fetched, &served, err)) == 0)
		rc = authorize(c, l->src, ref, served, err);
	if (rc == 0 && have_tree(c, l->digest + 7)) {
		tb_error_set(err, TB_EEXIST, "the cache has it");
		rc = 1;
	}
	if (rc == 0 && (rc = lazy_config(c, l, m, err)) == 0)
		rc = lazy_layers(c, l, m, err);
	if (building >= 0)
		close(building);
	if (rc == 0) /* a hint: never a reason not to start */
		tb_image_lazy_find_order(c, l);
	free(m);
	if (l)
		l->ms = tb_mono_ms() - t0;
	if (rc != 0) {
		tb_image_lazy_free(l);
		return rc < 0 ? classify(rc, err) : rc;
	}
	*out = l;
	return 0;
}

void tb_image_cache_pull_later(tb_image_cache_t *c, const tb_image_ref_t *ref,
			       const char *credentials, uint64_t max_unpacked)
{
	tb_image_later_add(c->later, ref, credentials, max_unpacked);
}

void tb_image_cache_pull_wait(tb_image_cache_t *c)
{
	tb_image_later_wait(c->later);
}

void tb_image_lazy_free(tb_image_lazy_t *l)
{
	if (!l)
		return;
	for (size_t i = 0; l->ix && i < l->layers.n; i++)
		tb_layer_index_free(l->ix[i]);
	for (size_t i = 0; i < l->layers.n; i++)
		free(l->layers.items[i]);
	free(l->layers.items);
	free(l->ix);
	free(l->blobs);
	tb_read_order_free(l->order);
	tb_oci_config_free(&l->config);
	if (l->src)
		l->src->close(l->src);
	free(l);
}

/* ------------------------------------------------------------ eviction */

typedef struct entry {
	char hex[72];
	uint64_t bytes;
	struct timespec used;
	char **refs; /* a tree's blobs: manifest, index, config, layers */
	size_t nrefs;
} entry_t;

static int older(const void *a, const void *b)
{
	const entry_t *x = a, *y = b;
	if (x->used.tv_sec != y->used.tv_sec)
		return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
	return x->used.tv_nsec < y->used.tv_nsec ? -1 : x->used.tv_nsec > y->used.tv_nsec;
}

static void add_ref(entry_t *e, const char *digest)
{
	char **more = digest && strlen(digest) == 71
			  ? realloc(e->refs, (e->nrefs + 1) * sizeof(char *))
			  : NULL;
	if (more && (more[e->nrefs] = strdup(digest + 7)))
		e->nrefs++;
	if (more)
		e->refs = more;
}

/* The trees (by their records) or the blobs in @p dir, with sizes. */
static size_t list(tb_image_cache_t *c, int dir, int trees, entry_t **out)
{
	struct dirent *de;
	size_t n = 0, cap = 0;
	entry_t *v = NULL;
	int fd = dup(dir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (d)
		rewinddir(d); /* a dup shares the offset: from the start */

	while (d && (de = readdir(d))) {
		struct stat st;
		size_t len = strlen(de->d_name);
		int is_meta = len == 64 + 5 && !strcmp(de->d_name + 64, ".json");
		if (de->d_name[0] == '.' || (trees ? !is_meta : len != 64) ||
		    fstatat(dir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (n == cap) {
			entry_t *more = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));
			if (!more)
				break;
			v = more;
		}
		entry_t *e = &v[n++];
		memset(e, 0, sizeof(*e));
		snprintf(e->hex, sizeof(e->hex), "%.64s", de->d_name);
		e->used = st.st_mtim;
		e->bytes = (uint64_t)st.st_size;
		if (trees) {
			int mfd = openat(dir, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			json_t *o = mfd >= 0 ? json_loadfd(mfd, 0, NULL) : NULL, *l;
			size_t i;
			if (mfd >= 0)
				close(mfd);
			e->bytes = (uint64_t)json_integer_value(json_object_get(o, "bytes"));
			add_ref(e, json_string_value(json_object_get(o, "digest")));
			add_ref(e, json_string_value(json_object_get(o, "top")));
			add_ref(e, json_string_value(json_object_get(o, "config")));
			json_array_foreach(json_object_get(o, "layers"), i, l)
			    add_ref(e, json_string_value(l));
			json_decref(o);
		}
	}
	if (d)
		closedir(d);
	(void)c;
	*out = v;
	return n;
}

static void free_list(entry_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < v[i].nrefs; k++)
			free(v[i].refs[k]);
		free(v[i].refs);
	}
	free(v);
}

static int named(const entry_t *trees, size_t n, const char *hex)
{
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; trees[i].hex[0] && k < trees[i].nrefs; k++)
			if (!strcmp(trees[i].refs[k], hex))
				return 1;
	return 0;
}

void tb_image_cache_trim(tb_image_cache_t *c)
{
	int all = lock_at(c->locks, TRIM_LOCK, LOCK_EX | LOCK_NB);
	entry_t *trees = NULL, *blobs = NULL;
	uint64_t total = 0;
	char name[128];

	if (all < 0)
		return; /* an image is being made: the next one trims */
	size_t nt = list(c, c->trees, 1, &trees), nb = list(c, c->blobs, 0, &blobs);
	for (size_t i = 0; i < nt; i++)
		total += trees[i].bytes;
	for (size_t i = 0; i < nb; i++)
		total += blobs[i].bytes;
	if (nt) /* qsort wants a non-null array, even of none */
		qsort(trees, nt, sizeof(*trees), older);
	if (nb)
		qsort(blobs, nb, sizeof(*blobs), older);
	for (size_t i = 0; i < nt && total > c->max; i++) {
		int lock = lock_at(c->locks, trees[i].hex, LOCK_EX | LOCK_NB);
		if (lock < 0)
			continue; /* in use */
		snprintf(name, sizeof(name), "%s.json", trees[i].hex);
		unlinkat(c->trees, name, 0); /* incomplete from now on */
		snprintf(name, sizeof(name), "evict-%s.%d", trees[i].hex, (int)getpid());
		if (renameat(c->trees, trees[i].hex, c->tmp, name) == 0)
			tb_remove_tree(c->tmp, name);
		close(lock);
		tb_info(NULL, "image cache: evicted %.12s (%llu MiB)", trees[i].hex,
			(unsigned long long)(trees[i].bytes >> 20));
		tb_metrics_image_evicted();
		total -= trees[i].bytes;
		trees[i].hex[0] = '\0'; /* names nothing any more */
	}
	for (size_t i = 0; i < nb && total > c->max; i++)
		if (!named(trees, nt, blobs[i].hex) && unlinkat(c->blobs, blobs[i].hex, 0) == 0)
			total -= blobs[i].bytes;
	size_t kept = 0;
	for (size_t i = 0; i < nt; i++)
		kept += trees[i].hex[0] != '\0';
	atomic_store(&c->images, kept);
	atomic_store(&c->bytes, total);
	free_list(trees, nt);
	free_list(blobs, nb);
	close(all);
}

void tb_image_cache_usage(tb_image_cache_t *c, uint64_t *images, uint64_t *bytes, uint64_t *max)
{
	*images = atomic_load(&c->images);
	*bytes = atomic_load(&c->bytes);
	*max = c->max;
}

void tb_image_cache_set_lazy_budget(tb_image_cache_t *c, uint64_t toc_bytes, uint64_t entries)
{
	c->lazy_budget.bytes = toc_bytes ? toc_bytes : TB_IMAGE_TOC_BYTES_MAX;
	c->lazy_budget.entries = entries ? entries : TB_IMAGE_MAX_ENTRIES;
}

void tb_image_cache_set_stall(tb_image_cache_t *c, unsigned seconds)
{
	atomic_store(&c->stall_seconds, seconds ? seconds : 30);
}

void tb_image_cache_interrupt(tb_image_cache_t *c)
{
	if (c)
		atomic_store(&c->stopping, 1);
}

int tb_image_cache_set_indexes(tb_image_cache_t *c, const tb_layer_indexes_t *where,
			       tb_error_t *err)
{
	tb_layer_index_queue_stop(c->indexer);
	c->indexer = NULL;
	memset(&c->indexes, 0, sizeof(c->indexes));
	if (!where || !where->store || !where->pins.get || !where->pins.put)
		return 0;
	int rc = tb_layer_index_queue_open(&c->indexer, c->blobs, where, err);
	if (rc == 0)
		c->indexes = *where;
	return rc;
}

tb_store_t *tb_image_cache_store(tb_image_cache_t *c)
{
	return c->indexes.store;
}

void tb_image_cache_index_wait(tb_image_cache_t *c, uint64_t *built, uint64_t *ms)
{
	if (c->indexer) {
		tb_layer_index_queue_wait(c->indexer, built, ms);
		return;
	}
	if (built)
		*built = 0;
	if (ms)
		*ms = 0;
}

int tb_image_cache_find_index(tb_image_cache_t *c, const char *layer, tb_layer_index_t **out,
			      tb_error_t *err)
{
	*out = NULL;
	if (!c->indexes.store)
		return tb_error_set(err, TB_ENOTFOUND, "layer %s: no store of indexes here", layer);
	int rc = tb_layer_index_find(&c->indexes, layer, out, err);
	if (rc < 0 && rc != TB_ENOTFOUND)
		tb_warn(NULL, "image cache: layer %.19s... is pulled whole: %s", layer, err->msg);
	tb_metrics_layer_index(rc == 0              ? "found"
			       : rc == TB_ENOTFOUND ? "none"
			       : rc == TB_EINVAL    ? "refused"
						    : "failed");
	return rc;
}

void tb_image_cache_set_authorization_ms(tb_image_cache_t *c, uint64_t ms)
{
	atomic_store(&c->auth_ttl_ms, ms);
}

void tb_image_release(tb_image_t *img)
{
	for (size_t i = 0; i < img->layers.n; i++)
		free(img->layers.items[i]);
	free(img->layers.items);
	img->layers.items = NULL;
	img->layers.n = 0;
	tb_oci_config_free(&img->config);
	if (img->lock >= 0)
		close(img->lock);
	img->lock = -1;
}
