/*
 * store_prepass.h: the pass over an object before it goes up (see
 * store_prepass.c), for store.c.
 */
#ifndef TB_STORE_PREPASS_H
#define TB_STORE_PREPASS_H

#include "tb/store.h"
#include "tb/sys/store.h"

#include <stdint.h>

/**
 * The size, SHA-256 and CRC-32C of @p fd's content from offset 0 into
 * @p out (its other fields are left as they are) and, if it is at least
 * @p multipart_min bytes and @p part_size is not 0, the SHA-256 of each
 * @p part_size part into @p parts (else parts->n is 0).
 * @param[out] parts released with tb_part_sums_free()
 * @return 0; TB_EIO if the file cannot be read or changes size meanwhile;
 *         TB_ENOMEM
 */
int tb_store_prepass(int fd, uint64_t part_size, uint64_t multipart_min, tb_object_info_t *out,
		     tb_part_sums_t *parts, tb_error_t *err);

#endif
