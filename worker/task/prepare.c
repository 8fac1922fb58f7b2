/*
 * prepare.c: the "prepared" phase (run_int.h): the runtime by name, the recipe
 * at its pinned commit, the limits, the inputs, the environment's image
 * when one is named (pulled whole, or with the worker's image_lazy and
 * each of its layers indexed, eStargz or zstd:chunked, its root read on
 * demand through FUSE: image_fs.h),
 * and the sandbox, from the pool when the worker keeps one (keyed by
 * image: sandbox_pool.h; a root read on demand is never built ahead).
 */
#include "run_int.h"

#include "inputs.h"
#include "tb/clock.h"
#include "tb/fsutil.h"
#include "tb/metrics.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What unpacking the image dropped or changed, into the manifest's
 * environment (each count only when above 0, with its first entry's
 * name). @return 0, or -1 out of memory. */
static int say_altered(tb_environment_altered_t *out, const tb_unpack_altered_t *a)
{
	const uint64_t counts[] = { a->devices, a->setid, a->ids };
	const char *const first[] = { a->device_path, a->setid_path, a->ids_path };
	uint64_t *into[] = { &out->devices, &out->setid, &out->ids };
	char **names[] = { &out->device_path, &out->setid_path, &out->ids_path };

	for (int i = 0; i < 3; i++) {
		if (!counts[i])
			continue;
		*into[i] = counts[i];
		TB_SET_HAS(out, i); /* TB_ALTERED_DEVICES, _SETID, _IDS */
		if (first[i][0] && !(*names[i] = strdup(first[i])))
			return -1;
	}
	return 0;
}

/* Threads fetching a root's spans not read yet into the span cache, in
 * the order a first run of the image read them (its read order, when one
 * was found: read_order.h), and only those: every span of an image
 * fetched for each attempt on every host would cost its registry the
 * whole image while the agent may read a few files. Without an order,
 * none. At the lowest priority, behind the agent's reads (image_fs.h). */
#define IMAGE_PREFETCH 2

/*
 * The root of r->image_lazy served through FUSE for the sandbox's range
 * of host ids: the sandbox's image_root (sandbox.h). Each layer read by
 * ranges from the image's source, each span checked against its index
 * (or each chunk against its layer's TOC) before a byte reaches the
 * sandbox, kept in the worker's span cache.
 * @return the detached mount, or < 0 (r->image_fs NULL: pull it whole).
 */
static int lazy_root(void *arg, uint32_t id_base, tb_error_t *err)
{
	tb_run_t *r = arg;
	const tb_image_lazy_t *l = r->image_lazy;
	tb_image_fs_layer_t *layers = calloc(l->layers.n + 1, sizeof(*layers));
	int mfd = -1, rc;

	if (!layers)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (size_t i = 0; i < l->layers.n; i++)
		layers[i] =
		    (tb_image_fs_layer_t){ l->ix[i], tb_image_source_fetch, &l->blobs[i], NULL };
	tb_image_fs_conf_t conf = {
		.layers = layers,
		.nlayers = l->layers.n,
		.cache = r->ctx->image_spans,
		.limits = { r->rt.sandbox.images.max_unpacked_mb << 20, TB_IMAGE_MAX_ENTRIES },
		.id_base = id_base,
		.prefetch_threads = l->order ? IMAGE_PREFETCH : 0,
		.order = l->order ? l->order->spans : NULL,
		.norder = l->order ? l->order->n : 0,
		.cancel = &r->image_lazy->cancel,
	};
	rc = tb_image_fs_start(&r->image_fs, &conf, &mfd, err);
	free(layers);
	return rc < 0 ? rc : mfd;
}

/* r->image as the manifest and the agent need it (digest, layers,
 * config), from the image read on demand: it holds no tree and no lock. */
static int lazy_image(tb_run_t *r, tb_image_lazy_t *l, tb_error_t *err)
{
	tb_image_t *img = &r->image;

	memset(img, 0, sizeof(*img));
	img->lock = -1;
	snprintf(img->digest, sizeof(img->digest), "%s", l->digest);
	img->config = l->config; /* moved */
	memset(&l->config, 0, sizeof(l->config));
	img->fetched = l->fetched;
	img->ms = l->ms;
	if (!(img->layers.items = calloc(l->layers.n + 1, sizeof(char *))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (size_t i = 0; i < l->layers.n; i++)
		if ((img->layers.items[img->layers.n] = strdup(l->layers.items[i])))
			img->layers.n++;
	if (img->layers.n != l->layers.n)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	r->image_lazy = l;
	return 0;
}

/* With the worker's image_lazy (a span cache), @p ref resolved to be
 * read on demand (image.h tb_image_lazy_open) into r->image and
 * r->image_lazy. @return 0; 1 when it is to be pulled whole (off, cached,
 * a layer with neither an index nor a TOC: said in the log);
 * the error otherwise. */
static int environment_lazy(tb_run_t *r, const tb_image_ref_t *ref, tb_error_t *err)
{
	const tb_images_conf_t *im = &r->rt.sandbox.images;
	tb_image_lazy_t *l;
	int rc;

	if (!r->ctx->image_spans)
		return 1;
	if ((rc = tb_image_lazy_open(r->ctx->images, ref, im->credentials, &l, err)) == 1)
		tb_info(r->task->id, "image %.19s: pulled whole: %s", ref->digest, err->msg);
	if (rc != 0)
		return rc;
	if ((rc = lazy_image(r, l, err)) < 0) {
		tb_image_lazy_free(l);
		tb_image_release(&r->image);
	}
	return rc;
}

/*
 * The environment: the recipe's image, else the runtime's default, else
 * none (the runtime's host binds). The runtime must allow where it comes
 * from; it is made ready (fetched, verified, unpacked: image.h) and held
 * in r->image until the sandbox is gone. @return 0; TB_EPOISON for an
 * image the runtime does not allow or one that is wrong; the image
 * cache's error otherwise.
 */
static int environment(tb_run_t *r, tb_error_t *err)
{
	const tb_images_conf_t *im = &r->rt.sandbox.images;
	const char *name =
	    r->recipe.environment.image ? r->recipe.environment.image : im->default_image;
	tb_image_ref_t ref;
	int rc;

	if (!name)
		return 0;
	if ((rc = tb_image_ref_parse(&ref, name, err)) < 0)
		return err->code = TB_EPOISON; /* the recipe's or runtime's, as written */
	if (!tb_images_allowed(im, &ref))
		return tb_error_set(
		    err, TB_EPOISON,
		    "image %.300s: runtime '%s' does not allow it (sandbox.images.%s "
		    "names where images may come from)",
		    name, r->rt.name, ref.layout ? "layouts" : "allow");
	if (!r->ctx->images)
		return tb_error_set(err, TB_EIO, "image %.300s: this worker keeps no image cache",
				    name);
	if ((rc = environment_lazy(r, &ref, err)) < 0 ||
	    (rc == 1 && (rc = tb_image_get(r->ctx->images, &ref, im->max_unpacked_mb << 20,
					   im->credentials, &r->image, err)) < 0))
		return tb_error_prefix(err, "environment");
	r->has_image = 1;
	tb_environment_ran_t *e = &r->m.environment;
	e->image = strdup(name);
	e->digest = strdup(r->image.digest);
	e->layers.items = calloc(r->image.layers.n + 1, sizeof(char *));
	for (size_t i = 0; e->layers.items && i < r->image.layers.n; i++)
		if ((e->layers.items[e->layers.n] = strdup(r->image.layers.items[i])))
			e->layers.n++;
	if (!e->image || !e->digest || e->layers.n != r->image.layers.n ||
	    say_altered(&e->altered, &r->image.altered) < 0)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	/* said with the "prepared" phase: whether it was ready, and the cost */
	r->phase_image =
	    json_pack("{s:s,s:s,s:b,s:b,s:I,s:I}", "image", name, "digest", r->image.digest,
		      "cached", r->image.cached, "lazy", r->image_lazy != NULL, "ms",
		      (json_int_t)r->image.ms, "fetched_bytes", (json_int_t)r->image.fetched);
	if (r->phase_image && r->image_lazy) /* spans to fetch ahead: its read order's */
		json_object_set_new(
		    r->phase_image, "prefetch_spans",
		    json_integer(r->image_lazy->order ? (json_int_t)r->image_lazy->order->n : 0));
	return 0;
}

/* The sandbox on r's image (its tree, or its root read on demand), or
 * the host binds; what the root read on demand left out or changed into
 * the manifest. */
static int sandbox(tb_run_t *r, tb_sandbox_spec_t *spec, tb_error_t *err)
{
	const tb_lifecycle_ctx_t *ctx = r->ctx;
	int rc;

	spec->image_tree = r->has_image && !r->image_lazy ? r->image.tree : NULL;
	spec->image_hold = spec->image_tree && r->image.lock > 0 ? r->image.lock : 0;
	spec->image_root = r->image_lazy ? lazy_root : NULL;
	spec->image_root_arg = r;
	/* a session's slot gets no successor while it lasts (sandbox_pool.h) */
	int next = r->task->kind != TB_TASK_INTERACTIVE;
	rc = ctx->pool ? tb_sandbox_pool_create(ctx->pool, spec, next, &r->sb, NULL, err)
		       : tb_sandbox_create(&r->sb, ctx->policy, spec, err);
	if (rc == 0 && r->image_fs &&
	    say_altered(&r->m.environment.altered, &tb_image_fs_stats(r->image_fs)->altered) < 0)
		rc = tb_error_set(err, TB_ENOMEM, "out of memory");
	return rc;
}

/* The image read on demand could not be served (its tree refused, no
 * FUSE): pulled whole instead, as without image_lazy. */
static int pull_whole(tb_run_t *r, tb_error_t *err)
{
	const tb_images_conf_t *im = &r->rt.sandbox.images;
	tb_image_ref_t ref = r->image_lazy->ref; /* environment()'s, checked */

	tb_warn(r->task->id, "image %.19s: pulled whole: its root read on demand: %s",
		r->image.digest, err->msg);
	tb_image_lazy_free(r->image_lazy);
	r->image_lazy = NULL;
	tb_image_release(&r->image);
	r->has_image = 0;
	int rc = tb_image_get(r->ctx->images, &ref, im->max_unpacked_mb << 20, im->credentials,
			      &r->image, err);
	if (rc < 0)
		tb_error_prefix(err, "environment");
	r->has_image = rc == 0;
	json_t *said = rc == 0 ? json_pack("{s:b,s:b,s:I,s:I}", "lazy", 0, "cached",
					   r->image.cached, "ms", (json_int_t)r->image.ms,
					   "fetched_bytes", (json_int_t)r->image.fetched)
			       : NULL;
	if (said && r->phase_image) { /* the "prepared" phase says the pull */
		json_object_update(r->phase_image, said);
		json_object_del(r->phase_image, "prefetch_spans");
	}
	json_decref(said);
	return rc;
}

int tb_run_prepare(tb_run_t *r, char *recipe_dir, size_t len, char *inputs_dir, size_t ilen,
		   tb_limits_t *lim, tb_error_t *err)
{
	const tb_lifecycle_ctx_t *ctx = r->ctx;
	char path[4096];
	int rc;

	snprintf(path, sizeof(path), "%s/%s.json", ctx->runtimes_dir, r->task->runtime);
	if ((rc = tb_runtime_load(&r->rt, path, err)) < 0)
		return rc == TB_ENOTFOUND
			   ? tb_error_set(err, TB_EPOISON, "unknown runtime '%s'", r->task->runtime)
			   : rc;
	uint64_t t0 = tb_mono_us();
	if ((rc = tb_recipe_checkout(ctx->recipes, r->task->recipe.url, r->task->recipe.commit,
				     recipe_dir, len, &r->recipe, err)) < 0)
		return rc;
	tb_metrics_step(TB_STEP_RECIPE, tb_mono_us() - t0);
	if ((rc = tb_runtime_limits(lim, &r->rt, &r->recipe.limits, &r->task->limits, err)) < 0)
		return rc;
	inputs_dir[0] = '\0';
	if (r->task->inputs.n) {
		snprintf(inputs_dir, ilen, "%s/%s-inputs-%s-%llu", ctx->work_root, ctx->group,
			 r->task->id, (unsigned long long)r->attempt);
		tb_remove_tree(AT_FDCWD, inputs_dir); /* a crashed attempt's */
		uint64_t lazy_min = ctx->input_cache ? r->rt.sandbox.lazy_inputs_mb << 20 : 0;
		if ((rc = tb_inputs_fetch(ctx->store, ctx->ledger, r->task, inputs_dir, lazy_min,
					  &r->inputs, err)) < 0)
			return rc;
		tb_lazy_fs_conf_t lc = { .store = ctx->store,
					 .cache = ctx->input_cache,
					 .files = r->inputs.files,
					 .nfiles = r->inputs.nlazy };
		if (r->inputs.nlazy &&
		    (rc = tb_lazy_fs_start(&r->lazy, &lc, &r->lazy_mount, err)) < 0)
			return tb_error_prefix(err, "inputs read on demand");
	}
	char name[256];
	snprintf(name, sizeof(name), "%s-%llu", r->task->id, (unsigned long long)r->attempt);
	tb_sandbox_spec_t spec = {
		.name = name,
		.hostname = "task",
		.slot = ctx->slot,
		.work_root = ctx->work_root,
		.group = ctx->group,
		.ro_binds = &r->rt.sandbox.ro_binds,
		.recipe_dir = recipe_dir,
		.inputs_dir = inputs_dir[0] ? inputs_dir : NULL,
		.lazy_mount = r->lazy_mount,
		.lazy_paths = &r->inputs.paths,
		.workspace_mb = r->rt.sandbox.workspace_mb,
		.outputs_mb = lim->outputs_mb,
		.memory_mb = lim->memory_mb,
		.pids = lim->pids,
		.cpu_millis = lim->cpu_millis,
		.max_open_files = r->rt.sandbox.max_open_files,
		.max_file_mb = r->rt.sandbox.max_file_mb,
		.wall_ms = lim->wall_seconds * 1000,
	};
	if ((rc = environment(r, err)) < 0)
		return rc;
	t0 = tb_mono_us();
	spec.writable_mb = r->rt.sandbox.images.writable_mb;
	if ((rc = sandbox(r, &spec, err)) < 0 && r->image_lazy && !r->image_fs &&
	    (rc = pull_whole(r, err)) == 0)
		rc = sandbox(r, &spec, err);
	if (rc == 0)
		tb_metrics_launch(tb_mono_us() - t0);
	if (rc == 0 && ctx->image_spans && r->has_image) /* image_lazy: which root */
		tb_metrics_image_lazy(r->image_fs ? "lazy" : "whole");
	return rc;
}
