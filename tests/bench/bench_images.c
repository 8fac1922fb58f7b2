/*
 * bench_images.c: what an environment's image costs, against a real
 * registry (deploy/local/services' docker-registry) holding the images
 * tests/bench/run builds: "big" (~150 MB of the host's libraries in five
 * layers over busybox-static), "second" (big's layers but its top one
 * replaced by a small one) and "small" (busybox-static alone).
 *
 *   cold start      a fresh cache: the image pulled, verified and
 *                   unpacked (tb_image_get), a sandbox built on it and
 *                   /bin/true run in it; against `skopeo copy` of the
 *                   same image to an OCI layout followed by `umoci raw
 *                   unpack` of it (no launch at all), alternated
 *   warm launch     a sandbox prepared on the cached image, assigned,
 *                   /bin/true run; against the same on the host's binds
 *                   (bench_sandbox's "taskbox launch")
 *   cache hit       tb_image_get of a cached image
 *   shared layers   bytes fetched for "second" once "big" is cached,
 *                   against big's
 *   pull RSS        this process's peak resident memory while pulling
 *                   "big", against "small"
 *   indexed pull    a fresh cache that indexes and publishes each gzip
 *                   layer it pulls whole (to a store in a directory, the
 *                   pins in memory: layer_index_store.h), against the
 *                   same pull without, alternated; and how long after
 *                   the pull its indexes are published
 *
 * Usage: bench_images --registry HOST:PORT --big DIGEST --second DIGEST
 *                     --small DIGEST [--repo NAME] [-n ROUNDS] [--json]
 * Needs root (the trees keep their owners; sandboxes).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "image.h"
#include "sandbox.h"

#define LAUNCHES 100

static const char *registry, *repo = "bench/app";
static char dir[] = "/tmp/tb-bench-images-XXXXXX";
static char cache_dir[64], work_root[64];

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

static tb_image_ref_t ref_of(const char *digest)
{
	char text[400];
	tb_image_ref_t r;
	tb_error_t err;
	snprintf(text, sizeof(text), "%s/%s@%s", registry, repo, digest);
	if (tb_image_ref_parse(&r, text, &err) < 0) {
		fprintf(stderr, "bench_images: %s\n", err.msg);
		exit(1);
	}
	return r;
}

/* A fresh cache (the old one removed). */
static tb_image_cache_t *fresh_cache(void)
{
	tb_image_cache_t *c;
	tb_error_t err;
	if (sh("rm -rf %s", cache_dir) < 0 ||
	    tb_image_cache_open(&c, cache_dir, 8ull << 30, &err) < 0) {
		fprintf(stderr, "bench_images: cache: %s\n", err.msg);
		exit(1);
	}
	return c;
}

static int get(tb_image_cache_t *c, const char *digest, tb_image_t *img)
{
	tb_image_ref_t r = ref_of(digest);
	tb_error_t err;
	if (tb_image_get(c, &r, 4ull << 30, NULL, img, &err) < 0) {
		fprintf(stderr, "bench_images: %s: %s\n", digest, err.msg);
		return -1;
	}
	return 0;
}

static tb_sandbox_spec_t spec_for(const char *name, const tb_image_t *img,
				  const tb_strlist_t *binds)
{
	return (tb_sandbox_spec_t){ .name = name,
				    .hostname = "bench",
				    .work_root = work_root,
				    .group = "tbbenchimg",
				    .ro_binds = binds,
				    .image_tree = img ? img->tree : NULL,
				    .writable_mb = 64,
				    .image_hold = img ? img->lock : 0,
				    .workspace_mb = 16,
				    .outputs_mb = 16,
				    .memory_mb = 256,
				    .pids = 64,
				    .cpu_millis = 1000,
				    .max_open_files = 256,
				    .max_file_mb = 64 };
}

/* Runs /bin/true in @p sb (assigned first when @p assign). */
static int run_true(tb_sandbox_t *sb, const tb_sandbox_spec_t *s, int assign)
{
	const char *argv[] = { "/bin/true", NULL }, *envp[] = { NULL };
	tb_sandbox_exec_t ex = { argv, envp, "/", -1, -1, -1, -1, 0 };
	tb_sandbox_exit_t e;
	tb_error_t err;
	int id;
	if ((assign && tb_sandbox_assign(sb, s, &err) != 0) ||
	    tb_sandbox_spawn(sb, &id, &ex, &err) != 0 ||
	    tb_sandbox_wait(sb, id, 10000, &e, &err) != 0 || e.end != TB_SANDBOX_EXITED ||
	    e.code != 0) {
		fprintf(stderr, "bench_images: /bin/true: %s\n", err.msg);
		return -1;
	}
	return 0;
}

/* Cold starts against skopeo copy + umoci raw unpack, alternated. */
static int cold(const tb_seccomp_t *policy, const char *big, int rounds)
{
	double *ours = calloc((size_t)rounds, sizeof(double)), *theirs = calloc((size_t)rounds, 8);
	double *pull = calloc((size_t)rounds, sizeof(double));
	double *unpack = calloc((size_t)rounds, sizeof(double));
	int rc = -1;

	for (int i = 0; i < rounds; i++) {
		double t0 = tb_bench_mono_ms();
		if (sh("rm -rf %s/layout %s/rootfs && skopeo copy -q --src-tls-verify=false "
		       "docker://%s/%s@%s oci:%s/layout:x && umoci --log error raw unpack --image "
		       "%s/layout:x %s/rootfs",
		       dir, dir, registry, repo, big, dir, dir, dir) < 0) {
			fprintf(stderr, "bench_images: skopeo copy + umoci raw unpack failed\n");
			goto out;
		}
		theirs[i] = tb_bench_mono_ms() - t0;
		sh("rm -rf %s/layout %s/rootfs", dir, dir);

		tb_image_cache_t *c = fresh_cache();
		tb_image_t img;
		tb_sandbox_t *sb;
		tb_error_t err;
		t0 = tb_bench_mono_ms();
		if (get(c, big, &img) < 0)
			goto out;
		pull[i] = tb_bench_mono_ms() - t0;
		tb_sandbox_spec_t s = spec_for("cold", &img, NULL);
		if (tb_sandbox_create(&sb, policy, &s, &err) != 0) {
			fprintf(stderr, "bench_images: sandbox: %s\n", err.msg);
			goto out;
		}
		int ran = run_true(sb, &s, 0);
		ours[i] = tb_bench_mono_ms() - t0;
		tb_sandbox_destroy(sb, NULL);
		tb_image_release(&img);
		if (ran < 0)
			goto out;
		/* the same with its blobs in the cache: the unpacking alone */
		sh("rm -rf %s/images/trees/*", cache_dir);
		t0 = tb_bench_mono_ms();
		if (get(c, big, &img) < 0)
			goto out;
		unpack[i] = tb_bench_mono_ms() - t0;
		tb_image_release(&img);
		tb_image_cache_close(c);
	}
	double m, p, bm, bp, pm, pp, um, up;
	tb_bench_stats(unpack, rounds, &um, &up);
	tb_bench_stats(theirs, rounds, &bm, &bp);
	tb_bench_stats(ours, rounds, &m, &p);
	tb_bench_stats(pull, rounds, &pm, &pp);
	tb_bench_row("images", "skopeo copy + umoci raw unpack (big)", "ms", bm, bp, NULL, 0);
	tb_bench_row("images", "pull + verify + unpack (big)", "ms", pm, pp, "skopeo+umoci", bm);
	tb_bench_row("images", "cold start: pull..unpack + launch (big)", "ms", m, p,
		     "skopeo+umoci", bm);
	tb_bench_row("images", "  of which unpacking (blobs cached)", "ms", um, up, "pull", pm);
	rc = 0;
out:
	free(ours);
	free(theirs);
	free(pull);
	free(unpack);
	return rc;
}

/* The pins of the indexed pulls: in memory, cleared each round. */
static struct {
	pthread_mutex_t lock;
	char layer[TB_OCI_MAX_LAYERS][72], digest[TB_OCI_MAX_LAYERS][72];
	int n;
} pins = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int pins_get(void *arg, const char *layer, char out[72], tb_error_t *err)
{
	int rc = TB_ENOTFOUND;
	(void)arg;
	pthread_mutex_lock(&pins.lock);
	for (int i = 0; i < pins.n && rc; i++)
		if (!strcmp(pins.layer[i], layer)) {
			memcpy(out, pins.digest[i], 72);
			rc = 0;
		}
	pthread_mutex_unlock(&pins.lock);
	return rc ? tb_error_set(err, rc, "no pin") : 0;
}

static int pins_put(void *arg, const char *layer, const char *digest, char out[72], tb_error_t *err)
{
	if (pins_get(arg, layer, out, err) == 0)
		return 0;
	pthread_mutex_lock(&pins.lock);
	if (pins.n < TB_OCI_MAX_LAYERS) {
		snprintf(pins.layer[pins.n], 72, "%s", layer);
		snprintf(pins.digest[pins.n++], 72, "%s", digest);
	}
	pthread_mutex_unlock(&pins.lock);
	memcpy(out, digest, 72);
	return 0;
}

/* One pull of @p big into a fresh cache, indexing with @p store (NULL:
 * not): its time, then how long until its layers were indexed and
 * published (the cache's thread, after the pull). */
static int pull_once(const char *big, tb_store_t *store, double *ms, double *after)
{
	tb_image_cache_t *c = fresh_cache();
	tb_layer_indexes_t w = { .store = store, .pins = { pins_get, pins_put, NULL } };
	tb_image_t img;
	tb_error_t err;
	uint64_t built = 0;
	pins.n = 0;
	if (store && tb_image_cache_set_indexes(c, &w, &err) < 0)
		return -1;
	double t0 = tb_bench_mono_ms();
	int rc = get(c, big, &img);
	*ms = tb_bench_mono_ms() - t0;
	if (rc == 0)
		tb_image_release(&img);
	t0 = tb_bench_mono_ms();
	tb_image_cache_index_wait(c, &built, NULL);
	*after = tb_bench_mono_ms() - t0;
	if (store && !built)
		rc = -1; /* (the log says why) */
	tb_image_cache_close(c);
	return rc;
}

/* Whole pulls that index and publish each layer, against whole pulls
 * that do not, alternated. */
static int indexed(const char *big, int rounds)
{
	double *plain = calloc((size_t)rounds, sizeof(double));
	double *with = calloc((size_t)rounds, sizeof(double));
	double *after = calloc((size_t)rounds, sizeof(double));
	tb_store_t *store = NULL;
	tb_error_t err;
	char path[128], cmd[200];
	int rc = -1;

	snprintf(path, sizeof(path), "%s/store", dir);
	for (int i = 0; i < rounds; i++) {
		double unused;
		snprintf(cmd, sizeof(cmd), "rm -rf %s", path);
		tb_store_close(store);
		store = NULL;
		if (system(cmd) != 0 || tb_store_dir_open(&store, path, &err) < 0 ||
		    pull_once(big, NULL, &plain[i], &unused) < 0 ||
		    pull_once(big, store, &with[i], &after[i]) < 0) {
			fprintf(stderr,
				"bench_images: an indexed pull failed (the log says why)\n");
			goto out;
		}
	}
	double pm, pp, wm, wp, bm, bp; /* plain, with indexing, the indexing after */
	tb_bench_stats(plain, rounds, &pm, &pp);
	tb_bench_stats(with, rounds, &wm, &wp);
	tb_bench_stats(after, rounds, &bm, &bp);
	tb_bench_row("images", "pull + verify + unpack (big, again)", "ms", pm, pp, NULL, 0);
	tb_bench_row("images", "  the same, indexing on (the pull alone)", "ms", wm, wp, "pull",
		     pm);
	tb_bench_row("images", "  then its layers indexed + published (nice 10)", "ms", bm, bp,
		     "pull", pm);
	rc = 0;
out:
	tb_store_close(store);
	free(plain);
	free(with);
	free(after);
	return rc;
}

/* Launches on a prepared sandbox: on the cached image, and on host binds. */
static int warm(const tb_seccomp_t *policy, const char *big)
{
	static char *items[] = { "/usr", "/bin", "/lib", "/lib64" };
	static const tb_strlist_t binds = { 4, items };
	double *img_ms = calloc(LAUNCHES, sizeof(double)), *host_ms = calloc(LAUNCHES, 8);
	double *hit_ms = calloc(LAUNCHES, sizeof(double));
	double *prep_img = calloc(LAUNCHES, sizeof(double)), *prep_host = calloc(LAUNCHES, 8);
	tb_image_cache_t *c = fresh_cache();
	tb_image_t img;
	int rc = -1;

	if (get(c, big, &img) < 0)
		goto out;
	tb_image_release(&img);
	for (int i = 0; i < 2 * LAUNCHES + 4; i++) {
		int on_image = i % 2 == 0;
		char name[32];
		tb_sandbox_t *sb;
		tb_error_t err;
		double t0 = tb_bench_mono_ms();
		if (on_image && get(c, big, &img) < 0)
			goto out;
		double hit = tb_bench_mono_ms() - t0;
		snprintf(name, sizeof(name), "w%d", i);
		tb_sandbox_spec_t s = spec_for(name, on_image ? &img : NULL, &binds);
		t0 = tb_bench_mono_ms();
		int prepared = tb_sandbox_prepare(&sb, policy, &s, &err);
		double prep = tb_bench_mono_ms() - t0;
		if (prepared != 0) {
			fprintf(stderr, "bench_images: prepare: %s\n", err.msg);
			goto out;
		}
		t0 = tb_bench_mono_ms();
		int ran = run_true(sb, &s, 1);
		double launch = tb_bench_mono_ms() - t0;
		tb_sandbox_destroy(sb, NULL);
		if (on_image)
			tb_image_release(&img);
		if (ran < 0)
			goto out;
		if (i < 4) /* the first few warm caches */
			continue;
		int k = (i - 4) / 2;
		if (on_image) {
			img_ms[k] = launch;
			hit_ms[k] = hit;
			prep_img[k] = prep;
		} else {
			host_ms[k] = launch;
			prep_host[k] = prep;
		}
	}
	double im, ip, hm, hp, cm, cp;
	tb_bench_stats(host_ms, LAUNCHES, &hm, &hp);
	tb_bench_stats(img_ms, LAUNCHES, &im, &ip);
	tb_bench_stats(hit_ms, LAUNCHES, &cm, &cp);
	tb_bench_row("images", "launch on host binds (prepared)", "ms", hm, hp, NULL, 0);
	tb_bench_row("images", "launch on a cached image (prepared)", "ms", im, ip, "host binds",
		     hm);
	tb_bench_row("images", "cache hit (tb_image_get)", "ms", cm, cp, NULL, 0);
	tb_bench_stats(prep_host, LAUNCHES, &hm, &hp);
	tb_bench_stats(prep_img, LAUNCHES, &im, &ip);
	tb_bench_row("images", "prepare on host binds (while the slot is busy)", "ms", hm, hp, NULL,
		     0);
	tb_bench_row("images", "prepare on a cached image (idem)", "ms", im, ip, "host binds", hm);
	rc = 0;
out:
	tb_image_cache_close(c);
	free(img_ms);
	free(host_ms);
	free(hit_ms);
	free(prep_img);
	free(prep_host);
	return rc;
}

/* Bytes fetched for "second" with "big" cached, against big's. */
static int shared(const char *big, const char *second)
{
	tb_image_cache_t *c = fresh_cache();
	tb_image_t a, b;
	int rc = -1;

	if (get(c, big, &a) == 0) {
		if (get(c, second, &b) == 0) {
			tb_bench_row("images", "fetched for big (cold)", "MiB",
				     (double)a.fetched / (1 << 20), (double)a.fetched / (1 << 20),
				     NULL, 0);
			tb_bench_row("images", "fetched for second (shares all but its top)", "MiB",
				     (double)b.fetched / (1 << 20), (double)b.fetched / (1 << 20),
				     "big", (double)a.fetched / (1 << 20));
			tb_image_release(&b);
			rc = 0;
		}
		tb_image_release(&a);
	}
	tb_image_cache_close(c);
	return rc;
}

/* This process's peak resident memory while pulling @p digest into a
 * fresh cache, in KiB (the peak reset first); @p added: over what it
 * held before. */
static double pull_peak_kib(const char *digest, double *added)
{
	tb_image_cache_t *c = fresh_cache();
	tb_image_t img;
	tb_bench_reset_peak();
	long before = tb_bench_status_kib("VmRSS:");
	double peak = -1;
	if (get(c, digest, &img) == 0) {
		peak = (double)tb_bench_status_kib("VmHWM:");
		tb_image_release(&img);
	}
	*added = peak - (double)before;
	tb_image_cache_close(c);
	return peak;
}

static void rss(const char *small, const char *big)
{
	double sa, ba;
	pull_peak_kib(small, &sa); /* threads' stacks and libraries touched once */
	double s = pull_peak_kib(small, &sa), b = pull_peak_kib(big, &ba);
	tb_bench_row("images", "peak RSS pulling small (~1 MiB)", "KiB", s, s, NULL, 0);
	tb_bench_row("images", "peak RSS pulling big (~150 MiB)", "KiB", b, b, "small", s);
	if (!tb_bench_json)
		printf(
		    "  (the pulls added %.0f KiB and %.0f KiB to what the process held before)\n",
		    sa, ba);
}

int main(int argc, char **argv)
{
	const char *big = NULL, *second = NULL, *small = NULL;
	int rounds = 3;
	tb_seccomp_t *policy;
	tb_error_t err;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			tb_bench_json = 1;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			rounds = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--registry") && i + 1 < argc)
			registry = argv[++i];
		else if (!strcmp(argv[i], "--repo") && i + 1 < argc)
			repo = argv[++i];
		else if (!strcmp(argv[i], "--big") && i + 1 < argc)
			big = argv[++i];
		else if (!strcmp(argv[i], "--second") && i + 1 < argc)
			second = argv[++i];
		else if (!strcmp(argv[i], "--small") && i + 1 < argc)
			small = argv[++i];
	}
	if (!registry || !big || !second || !small || rounds < 1) {
		fprintf(stderr, "usage: bench_images --registry HOST:PORT --big DIGEST --second "
				"DIGEST --small DIGEST [--repo NAME] [-n ROUNDS] [--json]\n");
		return 2;
	}
	if (geteuid() != 0 || !mkdtemp(dir) || tb_seccomp_compile(&policy, &err) != 0) {
		fprintf(stderr, "bench_images: needs root and a writable /tmp\n");
		return 1;
	}
	chmod(dir, 0711); /* init, in its user namespace, builds on work_root */
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", dir);
	snprintf(work_root, sizeof(work_root), "%s/work", dir);
	mkdir(work_root, 0711);
	if (!tb_bench_json)
		printf("images: %d cold starts each way, %d launches each way, from %s\n", rounds,
		       LAUNCHES, registry);
	int rc = cold(policy, big, rounds) || indexed(big, rounds) || warm(policy, big) ||
		 shared(big, second);
	if (!rc)
		rss(small, big);
	tb_bench_end();
	if (!tb_bench_json)
		printf("  targets: cold start <= 0.7x skopeo+umoci; launch on a cached image <= "
		       "1.2x host binds;\n"
		       "  second fetches only its top layer; peak RSS flat in the image's size\n");
	tb_sandbox_sweep(work_root, "tbbenchimg", &err);
	sh("rm -rf %s", dir);
	return rc ? 1 : 0;
}
