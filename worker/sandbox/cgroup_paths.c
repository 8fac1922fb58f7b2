/*
 * cgroup_paths.c: this process's cgroup directory from the texts of
 * /proc/self/cgroup and /proc/self/mountinfo (cgroup_paths.h says why
 * both). Owns the parsing of those two formats, nothing that touches a
 * file.
 */
#include "cgroup_paths.h"

#include <stdio.h>
#include <string.h>

#define LINE_MAX_LEN 4096
#define FIELDS_MAX 32

/* The next line of @p text into @p line (NUL-terminated, without '\n');
 * a line too long for @p len is skipped whole. @return the text after it,
 * NULL at the end. */
static const char *next_line(const char *text, char *line, size_t len)
{
	while (*text) {
		const char *end = strchr(text, '\n');
		size_t n = end ? (size_t)(end - text) : strlen(text);
		const char *rest = end ? end + 1 : text + n;
		if (n < len) {
			memcpy(line, text, n);
			line[n] = '\0';
			return rest;
		}
		text = rest;
	}
	return NULL;
}

/* Whether the comma-separated @p list names @p word. */
static int in_list(const char *list, const char *word)
{
	size_t wl = strlen(word);

	for (const char *p = list;; p++) {
		if (!strncmp(p, word, wl) && (p[wl] == ',' || p[wl] == '\0'))
			return 1;
		if (!(p = strchr(p, ',')))
			return 0;
	}
}

/* This process's cgroup in the hierarchy @p ctl names (NULL: the v2
 * one, "0::PATH") into @p own. @return 0, or -1 when it is in none. */
static int own_cgroup(char *own, size_t len, const char *self_cgroup, const char *ctl)
{
	char line[LINE_MAX_LEN];

	for (const char *t = self_cgroup; (t = next_line(t, line, sizeof(line)));) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *list = c1 + 1;
		if (ctl ? in_list(list, ctl) : list[0] == '\0') {
			if ((size_t)snprintf(own, len, "%s", c2 + 1) >= len)
				return -1;
			return 0;
		}
	}
	return -1;
}

/* Undoes mountinfo's octal escapes (" " is "\040", and so on) in place. */
static void unescape(char *s)
{
	char *w = s;

	for (const char *r = s; *r; w++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 4;
		} else {
			*w = *r++;
		}
	}
	*w = '\0';
}

/* Splits @p line at spaces into at most FIELDS_MAX fields. @return how
 * many. */
static int split(char *line, char **f)
{
	int n = 0;

	for (char *p = line; *p && n < FIELDS_MAX;) {
		while (*p == ' ')
			*p++ = '\0';
		if (!*p)
			break;
		f[n++] = p;
		p += strcspn(p, " ");
	}
	return n;
}

/* Whether mount fields @p f (@p n of them) are a mount of the hierarchy
 * @p ctl names (NULL: v2). @return the index of the file system type's
 * field, or -1. */
static int is_hierarchy(char **f, int n, const char *ctl)
{
	int dash = 6; /* after the optional fields, a "-" */

	while (dash < n && strcmp(f[dash], "-"))
		dash++;
	if (dash + 3 >= n)
		return -1;
	const char *type = f[dash + 1], *super = f[dash + 3];
	if (ctl ? strcmp(type, "cgroup") || !in_list(super, ctl) : strcmp(type, "cgroup2"))
		return -1;
	return dash + 1;
}

/* The part of @p own below @p root, or NULL when the mount with that root
 * does not show @p own ("/a/bc" is not under "/a/b"). */
static const char *below(const char *own, const char *root)
{
	size_t rl = strlen(root);

	if (!strcmp(root, "/"))
		return own;
	if (strncmp(own, root, rl) || (own[rl] != '\0' && own[rl] != '/'))
		return NULL;
	return own + rl;
}

int tb_cgroup_paths_find(char *out, size_t len, const char *self_cgroup, const char *mountinfo,
			 const char *ctl, tb_error_t *err)
{
	char own[LINE_MAX_LEN], line[LINE_MAX_LEN], seen_root[LINE_MAX_LEN] = "";
	char seen_mnt[LINE_MAX_LEN] = "";
	const char *name = ctl ? ctl : "cgroup2";

	if (own_cgroup(own, sizeof(own), self_cgroup, ctl) < 0)
		return tb_error_set(err, TB_ENOTFOUND, "/proc/self/cgroup names no %s hierarchy",
				    name);
	for (const char *t = mountinfo; (t = next_line(t, line, sizeof(line)));) {
		char *f[FIELDS_MAX];
		int n = split(line, f);
		if (n < 10 || is_hierarchy(f, n, ctl) < 0)
			continue;
		unescape(f[3]);
		unescape(f[4]);
		const char *rel = below(own, f[3]);
		if (!rel) {
			snprintf(seen_root, sizeof(seen_root), "%s", f[3]);
			snprintf(seen_mnt, sizeof(seen_mnt), "%s", f[4]);
			continue;
		}
		if (!strcmp(rel, "/"))
			rel = "";
		if ((size_t)snprintf(out, len, "%s%s", f[4], rel) >= len)
			return tb_error_set(err, TB_ETOOBIG, "cgroup path %s%s too long", f[4],
					    rel);
		return 0;
	}
	if (seen_mnt[0])
		return tb_error_set(err, TB_EIO,
				    "this process's %s cgroup %s is not below %s, the root of "
				    "the cgroup mounted on %s",
				    name, own, seen_root, seen_mnt);
	return tb_error_set(err, TB_ENOTFOUND, "no %s hierarchy is mounted", name);
}
