/*
 * image_done.c: what an attempt whose image root was read on demand
 * leaves behind it, once no sandbox can read it (run_int.h): the bytes
 * fetched ahead counted, the order its readers first needed the spans
 * in recorded for the image (when none was found at its start: read_order.h),
 * and the image pulled whole behind it for the next task on the host.
 * None of it when a span was refused: those reads are not the image's.
 */
#include "run_int.h"

#include "tb/log.h"
#include "tb/metrics.h"

#include <stdlib.h>

void tb_run_image_done(tb_run_t *r)
{
	tb_read_span_t *spans = NULL;
	size_t n = 0;
	char why[8];

	if (!r->image_fs)
		return;
	tb_metrics_image_prefetched(tb_image_fs_prefetched_bytes(r->image_fs));
	if (!tb_image_fs_error(r->image_fs, why, sizeof(why))) {
		if (tb_image_fs_read_order(r->image_fs, &spans, &n) < 0)
			tb_warn(r->task->id, "image %.19s: its read order: out of memory",
				r->image_lazy->digest);
		else
			tb_image_cache_record_order(r->ctx->images, r->image_lazy, spans, n);
		free(spans);
		/* the next task on this host: the unpacked tree (not before:
		 * the pull would take the link from this task's reads) */
		tb_image_cache_pull_later(r->ctx->images, &r->image_lazy->ref,
					  r->rt.sandbox.images.credentials,
					  r->rt.sandbox.images.max_unpacked_mb << 20);
	}
	tb_image_fs_stop(r->image_fs); /* its mount gone with the sandbox */
	r->image_fs = NULL;
}
