/*
 * image_tree.c: an image's root built in memory from its layers'
 * indexes (image_tree.h).
 *
 * Each entry of each layer goes through unpack_rules.c's decisions as
 * unpack.c's do, and is applied here the way unpack.c applies it to a
 * directory: its parent resolved in the tree (links followed within it),
 * missing parents made 0755 and root's, what was at its name removed
 * (a directory kept for a directory), a hard link to the node already
 * there. Nodes are numbered from 1 (the root); a directory's entries are
 * kept sorted by name, found by binary search. Which nodes this layer
 * made (`made`, by node as unpack.c's made_t is by inode) tells an
 * opaque directory's own entries from the lower layers'.
 */
#include "image_tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_LINKS 40 /* the kernel's, in one resolution */
#define NODES_MAX ((1u << 31) - 1)

struct tb_image_tree {
	tb_image_node_t *nodes; /* [0] unused */
	uint32_t n, cap;
	uint64_t memory, max_memory;
	/* building */
	const tb_unpack_limits_t *lim;
	tb_unpack_stats_t *st;
	const tb_layer_index_t *ix;
	const tb_layer_entry_t *entry;
	uint32_t layer; /* 1 + the layer being applied */
	tb_unpack_plan_t plan;
	tb_error_t *err;
};

static int fail(tb_image_tree_t *t, int code, const char *why)
{
	return tb_error_set(t->err, code, "layer entry '%.300s': %s", t->entry->path, why);
}

static int charge(tb_image_tree_t *t, uint64_t bytes)
{
	if (bytes > t->max_memory - t->memory)
		return tb_error_set(t->err, TB_ETOOBIG,
				    "the image's tree takes more than %llu bytes of memory: not "
				    "served from its indexes",
				    (unsigned long long)t->max_memory);
	t->memory += bytes;
	return 0;
}

/* ------------------------------------------------------------ nodes */

static uint32_t new_node(tb_image_tree_t *t, uint32_t mode, uint32_t uid, uint32_t gid)
{
	if (charge(t, sizeof(tb_image_node_t)) < 0)
		return 0;
	if (t->n >= t->cap) {
		if (t->cap >= NODES_MAX / 2) {
			tb_error_set(t->err, TB_ETOOBIG, "too many nodes");
			return 0;
		}
		uint32_t cap = t->cap ? 2 * t->cap : 1024;
		tb_image_node_t *nodes = realloc(t->nodes, cap * sizeof(*nodes));
		if (!nodes) {
			tb_error_set(t->err, TB_ENOMEM, "out of memory");
			return 0;
		}
		if (!t->cap)
			memset(nodes, 0, sizeof(*nodes)); /* [0]: no node */
		t->nodes = nodes, t->cap = cap;
	}
	tb_image_node_t *nd = &t->nodes[t->n];
	memset(nd, 0, sizeof(*nd));
	nd->mode = mode, nd->uid = uid, nd->gid = gid;
	return t->n++;
}

/* The index of @p name in @p d's entries, or where it would go (-1 - i). */
static long find_kid(const tb_image_node_t *d, const char *name)
{
	long lo = 0, hi = (long)d->nkids;
	while (lo < hi) {
		long mid = lo + (hi - lo) / 2;
		int c = strcmp(d->kids[mid].name, name);
		if (!c)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1 - lo;
}

static uint32_t lookup(const tb_image_tree_t *t, uint32_t dir, const char *name)
{
	const tb_image_node_t *d = &t->nodes[dir];
	long k = S_ISDIR(d->mode) ? find_kid(d, name) : -1;
	return k >= 0 ? d->kids[k].ino : 0;
}

/* @p name in @p dir names node @p ino (there is nothing there yet). */
static int add_kid(tb_image_tree_t *t, uint32_t dir, const char *name, uint32_t ino)
{
	size_t len = strlen(name);
	char *copy;

	if (charge(t, len + 1 + sizeof(tb_image_kid_t)) < 0)
		return t->err->code;
	tb_image_node_t *d = &t->nodes[dir];
	if (d->nkids == d->cap) {
		uint32_t cap = d->cap ? 2 * d->cap : 4;
		tb_image_kid_t *k = realloc(d->kids, cap * sizeof(*k));
		if (!k)
			return tb_error_set(t->err, TB_ENOMEM, "out of memory");
		d->kids = k, d->cap = cap;
	}
	if (!(copy = malloc(len + 1)))
		return tb_error_set(t->err, TB_ENOMEM, "out of memory");
	memcpy(copy, name, len + 1);
	long at = -1 - find_kid(d, name);
	memmove(d->kids + at + 1, d->kids + at, (d->nkids - (size_t)at) * sizeof(*d->kids));
	d->kids[at] = (tb_image_kid_t){ copy, ino };
	d->nkids++;
	t->nodes[ino].nlink++;
	if (S_ISDIR(t->nodes[ino].mode))
		t->nodes[ino].parent = dir;
	return 0;
}

/* Removes entry @p k of @p dir, and a directory's whole tree with it. */
static void remove_kid(tb_image_tree_t *t, uint32_t dir, long k)
{
	tb_image_node_t *d = &t->nodes[dir];
	uint32_t ino = d->kids[k].ino;

	free(d->kids[k].name);
	memmove(d->kids + k, d->kids + k + 1, (d->nkids - (size_t)k - 1) * sizeof(*d->kids));
	d->nkids--;
	tb_image_node_t *nd = &t->nodes[ino];
	nd->nlink--;
	if (S_ISDIR(nd->mode))
		while (nd->nkids) /* its entries: gone with it */
			remove_kid(t, ino, (long)nd->nkids - 1);
}

/* ------------------------------------------------------------ paths */

/* @p path from directory @p at, each link on the way followed within the
 * tree (RESOLVE_IN_ROOT: ".." stops at the root, an absolute target
 * starts there): the directory it names, or -errno. */
static long walk(const tb_image_tree_t *t, uint32_t at, const char *path, int *links)
{
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		size_t n = strcspn(p, "/");
		char name[TB_UNPACK_NAME_MAX];
		if (!n)
			break;
		snprintf(name, sizeof(name), "%.*s", (int)n, p);
		p += n;
		if (!S_ISDIR(t->nodes[at].mode))
			return -ENOTDIR;
		if (!strcmp(name, "."))
			continue;
		if (!strcmp(name, "..")) {
			at = at == TB_IMAGE_TREE_ROOT ? at : t->nodes[at].parent;
			continue;
		}
		uint32_t next = lookup(t, at, name);
		if (!next)
			return -ENOENT;
		if (S_ISLNK(t->nodes[next].mode)) {
			if (++*links > MAX_LINKS)
				return -ELOOP;
			const char *to = t->nodes[next].link;
			long r = walk(t, to[0] == '/' ? TB_IMAGE_TREE_ROOT : at, to, links);
			if (r < 0)
				return r;
			next = (uint32_t)r;
		}
		at = next;
	}
	return S_ISDIR(t->nodes[at].mode) ? (long)at : -ENOTDIR;
}

static long resolve(const tb_image_tree_t *t, const char *rel)
{
	int links = 0;
	return walk(t, TB_IMAGE_TREE_ROOT, rel, &links);
}

/* Node @p ino is this layer's, and each directory above @p dir up to the
 * root (a walk that stops at one already marked). */
static void mark(tb_image_tree_t *t, uint32_t ino, uint32_t dir)
{
	t->nodes[ino].made = t->layer;
	for (uint32_t d = dir; d != TB_IMAGE_TREE_ROOT && t->nodes[d].made != t->layer;
	     d = t->nodes[d].parent)
		t->nodes[d].made = t->layer;
}

/* Makes each directory of @p rel the tree lacks, from the deepest one
 * there (unpack.c's make_parents). */
static int make_parents(tb_image_tree_t *t, const char *rel)
{
	size_t ends[TB_UNPACK_NAME_MAX / 2 + 1], n = 0, k;
	char prefix[TB_UNPACK_NAME_MAX];
	long at = -ENOENT;

	for (size_t i = 0; rel[i]; i++) /* ends[k]: where component k ends */
		if (rel[i + 1] == '/' || rel[i + 1] == '\0')
			ends[++n] = i + 1;
	ends[0] = 0;
	for (k = n; k-- > 0;) { /* rel itself is missing */
		snprintf(prefix, sizeof(prefix), "%.*s", (int)ends[k], rel);
		if ((at = resolve(t, prefix)) >= 0)
			break;
	}
	if (at < 0)
		return fail(t, TB_EINVAL, "its directory's top is not in the tree");
	for (k++; k <= n; k++) {
		size_t from = ends[k - 1] + (k > 1);
		char name[TB_UNPACK_NAME_MAX];
		snprintf(name, sizeof(name), "%.*s", (int)(ends[k] - from), rel + from);
		if (lookup(t, (uint32_t)at, name)) /* a file, or a link to nowhere */
			return fail(t, TB_EINVAL, "its directory is not one in the tree");
		uint32_t d = new_node(t, S_IFDIR | TB_UNPACK_DIR_MODE, 0, 0);
		if (!d || add_kid(t, (uint32_t)at, name, d) < 0 ||
		    tb_unpack_count_dir(t->lim, t->st, t->err) < 0)
			return t->err->code;
		mark(t, d, (uint32_t)at);
		at = d;
	}
	return 0;
}

/* The directory @p rel of the tree, made where it is missing. */
static long open_parent(tb_image_tree_t *t, const char *rel)
{
	long d = resolve(t, rel);

	if (d == -ENOENT) {
		if (make_parents(t, rel) < 0)
			return -1;
		d = resolve(t, rel);
	}
	if (d < 0) {
		tb_error_set(t->err, TB_EINVAL,
			     "layer entry '%.300s': its directory is not one in the tree (%s)",
			     t->entry->path, strerror((int)-d));
		return -1;
	}
	return d;
}

/* Removes whatever is at @p name in @p dir, unless it is a directory and
 * @p keep_dir. @return 1 if a directory was kept, else 0. */
static int clear_place(tb_image_tree_t *t, uint32_t dir, const char *name, int keep_dir)
{
	long k = find_kid(&t->nodes[dir], name);

	if (k < 0)
		return 0;
	if (keep_dir && S_ISDIR(t->nodes[t->nodes[dir].kids[k].ino].mode))
		return 1;
	remove_kid(t, dir, k);
	return 0;
}

/* An opaque directory: what lower layers put under it removed, what this
 * layer made kept; into a directory of this layer's, the same again. */
static void make_opaque(tb_image_tree_t *t, uint32_t dir)
{
	for (long k = (long)t->nodes[dir].nkids - 1; k >= 0; k--) {
		uint32_t ino = t->nodes[dir].kids[k].ino;
		if (t->nodes[ino].made != t->layer) {
			remove_kid(t, dir, k);
			t->st->removed++;
		} else if (S_ISDIR(t->nodes[ino].mode)) {
			make_opaque(t, ino);
		}
	}
}

/* ------------------------------------------------------------ entries */

static int put_hardlink(tb_image_tree_t *t, uint32_t dir)
{
	char *target = t->plan.target;
	char *slash = strrchr(target, '/');
	const char *tname = slash ? slash + 1 : target;

	if (slash)
		*slash = '\0';
	long tdir = resolve(t, slash ? target : "");
	if (tdir < 0)
		return fail(t, TB_EINVAL, "a hard link to an entry not in the tree");
	clear_place(t, dir, t->plan.name, 0);
	uint32_t to = lookup(t, (uint32_t)tdir, tname);
	if (!to || S_ISDIR(t->nodes[to].mode))
		return fail(t, TB_EINVAL,
			    "a hard link to an entry not in the tree, or to a directory");
	if (add_kid(t, dir, t->plan.name, to) < 0)
		return t->err->code;
	mark(t, to, dir);
	return 0;
}

static int put_dir(tb_image_tree_t *t, uint32_t dir)
{
	const tb_unpack_plan_t *p = &t->plan;
	uint32_t d = lookup(t, dir, p->name);

	if (!clear_place(t, dir, p->name, 1)) {
		if (!(d = new_node(t, S_IFDIR, 0, 0)) || add_kid(t, dir, p->name, d) < 0)
			return t->err->code;
	}
	tb_image_node_t *nd = &t->nodes[d];
	nd->mode = S_IFDIR | p->mode, nd->uid = p->uid, nd->gid = p->gid;
	nd->mtime = p->mtime, nd->mtime_ns = p->mtime_ns;
	mark(t, d, dir);
	return 0;
}

/* A file, a symbolic link or a FIFO: a new node where the name was. */
static int put_node(tb_image_tree_t *t, uint32_t dir)
{
	const tb_unpack_plan_t *p = &t->plan;
	uint32_t kind = p->type == TB_LAYER_FILE      ? S_IFREG
			: p->type == TB_LAYER_SYMLINK ? S_IFLNK
						      : S_IFIFO;

	clear_place(t, dir, p->name, 0);
	uint32_t ino = new_node(t, kind | p->mode, p->uid, p->gid);
	if (!ino)
		return t->err->code;
	tb_image_node_t *nd = &t->nodes[ino];
	nd->mtime = p->mtime, nd->mtime_ns = p->mtime_ns;
	if (kind == S_IFREG) {
		nd->size = p->size;
		nd->offset = t->entry->offset;
		nd->layer = t->layer - 1;
	} else if (kind == S_IFLNK) {
		size_t len = strlen(p->link);
		if (charge(t, len + 1) < 0)
			return t->err->code;
		if (!(nd->link = strdup(p->link)))
			return tb_error_set(t->err, TB_ENOMEM, "out of memory");
		nd->size = len;
	}
	if (add_kid(t, dir, p->name, ino) < 0)
		return t->err->code;
	mark(t, ino, dir);
	return 0;
}

/* Places one entry, as unpack.c's place() does. */
static int place(tb_image_tree_t *t, const tb_layer_entry_t *e)
{
	tb_unpack_plan_t *p = &t->plan;
	int rc;

	t->entry = e;
	if ((rc = tb_unpack_path(p, e->path, t->err)) != 0)
		return rc < 0 ? rc : 0; /* the root itself: its mode is the tree's */
	long dir = open_parent(t, p->parent);
	if (dir < 0)
		return t->err->code;
	if ((rc = tb_unpack_decide(p, e, t->lim, t->st, t->err)) < 0)
		return rc;
	switch (p->what) {
	case TB_UNPACK_WHITEOUT:
		clear_place(t, (uint32_t)dir, p->name, 0);
		return 0;
	case TB_UNPACK_OPAQUE:
		make_opaque(t, (uint32_t)dir);
		return 0;
	case TB_UNPACK_MAKE:
		break;
	default: /* skipped, dropped */
		return 0;
	}
	if (p->type == TB_LAYER_HARDLINK)
		return put_hardlink(t, (uint32_t)dir);
	if (p->type == TB_LAYER_DIR)
		return put_dir(t, (uint32_t)dir);
	return put_node(t, (uint32_t)dir);
}

/* What can be caught of an index that lies about where data is: a file's
 * data running into the next entry's header (a gzip index: its stream is
 * the tar stream), or into the next file's data or past the stream (one
 * made from a TOC, eStargz or zstd:chunked: its stream is the files'
 * contents one after another). */
static int check_offsets(const tb_layer_index_t *ix, size_t i, tb_error_t *err)
{
	const tb_layer_entry_t *e = &ix->entries[i];
	int packed = tb_layer_index_kind_toc(ix->kind);
	uint64_t end = packed ? e->offset + e->size : e->offset + (e->size + 511) / 512 * 512;
	uint64_t header = packed ? 0 : 512;

	if ((packed && end > ix->total_out) ||
	    (i + 1 < ix->nentries && end + header > ix->entries[i + 1].offset))
		return tb_error_set(err, TB_EINVAL,
				    "layer %s: the index says entry '%.300s' has %llu bytes at "
				    "%llu, over the next entry's %s: not trusted",
				    ix->layer, e->path, (unsigned long long)e->size,
				    (unsigned long long)e->offset, packed ? "data" : "header");
	return 0;
}

/* Each directory's links: 2, and one for each directory in it. */
static void count_links(tb_image_tree_t *t)
{
	for (uint32_t i = 1; i < t->n; i++)
		if (S_ISDIR(t->nodes[i].mode) && (t->nodes[i].nlink || i == TB_IMAGE_TREE_ROOT))
			t->nodes[i].nlink = 2;
	for (uint32_t i = 1; i < t->n; i++)
		for (uint32_t k = 0; S_ISDIR(t->nodes[i].mode) && k < t->nodes[i].nkids; k++)
			if (S_ISDIR(t->nodes[t->nodes[i].kids[k].ino].mode))
				t->nodes[i].nlink++;
}

static int apply(tb_image_tree_t *t, const tb_layer_index_t *const *ix, size_t n)
{
	int rc = 0;

	for (size_t l = 0; l < n && rc == 0; l++) {
		t->ix = ix[l];
		t->layer = (uint32_t)l + 1;
		for (size_t i = 0; i < ix[l]->nentries && rc == 0; i++)
			if ((rc = check_offsets(ix[l], i, t->err)) == 0)
				rc = place(t, &ix[l]->entries[i]);
		if (rc < 0)
			tb_error_prefix(t->err, "layer %zu (%.19s)", l, ix[l]->layer);
	}
	return rc;
}

int tb_image_tree_build(tb_image_tree_t **out, const tb_layer_index_t *const *ix, size_t n,
			const tb_unpack_limits_t *lim, uint64_t max_memory, tb_unpack_stats_t *st,
			tb_error_t *err)
{
	tb_unpack_stats_t own = { 0 };
	tb_image_tree_t *t = calloc(1, sizeof(*t));
	int rc;

	*out = NULL;
	if (!t)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	t->max_memory = max_memory ? max_memory : TB_IMAGE_TREE_MEMORY_DEFAULT;
	t->lim = lim;
	t->st = st ? st : &own;
	t->err = err;
	t->n = 1; /* [0] unused: 0 is no node */
	if (!new_node(t, S_IFDIR | TB_UNPACK_ROOT_MODE, 0, 0)) {
		tb_image_tree_free(t);
		return err->code;
	}
	t->nodes[TB_IMAGE_TREE_ROOT].nlink = 2;
	if ((rc = apply(t, ix, n)) < 0) {
		tb_image_tree_free(t);
		return rc;
	}
	count_links(t);
	*out = t;
	return 0;
}

const tb_image_node_t *tb_image_tree_node(const tb_image_tree_t *t, uint64_t ino)
{
	if (!ino || ino >= t->n || !t->nodes[ino].nlink)
		return NULL;
	return &t->nodes[ino];
}

uint32_t tb_image_tree_lookup(const tb_image_tree_t *t, uint64_t dir, const char *name)
{
	if (!tb_image_tree_node(t, dir))
		return 0;
	return lookup(t, (uint32_t)dir, name);
}

uint32_t tb_image_tree_end(const tb_image_tree_t *t)
{
	return t->n;
}

uint64_t tb_image_tree_memory(const tb_image_tree_t *t)
{
	return t->memory;
}

void tb_image_tree_free(tb_image_tree_t *t)
{
	if (!t)
		return;
	for (uint32_t i = 1; i < t->n; i++) {
		for (uint32_t k = 0; k < t->nodes[i].nkids; k++)
			free(t->nodes[i].kids[k].name);
		free(t->nodes[i].kids);
		free(t->nodes[i].link);
	}
	free(t->nodes);
	free(t);
}
