/*
 * worker_open.c: what a worker runs with, opened from its configuration
 * in one call (worker.h, tb_worker_open): the recipe and image caches,
 * the seccomp policy, the sandbox's init program found, the host's id
 * registry tried, what a dead worker of the same group left swept, and
 * the lazy inputs' block cache where FUSE serves (and, with image_lazy,
 * the span cache of image roots read on demand), and where the image
 * cache publishes and finds layer indexes (the store, pinned in the
 * ledger). `taskbox worker`, its
 * --check (`taskbox config check`) and `taskbox demo` all open a worker
 * here; the sandbox pool is tb_worker_run()'s.
 */
#include "worker.h"

#include "block_cache.h"
#include "lazy_fs.h"
#include "span_cache.h"
#include "sandbox.h"
#include "sandbox_ids.h"
#include "sandbox_seccomp.h"
#include "tb/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Opens the recipe cache and the image cache (@p image_bytes at most,
 * giving up on a registry silent for @p stall_seconds) under
 * @p cache_dir. @return 0, or the error (nothing left open). */
static int open_caches(const char *cache_dir, uint64_t image_bytes, unsigned stall_seconds,
		       tb_recipe_cache_t **recipes, tb_image_cache_t **images, tb_error_t *err)
{
	*recipes = NULL;
	*images = NULL;
	if (tb_recipe_cache_open(recipes, cache_dir, err) < 0 ||
	    tb_image_cache_open(images, cache_dir, image_bytes, err) < 0) {
		tb_recipe_cache_close(*recipes);
		tb_image_cache_close(*images);
		*recipes = NULL;
		*images = NULL;
		return err->code;
	}
	tb_image_cache_set_stall(*images, stall_seconds);
	return 0;
}

/* A layer index's pin: the ledger's, under "layer-index:<layer hex>"
 * (layer_index_store.h; image/ knows nothing of the ledger). */
static int pin_name(char *out, size_t cap, const char *layer)
{
	return snprintf(out, cap, "layer-index:%.64s", layer + 7) < 0 ? -1 : 0;
}

static int pins_get(void *arg, const char *layer, char out[72], tb_error_t *err)
{
	char name[96];
	pin_name(name, sizeof(name), layer);
	return tb_ledger_pinned(arg, name, out, 72, err);
}

static int pins_put(void *arg, const char *layer, const char *digest, char out[72], tb_error_t *err)
{
	char name[96];
	pin_name(name, sizeof(name), layer);
	return tb_ledger_pin(arg, name, digest, TB_LAYER_INDEX_PIN_TTL_MS, out, 72, err);
}

/* Layer indexes are published and found where the fleet shares a store
 * and a ledger that keeps pins (Redis): written there by workers only.
 * The in-process ledger keeps none: no index (every image pulled whole). */
static void open_indexes(tb_worker_deps_t *d)
{
	if (!d->store || !d->ledger || !tb_ledger_keeps_pins(d->ledger))
		return;
	tb_layer_indexes_t where = {
		.store = d->store,
		.pins = { .get = pins_get, .put = pins_put, .arg = d->ledger },
	};
	tb_error_t err;
	if (tb_image_cache_set_indexes(d->images, &where, &err) < 0)
		tb_warn(NULL, "layer indexes are not published from here: %s", err.msg);
}

/* Every sandbox needs a range of host ids from the host's registry
 * (sandbox_ids.h): one that cannot be taken at start is said now, naming
 * the path, not at the first task. */
static int check_id_registry(tb_error_t *err)
{
	tb_idrange_t probe;
	int rc = tb_idrange_claim(&probe, err);

	if (rc < 0)
		return tb_error_prefix(err,
				       "sandbox id registry (the host's %s, shared by "
				       "every worker on the host; see deploy/README.md)",
				       TB_SANDBOX_ID_REGISTRY);
	tb_idrange_release(&probe);
	return 0;
}

/* What a dead worker with this id left (sandboxes, cgroups, mounts). */
static void sweep(const char *work_dir, const char *group, const char *id)
{
	tb_error_t err;
	int swept = tb_sandbox_sweep(work_dir, group, &err);

	if (swept > 0)
		tb_warn(NULL, "removed %d sandboxes a dead worker %s left behind", swept, id);
	else if (swept < 0)
		tb_warn(NULL, "could not remove all that a dead worker %s left behind: %s", id,
			err.msg);
}

/* The cache of lazy inputs' blocks (cache_dir/inputs), where this worker
 * can serve FUSE (it opens /dev/fuse: the fuse module, root); without it
 * every input is downloaded whole, and the log says why. */
static void open_input_cache(const tb_config_t *cfg, tb_block_cache_t **out)
{
	char dir[4200];
	tb_error_t err;
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);

	*out = NULL;
	if (fd < 0) {
		tb_warn(NULL, "inputs are downloaded whole here: /dev/fuse: %s", strerror(errno));
		return;
	}
	close(fd);
	/* the whole way once: a kernel or container may refuse the mount */
	tb_lazy_fs_conf_t probe = { 0 };
	tb_lazy_fs_t *fs;
	int mfd;
	if (tb_lazy_fs_start(&fs, &probe, &mfd, &err) < 0) {
		tb_warn(NULL, "inputs are downloaded whole here: %s", err.msg);
		return;
	}
	close(mfd);
	tb_lazy_fs_stop(fs);
	snprintf(dir, sizeof(dir), "%s/inputs", cfg->cache_dir);
	if (tb_block_cache_open(out, dir, cfg->input_cache_mb << 20, &err) < 0)
		tb_warn(NULL, "inputs are downloaded whole here: %s", err.msg);
}

/* With image_lazy, where FUSE serves (the inputs' cache opened: @p fuse),
 * the spans of images read on demand (cache_dir/spans, a tenth of
 * image_cache_mb, at least 64 MiB); else every image is pulled whole. */
static void open_image_spans(const tb_config_t *cfg, int fuse, tb_span_cache_t **out)
{
	char dir[4200];
	tb_error_t err;
	uint64_t max = (cfg->image_cache_mb << 20) / 10;

	*out = NULL;
	if (!cfg->image_lazy)
		return;
	if (!fuse) {
		tb_warn(NULL, "image_lazy: images are pulled whole here (no FUSE: see above)");
		return;
	}
	snprintf(dir, sizeof(dir), "%s/spans", cfg->cache_dir);
	max = max < (64u << 20) ? 64u << 20 : max;
	if (tb_span_cache_open(out, dir, max, &err) < 0)
		tb_warn(NULL, "image_lazy: images are pulled whole here: %s", err.msg);
	else
		tb_info(NULL,
			"image_lazy: an image whose layers are all indexed starts read on "
			"demand (spans in %s, %llu MiB at most)",
			dir, (unsigned long long)(max >> 20));
}

int tb_worker_open(tb_worker_deps_t *d, unsigned what, tb_error_t *err)
{
	const tb_config_t *cfg = d->cfg;
	const char *init_path;

	d->recipes = NULL;
	d->images = NULL;
	d->input_cache = NULL;
	d->image_spans = NULL;
	d->policy = NULL;
	if (open_caches(cfg->cache_dir, cfg->image_cache_mb << 20,
			(unsigned)cfg->image_stall_seconds, &d->recipes, &d->images, err) < 0 ||
	    tb_seccomp_compile((tb_seccomp_t **)&d->policy, err) < 0 ||
	    tb_sandbox_find_init(&init_path, err) < 0 || check_id_registry(err) < 0) {
		tb_worker_close(d);
		return err->code;
	}
	open_indexes(d);
	if (what & TB_WORKER_OPEN_SWEEP)
		sweep(cfg->work_dir, d->group, d->worker_id);
	if (what & TB_WORKER_OPEN_INPUTS)
		open_input_cache(cfg, &d->input_cache);
	if (what & TB_WORKER_OPEN_INPUTS)
		open_image_spans(cfg, d->input_cache != NULL, &d->image_spans);
	return 0;
}

void tb_worker_close(tb_worker_deps_t *d)
{
	tb_recipe_cache_close(d->recipes);
	tb_image_cache_close(d->images);
	tb_block_cache_close(d->input_cache);
	tb_span_cache_close(d->image_spans);
	tb_seccomp_free((tb_seccomp_t *)d->policy);
	d->recipes = NULL;
	d->images = NULL;
	d->input_cache = NULL;
	d->image_spans = NULL;
	d->policy = NULL;
}
