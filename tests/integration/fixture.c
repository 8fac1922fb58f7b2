/*
 * fixture.c: the sandbox tests' shared fixture (fixture.h).
 */
#include "fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

static char *binds_items[] = { "/usr", "/bin", "/lib", "/lib64", "/sbin" };
const tb_strlist_t tb_fixture_binds = { 5, binds_items };

/* Runs @p cmd; @return 0 when it exited 0. */
static int run(const char *cmd)
{
	int rc = system(cmd);
	if (rc != 0)
		fprintf(stderr, "fixture: failed (%d): %s\n", rc, cmd);
	return rc == 0 ? 0 : -1;
}

int tb_fixture_setup(tb_fixture_t *f, const char *name, const char *group, unsigned parts)
{
	char path[160], cmd[1024];
	tb_error_t err;

	memset(f, 0, sizeof(*f));
	snprintf(f->root, sizeof(f->root), "/tmp/tb-%.24s-test-XXXXXX", name);
	if (!mkdtemp(f->root)) {
		perror("fixture: mkdtemp");
		return -1;
	}
	chmod(f->root, 0711); /* sandboxes' ids reach what is under it */
	snprintf(f->work, sizeof(f->work), "%s/work", f->root);
	snprintf(f->runtimes, sizeof(f->runtimes), "%s/runtimes", f->root);
	if (mkdir(f->work, 0755) < 0 || mkdir(f->runtimes, 0755) < 0) {
		perror("fixture: mkdir");
		return -1;
	}
	if (parts & TB_FIXTURE_RUNTIME) {
		snprintf(cmd, sizeof(cmd),
			 "sed 's/\"name\": \"default\"/\"name\": \"test\"/' "
			 "%s/examples/runtimes/default.json > %s/test.json",
			 TB_SOURCE_DIR, f->runtimes);
		if (run(cmd) < 0)
			return -1;
	}
	tb_sandbox_sweep(f->work, group, &err); /* what a crashed run left */
	if (tb_seccomp_compile(&f->policy, &err) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/store", f->root);
	if ((parts & TB_FIXTURE_STORE) && tb_store_dir_open(&f->store, path, &err) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/cache", f->root);
	if ((parts & TB_FIXTURE_RECIPES) && tb_recipe_cache_open(&f->recipes, path, &err) < 0)
		goto fail;
	if ((parts & TB_FIXTURE_IMAGES) &&
	    tb_image_cache_open(&f->images, path, 1ull << 30, &err) < 0)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "fixture: %s\n", err.msg);
	return -1;
}

int tb_fixture_teardown(tb_fixture_t *f)
{
	char cmd[128];

	tb_recipe_cache_close(f->recipes);
	tb_image_cache_close(f->images);
	tb_store_close(f->store);
	tb_seccomp_free(f->policy);
	f->recipes = NULL, f->store = NULL, f->policy = NULL, f->images = NULL;
	if (!f->root[0])
		return 0;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->root);
	return run(cmd);
}

void tb_fixture_sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}
