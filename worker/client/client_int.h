/*
 * client_int.h: what the files of worker/client/ share, private to it.
 */
#ifndef TB_CLIENT_INT_H
#define TB_CLIENT_INT_H

#include "tb/config.h"
#include "tb/error.h"

#include <stddef.h>

/**
 * @p len bytes to @p topic keyed @p key, and their delivery awaited (30 s
 * at most), counted on a tracker of their own: another thread's messages
 * (the view serves many at once) do not move it.
 * @return 0, or TB_EIO naming why (TB_ENOMEM)
 */
int tb_client_produce(const tb_config_t *cfg, const char *topic, const char *key, const void *data,
		      size_t len, tb_error_t *err);

#endif
