/*
 * demo_recipe.h: turns a directory of recipe files into a git repository
 * with one commit (libgit2), so the embedded demo can run a real recipe at
 * a real pinned commit without a git server. Demo support only.
 */
#ifndef TB_DEMO_RECIPE_H
#define TB_DEMO_RECIPE_H

#include "tb/error.h"

#include <stddef.h>

/**
 * Commits every file under @p src_dir into a new repository at @p git_dir.
 * @param[out] url "file://<git_dir>"; @param[out] commit 40 hex digits
 */
int tb_demo_recipe_commit(const char *src_dir, const char *git_dir, char *url, size_t url_len,
			  char commit[41], tb_error_t *err);

#endif
