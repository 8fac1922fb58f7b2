/*
 * layer_index_tar.c: the tar stream's entries listed as it is inflated
 * (layer_index_int.h), for the layer index: ustar and GNU headers, GNU
 * long names ('L', 'K') and pax records (path, linkpath, size, uid,
 * gid, mtime). It keeps where each entry's data starts in the stream.
 * What it cannot describe truthfully (a sparse file, an unknown entry
 * type, data on an entry that has none, a bad checksum, a time before
 * the epoch or past TB_LAYER_INDEX_MTIME_MAX) is refused, naming the
 * entry: such a layer is pulled whole.
 */
#include "layer_index_int.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK 512u

/* A header's numeric field: octal (spaces or NULs around it) or GNU's
 * base-256 (its first byte's high bit set). @return 0, or -1. */
static int field(const uint8_t *f, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	size_t i = 0;

	if (f[0] & 0x80) { /* base-256, big-endian, positive only */
		if (f[0] & 0x40)
			return -1;
		x = f[0] & 0x3f;
		for (i = 1; i < n; i++) {
			if (x >> 56)
				return -1;
			x = x << 8 | f[i];
		}
		*v = x;
		return 0;
	}
	while (i < n && f[i] == ' ')
		i++;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
		if (x >> 60)
			return -1;
		x = x << 3 | (uint64_t)(f[i] - '0');
	}
	if (i < n && f[i] != ' ' && f[i] != '\0')
		return -1;
	*v = x;
	return 0;
}

static int checksum_ok(const uint8_t *h)
{
	uint64_t want;
	unsigned long sum = 0;
	long ssum = 0;

	if (field(h + 148, 8, &want) < 0)
		return 0;
	for (size_t i = 0; i < BLOCK; i++) {
		uint8_t c = i >= 148 && i < 156 ? ' ' : h[i];
		sum += c;
		ssum += (signed char)c;
	}
	return want == sum || (long)want == ssum;
}

static int is_zero(const uint8_t *h)
{
	for (size_t i = 0; i < BLOCK; i++)
		if (h[i])
			return 0;
	return 1;
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static int fail(tb_tar_scan_t *t, const char *name, const char *why, tb_error_t *err)
{
	return tb_error_set(err, TB_EINVAL, "tar entry '%.200s' at %llu: %s", name,
			    (unsigned long long)(t->pos - BLOCK), why);
}

/* The header's own name (ustar's prefix joined). */
static char *header_name(const uint8_t *h)
{
	char buf[160 + 100 + 2];
	size_t nl = strnlen((const char *)h, 100);

	if (!memcmp(h + 257, "ustar", 6) && h[345]) { /* POSIX ustar: prefix/name */
		size_t pl = strnlen((const char *)h + 345, 155);
		memcpy(buf, h + 345, pl);
		buf[pl] = '/';
		memcpy(buf + pl + 1, h, nl);
		return dup_n(buf, pl + 1 + nl);
	}
	return dup_n((const char *)h, nl);
}

static int type_of(char flag)
{
	switch (flag) {
	case '0':
	case '\0':
	case '7':
		return TB_LAYER_FILE;
	case '1':
		return TB_LAYER_HARDLINK;
	case '2':
		return TB_LAYER_SYMLINK;
	case '3':
		return TB_LAYER_CHAR;
	case '4':
		return TB_LAYER_BLOCK;
	case '5':
		return TB_LAYER_DIR;
	case '6':
		return TB_LAYER_FIFO;
	default:
		return -1;
	}
}

static int grow(tb_tar_scan_t *t, tb_error_t *err)
{
	tb_layer_index_t *ix = t->ix;
	if (ix->nentries < t->cap)
		return 0;
	if (ix->nentries >= TB_LAYER_INDEX_ENTRIES_MAX)
		return tb_error_set(err, TB_EINVAL, "more than %u tar entries: not indexed",
				    TB_LAYER_INDEX_ENTRIES_MAX);
	size_t cap = t->cap ? 2 * t->cap : 64;
	tb_layer_entry_t *e = realloc(ix->entries, cap * sizeof(*e));
	if (!e)
		return tb_error_set(err, TB_ENOMEM, "tar entries: out of memory");
	ix->entries = e;
	t->cap = cap;
	return 0;
}

/* Pending names (L/K, pax) given to this entry; the header's otherwise. */
static int take_names(tb_tar_scan_t *t, const uint8_t *h, tb_layer_entry_t *e, tb_error_t *err)
{
	e->path = t->path ? t->path : header_name(h);
	e->link =
	    t->link ? t->link : dup_n((const char *)h + 157, strnlen((const char *)h + 157, 100));
	t->path = t->link = NULL;
	if (!e->path || !e->link) {
		free(e->path);
		free(e->link);
		return tb_error_set(err, TB_ENOMEM, "tar entries: out of memory");
	}
	return 0;
}

static int check_entry(tb_tar_scan_t *t, const tb_layer_entry_t *e, tb_error_t *err)
{
	if (!e->path[0])
		return fail(t, e->path, "an empty name", err);
	if (strlen(e->path) >= TB_LAYER_INDEX_NAME_MAX ||
	    strlen(e->link) >= TB_LAYER_INDEX_NAME_MAX)
		return fail(t, e->path, "a name or link target of 4096 bytes or more", err);
	if (e->size && e->type != TB_LAYER_FILE && e->type != TB_LAYER_HARDLINK)
		return fail(t, e->path, "data on an entry that has none", err);
	return 0;
}

/* A header of an entry proper (not a meta one): listed, its data passed. */
static int add_entry(tb_tar_scan_t *t, const uint8_t *h, int type, tb_error_t *err)
{
	uint64_t mode, uid, gid, size, mtime;
	tb_layer_entry_t e = { 0 };

	if (field(h + 100, 8, &mode) < 0 || field(h + 108, 8, &uid) < 0 ||
	    field(h + 116, 8, &gid) < 0 || field(h + 124, 12, &size) < 0 ||
	    field(h + 136, 12, &mtime) < 0)
		return fail(t, (const char *)h, "a numeric field that does not parse", err);
	if (t->has_pax & 8)
		mtime = t->pax_mtime;
	if (mtime > (uint64_t)TB_LAYER_INDEX_MTIME_MAX)
		return fail(t, (const char *)h, "a time past the year 9999", err);
	if (grow(t, err) < 0 || take_names(t, h, &e, err) < 0)
		return err->code;
	e.type = (uint8_t)type;
	e.mode = (uint32_t)(mode & 07777);
	size = t->has_pax & 1 ? t->pax[0] : size;
	uid = t->has_pax & 2 ? t->pax[1] : uid;
	gid = t->has_pax & 4 ? t->pax[2] : gid;
	e.uid = uid > UINT32_MAX ? UINT32_MAX : (uint32_t)uid;
	e.gid = gid > UINT32_MAX ? UINT32_MAX : (uint32_t)gid;
	e.size = size;
	e.mtime = (int64_t)mtime;
	e.mtime_ns = t->has_pax & 8 ? t->pax_mtime_ns : 0;
	e.offset = t->pos;
	t->has_pax = 0;
	t->ix->entries[t->ix->nentries++] = e; /* freed with the index from here */
	if (check_entry(t, &e, err) < 0)
		return err->code;
	t->skip = (e.size + BLOCK - 1) / BLOCK * BLOCK;
	return 0;
}

/* A pax record's decimal value into t->pax[@p i]. */
static int pax_number(tb_tar_scan_t *t, int i, const char *v, size_t vl, tb_error_t *err)
{
	char num[24];
	char *end;
	if (!vl || vl >= sizeof(num) || v[0] < '0' || v[0] > '9')
		return fail(t, "(pax)", "a number that does not parse", err);
	memcpy(num, v, vl);
	num[vl] = '\0';
	t->pax[i] = strtoull(num, &end, 10);
	if (*end)
		return fail(t, "(pax)", "a number that does not parse", err);
	t->has_pax |= 1u << i;
	return 0;
}

/* A pax time, "SECONDS[.FRACTION]", into t->pax_mtime: nanoseconds kept,
 * further digits dropped (as libarchive does). One before the epoch is
 * refused: the index holds none. */
static int pax_time(tb_tar_scan_t *t, const char *v, size_t vl, tb_error_t *err)
{
	uint64_t sec = 0;
	uint32_t ns = 0, scale = 100000000;
	size_t i = 0;

	if (vl && v[0] == '-')
		return fail(t, "(pax)", "a time before the epoch", err);
	for (; i < vl && v[i] >= '0' && v[i] <= '9'; i++) {
		if (sec > (uint64_t)TB_LAYER_INDEX_MTIME_MAX)
			return fail(t, "(pax)", "a time past the year 9999", err);
		sec = sec * 10 + (uint64_t)(v[i] - '0');
	}
	if (!i || (i < vl && v[i] != '.'))
		return fail(t, "(pax)", "a time that does not parse", err);
	for (i++; i < vl && v[i] >= '0' && v[i] <= '9'; i++, scale /= 10)
		ns += (uint32_t)(v[i] - '0') * scale;
	if (i < vl)
		return fail(t, "(pax)", "a time that does not parse", err);
	t->pax_mtime = sec;
	t->pax_mtime_ns = ns;
	t->has_pax |= 8;
	return 0;
}

/* One pax record's key and value (the others are not the index's). */
static int pax_record(tb_tar_scan_t *t, const char *k, size_t kl, const char *v, size_t vl,
		      tb_error_t *err)
{
	static const char *const numbers[] = { "size", "uid", "gid" };
	char **to = kl == 4 && !memcmp(k, "path", 4)       ? &t->path
		    : kl == 8 && !memcmp(k, "linkpath", 8) ? &t->link
							   : NULL;
	if (kl > 11 && !memcmp(k, "GNU.sparse.", 11))
		return fail(t, "(pax)", "a sparse file", err);
	if (to) {
		free(*to);
		if (!(*to = dup_n(v, vl)))
			return tb_error_set(err, TB_ENOMEM, "tar entries: out of memory");
		return 0;
	}
	for (int i = 0; i < 3; i++)
		if (kl == strlen(numbers[i]) && !memcmp(k, numbers[i], kl))
			return pax_number(t, i, v, vl, err);
	if (kl == 5 && !memcmp(k, "mtime", 5))
		return pax_time(t, v, vl, err);
	return 0;
}

/* A pax extended header's records: "LEN key=value\n" each. */
static int pax_records(tb_tar_scan_t *t, const char *p, size_t n, tb_error_t *err)
{
	while (n) {
		size_t len = 0, i = 0;
		while (i < n && i < 10 && p[i] >= '0' && p[i] <= '9')
			len = len * 10 + (size_t)(p[i++] - '0');
		if (!i || i >= n || p[i] != ' ' || len <= i + 1 || len > n || p[len - 1] != '\n')
			return fail(t, "(pax)", "a record that does not parse", err);
		const char *k = p + i + 1, *eq = memchr(k, '=', len - i - 2);
		if (!eq)
			return fail(t, "(pax)", "a record without '='", err);
		if (pax_record(t, k, (size_t)(eq - k), eq + 1, (size_t)(p + len - 1 - (eq + 1)),
			       err) < 0)
			return err->code;
		p += len;
		n -= len;
	}
	return 0;
}

/* An 'L', 'K' or 'x' entry's data, read whole. */
static int meta_done(tb_tar_scan_t *t, tb_error_t *err)
{
	int rc = 0;
	if (t->kind == 'x') {
		rc = pax_records(t, t->meta, t->mlen, err);
	} else {
		char **to = t->kind == 'L' ? &t->path : &t->link;
		free(*to);
		if (!(*to = dup_n(t->meta, strnlen(t->meta, t->mlen))))
			rc = tb_error_set(err, TB_ENOMEM, "tar entries: out of memory");
	}
	free(t->meta);
	t->meta = NULL;
	t->mlen = t->mwant = 0;
	return rc;
}

static int start_meta(tb_tar_scan_t *t, const uint8_t *h, char kind, tb_error_t *err)
{
	uint64_t size;
	if (field(h + 124, 12, &size) < 0 || size > TB_TAR_META_MAX)
		return fail(t, (const char *)h, "a long name or pax header too long", err);
	t->kind = kind;
	t->mwant = (size_t)size;
	t->mlen = 0;
	t->skip = (size + BLOCK - 1) / BLOCK * BLOCK - size; /* the padding, after */
	if (!(t->meta = malloc(size ? size : 1)))
		return tb_error_set(err, TB_ENOMEM, "tar entries: out of memory");
	return size ? 0 : meta_done(t, err);
}

static int header(tb_tar_scan_t *t, const uint8_t *h, tb_error_t *err)
{
	char flag = (char)h[156];
	int type = type_of(flag);

	if (is_zero(h)) {
		t->ended = ++t->zeros >= 2;
		return 0;
	}
	t->zeros = 0;
	if (!checksum_ok(h))
		return fail(t, (const char *)h, "a header whose checksum does not match", err);
	if (flag == 'L' || flag == 'K' || flag == 'x')
		return start_meta(t, h, flag, err);
	if (flag == 'g') { /* global pax records: nothing the entries take */
		uint64_t size;
		if (field(h + 124, 12, &size) < 0)
			return fail(t, "(pax global)", "a size that does not parse", err);
		t->skip = (size + BLOCK - 1) / BLOCK * BLOCK;
		return 0;
	}
	if (flag == 'S')
		return fail(t, (const char *)h, "a sparse file", err);
	if (type < 0)
		return fail(t, (const char *)h, "an entry type the index does not list", err);
	return add_entry(t, h, type, err);
}

/* Takes what the current state wants of @p p; @return the bytes used. */
static size_t step(tb_tar_scan_t *t, const uint8_t *p, size_t n, tb_error_t *err, int *rc)
{
	size_t k;
	if (t->meta) {
		k = t->mwant - t->mlen < n ? t->mwant - t->mlen : n;
		memcpy(t->meta + t->mlen, p, k);
		t->mlen += k;
		if (t->mlen == t->mwant)
			*rc = meta_done(t, err);
	} else if (t->skip || t->ended) {
		k = t->ended || t->skip > n ? n : (size_t)t->skip;
		t->skip -= t->ended ? 0 : k;
	} else {
		k = BLOCK - t->hlen < n ? BLOCK - t->hlen : n;
		memcpy(t->hdr + t->hlen, p, k);
		t->hlen += k;
		if (t->hlen == BLOCK) {
			t->hlen = 0;
			t->pos += k;
			*rc = header(t, t->hdr, err);
			return k;
		}
	}
	t->pos += k;
	return k;
}

int tb_tar_scan_feed(tb_tar_scan_t *t, const uint8_t *p, size_t n, tb_error_t *err)
{
	while (n) {
		int rc = 0;
		size_t used = step(t, p, n, err, &rc);
		if (rc < 0)
			return rc;
		p += used;
		n -= used;
	}
	return 0;
}

int tb_tar_scan_end(tb_tar_scan_t *t, tb_error_t *err)
{
	if (t->ended || (!t->hlen && !t->skip && !t->meta && !t->path && !t->link))
		return 0;
	return tb_error_set(err, TB_EINVAL, "the tar stream ends inside an entry (at %llu)",
			    (unsigned long long)t->pos);
}

void tb_tar_scan_free(tb_tar_scan_t *t)
{
	free(t->meta);
	free(t->path);
	free(t->link);
	t->meta = t->path = t->link = NULL;
}

void tb_layer_entries_free(tb_layer_entry_t *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(e[i].path);
		free(e[i].link);
	}
}
