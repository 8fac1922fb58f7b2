/*
 * fixture_repo.c: recipe repositories committed with git (fixture_repo.h).
 */
#include "fixture_repo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Runs @p cmd; @return 0 when it exited 0. */
static int run(const char *cmd)
{
	int rc = system(cmd);
	if (rc != 0)
		fprintf(stderr, "fixture: failed (%d): %s\n", rc, cmd);
	return rc == 0 ? 0 : -1;
}

int tb_fixture_head(const char *repo, char *commit, size_t len)
{
	char cmd[300];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "git -C %s rev-parse HEAD", repo);
	if (!(p = popen(cmd, "r"))) {
		perror("fixture: popen");
		return -1;
	}
	int got = fgets(commit, (int)len, p) != NULL;
	if (pclose(p) != 0 || !got) {
		fprintf(stderr, "fixture: failed: %s\n", cmd);
		return -1;
	}
	commit[strcspn(commit, "\n")] = '\0';
	return 0;
}

int tb_fixture_commit(const char *repo, const char *copy_from, char *commit, size_t len)
{
	char cmd[2048], copy[600] = "";

	if (copy_from)
		snprintf(copy, sizeof(copy), "cp -r %s/. %s; ", copy_from, repo);
	snprintf(cmd, sizeof(cmd),
		 "set -e; mkdir -p %s; [ -d %s/.git ] || git init -q %s; %sgit -C %s add -A; "
		 "git -C %s -c user.name=t -c user.email=t@t commit -q --allow-empty -m fixture",
		 repo, repo, repo, copy, repo, repo);
	return run(cmd) < 0 ? -1 : tb_fixture_head(repo, commit, len);
}

/* Makes the directories of @p path (a file's: not its last part). */
static int make_dirs(char *path)
{
	for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		int rc = mkdir(path, 0755);
		*s = '/';
		if (rc < 0 && errno != EEXIST) {
			fprintf(stderr, "fixture: mkdir %.*s: %s\n", (int)(s - path), path,
				strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* Writes @p text as @p name in @p repo. @return 0, or -1 having said why. */
static int write_file(const char *repo, const char *name, const char *text)
{
	char path[1024];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", repo, name) >= sizeof(path)) {
		fprintf(stderr, "fixture: path too long: %s/%s\n", repo, name);
		return -1;
	}
	if (make_dirs(path) < 0)
		return -1;
	FILE *f = fopen(path, "w");
	int ok = f && fputs(text, f) >= 0;
	if (f && fclose(f) != 0)
		ok = 0;
	if (!ok) {
		fprintf(stderr, "fixture: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

int tb_fixture_vrecipe(const char *repo, char *commit, size_t len, const char *name, va_list rest)
{
	char dir[1030];

	snprintf(dir, sizeof(dir), "%s/", repo); /* the repository itself, made */
	if (make_dirs(dir) < 0)
		return -1;
	for (; name; name = va_arg(rest, const char *)) {
		const char *text = va_arg(rest, const char *);
		if (!text) {
			fprintf(stderr, "fixture: %s: no text\n", name);
			return -1;
		}
		if (write_file(repo, name, text) < 0)
			return -1;
	}
	if (tb_fixture_commit(repo, NULL, commit, len) < 0)
		return -1;
	if (strlen(commit) != 40) {
		fprintf(stderr, "fixture: %s: not a commit id: %s\n", repo, commit);
		return -1;
	}
	return 0;
}

int tb_fixture_recipe(const char *repo, char *commit, size_t len, const char *name, ...)
{
	va_list ap;

	va_start(ap, name);
	int rc = tb_fixture_vrecipe(repo, commit, len, name, ap);
	va_end(ap);
	return rc;
}
