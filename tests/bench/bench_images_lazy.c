/*
 * bench_images_lazy.c: issue 49's targets, on an image of ~2 GB that
 * tests/bench/run builds from the host's /usr (busybox-static under
 * layers of ~256 MiB of the host's files, gzip as umoci writes them),
 * pushed to the local registry (deploy/local/services' docker-registry).
 *
 * A first worker pulls it whole with the fleet's indexes set (the
 * services' S3 as the store, their Redis as the ledger that pins each
 * layer's index, as worker_open.c wires them): its layers are indexed
 * and published after the pull (image.h tb_image_cache_set_indexes).
 * Then, in rounds that alternate which path goes first, each path on a
 * fresh host (a new image cache, a new span cache: nothing of the image
 * on the host but the kernel's page cache of the registry's files,
 * which both paths share):
 *
 *   lazy   tb_image_lazy_open (manifest, config, each layer's index
 *          found by its pin and decoded against it), a sandbox built
 *          with its root read on demand through FUSE (image_fs.h, the
 *          conf prepare.c's lazy_root gives it: the worker's span cache,
 *          no prefetch), a hello agent (`/bin/sh -c 'echo hello'`), then
 *          in the same sandbox an agent that reads every file of the
 *          image (`find /bin /usr -type f -exec cat {} +`)
 *   eager  tb_image_get (whole pull, verify, unpack), a sandbox on the
 *          tree, the same two agents
 *
 * For each: the time from the start (the claim's closest equivalent
 * here: what prepare.c does for the image starts with tb_image_lazy_open
 * or tb_image_get) to the hello agent's "hello" read from its stdout (its
 * first instruction, plus its exec), with the bytes fetched until then
 * (manifest, config, the indexes' encodings, the spans read); and to
 * the end of the reading agent. Ratios, never timed assertions.
 *
 * Why the library and not a `taskbox worker`: what the worker does
 * between a claim and tb_image_lazy_open (the lease, the recipe, the
 * inputs) is not the image's and is measured by bench_worker (the
 * per-task overhead, ~15 ms); a worker would also keep the image after
 * a task (the background pull, cache_later.c) and its sandboxes in a
 * pool, where each round here must start from a host that never saw the
 * image. The calls are the worker's, in its order, with its
 * configuration (a lazy root is never built ahead: sandbox_pool.h).
 *
 * Usage: bench_images_lazy --registry HOST:PORT --image DIGEST
 *                          [--repo NAME] [-n ROUNDS] [--json]
 * Needs root, /dev/fuse and TASKBOX_TEST_S3_* and _REDIS (the services).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "image.h"
#include "image_fs.h"
#include "sandbox.h"
#include "span_cache.h"
#include "tb/ledger.h"

#define MAX_UNPACKED (16ull << 30)
#define HELLO "/bin/sh", "-c", "echo hello"
#define READ_ALL                                                                                   \
	"/bin/busybox", "find", "/bin", "/usr", "-type", "f", "-exec", "/bin/busybox", "cat",      \
	    "{}", "+"

static const char *registry, *repo = "bench/huge", *digest;
static char dir[] = "/tmp/tb-bench-lazy-XXXXXX";
static char cache_dir[64], spans_dir[64], work_root[64];
static tb_seccomp_t *policy;
static tb_layer_indexes_t fleet;
static uint64_t layers_bytes, image_bytes, index_bytes;
static unsigned prefetch; /* TB_BENCH_IMAGE_PREFETCH: what prefetching would give */

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0 ? 0 : -1;
}

/* The pins, in the ledger as the worker keeps them (worker_open.c), for
 * an hour: the bench's own prefix. */
static void pin_name(char *out, size_t cap, const char *layer)
{
	snprintf(out, cap, "layer-index:%.64s", layer + 7);
}

static int pins_get(void *arg, const char *layer, char out[72], tb_error_t *err)
{
	char name[96];
	pin_name(name, sizeof(name), layer);
	return tb_ledger_pinned(arg, name, out, 72, err);
}

static int pins_put(void *arg, const char *layer, const char *d, char out[72], tb_error_t *err)
{
	char name[96];
	pin_name(name, sizeof(name), layer);
	return tb_ledger_pin(arg, name, d, 3600 * 1000, out, 72, err);
}

static tb_image_ref_t ref_of(void)
{
	char text[400];
	tb_image_ref_t r;
	tb_error_t err;
	snprintf(text, sizeof(text), "%s/%s@%s", registry, repo, digest);
	if (tb_image_ref_parse(&r, text, &err) < 0) {
		fprintf(stderr, "bench_images_lazy: %s\n", err.msg);
		exit(1);
	}
	return r;
}

/* A host's image cache that never saw the image (the old one removed),
 * publishing to and finding in the fleet's store as a worker's does. */
static tb_image_cache_t *fresh_cache(void)
{
	tb_image_cache_t *c;
	tb_error_t err;
	if (sh("rm -rf %s %s", cache_dir, spans_dir) < 0 ||
	    tb_image_cache_open(&c, cache_dir, 64ull << 30, &err) < 0 ||
	    tb_image_cache_set_indexes(c, &fleet, &err) < 0) {
		fprintf(stderr, "bench_images_lazy: cache: %s\n", err.msg);
		exit(1);
	}
	return c;
}

static tb_sandbox_spec_t spec_for(const char *name)
{
	return (tb_sandbox_spec_t){ .name = name,
				    .hostname = "bench",
				    .work_root = work_root,
				    .group = "tbbenchlazy",
				    .writable_mb = 64,
				    .workspace_mb = 16,
				    .outputs_mb = 16,
				    .memory_mb = 2048,
				    .pids = 64,
				    .cpu_millis = 1000,
				    .max_open_files = 256,
				    .max_file_mb = 64 };
}

/* The root read on demand, as prepare.c's lazy_root serves it. */
typedef struct lazy_root {
	const tb_image_lazy_t *l;
	tb_span_cache_t *spans;
	tb_image_fs_t *fs;
	double ms; /* tb_image_fs_start's */
} lazy_root_t;

static int lazy_root(void *arg, uint32_t id_base, tb_error_t *err)
{
	lazy_root_t *lr = arg;
	const tb_image_lazy_t *l = lr->l;
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
		.cache = lr->spans,
		.limits = { MAX_UNPACKED, TB_IMAGE_MAX_ENTRIES },
		.id_base = id_base,
		.prefetch_threads = prefetch, /* prepare.c's IMAGE_PREFETCH: 0 */
	};
	double t0 = tb_bench_mono_ms();
	rc = tb_image_fs_start(&lr->fs, &conf, &mfd, err);
	lr->ms = tb_bench_mono_ms() - t0;
	free(layers);
	return rc < 0 ? rc : mfd;
}

/* Runs @p argv in @p sb; with @p hello, the time from @p t0 to "hello"
 * on its stdout into *@p at, else to its end. @return 0, or -1 (said). */
static int agent(tb_sandbox_t *sb, const char *const *argv, int hello, double t0, double *at)
{
	const char *envp[] = { "PATH=/bin:/usr/bin", NULL };
	tb_sandbox_exec_t ex = { argv, envp, "/", -1, -1, -1, -1, 0 };
	tb_sandbox_exit_t e = { 0 };
	tb_error_t err = { 0 };
	char out[64];
	size_t n = 0;
	int fds[2], id, rc = 0;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	ex.stdout_fd = hello ? fds[1] : -1;
	if (tb_sandbox_spawn(sb, &id, &ex, &err) != 0) {
		fprintf(stderr, "bench_images_lazy: %s: %s\n", argv[0], err.msg);
		close(fds[0]), close(fds[1]);
		return -1;
	}
	close(fds[1]);
	while (hello && n < sizeof(out) - 1 && !memchr(out, '\n', n)) {
		ssize_t got = read(fds[0], out + n, sizeof(out) - 1 - n);
		if (got <= 0)
			break;
		n += (size_t)got;
	}
	if (hello)
		*at = tb_bench_mono_ms() - t0;
	close(fds[0]);
	if (tb_sandbox_wait(sb, id, 1800 * 1000, &e, &err) != 0 || e.end != TB_SANDBOX_EXITED ||
	    e.code != 0 || (hello && (n < 6 || memcmp(out, "hello\n", 6)))) {
		fprintf(stderr, "bench_images_lazy: %s ended %d, code %d: %s\n",
			argv[hello ? 2 : 1], e.end, e.code, err.msg);
		rc = -1;
	}
	if (!hello)
		*at = tb_bench_mono_ms() - t0;
	return rc;
}

/* One path's figures in one round. */
typedef struct run {
	double open;        /* tb_image_lazy_open, or tb_image_get */
	double root;        /* lazy: tb_image_fs_start (its tree built, mounted) */
	double sandbox;     /* tb_sandbox_create (lazy: the root's start included) */
	double first;       /* from the start to "hello" */
	double all;         /* from the start to the reader's end */
	double before, got; /* MiB fetched until "hello", until the end */
} run_t;

static double mib_of(uint64_t bytes)
{
	return (double)bytes / (1 << 20);
}

static uint64_t spans_fetched(tb_image_fs_t *fs, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += tb_image_fs_fetched(fs, i);
	return sum;
}

/* The encodings of @p l's indexes: what finding them fetched. */
static uint64_t indexes_bytes(const tb_image_lazy_t *l)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < l->layers.n; i++) {
		uint8_t *data;
		size_t len;
		char d[72];
		tb_error_t err;
		if (tb_layer_index_encode(l->ix[i], &data, &len, d, &err) == 0) {
			sum += len;
			free(data);
		}
	}
	return sum;
}

static int lazy_round(run_t *r)
{
	static const char *const hello[] = { HELLO, NULL }, *const all[] = { READ_ALL, NULL };
	tb_image_cache_t *c = fresh_cache();
	tb_image_ref_t ref = ref_of();
	lazy_root_t lr = { 0 };
	tb_image_lazy_t *l = NULL;
	tb_sandbox_t *sb = NULL;
	tb_error_t err;
	char why[1700];
	int rc = -1;

	if (tb_span_cache_open(&lr.spans, spans_dir, 64ull << 30, &err) < 0)
		goto out;
	double t0 = tb_bench_mono_ms();
	if (tb_image_lazy_open(c, &ref, NULL, &l, &err) != 0)
		goto out;
	r->open = tb_bench_mono_ms() - t0;
	lr.l = l;
	tb_sandbox_spec_t s = spec_for("lazy");
	s.image_root = lazy_root;
	s.image_root_arg = &lr;
	double t1 = tb_bench_mono_ms();
	if (tb_sandbox_create(&sb, policy, &s, &err) != 0)
		goto out;
	r->sandbox = tb_bench_mono_ms() - t1;
	r->root = lr.ms;
	if (agent(sb, hello, 1, t0, &r->first) < 0)
		goto out;
	if (!index_bytes)
		index_bytes = indexes_bytes(l);
	r->before = mib_of(l->fetched + index_bytes + spans_fetched(lr.fs, l->layers.n));
	if (agent(sb, all, 0, t0, &r->all) < 0)
		goto out;
	r->got = mib_of(l->fetched + index_bytes + spans_fetched(lr.fs, l->layers.n));
	rc = tb_image_fs_error(lr.fs, why, sizeof(why)) == 0 ? 0 : -1;
	if (rc < 0)
		snprintf(err.msg, sizeof(err.msg), "%s", why);
out:
	if (rc < 0)
		fprintf(stderr, "bench_images_lazy: lazy: %s\n", err.msg);
	tb_sandbox_destroy(sb, NULL);
	tb_image_fs_stop(lr.fs);
	tb_image_lazy_free(l);
	tb_span_cache_close(lr.spans);
	tb_image_cache_close(c);
	return rc;
}

static int eager_round(run_t *r)
{
	static const char *const hello[] = { HELLO, NULL }, *const all[] = { READ_ALL, NULL };
	tb_image_cache_t *c = fresh_cache();
	tb_image_ref_t ref = ref_of();
	tb_sandbox_t *sb = NULL;
	tb_image_t img;
	tb_error_t err;
	int rc = -1;

	double t0 = tb_bench_mono_ms();
	if (tb_image_get(c, &ref, MAX_UNPACKED, NULL, &img, &err) < 0) {
		fprintf(stderr, "bench_images_lazy: eager: %s\n", err.msg);
		tb_image_cache_close(c);
		return -1;
	}
	r->open = tb_bench_mono_ms() - t0;
	tb_sandbox_spec_t s = spec_for("eager");
	s.image_tree = img.tree;
	s.image_hold = img.lock;
	double t1 = tb_bench_mono_ms();
	if (tb_sandbox_create(&sb, policy, &s, &err) != 0)
		fprintf(stderr, "bench_images_lazy: eager: %s\n", err.msg);
	else if ((r->sandbox = tb_bench_mono_ms() - t1, agent(sb, hello, 1, t0, &r->first)) == 0 &&
		 agent(sb, all, 0, t0, &r->all) == 0)
		rc = 0;
	r->before = r->got = mib_of(img.fetched);
	tb_sandbox_destroy(sb, NULL);
	tb_image_release(&img);
	tb_image_cache_close(c);
	return rc;
}

/* What tb_image_lazy_open spends on the indexes: each layer's found (its
 * pin from Redis, its encoding from S3, decoded against the pin), and
 * of that the decoding alone (on the same bytes). */
static void find_indexes(tb_image_cache_t *c, const tb_strlist_t *layers)
{
	double found = 0, decoded = 0;
	tb_error_t err;

	for (size_t i = 0; i < layers->n; i++) {
		tb_layer_index_t *ix, *again;
		uint8_t *data;
		size_t len;
		char d[72];
		double t0 = tb_bench_mono_ms();
		if (tb_image_cache_find_index(c, layers->items[i], &ix, &err) < 0)
			return;
		found += tb_bench_mono_ms() - t0;
		if (tb_layer_index_encode(ix, &data, &len, d, &err) == 0) {
			t0 = tb_bench_mono_ms();
			if (tb_layer_index_decode(data, len, ix->layer, d, &again, &err) == 0)
				tb_layer_index_free(again);
			decoded += tb_bench_mono_ms() - t0;
			free(data);
		}
		tb_layer_index_free(ix);
	}
	tb_bench_row("images-2g", "its indexes found, one after another (pin, GET, decode)", "ms",
		     found, found, NULL, 0);
	tb_bench_row("images-2g", "  of which decoding them", "ms", decoded, decoded, NULL, 0);
}

/* The first worker: the image pulled whole, its layers indexed and
 * published to the fleet; the sizes the ratios are of. */
static int first_worker(void)
{
	tb_image_cache_t *c = fresh_cache();
	tb_image_ref_t ref = ref_of();
	tb_image_t img;
	tb_error_t err;
	uint64_t built = 0, ms = 0;

	double t0 = tb_bench_mono_ms();
	if (tb_image_get(c, &ref, MAX_UNPACKED, NULL, &img, &err) < 0) {
		fprintf(stderr, "bench_images_lazy: first pull: %s\n", err.msg);
		tb_image_cache_close(c);
		return -1;
	}
	double pull = tb_bench_mono_ms() - t0;
	t0 = tb_bench_mono_ms();
	tb_image_cache_index_wait(c, &built, &ms);
	double after = tb_bench_mono_ms() - t0;
	layers_bytes = img.fetched;
	image_bytes = img.bytes;
	if (!tb_bench_json)
		printf("  image: %zu layers, %.0f MiB of gzip layers, %.0f MiB unpacked\n",
		       img.layers.n, (double)layers_bytes / (1 << 20),
		       (double)image_bytes / (1 << 20));
	tb_bench_row("images-2g", "first worker: pull + verify + unpack", "ms", pull, pull, NULL,
		     0);
	tb_bench_row("images-2g", "  then its layers indexed + published", "ms", after, after,
		     "pull", pull);
	size_t n = img.layers.n;
	find_indexes(c, &img.layers);
	tb_image_release(&img);
	tb_image_cache_close(c);
	if (built + 1 < n) { /* busybox's layer may have been published before */
		fprintf(stderr,
			"bench_images_lazy: %llu of %zu layers indexed (the log says why)\n",
			(unsigned long long)built, n);
		return -1;
	}
	return 0;
}

/* Median and p99 of the double at @p off in each of @p n runs. */
static void stats_of(const run_t *r, int n, size_t off, double *median, double *p99)
{
	double *v = calloc((size_t)n, sizeof(double));
	for (int i = 0; v && i < n; i++)
		memcpy(&v[i], (const char *)&r[i] + off, sizeof(double));
	tb_bench_stats(v, v ? n : 0, median, p99);
	free(v);
}

static void rows(const run_t *lazy, const run_t *eager, int n)
{
	double lm, lp, em, ep, mib = (double)layers_bytes / (1 << 20);
	double *ratio = calloc((size_t)n, sizeof(double));
#define BOTH(field)                                                                                \
	(stats_of(lazy, n, offsetof(run_t, field), &lm, &lp),                                      \
	 stats_of(eager, n, offsetof(run_t, field), &em, &ep))

	BOTH(first);
	tb_bench_row("images-2g", "eager: start to hello (pull..unpack, sandbox)", "ms", em, ep,
		     NULL, 0);
	tb_bench_row("images-2g", "lazy: start to hello (target <= 1000 ms)", "ms", lm, lp, "eager",
		     em);
	BOTH(open);
	tb_bench_row("images-2g", "  of which tb_image_lazy_open", "ms", lm, lp, NULL, 0);
	BOTH(root);
	tb_bench_row("images-2g", "  of which its root's tree built + mounted", "ms", lm, lp, NULL,
		     0);
	BOTH(sandbox);
	tb_bench_row("images-2g", "  of which the sandbox (the root's included)", "ms", lm, lp,
		     NULL, 0);
	BOTH(before);
	tb_bench_row("images-2g", "lazy: fetched before hello", "MiB", lm, lp, "gzip layers", mib);
	tb_bench_row("images-2g", "  of which the indexes", "MiB", (double)index_bytes / (1 << 20),
		     (double)index_bytes / (1 << 20), "gzip layers", mib);
	if (!tb_bench_json)
		printf(
		    "  (before hello: %.2f %% of the gzip layers, %.2f %% of the image unpacked; "
		    "target <= 2 %%)\n",
		    100 * lm / mib, 100 * lm * (1 << 20) / (double)image_bytes);
	BOTH(all);
	tb_bench_row("images-2g", "eager: start to every file read", "ms", em, ep, NULL, 0);
	tb_bench_row("images-2g", "lazy: start to every file read (target <= 1.2x)", "ms", lm, lp,
		     "eager", em);
	for (int i = 0; ratio && i < n; i++) /* each round's own, the pair measured together */
		ratio[i] = lazy[i].all / eager[i].all;
	tb_bench_stats(ratio, ratio ? n : 0, &lm, &lp);
	tb_bench_row("images-2g", "  lazy / eager, each round's", "x", lm, lp, NULL, 0);
	BOTH(got);
	tb_bench_row("images-2g", "lazy: fetched by the end", "MiB", lm, lp, "gzip layers", mib);
#undef BOTH
	free(ratio);
}

/* The fleet's store and ledger: the services' S3 and Redis. */
static int fleet_open(tb_store_t **store, tb_ledger_t **ledger)
{
	const char *endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT"),
		   *redis = getenv("TASKBOX_TEST_REDIS");
	tb_store_config_t cfg = { 0 };
	char url[128], prefix[64];
	tb_error_t err;

	if (!endpoint || !redis || !getenv("TASKBOX_TEST_S3_ACCESS_KEY") ||
	    !getenv("TASKBOX_TEST_S3_SECRET_KEY"))
		return -1;
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	snprintf(url, sizeof(url), "s3://tb-bench-images/%d-%lld", (int)getpid(),
		 (long long)time(NULL));
	snprintf(prefix, sizeof(prefix), "tbbench%d", (int)getpid());
	cfg.url = url;
	cfg.endpoint = (char *)endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(store, &cfg, &err) < 0 || tb_bench_bucket(*store, &err) < 0 ||
	    tb_ledger_open(ledger, redis, prefix, "bench", &err) < 0) {
		fprintf(stderr, "bench_images_lazy: %s\n", err.msg);
		return -1;
	}
	fleet = (tb_layer_indexes_t){ *store, { pins_get, pins_put, *ledger } };
	return 0;
}

static int store_drop(void *ud, const char *key, const tb_object_info_t *info)
{
	tb_error_t err;
	(void)info;
	tb_store_delete(ud, key, &err);
	return 0;
}

int main(int argc, char **argv)
{
	tb_store_t *store = NULL;
	tb_ledger_t *ledger = NULL;
	tb_error_t err;
	int rounds = 3, rc = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			tb_bench_json = 1;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			rounds = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--registry") && i + 1 < argc)
			registry = argv[++i];
		else if (!strcmp(argv[i], "--repo") && i + 1 < argc)
			repo = argv[++i];
		else if (!strcmp(argv[i], "--image") && i + 1 < argc)
			digest = argv[++i];
	}
	if (getenv("TB_BENCH_IMAGE_PREFETCH"))
		prefetch = (unsigned)strtoul(getenv("TB_BENCH_IMAGE_PREFETCH"), NULL, 10);
	if (!registry || !digest || rounds < 1) {
		fprintf(stderr, "usage: bench_images_lazy --registry HOST:PORT --image DIGEST "
				"[--repo NAME] [-n ROUNDS] [--json]\n");
		return 2;
	}
	if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0 || !mkdtemp(dir) ||
	    tb_seccomp_compile(&policy, &err) != 0 || fleet_open(&store, &ledger) < 0) {
		fprintf(stderr, "bench_images_lazy: needs root, /dev/fuse, a writable /tmp and "
				"TASKBOX_TEST_S3_* and _REDIS (deploy/local/services env)\n");
		return 1;
	}
	chmod(dir, 0711); /* init, in its user namespace, builds on work_root */
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", dir);
	snprintf(spans_dir, sizeof(spans_dir), "%s/spans", dir);
	snprintf(work_root, sizeof(work_root), "%s/work", dir);
	mkdir(work_root, 0711);
	run_t *lazy = calloc((size_t)rounds, sizeof(run_t)),
	      *eager = calloc((size_t)rounds, sizeof(run_t));
	if (!tb_bench_json)
		printf("images-2g: %d rounds each way, alternated, from %s%s\n", rounds, registry,
		       prefetch ? " (TB_BENCH_IMAGE_PREFETCH: the lazy root prefetching)" : "");
	if (lazy && eager && first_worker() == 0) {
		rc = 0;
		for (int i = 0; i < rounds && !rc; i++) /* which goes first alternates */
			rc = i % 2 ? eager_round(&eager[i]) || lazy_round(&lazy[i])
				   : lazy_round(&lazy[i]) || eager_round(&eager[i]);
		if (!rc)
			rows(lazy, eager, rounds);
	}
	tb_bench_end();
	if (!tb_bench_json && !rc)
		printf("  targets: lazy start to hello <= 1 s, fetching <= 2 %% of the image;\n"
		       "  every file read lazily <= 1.2x eager\n");
	free(lazy);
	free(eager);
	tb_store_list(store, "", store_drop, store, &err);
	tb_store_close(store);
	tb_ledger_close(ledger);
	tb_sandbox_sweep(work_root, "tbbenchlazy", &err);
	sh("rm -rf %s", dir);
	return rc;
}
