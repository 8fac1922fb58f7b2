/*
 * init_etc.c: the ids a sandbox's programs see by name: /etc/passwd and
 * /etc/group with the agent (TB_SANDBOX_AGENT_ID) and each judge, written
 * whole on a tmpfs root, merged into an image's own files (its ids kept,
 * only the missing ones added) on an image root, with the files the
 * sandbox owns (resolv.conf, hosts, hostname) made empty and its own.
 */
#include "init_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* Appends "<name><n>:x:<id>:" (and @p rest) for each judge's uid to @p buf:
 * judge1 is TB_SANDBOX_JUDGE_ID, judge2 the next, and so on. */
static void judge_entries(char *buf, size_t cap, const char *rest)
{
	char num[24];

	for (unsigned i = 0; i < TB_SANDBOX_MAX_JUDGES; i++) {
		cat(buf, cap, "judge");
		utoa(num, sizeof(num), i + 1);
		cat(buf, cap, num);
		cat(buf, cap, ":x:");
		utoa(num, sizeof(num), TB_SANDBOX_JUDGE_ID + i);
		cat(buf, cap, num);
		cat(buf, cap, rest[0] ? ":" : ":\n");
		if (rest[0]) {
			cat(buf, cap, num);
			cat(buf, cap, rest);
		}
	}
}

static void image_etc(const char *root, const char *passwd, const char *group);

/* /etc: the sandbox's own passwd, group, nsswitch.conf and resolv.conf in
 * the tmpfs @p root; for an image root (@p root NULL), image_etc(). */
void build_etc(const char *root)
{
	static char passwd[4096], group[2048];
	char path[PATH_LEN];

	cat(passwd, sizeof(passwd),
	    "root:x:0:0:root:/root:/bin/sh\n"
	    "agent:x:1000:1000:agent:/workspace:/bin/sh\n");
	judge_entries(passwd, sizeof(passwd), ":judge:/home:/bin/sh\n");
	cat(passwd, sizeof(passwd), "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
	cat(group, sizeof(group), "root:x:0:\nagent:x:1000:\n");
	judge_entries(group, sizeof(group), "");
	cat(group, sizeof(group), "nogroup:x:65534:\n");
	if (!root) {
		image_etc(image_root_path, passwd, group);
		return;
	}
	join(path, sizeof(path), root, "/etc");
	if (mkdir_p(path) < 0)
		fail("mkdir", "/etc", errno);
	const struct {
		const char *name, *text;
	} files[] = {
		{ "/etc/passwd", passwd },
		{ "/etc/group", group },
		{ "/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n" },
		{ "/etc/resolv.conf", "" },
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		join(path, sizeof(path), root, files[i].name);
		if (write_file(path, files[i].text, 0644) < 0)
			fail("write", files[i].name, errno);
	}
}

/* Whether the /etc/passwd or /etc/group text @p text has an entry whose
 * id (its third field) is @p id's digits. */
static int has_id(const char *text, const char *id, size_t idlen)
{
	for (const char *line = text; *line;) {
		const char *f = line;
		for (int colons = 0; *f && *f != '\n' && colons < 2; f++)
			colons += *f == ':';
		if (!strncmp(f, id, idlen) && f[idlen] == ':')
			return 1;
		line += strcspn(line, "\n");
		line += *line == '\n';
	}
	return 0;
}

/* An image's own /etc/passwd or /etc/group (@p name), kept, with the
 * lines of @p ours whose ids it lacks added (the agent's, the judges'). */
static void merge_ids(const char *root, const char *name, const char *ours)
{
	static char text[65536];
	char path[PATH_LEN];
	ssize_t n = 0;

	join(path, sizeof(path), root, name);
	/* a regular file only: a FIFO must not hang init, a link is not read */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		n = read(fd, text, sizeof(text) - 4096 * 2);
	if (fd >= 0)
		close(fd);
	text[n > 0 ? n : 0] = '\0';
	if (n > 0 && text[n - 1] != '\n')
		cat(text, sizeof(text), "\n");
	for (const char *line = ours; *line;) {
		size_t len = strcspn(line, "\n");
		const char *id = line;
		for (int colons = 0; id < line + len && colons < 2; id++)
			colons += *id == ':';
		size_t idlen = strcspn(id, ":");
		if (!has_id(text, id, idlen) && strlen(text) + len + 2 < sizeof(text)) {
			size_t at = strlen(text);
			memcpy(text + at, line, len);
			text[at + len] = '\n';
			text[at + len + 1] = '\0';
		}
		line += len + (line[len] == '\n');
	}
	if ((unlink(path) < 0 && errno != ENOENT && rmdir(path) < 0) || /* ours from now on */
	    write_file(path, text, 0644) < 0)
		fail("write", name, errno);
}

/* The /etc of an image root: the image's passwd and group with the
 * sandbox's ids added, and the files the sandbox owns (no DNS: the proxy
 * is the way out; hosts and hostname are written at assignment). */
static void image_etc(const char *root, const char *passwd, const char *group)
{
	static const char *const ours[] = { "/etc/resolv.conf", "/etc/hosts", "/etc/hostname" };
	char path[PATH_LEN];

	join(path, sizeof(path), root, "/etc");
	if (mkdir_p(path) < 0)
		fail("mkdir", "/etc", errno);
	merge_ids(root, "/etc/passwd", passwd);
	merge_ids(root, "/etc/group", group);
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
		join(path, sizeof(path), root, ours[i]);
		if ((unlink(path) < 0 && errno != ENOENT && rmdir(path) < 0) ||
		    write_file(path, "", 0644) < 0)
			fail("write", ours[i], errno);
	}
}
