/*
 * unpack_rules.c: what each entry of a layer becomes in an image's tree
 * (unpack.h): names cleaned, whiteouts and opaque directories told
 * apart, devices and sockets dropped, set-ID bits cleared, ids past the
 * map made nobody, the caps counted. It decides only: unpack.c applies
 * the decisions to a directory, image_tree.c to a tree in memory.
 */
#include "unpack.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#define ID_LIMIT 65536 /* what a sandbox maps */
#define WH ".wh."
#define WH_OPAQUE ".wh..wh..opq"

static int fail(const char *entry, tb_error_t *err, int code, const char *why)
{
	return tb_error_set(err, code, "layer entry '%.300s': %s", entry, why);
}

/* "./a//b/" -> "a/b", "/etc" -> "etc", "./" -> "". @return 0; -1 for a
 * ".." component or a name too long (a component past NAME_MAX too: no
 * file system makes it). */
static int clean_path(const char *in, char *out, size_t cap)
{
	size_t o = 0;

	for (const char *p = in; *p;) {
		while (*p == '/')
			p++;
		const char *e = p + strcspn(p, "/");
		size_t n = (size_t)(e - p);
		if ((n == 2 && p[0] == '.' && p[1] == '.') || n > NAME_MAX)
			return -1;
		if (n && !(n == 1 && p[0] == '.')) {
			if (o + (o > 0) + n + 1 > cap)
				return -1;
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p = e;
	}
	out[o] = '\0';
	return 0;
}

int tb_unpack_path(tb_unpack_plan_t *p, const char *path, tb_error_t *err)
{
	if (clean_path(path, p->rel, sizeof(p->rel)) < 0)
		return fail(path, err, TB_EINVAL, "a name with '..', or too long");
	if (!p->rel[0])
		return 1;
	char *slash = strrchr(p->rel, '/');
	p->name = slash ? slash + 1 : p->rel;
	snprintf(p->parent, sizeof(p->parent), "%.*s", slash ? (int)(slash - p->rel) : 0, p->rel);
	return 0;
}

/* The first entry of a kind altered: its name as the layer gave it, in
 * printable ASCII (a log line and the manifest take it as it is). */
static void note(char *out, size_t cap, const char *entry)
{
	size_t i = 0;

	if (out[0])
		return;
	for (; entry[i] && i + 1 < cap; i++)
		out[i] = entry[i] >= 0x20 && entry[i] < 0x7f ? entry[i] : '?';
	out[i] = '\0';
}

/* The ids the entry will have: past what a sandbox maps, nobody (said). */
static void ids_of(tb_unpack_plan_t *p, const tb_layer_entry_t *e, tb_unpack_stats_t *st)
{
	p->uid = e->uid < ID_LIMIT ? e->uid : TB_UNPACK_NOBODY;
	p->gid = e->gid < ID_LIMIT ? e->gid : TB_UNPACK_NOBODY;
	if (p->uid != e->uid || p->gid != e->gid) {
		st->altered.ids++;
		note(st->altered.ids_path, sizeof(st->altered.ids_path), e->path);
	}
}

/* The entry's permission bits, set-ID bits dropped (said). */
static uint32_t perm_of(const tb_layer_entry_t *e, tb_unpack_stats_t *st)
{
	uint32_t m = e->mode & 07777;
	if (m & 06000) {
		st->altered.setid++;
		note(st->altered.setid_path, sizeof(st->altered.setid_path), e->path);
	}
	return m & 01777;
}

/* A whiteout: `.wh.NAME` removes NAME from the layers below; `.wh..wh..opq`
 * makes its directory opaque; `.wh..wh.*` else is aufs's: nothing. */
static int whiteout(tb_unpack_plan_t *p, tb_unpack_stats_t *st)
{
	st->whiteouts++;
	if (!strcmp(p->name, WH_OPAQUE)) {
		p->what = TB_UNPACK_OPAQUE;
		return 0;
	}
	const char *hidden = p->name + strlen(WH);
	if (!hidden[0] || !strcmp(hidden, ".") || !strcmp(hidden, "..") ||
	    !strncmp(hidden, WH, strlen(WH))) {
		p->what = TB_UNPACK_SKIP;
		return 0;
	}
	st->removed++;
	p->what = TB_UNPACK_WHITEOUT;
	p->name = hidden;
	return 0;
}

/* A file: its declared size, holes and all (what it takes once read,
 * whatever few bytes a sparse layer holds for it), against the cap. */
static int file_size(tb_unpack_plan_t *p, const tb_layer_entry_t *e, const tb_unpack_limits_t *lim,
		     tb_unpack_stats_t *st, tb_error_t *err)
{
	if (e->size > lim->max_bytes - st->bytes)
		return tb_error_set(err, TB_ETOOBIG,
				    "the image unpacks to more than %llu bytes, its cap "
				    "(sandbox.images.max_unpacked_mb): file '%.300s' declares %llu "
				    "bytes",
				    (unsigned long long)lim->max_bytes, e->path,
				    (unsigned long long)e->size);
	st->bytes += e->size;
	p->size = e->size;
	return 0;
}

/* What is made, by type: its attributes. */
static int make(tb_unpack_plan_t *p, const tb_layer_entry_t *e, const tb_unpack_limits_t *lim,
		tb_unpack_stats_t *st, tb_error_t *err)
{
	p->what = TB_UNPACK_MAKE;
	p->type = e->type;
	p->size = 0;
	p->link = NULL;
	p->mode = 0;
	p->uid = p->gid = 0;
	p->mtime = e->mtime;
	p->mtime_ns = e->mtime_ns;
	switch (e->type) {
	case TB_LAYER_FILE:
		if (file_size(p, e, lim, st, err) < 0)
			return err->code;
		ids_of(p, e, st);
		p->mode = perm_of(e, st);
		return 0;
	case TB_LAYER_DIR:
		ids_of(p, e, st);
		p->mode = perm_of(e, st);
		return 0;
	case TB_LAYER_SYMLINK:
		if (!e->link[0])
			return fail(e->path, err, TB_EINVAL, "a symbolic link to nothing");
		/* the kernel's PATH_MAX: longer, symlinkat fails, and that is
		 * the layer's fault, not the worker's */
		if (strlen(e->link) >= TB_UNPACK_NAME_MAX)
			return fail(e->path, err, TB_EINVAL,
				    "a symbolic link's target of 4096 bytes or more");
		p->link = e->link;
		p->mode = 0777;
		ids_of(p, e, st);
		return 0;
	case TB_LAYER_HARDLINK:
		if (clean_path(e->link, p->target, sizeof(p->target)) < 0 || !p->target[0])
			return fail(e->path, err, TB_EINVAL, "a hard link out of the tree");
		return 0;
	case TB_LAYER_FIFO:
		p->mode = TB_UNPACK_FIFO_MODE;
		return 0;
	default: /* devices and sockets: never in a sandbox's root */
		st->entries--;
		st->altered.devices++;
		note(st->altered.device_path, sizeof(st->altered.device_path), e->path);
		p->what = TB_UNPACK_DROP;
		return 0;
	}
}

int tb_unpack_decide(tb_unpack_plan_t *p, const tb_layer_entry_t *e, const tb_unpack_limits_t *lim,
		     tb_unpack_stats_t *st, tb_error_t *err)
{
	/* whiteouts count too: each costs a walk of what it hides */
	if (st->entries + st->whiteouts >= lim->max_entries)
		return tb_error_set(err, TB_ETOOBIG, "the image has more than %llu entries",
				    (unsigned long long)lim->max_entries);
	if (!strncmp(p->name, WH, strlen(WH)))
		return whiteout(p, st);
	st->entries++;
	return make(p, e, lim, st, err);
}

int tb_unpack_count_dir(const tb_unpack_limits_t *lim, tb_unpack_stats_t *st, tb_error_t *err)
{
	if (++st->entries > lim->max_entries)
		return tb_error_set(err, TB_ETOOBIG, "the image has more than %llu entries",
				    (unsigned long long)lim->max_entries);
	return 0;
}
