/*
 * ledger.c: chooses the ledger implementation ledger.url names.
 */
#include "tb/ledger.h"

#include <string.h>

int tb_ledger_open(tb_ledger_t **out, const char *url, const char *prefix, const char *worker,
		   tb_error_t *err)
{
	*out = NULL;
	if (!strcmp(url, "memory:"))
		return tb_ledger_memory_open(out, worker, err);
	if (!strncmp(url, "redis://", 8))
		return tb_ledger_redis_open(out, url, prefix, worker, err);
	return tb_error_set(err, TB_EINVAL,
			    "ledger.url '%s': expected 'memory:' or redis://host:port[/db]", url);
}
