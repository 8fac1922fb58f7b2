/*
 * submit.h: a task onto the tasks topic, as `taskbox submit` and any other
 * producer in this tree put it: checked and encoded as the worker decodes
 * it (schemas/task.md), keyed by its id, its delivery awaited.
 */
#ifndef TB_SUBMIT_H
#define TB_SUBMIT_H

#include "tb/config.h"
#include "tb/error.h"

#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>

/**
 * The canonical MessagePack of task @p doc (JSON as schemas/task.md
 * writes it, `id` and `submitted_at` filled in), as the worker would
 * decode it; its id into @p id.
 * @param[out] out initialised by the caller, its bytes appended
 * @return 0; TB_EINVAL naming the field that is wrong
 */
int tb_submit_encode(const json_t *doc, msgpack_sbuffer *out, char *id, size_t idlen,
		     tb_error_t *err);

/**
 * @p len bytes of an encoded task (tb_submit_encode()) onto the tasks
 * topic, keyed @p id, delivery awaited (30 s at most).
 * @return 0; TB_EIO naming why
 */
int tb_submit_send(const tb_config_t *cfg, const char *id, const void *data, size_t len,
		   tb_error_t *err);

#endif
