/*
 * layer_testlib.c: an index checked against the tar libarchive reads
 * (layer_testlib.h).
 */
#include "layer_testlib.h"

#include <archive.h>
#include <archive_entry.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

/* A link's entry: its type and target (a hard link has no data). */
static void check_link(const tb_layer_entry_t *x, struct archive_entry *e)
{
	if (archive_entry_hardlink(e)) {
		assert_int_equal(x->type, TB_LAYER_HARDLINK);
		assert_string_equal(x->link, archive_entry_hardlink(e));
	} else if (archive_entry_filetype(e) == AE_IFLNK) {
		assert_int_equal(x->type, TB_LAYER_SYMLINK);
		assert_string_equal(x->link, archive_entry_symlink(e));
	}
}

/* An entry's data read through the index, against libarchive's. */
static void check_data(struct archive *a, const tb_layer_entry_t *x, const tb_layer_index_t *ix,
		       tb_layer_fetch_fn fetch, void *arg)
{
	uint8_t *want = malloc(x->size + 1), *got = malloc(x->size + 1);
	tb_error_t err;

	assert_non_null(want);
	assert_non_null(got);
	assert_int_equal(archive_read_data(a, want, x->size), (la_ssize_t)x->size);
	if (tb_layer_index_read(ix, fetch, arg, x->offset, got, x->size, &err))
		fail_msg("read %s: %s", x->path, err.msg);
	assert_memory_equal(got, want, x->size);
	free(want);
	free(got);
}

size_t layer_check_against_tar(const uint8_t *blob, size_t n, const tb_layer_index_t *ix, int how,
			       tb_layer_fetch_fn fetch, void *arg)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	size_t i = 0;

	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_format_tar(a);
	assert_int_equal(archive_read_open_memory(a, blob, n), ARCHIVE_OK);
	for (; archive_read_next_header(a, &e) == ARCHIVE_OK; i++) {
		assert_true(i < ix->nentries);
		const tb_layer_entry_t *x = &ix->entries[i];
		assert_string_equal(x->path, archive_entry_pathname(e));
		check_link(x, e);
		if (archive_entry_hardlink(e))
			continue;
		assert_int_equal(x->type == TB_LAYER_DIR, archive_entry_filetype(e) == AE_IFDIR);
		assert_int_equal(x->mode, archive_entry_perm(e));
		assert_int_equal(x->uid, archive_entry_uid(e));
		assert_int_equal(x->size, archive_entry_size(e));
		if (how & LAYER_CHECK_TIMES) {
			assert_int_equal(x->mtime, archive_entry_mtime(e));
			assert_int_equal(x->mtime_ns, archive_entry_mtime_nsec(e));
		}
		check_data(a, x, ix, fetch, arg);
	}
	archive_read_free(a);
	assert_int_equal(i, ix->nentries);
	return i;
}
