/*
 * test_unpack.c: image layers applied onto a tree (worker/image/unpack.h),
 * honest ones and hostile ones: every hostile layer either lands inside
 * the tree or is refused, and nothing outside it changes. As root (the
 * tree keeps the layer's owners); skips otherwise.
 */
#include "oci_testlib.h"
#include "unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

static char base[64] = "/tmp/tb-unpack-test-XXXXXX";
static char tree[128], outside[128];
static int rootfd = -1;

/* One entry of a layer made by the test. */
typedef struct entry {
	const char *path;
	char type;        /* 'f' file, 'd' dir, 'l' symlink, 'h' hard link, 'p' fifo, 'c' device,
			   * 's' a sparse file: data at 0, then a hole to sparse_size */
	const char *data; /* file contents, or link target */
	unsigned mode;
	long long uid;
} entry_t;

static long long sparse_size; /* what an 's' entry declares */
/* Entry i's time, when set: full pax, every time in records (with its
 * nanoseconds). */
static const struct timespec *times;

/* A layer of @p n entries in a memfd, compressed by @p filter. */
static int layer(const entry_t *e, size_t n, int filter)
{
	int fd = memfd_create("layer", 0);
	struct archive *a = archive_write_new();

	assert_true(fd >= 0);
	if (times)
		archive_write_set_format_pax(a);
	else
		archive_write_set_format_pax_restricted(a);
	if (filter == 'g')
		archive_write_add_filter_gzip(a);
	else if (filter == 'z')
		archive_write_add_filter_zstd(a);
	assert_int_equal(archive_write_open_fd(a, fd), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, e[i].path);
		archive_entry_set_uid(ae, e[i].uid);
		archive_entry_set_gid(ae, e[i].uid);
		archive_entry_set_perm(ae, e[i].mode ? e[i].mode : 0644);
		if (times)
			archive_entry_set_mtime(ae, times[i].tv_sec, times[i].tv_nsec);
		switch (e[i].type) {
		case 'd':
			archive_entry_set_filetype(ae, AE_IFDIR);
			break;
		case 'l':
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, e[i].data);
			break;
		case 'h':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, e[i].data);
			break;
		case 'p':
			archive_entry_set_filetype(ae, AE_IFIFO);
			break;
		case 'c':
			archive_entry_set_filetype(ae, AE_IFCHR);
			archive_entry_set_rdev(ae, makedev(1, 3));
			break;
		case 's':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_size(ae, sparse_size);
			archive_entry_sparse_add_entry(ae, 0, (la_int64_t)strlen(e[i].data));
			break;
		default:
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_size(ae, e[i].data ? (la_int64_t)strlen(e[i].data) : 0);
		}
		assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
		if ((e[i].type == 'f' || e[i].type == 's') && e[i].data)
			archive_write_data(a, e[i].data, strlen(e[i].data));
		archive_entry_free(ae);
	}
	archive_write_close(a);
	archive_write_free(a);
	lseek(fd, 0, SEEK_SET);
	return fd;
}

#define N(x) (sizeof(x) / sizeof((x)[0]))

static const tb_unpack_limits_t roomy = { 1 << 20, 1000 };

/* Applies a layer; @return its rc, the error in @p err. */
static int apply(const entry_t *e, size_t n, int filter, const tb_unpack_limits_t *lim,
		 tb_unpack_stats_t *st, tb_error_t *err)
{
	int fd = layer(e, n, filter);
	int rc = tb_unpack_layer(rootfd, fd, lim, st, err);
	close(fd);
	return rc;
}

/* File @p rel of the tree (its first 255 bytes), or NULL. */
static char *read_in(const char *rel)
{
	return oci_tree_read(tree, rel);
}

static int exists_in(const char *rel)
{
	struct stat st;
	return fstatat(rootfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* The host directory beside the tree holds one canary, unchanged. */
static void outside_untouched(void)
{
	char path[256], buf[16] = "";
	snprintf(path, sizeof(path), "%s/canary", outside);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "canary\n");
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) = 1", outside);
	if (system(cmd) != 0)
		fail_msg("something was written into %s", outside);
}

static int fresh_tree(void **state)
{
	char cmd[300];
	(void)state;
	if (rootfd >= 0)
		close(rootfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", tree, tree);
	if (system(cmd) != 0)
		return -1;
	rootfd = open(tree, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return rootfd < 0 ? -1 : 0;
}

static void test_unpack__an_honest_layer(void **state)
{
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	struct stat s;
	(void)state;
	entry_t e[] = {
		{ "./usr/", 'd', NULL, 0755, 0 },
		{ "./usr/bin/tool", 'f', "#!/bin/sh\n", 04755, 0 },
		{ "usr/bin/same", 'h', "usr/bin/tool", 0, 0 },
		{ "usr/bin/sh", 'l', "tool", 0, 0 },
		{ "home/agent/notes", 'f', "mine\n", 0600, 1000 },
		{ "run/pipe", 'p', NULL, 0600, 0 },
		{ "dev/null", 'c', NULL, 0666, 0 },
		{ "far/away", 'f', "x", 0644, 100000 },
		{ "/etc/hostname", 'f', "inside\n", 0644, 0 },
	};
	assert_int_equal(apply(e, N(e), 'g', &roomy, &st, &err), 0);
	assert_string_equal(read_in("usr/bin/tool"), "#!/bin/sh\n");
	assert_int_equal(fstatat(rootfd, "usr/bin/tool", &s, 0), 0);
	assert_int_equal(s.st_mode & 07777, 0755); /* set-user-ID dropped */
	assert_int_equal(s.st_nlink, 2);           /* and its hard link */
	assert_string_equal(read_in("usr/bin/sh"), "#!/bin/sh\n");
	assert_int_equal(fstatat(rootfd, "home/agent/notes", &s, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(s.st_uid, 1000);
	assert_int_equal(fstatat(rootfd, "far/away", &s, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(s.st_uid, 65534); /* past what a sandbox maps */
	assert_int_equal(fstatat(rootfd, "run/pipe", &s, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISFIFO(s.st_mode));
	assert_false(exists_in("dev/null")); /* devices are skipped */
	assert_int_equal(st.altered.devices, 1);
	assert_string_equal(read_in("etc/hostname"), "inside\n"); /* absolute: from the root */
	outside_untouched();
}

static void test_unpack__nothing_lands_outside_the_tree(void **state)
{
	char target[300], rel[300], inside[300];
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	(void)state;
	snprintf(target, sizeof(target), "%s", outside);
	snprintf(rel, sizeof(rel), "../../../../../../..%s", outside);
	snprintf(inside, sizeof(inside), "%s/", outside + 1);
	entry_t links[] = {
		{ "abs", 'l', target, 0, 0 },
		{ "rel", 'l', rel, 0, 0 },
		{ "canary", 'l', "/nowhere", 0, 0 },
	};
	assert_int_equal(apply(links, N(links), 0, &roomy, &st, &err), 0);
	/* a write through a link resolves as in the sandbox: here, nowhere */
	entry_t abs[] = { { "abs/pwned", 'f', "x", 0644, 0 } };
	entry_t relw[] = { { "rel/pwned", 'f', "x", 0644, 0 } };
	assert_int_equal(apply(abs, 1, 0, &roomy, &st, &err), TB_EINVAL);
	assert_int_equal(apply(relw, 1, 0, &roomy, &st, &err), TB_EINVAL);
	/* once the tree has that directory, both land in it */
	entry_t dir[] = { { inside, 'd', NULL, 0755, 0 } };
	assert_int_equal(apply(dir, 1, 0, &roomy, &st, &err), 0);
	assert_int_equal(apply(abs, 1, 0, &roomy, &st, &err), 0);
	entry_t rel2[] = { { "rel/pwned2", 'f', "y", 0644, 0 } };
	assert_int_equal(apply(rel2, 1, 0, &roomy, &st, &err), 0);
	char in[400];
	snprintf(in, sizeof(in), "%spwned2", inside);
	assert_string_equal(read_in(in), "y");
	/* a file in a link's place replaces the link, never its target */
	entry_t over[] = { { "canary", 'f', "replaced the link", 0644, 0 } };
	assert_int_equal(apply(over, 1, 0, &roomy, &st, &err), 0);
	assert_string_equal(read_in("canary"), "replaced the link");
	outside_untouched();
}

static void test_unpack__hostile_names_are_refused(void **state)
{
	static const entry_t bad[][1] = {
		{ { "../escape", 'f', "x", 0644, 0 } },
		{ { "a/../../escape", 'f', "x", 0644, 0 } },
		{ { "hard", 'h', "../../etc/passwd", 0, 0 } },
		{ { "hard", 'h', "/does/not/exist", 0, 0 } },
		{ { "hard", 'h', "usr", 0, 0 } }, /* a directory */
	};
	(void)state;
	entry_t dir[] = { { "usr/", 'd', NULL, 0755, 0 } };
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	assert_int_equal(apply(dir, 1, 0, &roomy, &st, &err), 0);
	for (size_t i = 0; i < N(bad); i++)
		if (apply(bad[i], 1, 0, &roomy, &st, &err) != TB_EINVAL)
			fail_msg("%s -> %s was taken", bad[i][0].path,
				 bad[i][0].data ? bad[i][0].data : "");
	outside_untouched();
}

static void test_unpack__whiteouts_and_opaque_directories(void **state)
{
	entry_t lower[] = {
		{ "a/x", 'f', "x", 0644, 0 },        { "a/y", 'f', "y", 0644, 0 },
		{ "b/z", 'f', "z", 0644, 0 },        { "d/old", 'f', "old", 0644, 0 },
		{ "d/sub/old2", 'f', "o", 0644, 0 },
	};
	entry_t upper[] = {
		{ "a/.wh.x", 'f', "", 0644, 0 },
		{ ".wh.b", 'f', "", 0644, 0 },
		{ "d/new", 'f', "new", 0644, 0 },
		{ "d/.wh..wh..opq", 'f', "", 0644, 0 }, /* after an entry of its own layer */
		{ "d/sub/new2", 'f', "n", 0644, 0 },
	};
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	(void)state;
	assert_int_equal(apply(lower, N(lower), 'z', &roomy, &st, &err), 0);
	assert_int_equal(apply(upper, N(upper), 'z', &roomy, &st, &err), 0);
	assert_false(exists_in("a/x"));
	assert_true(exists_in("a/y"));
	assert_false(exists_in("b"));
	assert_false(exists_in("a/.wh.x"));
	assert_false(exists_in("d/old"));
	assert_false(exists_in("d/sub/old2"));
	assert_string_equal(read_in("d/new"), "new");
	assert_string_equal(read_in("d/sub/new2"), "n");
	assert_false(exists_in("d/.wh..wh..opq"));
}

/* An opaque directory over a tree 2,000 levels deep: cleared, without a
 * stack frame per level big enough to overflow a slot's stack. */
static void test_unpack__an_opaque_directory_over_a_deep_tree(void **state)
{
	static char deep[4100];
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	(void)state;
	size_t n = 0;
	for (int i = 0; i < 2000; i++)
		n += (size_t)snprintf(deep + n, sizeof(deep) - n, "d/");
	snprintf(deep + n, sizeof(deep) - n, "x");
	entry_t lower[] = { { deep, 'f', "x", 0644, 0 } };
	entry_t upper[] = { { ".wh..wh..opq", 'f', "", 0644, 0 }, { "kept", 'f', "k", 0644, 0 } };
	tb_unpack_limits_t many = { 1 << 20, 10000 };
	assert_int_equal(apply(lower, 1, 0, &many, &st, &err), 0);
	assert_true(exists_in("d/d/d"));
	assert_int_equal(apply(upper, 2, 0, &many, &st, &err), 0);
	assert_false(exists_in("d"));
	assert_string_equal(read_in("kept"), "k");
}

/* What a layer made counts by inode, not by the path it was reached by:
 * an entry put through a link survives its directory made opaque. */
static void test_unpack__an_opaque_directory_keeps_what_came_through_a_link(void **state)
{
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	(void)state;
	entry_t lower[] = { { "usr/lib/x", 'f', "old", 0644, 0 }, { "lib", 'l', "usr/lib", 0, 0 } };
	entry_t upper[] = { { "lib/foo", 'f', "new", 0644, 0 },
			    { "usr/lib/.wh..wh..opq", 'f', "", 0644, 0 } };
	assert_int_equal(apply(lower, 2, 0, &roomy, &st, &err), 0);
	assert_int_equal(apply(upper, 2, 0, &roomy, &st, &err), 0);
	assert_string_equal(read_in("usr/lib/foo"), "new");
	assert_false(exists_in("usr/lib/x"));
}

/* Many new deep paths in one layer: each made from the deepest directory
 * there, recorded by inode (no string per prefix). */
static void test_unpack__many_deep_new_paths(void **state)
{
	static char paths[50][4000];
	static entry_t e[50];
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	(void)state;
	for (int i = 0; i < 50; i++) {
		size_t n = (size_t)snprintf(paths[i], sizeof(paths[i]), "top%d/", i);
		for (int k = 0; k < 900; k++)
			n += (size_t)snprintf(paths[i] + n, sizeof(paths[i]) - n, "d/");
		snprintf(paths[i] + n, sizeof(paths[i]) - n, "leaf");
		e[i] = (entry_t){ paths[i], 'f', "x", 0644, 0 };
	}
	tb_unpack_limits_t lim = { 1 << 20, 100000 };
	assert_int_equal(apply(e, 50, 'g', &lim, &st, &err), 0);
	assert_true(exists_in(paths[49]));
	assert_int_equal(st.entries, 50 * (1 + 900 + 1));
}

static void test_unpack__caps_and_junk(void **state)
{
	static char big[8193];
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	(void)state;
	memset(big, 'b', sizeof(big) - 1);
	entry_t one[] = { { "big", 'f', big, 0644, 0 } };
	tb_unpack_limits_t small = { 4096, 1000 };
	assert_int_equal(apply(one, 1, 'g', &small, &st, &err), TB_ETOOBIG);
	entry_t many[] = { { "a", 'f', "", 0644, 0 },
			   { "b", 'f', "", 0644, 0 },
			   { "c", 'f', "", 0644, 0 } };
	tb_unpack_limits_t few = { 1 << 20, 2 };
	memset(&st, 0, sizeof(st));
	assert_int_equal(apply(many, N(many), 0, &few, &st, &err), TB_ETOOBIG);
	static char junk[2048];
	memset(junk, 'j', sizeof(junk));
	int fd = memfd_create("junk", 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	lseek(fd, 0, SEEK_SET);
	assert_int_equal(tb_unpack_layer(rootfd, fd, &roomy, &st, &err), TB_EINVAL);
	close(fd);
}

/*
 * A sparse file counts for the size it declares, holes and all: 2 GiB
 * of it, a few bytes in the layer, is over a 1 MiB cap, and the refusal
 * names it; under a cap it fits, it is made at that size.
 */
static void test_unpack__a_sparse_file_counts_what_it_declares(void **state)
{
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	struct stat s;
	(void)state;
	entry_t huge[] = { { "data/huge.img", 's', "head", 0644, 0 } };
	sparse_size = 2LL << 30;
	int fd = layer(huge, 1, 'g');
	struct stat ls;
	assert_int_equal(fstat(fd, &ls), 0);
	assert_true(ls.st_size < 64 << 10); /* small on the wire */
	assert_int_equal(tb_unpack_layer(rootfd, fd, &roomy, &st, &err), TB_ETOOBIG);
	close(fd);
	if (!strstr(err.msg, "data/huge.img") || !strstr(err.msg, "2147483648"))
		fail_msg("a sparse file said: %s", err.msg);
	assert_false(exists_in("data/huge.img"));
	entry_t fits[] = { { "data/fits.img", 's', "head", 0644, 0 } };
	sparse_size = 512 << 10;
	memset(&st, 0, sizeof(st));
	assert_int_equal(apply(fits, 1, 0, &roomy, &st, &err), 0);
	assert_int_equal(st.bytes, 512 << 10);
	assert_int_equal(fstatat(rootfd, "data/fits.img", &s, 0), 0);
	assert_int_equal(s.st_size, 512 << 10);
	assert_string_equal(read_in("data/fits.img"), "head");
}

/*
 * What the tree does not keep as the layer had it is counted, with the
 * first entry of each kind: a device node and a socket left out, set-ID
 * bits dropped (a file's and a directory's), owners no sandbox maps made
 * nobody; and a link target too long is the layer's fault.
 */
static void test_unpack__what_is_dropped_or_changed_is_counted(void **state)
{
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	(void)state;
	entry_t e[] = {
		{ "dev/null", 'c', NULL, 0666, 0 },         { "dev/zero", 'c', NULL, 0666, 0 },
		{ "usr/bin/su", 'f', "x", 04755, 0 },       { "srv/shared/", 'd', NULL, 02775, 0 },
		{ "home/big/file", 'f', "y", 0644, 70000 }, { "home/plain", 'f', "z", 0644, 1000 },
	};
	assert_int_equal(apply(e, N(e), 'g', &roomy, &st, &err), 0);
	assert_int_equal(st.altered.devices, 2);
	assert_string_equal(st.altered.device_path, "dev/null");
	assert_int_equal(st.altered.setid, 2);
	assert_string_equal(st.altered.setid_path, "usr/bin/su");
	assert_int_equal(st.altered.ids, 1);
	assert_string_equal(st.altered.ids_path, "home/big/file");
	static char far[4200];
	memset(far, 'a', sizeof(far) - 1);
	entry_t link[] = { { "far", 'l', far, 0, 0 } };
	assert_int_equal(apply(link, 1, 0, &roomy, &st, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "target of 4096 bytes or more"));
}

/* @p rel's modification time (not followed) is @p sec.@p ns. */
static void modified_at(const char *rel, long long sec, long ns)
{
	struct stat s;
	assert_int_equal(fstatat(rootfd, rel, &s, AT_SYMLINK_NOFOLLOW), 0);
	if (s.st_mtim.tv_sec != sec || s.st_mtim.tv_nsec != ns)
		fail_msg("%s: modified at %lld.%09ld, not %lld.%09ld", rel,
			 (long long)s.st_mtim.tv_sec, s.st_mtim.tv_nsec, sec, ns);
}

/* Each entry's time to the nanosecond (files, links, FIFOs, directories
 * once their layer is placed); a directory no layer names at 0; one a
 * later layer changes without naming it keeps its own. */
static void test_unpack__entries_keep_their_layers_times(void **state)
{
	tb_unpack_stats_t st = { 0 };
	tb_error_t err;
	struct stat s;
	(void)state;
	entry_t l1[] = {
		{ "d/", 'd', NULL, 0755, 0 },     { "d/f", 'f', "x", 0644, 0 },
		{ "d/l", 'l', "f", 0, 0 },        { "d/p", 'p', NULL, 0600, 0 },
		{ "d/sub/g", 'f', "g", 0644, 0 },
	};
	static const struct timespec t1[] = {
		{ 1000, 5 }, { 2000, 123456789 }, { 3000, 7 }, { 4000, 0 }, { 5000, 1 },
	};
	entry_t l2[] = {
		{ "d/new", 'f', "n", 0644, 0 },
		{ "d/.wh.p", 'f', "", 0644, 0 },
		{ "d/sub/", 'd', NULL, 0755, 0 },
		{ "d/sub/h", 'f', "h", 0644, 0 },
	};
	static const struct timespec t2[] = { { 6000, 0 }, { 0, 0 }, { 7000, 70 }, { 8000, 80 } };
	times = t1;
	assert_int_equal(apply(l1, N(l1), 'g', &roomy, &st, &err), 0);
	modified_at("d", 1000, 5);
	modified_at("d/f", 2000, 123456789);
	assert_int_equal(fstatat(rootfd, "d/f", &s, 0), 0);
	assert_int_equal(s.st_atim.tv_sec, 2000); /* the access time too */
	modified_at("d/l", 3000, 7);
	modified_at("d/p", 4000, 0);
	modified_at("d/sub", 0, 0); /* no layer names it */
	times = t2;
	assert_int_equal(apply(l2, N(l2), 'g', &roomy, &st, &err), 0);
	times = NULL;
	modified_at("d", 1000, 5); /* changed, not named: its own */
	modified_at("d/new", 6000, 0);
	modified_at("d/sub", 7000, 70); /* named, a child made in it after */
	assert_false(exists_in("d/p"));
}

static int setup(void **state)
{
	char cmd[300];
	(void)state;
	if (!mkdtemp(base))
		return -1;
	snprintf(tree, sizeof(tree), "%s/tree", base);
	snprintf(outside, sizeof(outside), "%s/outside", base);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s && echo canary > %s/canary", outside, outside);
	return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	if (rootfd >= 0)
		close(rootfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_unpack__an_honest_layer, fresh_tree),
		cmocka_unit_test_setup(test_unpack__entries_keep_their_layers_times, fresh_tree),
		cmocka_unit_test_setup(test_unpack__nothing_lands_outside_the_tree, fresh_tree),
		cmocka_unit_test_setup(test_unpack__hostile_names_are_refused, fresh_tree),
		cmocka_unit_test_setup(test_unpack__whiteouts_and_opaque_directories, fresh_tree),
		cmocka_unit_test_setup(test_unpack__an_opaque_directory_over_a_deep_tree,
				       fresh_tree),
		cmocka_unit_test_setup(
		    test_unpack__an_opaque_directory_keeps_what_came_through_a_link, fresh_tree),
		cmocka_unit_test_setup(test_unpack__many_deep_new_paths, fresh_tree),
		cmocka_unit_test_setup(test_unpack__caps_and_junk, fresh_tree),
		cmocka_unit_test_setup(test_unpack__a_sparse_file_counts_what_it_declares,
				       fresh_tree),
		cmocka_unit_test_setup(test_unpack__what_is_dropped_or_changed_is_counted,
				       fresh_tree),
	};
	if (geteuid() != 0) {
		printf("SKIP: the tree keeps the layer's owners: needs root\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
