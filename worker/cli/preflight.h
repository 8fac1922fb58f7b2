/*
 * preflight.h: what a worker checks of its configuration before it joins
 * its group, and `taskbox worker --check` and `taskbox schema config`
 * report: that runtimes_dir holds a runtime it can serve tasks with. The
 * checks that need the host (a sandbox built under work_dir) and the
 * services are cmd_worker.c's, which owns what they use.
 */
#ifndef TB_PREFLIGHT_H
#define TB_PREFLIGHT_H

#include "tb/config.h"

#include <stddef.h>

/**
 * Where the configuration's @p key came from, for a message that names
 * it: "TASKBOX_WORK_DIR" when that variable is set (it wins), else
 * @p file, else "the defaults" (no file). @return @p buf
 */
const char *tb_preflight_origin(char *buf, size_t len, const char *key, const char *file);

/**
 * Whether runtimes_dir exists and holds at least one valid runtime
 * (`<name>.json`). @p file names the configuration file (NULL: none),
 * for the message.
 * @param[out] out the runtimes found ("default, gpu"), for the log
 * @return 0; TB_ENOTFOUND (no such directory), TB_EINVAL (no valid
 *         runtime in it: the first reason given), each naming the key and
 *         the file
 */
int tb_preflight_runtimes(char *out, size_t len, const tb_config_t *cfg, const char *file,
			  tb_error_t *err);

#endif
