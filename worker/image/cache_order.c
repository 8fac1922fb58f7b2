/*
 * cache_order.c: the read orders of images read on demand (read_order.h),
 * kept where the cache publishes layer indexes: found when an image is
 * opened to be read on demand, recorded after a run that found none.
 * Each outcome is said in the log when it is a fault, and counted
 * (taskbox_image_read_orders_total). Only an order that fails to decode
 * is replaced by this run's: one that decodes but was recorded over other
 * indexes than this host's (a host that read a layer by its gzip index
 * where the fleet read its TOC, say) is only not used here ("unfit"),
 * and stands for the hosts it fits.
 */
#include "cache_int.h"

#include "tb/log.h"
#include "tb/metrics.h"

void tb_image_lazy_find_order(tb_image_cache_t *c, tb_image_lazy_t *l)
{
	tb_store_t *store = tb_image_cache_store(c);
	tb_error_t err;

	l->order = NULL;
	l->order_state = TB_IMAGE_ORDER_AWAY;
	if (!store)
		return;
	int rc = tb_read_order_find(store, l->digest, (const tb_layer_index_t *const *)l->ix,
				    l->layers.n, &l->order, &err);
	if (rc == TB_ECONFLICT)
		tb_info(NULL, "image cache: no prefetch on this host (the order stands): %s",
			err.msg);
	else if (rc < 0 && rc != TB_ENOTFOUND)
		tb_warn(NULL, "image cache: no prefetch: %s", err.msg);
	l->order_state = rc == 0              ? TB_IMAGE_ORDER_FOUND
			 : rc == TB_ENOTFOUND ? TB_IMAGE_ORDER_NONE
			 : rc == TB_EINVAL    ? TB_IMAGE_ORDER_REFUSED
			 : rc == TB_ECONFLICT ? TB_IMAGE_ORDER_UNFIT
					      : TB_IMAGE_ORDER_AWAY;
	tb_metrics_read_order(rc == 0                                ? "found"
			      : rc == TB_ENOTFOUND                   ? "none"
			      : rc == TB_EINVAL || rc == TB_EVERSION ? "refused"
			      : rc == TB_ECONFLICT                   ? "unfit"
								     : "failed");
}

void tb_image_cache_record_order(tb_image_cache_t *c, const tb_image_lazy_t *l,
				 const tb_read_span_t *spans, size_t n)
{
	tb_store_t *store = tb_image_cache_store(c);
	tb_read_order_t *o = NULL;
	tb_error_t err;

	if (!store || !n ||
	    (l->order_state != TB_IMAGE_ORDER_NONE && l->order_state != TB_IMAGE_ORDER_REFUSED))
		return;
	int rc = tb_read_order_make(&o, l->digest, (const tb_layer_index_t *const *)l->ix,
				    l->layers.n, spans, n, &err);
	if (rc == 0)
		rc =
		    tb_read_order_publish(store, o, l->order_state == TB_IMAGE_ORDER_REFUSED, &err);
	tb_read_order_free(o);
	if (rc == TB_EEXIST) /* another run's came first: it stands */
		return;
	if (rc < 0)
		tb_warn(NULL, "image cache: image %.19s...: its read order not recorded: %s",
			l->digest, err.msg);
	tb_metrics_read_order(rc == 0 ? "recorded" : "unrecorded");
}
