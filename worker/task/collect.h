/*
 * collect.h: saving what a task left in /outputs as artifacts, safely.
 *
 * Only regular files are saved. The walk never follows a symbolic link,
 * never leaves /outputs (each step is an openat() with O_NOFOLLOW from the
 * directory above, so a name cannot lead elsewhere whatever the agent
 * did), and reads each file through the descriptor it checked, so nothing
 * can be swapped in between check and upload. Symbolic links, fifos,
 * sockets and devices, names that are not UTF-8, files past the size or
 * count caps: each is refused and listed with the reason in the manifest.
 * The agent's /outputs is a tmpfs of its own, so hard links from elsewhere
 * cannot exist there. This file walks and uploads; the lifecycle decides
 * when, and the manifest is written by whoever owns it.
 */
#ifndef TB_COLLECT_H
#define TB_COLLECT_H

#include "tb/schema_manifest.h"
#include "tb/store.h"

#include <stdint.h>

typedef struct tb_collect_limits {
	uint64_t max_files; /* files saved at most */
	uint64_t max_bytes; /* total bytes saved at most */
} tb_collect_limits_t;

/**
 * Uploads the regular files under @p outputs_dir to @p store as
 * <key_prefix><relative path>, and appends each to @p m->artifacts, or to
 * @p m->refused with the reason; sets @p m->usage's outputs_bytes (every
 * regular file found) and saved_bytes (those saved).
 * @param outputs_dir the sandbox's /outputs as the worker sees it, e.g.
 *        /proc/<init pid>/root/outputs
 * @return 0 even when files were refused (that is the agent's doing); a
 *         negative TB_E* code when the store failed (the task can be
 *         retried) or memory ran out
 */
int tb_collect_outputs(tb_manifest_t *m, tb_store_t *store, const char *outputs_dir,
		       const char *key_prefix, const tb_collect_limits_t *lim, tb_error_t *err);

#endif
