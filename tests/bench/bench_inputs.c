/*
 * bench_inputs.c: inputs read on demand against downloaded whole
 * (`tests/bench/run inputs`), on the local S3 server, side by side:
 *
 *   time to first byte   eager: the whole object downloaded (and checked)
 *                        before the agent could read its first byte; lazy:
 *                        the file system made, mounted, the file opened
 *                        and its first byte read
 *   a MiB from the middle  lazy: its time, and the bytes fetched
 *   sequential read      the whole object read through the lazy file
 *                        system (a cold cache), against the eager download
 *                        (target: within 1.2x)
 *
 * --mb N: the object's size (512 MiB by default). Root (it opens
 * /dev/fuse) and TASKBOX_TEST_S3_* (deploy/local/services env). Each
 * figure is the median of five rounds, each with a fresh block cache; the
 * ratio is the median of each round's own (its lazy read against the
 * download just before it: on a shared machine whose speed drifts from
 * minute to minute, a pair measured together is the fairer comparison).
 */
#include "bench_util.h"
#include "block_cache.h"
#include "lazy_fs.h"

#include "tb/blocks.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 5

static char tmp[] = "/tmp/tb-bench-inputs-XXXXXX";

/* An object of @p size random bytes at @p key, and its block list. */
static int make_object(tb_store_t *s, const char *key, uint64_t size, tb_blocks_t *b)
{
	char path[128];
	tb_error_t err;
	uint64_t x = 0x2545F4914F6CDD1Dull;
	static uint64_t buf[1 << 17];

	snprintf(path, sizeof(path), "%s/object", tmp);
	FILE *f = fopen(path, "we");
	if (!f)
		return -1;
	for (uint64_t done = 0; done < size; done += sizeof(buf)) {
		for (size_t i = 0; i < sizeof(buf) / 8; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[i] = x;
		}
		size_t n = size - done < sizeof(buf) ? (size_t)(size - done) : sizeof(buf);
		if (fwrite(buf, 1, n, f) != n)
			return -1;
	}
	fclose(f);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = fd < 0 || tb_blocks_of_fd(fd, "object", b, NULL, &err) < 0 ||
			 tb_store_put_file(s, key, path, NULL, &err) < 0
		     ? -1
		     : 0;
	if (rc < 0)
		fprintf(stderr, "bench inputs: the object: %s\n",
			fd < 0 ? strerror(errno) : err.msg);
	if (fd >= 0)
		close(fd);
	unlink(path);
	return rc;
}

typedef struct lazy_run {
	tb_lazy_fs_t *fs;
	tb_block_cache_t *cache;
	char at[160], file[200];
} lazy_run_t;

static int lazy_open(lazy_run_t *l, tb_store_t *s, const tb_lazy_file_t *f, int round)
{
	char dir[160];
	tb_error_t err;
	int mfd;

	snprintf(dir, sizeof(dir), "%s/cache-%d", tmp, round);
	if (tb_block_cache_open(&l->cache, dir, 4096ull << 20, &err) < 0)
		return -1;
	tb_lazy_fs_conf_t conf = { .store = s, .cache = l->cache, .files = f, .nfiles = 1 };
	if (tb_lazy_fs_start(&l->fs, &conf, &mfd, &err) < 0) {
		fprintf(stderr, "bench inputs: %s\n", err.msg);
		return -1;
	}
	snprintf(l->at, sizeof(l->at), "%s/m%d", tmp, round);
	mkdir(l->at, 0755);
	int rc = move_mount(mfd, "", AT_FDCWD, l->at, MOVE_MOUNT_F_EMPTY_PATH);
	close(mfd);
	snprintf(l->file, sizeof(l->file), "%s/input", l->at);
	return rc;
}

static void lazy_close(lazy_run_t *l)
{
	umount2(l->at, MNT_DETACH);
	tb_lazy_fs_stop(l->fs);
	tb_block_cache_close(l->cache); /* NULL: kept */
}

static double read_all(const char *path, uint64_t *bytes)
{
	static char buf[1 << 20];
	double t0 = tb_bench_mono_ms();
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	*bytes = 0;
	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		*bytes += (uint64_t)n;
	if (fd >= 0)
		close(fd);
	return tb_bench_mono_ms() - t0;
}

int main(int argc, char **argv)
{
	const char *endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	uint64_t mb = 512;
	double eager[ROUNDS], ttfb[ROUNDS], mid[ROUNDS], seq[ROUNDS], warm_ms[ROUNDS],
	    ratio[ROUNDS], med, p99, base;
	uint64_t mid_fetched = 0, seq_bytes = 0;
	tb_store_config_t cfg = { 0 };
	char url[160], key[64], path[200];
	tb_blocks_t b;
	tb_store_t *s;
	tb_error_t err;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--json"))
			tb_bench_json = 1;
		else if (!strcmp(argv[i], "--mb") && i + 1 < argc)
			mb = strtoull(argv[++i], NULL, 10);
	if (!endpoint || geteuid() != 0 || !mkdtemp(tmp) || unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		fprintf(stderr, "bench inputs: needs root and TASKBOX_TEST_S3_* "
				"(deploy/local/services env)\n");
		return 1;
	}
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	snprintf(url, sizeof(url), "s3://tb-bench-inputs/%d-%lld", (int)getpid(),
		 (long long)time(NULL));
	cfg.url = url, cfg.endpoint = (char *)endpoint,
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(&s, &cfg, &err) < 0 || tb_bench_bucket(s, &err) < 0) {
		fprintf(stderr, "bench inputs: %s\n", err.msg);
		return 1;
	}
	snprintf(key, sizeof(key), "uploads/bench-%llu", (unsigned long long)mb);
	if (make_object(s, key, mb << 20, &b) < 0)
		return 1;
	const tb_lazy_file_t file = { "input", key, &b, NULL };
	for (int r = 0; r < ROUNDS; r++) {
		/* eager: the whole, checked, before the first byte */
		snprintf(path, sizeof(path), "%s/eager", tmp);
		double t0 = tb_bench_mono_ms();
		if (tb_store_get_file(s, key, path, TB_STORE_GET_SHA256, NULL, &err) < 0) {
			fprintf(stderr, "bench inputs: %s\n", err.msg);
			return 1;
		}
		eager[r] = tb_bench_mono_ms() - t0;
		unlink(path);
		/* lazy: made, mounted, opened, a byte read */
		lazy_run_t l;
		char c;
		t0 = tb_bench_mono_ms();
		if (lazy_open(&l, s, &file, r) < 0)
			return 1;
		int fd = open(l.file, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || pread(fd, &c, 1, 0) != 1)
			return 1;
		ttfb[r] = tb_bench_mono_ms() - t0;
		/* a MiB from the middle */
		static char buf[1 << 20];
		uint64_t before = tb_lazy_fs_fetched(l.fs, 0);
		t0 = tb_bench_mono_ms();
		if (pread(fd, buf, sizeof(buf), (off_t)((mb << 20) / 2 + 4096)) != sizeof(buf))
			return 1;
		mid[r] = tb_bench_mono_ms() - t0;
		mid_fetched = tb_lazy_fs_fetched(l.fs, 0) - before;
		close(fd);
		lazy_close(&l);
		/* sequential, whole, a fresh file system and cache */
		if (lazy_open(&l, s, &file, r + ROUNDS) < 0)
			return 1;
		seq[r] = read_all(l.file, &seq_bytes);
		tb_block_cache_t *warm = l.cache;
		l.cache = NULL; /* kept for the warm read */
		lazy_close(&l);
		/* again, on a fresh file system over the cache it filled */
		{
			tb_lazy_fs_conf_t conf = {
				.store = s, .cache = warm, .files = &file, .nfiles = 1
			};
			int mfd;
			if (tb_lazy_fs_start(&l.fs, &conf, &mfd, &err) < 0 ||
			    move_mount(mfd, "", AT_FDCWD, l.at, MOVE_MOUNT_F_EMPTY_PATH) < 0)
				return 1;
			close(mfd);
			l.cache = warm;
			warm_ms[r] = read_all(l.file, &seq_bytes);
			lazy_close(&l);
		}
		if (seq_bytes != mb << 20)
			fprintf(stderr, "bench inputs: read %llu of %llu bytes\n",
				(unsigned long long)seq_bytes, (unsigned long long)(mb << 20));
		snprintf(path, sizeof(path), "rm -rf %s/cache-*", tmp);
		if (system(path) != 0)
			return 1;
	}
	char name[96];
	for (int r = 0; r < ROUNDS; r++) /* before the figures are sorted */
		ratio[r] = seq[r] / eager[r];
	tb_bench_stats(eager, ROUNDS, &base, &p99);
	snprintf(name, sizeof(name), "%llu MiB input: time to first byte, eager",
		 (unsigned long long)mb);
	tb_bench_row("inputs", name, "ms", base, p99, NULL, 0);
	tb_bench_stats(ttfb, ROUNDS, &med, &p99);
	tb_bench_row("inputs", "  lazy (mount, open, first byte)", "ms", med, p99, "eager", base);
	tb_bench_stats(mid, ROUNDS, &med, &p99);
	tb_bench_row("inputs", "  lazy: a MiB from the middle", "ms", med, p99, NULL, 0);
	tb_bench_row("inputs", "  lazy: bytes fetched for it", "MiB",
		     (double)mid_fetched / (1 << 20), (double)mid_fetched / (1 << 20), NULL, 0);
	tb_bench_stats(seq, ROUNDS, &med, &p99);
	tb_bench_row("inputs", "sequential read, lazy (cold cache)", "MB/s",
		     (double)(mb << 20) / 1e3 / med, (double)(mb << 20) / 1e3 / p99, NULL, 0);
	double wmed;
	tb_bench_stats(warm_ms, ROUNDS, &wmed, &p99);
	tb_bench_row("inputs", "sequential read, lazy (warm cache)", "MB/s",
		     (double)(mb << 20) / 1e3 / wmed, (double)(mb << 20) / 1e3 / p99, NULL, 0);
	tb_bench_row("inputs", "  eager download, checked", "MB/s", (double)(mb << 20) / 1e3 / base,
		     (double)(mb << 20) / 1e3 / base, NULL, 0);
	tb_bench_stats(ratio, ROUNDS, &med, &p99);
	tb_bench_row("inputs", "  lazy time / eager time (each round's)", "x", med, p99,
		     "target <= 1.2", 1.2);
	tb_bench_end();
	tb_store_delete(s, key, &err);
	tb_store_close(s);
	tb_blocks_free(&b);
	snprintf(path, sizeof(path), "rm -rf %s", tmp);
	return system(path) == 0 ? 0 : 1;
}
