/*
 * test_lazy_fs.c: inputs read on demand (worker/lazy/lazy_fs.h), against
 * the real S3 server: a file shows its size at once and only what is read
 * is fetched, by ranged GETs; a block that is not the content named fails
 * its read with EIO and says which; a second reader is served from the
 * block cache; nothing is writable. Needs root (it opens /dev/fuse) and
 * TASKBOX_TEST_S3_* (tests/run); the file system is moved into a mount
 * namespace of the test's own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "block_cache.h"
#include "lazy_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define SIZE (40u * TB_BLOCK_SIZE + 12345)

static struct {
	tb_store_t *store;
	char tmp[64];
	uint8_t *data; /* the object's content */
	char key[128];
	tb_blocks_t blocks;
	int n; /* mount points made */
} F;

static int memfd_of(const void *data, size_t len)
{
	int fd = memfd_create("lazy", MFD_CLOEXEC);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		return -1;
	return fd;
}

static int setup(void **state)
{
	const char *endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	tb_store_config_t cfg = { 0 };
	char url[128], bucket[64];
	tb_error_t err;

	(void)state;
	if (geteuid() != 0 || !endpoint || access("/dev/fuse", R_OK | W_OK) < 0) {
		printf("SKIP: needs root, /dev/fuse and TASKBOX_TEST_S3_* (tests/run)\n");
		exit(77);
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	snprintf(bucket, sizeof(bucket), "tb-lazy-%d", getpid());
	snprintf(url, sizeof(url), "s3://%s/runs", bucket);
	cfg.url = url;
	cfg.endpoint = (char *)endpoint;
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(&F.store, &cfg, &err) != 0 ||
	    tb_store_create_bucket(F.store, &err) != 0) {
		fprintf(stderr, "s3 setup: %s\n", err.msg);
		return -1;
	}
	snprintf(F.tmp, sizeof(F.tmp), "/tmp/tb-lazy-XXXXXX");
	if (!mkdtemp(F.tmp) || !(F.data = malloc(SIZE)))
		return -1;
	uint64_t x = 88172645463325252ull ^ (uint64_t)getpid(); /* xorshift: no two blocks alike */
	for (size_t i = 0; i < SIZE; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		F.data[i] = (uint8_t)x;
	}
	int fd = memfd_of(F.data, SIZE);
	snprintf(F.key, sizeof(F.key), "uploads/lazy-%d", getpid());
	if (fd < 0 || tb_blocks_of_fd(fd, "data", &F.blocks, NULL, &err) != 0 ||
	    tb_store_put_fd(F.store, F.key, fd, NULL, &err) != 0) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	tb_blocks_free(&F.blocks);
	free(F.data);
	tb_store_close(F.store);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", F.tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* Starts a file system of @p files and mounts it at a fresh directory,
 * into @p at. */
static tb_lazy_fs_t *mounted(const tb_lazy_file_t *files, size_t n, tb_block_cache_t *cache,
			     char *at, size_t cap)
{
	tb_lazy_fs_conf_t conf = { .store = F.store, .cache = cache, .files = files, .nfiles = n };
	tb_lazy_fs_t *fs;
	tb_error_t err;
	int mfd;

	if (tb_lazy_fs_start(&fs, &conf, &mfd, &err) != 0)
		fail_msg("start: %s", err.msg);
	snprintf(at, cap, "%s/m%d", F.tmp, F.n++);
	assert_int_equal(mkdir(at, 0755), 0);
	if (move_mount(mfd, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		fail_msg("move_mount: %s", strerror(errno));
	close(mfd);
	return fs;
}

static void unmounted(tb_lazy_fs_t *fs, const char *at)
{
	assert_int_equal(umount2(at, MNT_DETACH), 0);
	tb_lazy_fs_stop(fs);
}

static void read_at(const char *path, uint64_t off, size_t len, uint8_t *buf)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, len, (off_t)off), (ssize_t)len);
	close(fd);
}

static void test_lazy__a_file_is_there_at_once_and_only_what_is_read_is_fetched(void **state)
{
	const tb_lazy_file_t files[] = { { "data.bin", F.key, &F.blocks, NULL } };
	char at[128], path[160];
	struct stat st;
	uint8_t *buf = malloc(TB_BLOCK_SIZE);

	(void)state;
	tb_lazy_fs_t *fs = mounted(files, 1, NULL, at, sizeof(at));
	snprintf(path, sizeof(path), "%s/data.bin", at);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, SIZE);
	assert_int_equal(st.st_mode & 07777, 0444);
	assert_int_equal(tb_lazy_fs_fetched(fs, 0), 0); /* nothing read, nothing fetched */
	/* a MiB from the middle, across two blocks */
	const uint64_t off = 3 * TB_BLOCK_SIZE + TB_BLOCK_SIZE / 2;
	read_at(path, off, TB_BLOCK_SIZE, buf);
	assert_memory_equal(buf, F.data + off, TB_BLOCK_SIZE);
	uint64_t fetched = tb_lazy_fs_fetched(fs, 0);
	printf("  read 1 MiB of %u: %llu bytes fetched\n", SIZE, (unsigned long long)fetched);
	/* its two blocks, and at most the kernel's read-ahead past them */
	assert_true(fetched >= 2 * TB_BLOCK_SIZE && fetched <= 4 * TB_BLOCK_SIZE);
	/* the end, shorter than a block */
	read_at(path, SIZE - 100, 100, buf);
	assert_memory_equal(buf, F.data + SIZE - 100, 100);
	/* the directory holds it and nothing else; nothing is writable */
	DIR *d = opendir(at);
	struct dirent *de;
	int names = 0;
	assert_non_null(d);
	while ((de = readdir(d)))
		names +=
		    de->d_name[0] != '.' ? (assert_string_equal(de->d_name, "data.bin"), 1) : 0;
	closedir(d);
	assert_int_equal(names, 1);
	assert_int_equal(open(path, O_WRONLY | O_CLOEXEC), -1);
	assert_int_equal(errno, EROFS);
	snprintf(path, sizeof(path), "%s/new", at);
	assert_int_equal(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644), -1);
	char why[256];
	assert_int_equal(tb_lazy_fs_error(fs, why, sizeof(why)), 0);
	assert_string_equal(why, "");
	unmounted(fs, at);
	free(buf);
}

static void test_lazy__a_block_that_is_not_the_content_named_fails_its_read(void **state)
{
	tb_blocks_t other;
	tb_error_t err;
	char at[128], path[160], why[512];
	uint8_t *buf = malloc(TB_BLOCK_SIZE);

	(void)state;
	/* the list of a content whose block 2 differs from what is stored */
	F.data[2 * TB_BLOCK_SIZE + 7] ^= 0x40;
	int fd = memfd_of(F.data, SIZE);
	F.data[2 * TB_BLOCK_SIZE + 7] ^= 0x40;
	assert_int_equal(tb_blocks_of_fd(fd, "other", &other, NULL, &err), 0);
	close(fd);
	const tb_lazy_file_t files[] = { { "data.bin", F.key, &other, NULL } };
	tb_lazy_fs_t *fs = mounted(files, 1, NULL, at, sizeof(at));
	snprintf(path, sizeof(path), "%s/data.bin", at);
	read_at(path, 0, 4096, buf); /* block 0 is what it should be */
	assert_memory_equal(buf, F.data, 4096);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, 4096, 2 * TB_BLOCK_SIZE), -1);
	assert_int_equal(errno, EIO);
	close(fd);
	assert_int_equal(tb_lazy_fs_error(fs, why, sizeof(why)), TB_EPOISON); /* for good */
	printf("  %s\n", why);
	assert_non_null(strstr(why, "input data.bin: block 2 (bytes 2097152 to 3145727)"));
	unmounted(fs, at);
	tb_blocks_free(&other);
	free(buf);
}

/* Reads the file at @p path from its start in pieces of 96 KiB (they
 * straddle blocks, as cat's and Python's reads do), checking each, up to
 * @p upto bytes; the file stays open, its descriptor returned. */
static int read_in_pieces(const char *path, uint64_t upto)
{
	uint8_t *buf = malloc(96 << 10);
	uint64_t have = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_non_null(buf);
	assert_true(fd >= 0);
	while (have < upto) {
		ssize_t n = read(fd, buf, 96 << 10);
		assert_true(n > 0);
		assert_memory_equal(buf, F.data + have, (size_t)n);
		have += (uint64_t)n;
	}
	free(buf);
	return fd;
}

/* Bytes fetched by @p fs once they reach @p want, or after 2 s
 * (bounded: 200 looks, 10 ms apart). */
static uint64_t fetched_by_then(tb_lazy_fs_t *fs, uint64_t want)
{
	for (int i = 0; i < 200 && tb_lazy_fs_fetched(fs, 0) < want; i++)
		usleep(10 * 1000);
	return tb_lazy_fs_fetched(fs, 0);
}

/* A reader going through a file in pieces that straddle blocks (reads
 * of 96 KiB: cat's, Python's are as odd) has the blocks ahead fetched
 * before it asks: its first four MiB are followed by the rest. */
static void test_lazy__a_sequential_reader_has_blocks_fetched_ahead(void **state)
{
	const tb_lazy_file_t files[] = { { "data.bin", F.key, &F.blocks, NULL } };
	tb_block_cache_t *cache;
	tb_error_t err;
	char at[128], dir[128], path[160];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/cache-ahead", F.tmp);
	assert_int_equal(tb_block_cache_open(&cache, dir, 64u << 20, &err), 0);
	tb_lazy_fs_t *fs = mounted(files, 1, cache, at, sizeof(at));
	snprintf(path, sizeof(path), "%s/data.bin", at);
	int fd = read_in_pieces(path, 4 * TB_BLOCK_SIZE);
	uint64_t fetched = fetched_by_then(fs, SIZE);
	printf("  read 4 MiB, %llu fetched\n", (unsigned long long)fetched);
	assert_int_equal(fetched, SIZE); /* all: it is within the window */
	close(fd);
	unmounted(fs, at);
	tb_block_cache_close(cache);
}

/* A cache warm in places (another task read a few blocks here and there)
 * does not stop the read-ahead: the blocks between the kept ones are
 * fetched ahead of a sequential reader all the same. */
static void test_lazy__blocks_between_kept_ones_are_fetched_ahead(void **state)
{
	const tb_lazy_file_t files[] = { { "data.bin", F.key, &F.blocks, NULL } };
	tb_block_cache_t *cache;
	tb_error_t err;
	char at[128], dir[128], path[160];
	uint8_t *buf = malloc(4096);

	(void)state;
	snprintf(dir, sizeof(dir), "%s/cache-gaps", F.tmp);
	assert_int_equal(tb_block_cache_open(&cache, dir, 64u << 20, &err), 0);
	/* the first task: a few blocks, far apart (not a sequential read) */
	tb_lazy_fs_t *fs = mounted(files, 1, cache, at, sizeof(at));
	snprintf(path, sizeof(path), "%s/data.bin", at);
	for (uint64_t b = 8; b < SIZE / TB_BLOCK_SIZE; b += 8)
		read_at(path, b * TB_BLOCK_SIZE, 4096, buf);
	unmounted(fs, at);
	uint64_t kept = tb_block_cache_bytes(cache);
	assert_true(kept >= 4 * TB_BLOCK_SIZE && kept < SIZE / 2);
	/* the second: from the start, in order */
	fs = mounted(files, 1, cache, at, sizeof(at));
	snprintf(path, sizeof(path), "%s/data.bin", at);
	int fd = read_in_pieces(path, 4 * TB_BLOCK_SIZE);
	uint64_t fetched = fetched_by_then(fs, SIZE - kept);
	printf("  %llu bytes kept before; %llu fetched\n", (unsigned long long)kept,
	       (unsigned long long)fetched);
	assert_int_equal(fetched, SIZE - kept); /* all but the kept */
	close(fd);
	unmounted(fs, at);
	tb_block_cache_close(cache);
	free(buf);
}

/* With a cache, blocks are fetched ahead of a reader in runs, one GET for
 * many, each checked on its own: the reader gets every byte before a bad
 * block (BAD: well into the read, in a run fetched ahead), the bad one
 * fails its read, and it is never kept. */
#define BAD 30
static void test_lazy__a_bad_block_fetched_ahead_fails_only_from_there(void **state)
{
	tb_blocks_t other;
	tb_block_cache_t *cache;
	tb_error_t err;
	char at[128], dir[128], path[160], why[512];
	uint8_t *buf = malloc(128 << 10);
	uint64_t have = 0;
	ssize_t n = 0;

	(void)state;
	F.data[BAD * TB_BLOCK_SIZE + 99] ^= 0x01;
	int fd = memfd_of(F.data, SIZE);
	F.data[BAD * TB_BLOCK_SIZE + 99] ^= 0x01;
	assert_int_equal(tb_blocks_of_fd(fd, "other", &other, NULL, &err), 0);
	close(fd);
	snprintf(dir, sizeof(dir), "%s/cache-bad", F.tmp);
	assert_int_equal(tb_block_cache_open(&cache, dir, 64u << 20, &err), 0);
	const tb_lazy_file_t files[] = { { "data.bin", F.key, &other, NULL } };
	tb_lazy_fs_t *fs = mounted(files, 1, cache, at, sizeof(at));
	snprintf(path, sizeof(path), "%s/data.bin", at);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	while (have < SIZE && (n = read(fd, buf, 128 << 10)) > 0) {
		assert_memory_equal(buf, F.data + have, (size_t)n);
		have += (uint64_t)n;
	}
	assert_int_equal(n, -1);
	assert_int_equal(errno, EIO);
	assert_int_equal(have, BAD * TB_BLOCK_SIZE); /* all before it */
	/* blocks past the bad one were fetched: by the runs ahead, the one
	 * with the bad block among them (the reader never asked for them) */
	assert_true(tb_lazy_fs_fetched(fs, 0) > (uint64_t)(BAD + 1) * TB_BLOCK_SIZE);
	close(fd);
	assert_int_equal(tb_lazy_fs_error(fs, why, sizeof(why)), TB_EPOISON);
	assert_non_null(strstr(why, "input data.bin: block 30 "));
	unmounted(fs, at); /* the blocks handed to the cache are written by now */
	for (size_t b = 0; b < BAD; b++)
		assert_true(tb_block_cache_has(cache, &other, b));
	assert_false(tb_block_cache_has(cache, &other, BAD));
	tb_block_cache_close(cache);
	tb_blocks_free(&other);
	free(buf);
}

static void test_lazy__a_second_reader_is_served_from_the_cache(void **state)
{
	const tb_lazy_file_t files[] = { { "a.bin", F.key, &F.blocks, NULL } };
	tb_block_cache_t *cache;
	tb_error_t err;
	char at[128], dir[128], path[256];
	uint8_t *all = malloc(SIZE);

	(void)state;
	snprintf(dir, sizeof(dir), "%s/cache", F.tmp);
	assert_int_equal(tb_block_cache_open(&cache, dir, 64u << 20, &err), 0);
	for (int round = 0; round < 2; round++) {
		tb_lazy_fs_t *fs = mounted(files, 1, cache, at, sizeof(at));
		snprintf(path, sizeof(path), "%s/a.bin", at);
		read_at(path, 0, SIZE, all);
		assert_memory_equal(all, F.data, SIZE);
		/* the first reads it all from the store, the second none */
		assert_int_equal(tb_lazy_fs_fetched(fs, 0), round == 0 ? SIZE : 0);
		/* the kernel reads ahead a block at a time, not 128 KiB */
		struct stat st;
		char ra[128], kb[16] = "";
		assert_int_equal(stat(path, &st), 0);
		snprintf(ra, sizeof(ra), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
			 minor(st.st_dev));
		FILE *f = fopen(ra, "re");
		assert_non_null(f);
		assert_non_null(fgets(kb, sizeof(kb), f));
		fclose(f);
		assert_int_equal(strtol(kb, NULL, 10), TB_BLOCK_SIZE / 1024);
		unmounted(fs, at);
	}
	assert_int_equal(tb_block_cache_bytes(cache), SIZE);
	/* kept in one file, the content's */
	snprintf(path, sizeof(path), "%s/%s.blocks", dir, F.blocks.digest);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, SIZE);
	DIR *d = opendir(dir);
	int files_there = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		files_there += de->d_name[0] != '.';
	closedir(d);
	assert_int_equal(files_there, 1);
	tb_block_cache_close(cache);
	free(all);
}

/* A store that is down fails the read too, but as the store's failure,
 * which may pass (the attempt is tried again), not as the content's. */
static void test_lazy__a_store_that_is_down_fails_the_read_for_now(void **state)
{
	tb_store_config_t cfg = { 0 };
	tb_store_t *dead;
	tb_error_t err;
	char at[128], path[160], why[512], buf[16];

	(void)state;
	cfg.url = (char *)"s3://tb-lazy-dead/runs";
	cfg.endpoint = (char *)"http://127.0.0.1:9"; /* discard: nothing listens */
	cfg.region = (char *)"us-east-1";
	assert_int_equal(tb_store_open(&dead, &cfg, &err), 0);
	const tb_lazy_file_t files[] = { { "data.bin", F.key, &F.blocks, NULL } };
	tb_lazy_fs_conf_t conf = { .store = dead, .files = files, .nfiles = 1 };
	tb_lazy_fs_t *fs;
	int mfd;
	if (tb_lazy_fs_start(&fs, &conf, &mfd, &err) != 0)
		fail_msg("start: %s", err.msg);
	snprintf(at, sizeof(at), "%s/m%d", F.tmp, F.n++);
	assert_int_equal(mkdir(at, 0755), 0);
	assert_int_equal(move_mount(mfd, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH), 0);
	close(mfd);
	snprintf(path, sizeof(path), "%s/data.bin", at);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, sizeof(buf), 0), -1);
	assert_int_equal(errno, EIO);
	close(fd);
	int code = tb_lazy_fs_error(fs, why, sizeof(why));
	printf("  %s\n", why);
	assert_int_equal(code, TB_EIO);
	assert_non_null(strstr(why, "input data.bin: s3 GET"));
	unmounted(fs, at);
	tb_store_close(dead);
}

/* Readers by the hundred, 10,000 random reads between them, at once: the
 * file system serves them with its few threads and slots (the rest wait
 * in the kernel), every byte right, each block fetched once (with the
 * worker's block cache, as a worker has), and the file system starts no
 * thread for them (libfuse's own loop would, up to its maximum). */
struct hostile {
	const char *path;
	unsigned seed;
	int bad;
};

static void *hostile_reader(void *arg)
{
	struct hostile *h = arg;
	uint8_t buf[4096];
	int fd = open(h->path, O_RDONLY | O_CLOEXEC);

	for (int i = 0; fd >= 0 && i < 50; i++) {
		h->seed = h->seed * 1103515245u + 12345u;
		uint64_t off = (uint64_t)(h->seed % (SIZE - sizeof(buf)));
		if (pread(fd, buf, sizeof(buf), (off_t)off) != (ssize_t)sizeof(buf) ||
		    memcmp(buf, F.data + off, sizeof(buf)) != 0)
			h->bad++;
	}
	if (fd < 0)
		h->bad++;
	else
		close(fd);
	return NULL;
}

static long threads_of_self(void)
{
	char line[256];
	long n = -1;
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Threads:", 8))
			n = strtol(line + 8, NULL, 10);
	if (f)
		fclose(f);
	return n;
}

static void test_lazy__ten_thousand_random_reads_at_once_are_throttled(void **state)
{
	const tb_lazy_file_t files[] = { { "data.bin", F.key, &F.blocks, NULL } };
	enum { READERS = 200 };
	static struct hostile h[READERS];
	pthread_t th[READERS];
	char at[128], path[160];

	(void)state;
	tb_block_cache_t *cache;
	tb_error_t err;
	snprintf(path, sizeof(path), "%s/hostile-cache", F.tmp);
	assert_int_equal(tb_block_cache_open(&cache, path, 64u << 20, &err), 0);
	tb_lazy_fs_t *fs = mounted(files, 1, cache, at, sizeof(at));
	snprintf(path, sizeof(path), "%s/data.bin", at);
	long before = threads_of_self();
	for (int i = 0; i < READERS; i++) {
		h[i] = (struct hostile){ path, (unsigned)i * 7919u + 1u, 0 };
		assert_int_equal(pthread_create(&th[i], NULL, hostile_reader, &h[i]), 0);
	}
	long during = threads_of_self();
	int bad = 0;
	for (int i = 0; i < READERS; i++) {
		pthread_join(th[i], NULL);
		bad += h[i].bad;
	}
	printf("  %d readers x 50 random reads: %d wrong; threads %ld before, %ld with the "
	       "readers (theirs: %d); %llu bytes fetched for %u\n",
	       READERS, bad, before, during, READERS, (unsigned long long)tb_lazy_fs_fetched(fs, 0),
	       SIZE);
	assert_int_equal(bad, 0);
	assert_true(during <= before + READERS); /* the file system started none */
	/* each block fetched once: the slots dedupe, the worker's cache keeps */
	assert_true(tb_lazy_fs_fetched(fs, 0) <= SIZE);
	unmounted(fs, at);
	tb_block_cache_close(cache);
}

static void test_lazy__bad_names_are_refused(void **state)
{
	const tb_lazy_file_t two[] = { { "x", F.key, &F.blocks, NULL },
				       { "x", F.key, &F.blocks, NULL } };
	const tb_lazy_file_t slash[] = { { "a/b", F.key, &F.blocks, NULL } };
	tb_lazy_fs_conf_t conf = { .store = F.store, .files = two, .nfiles = 2 };
	tb_lazy_fs_t *fs;
	tb_error_t err;
	int mfd;

	(void)state;
	assert_int_equal(tb_lazy_fs_start(&fs, &conf, &mfd, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "two files named 'x'"));
	conf.files = slash, conf.nfiles = 1;
	assert_int_equal(tb_lazy_fs_start(&fs, &conf, &mfd, &err), TB_EINVAL);
	assert_int_equal(mfd, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
		    test_lazy__a_file_is_there_at_once_and_only_what_is_read_is_fetched),
		cmocka_unit_test(test_lazy__a_block_that_is_not_the_content_named_fails_its_read),
		cmocka_unit_test(test_lazy__a_sequential_reader_has_blocks_fetched_ahead),
		cmocka_unit_test(test_lazy__blocks_between_kept_ones_are_fetched_ahead),
		cmocka_unit_test(test_lazy__a_bad_block_fetched_ahead_fails_only_from_there),
		cmocka_unit_test(test_lazy__a_second_reader_is_served_from_the_cache),
		cmocka_unit_test(test_lazy__a_store_that_is_down_fails_the_read_for_now),
		cmocka_unit_test(test_lazy__ten_thousand_random_reads_at_once_are_throttled),
		cmocka_unit_test(test_lazy__bad_names_are_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
