/*
 * read_order_store.c: an image's read order kept in the store, found and
 * recorded (read_order.h). Nothing here is believed beyond its shape: the
 * object is decoded as hostile and fitted to the image's pinned indexes.
 */
#include "read_order.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tb_read_order_key(char *out, size_t cap, const char *image)
{
	snprintf(out, cap, "image-orders/%.64s", strlen(image) > 7 ? image + 7 : "");
}

int tb_read_order_find(tb_store_t *store, const char *image, const tb_layer_index_t *const *ix,
		       size_t nlayers, tb_read_order_t **out, tb_error_t *err)
{
	char key[100], *data = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	tb_read_order_key(key, sizeof(key), image);
	rc = tb_store_get_bytes(store, key, TB_READ_ORDER_BYTES_MAX, &data, &len, err);
	if (rc == TB_ENOTFOUND)
		return tb_error_set(err, TB_ENOTFOUND, "image %.19s...: no read order recorded",
				    image);
	if (rc == TB_ETOOBIG)
		return tb_error_set(err, TB_EINVAL, "image %.19s...: its read order is too big",
				    image);
	if (rc < 0)
		return tb_error_prefix(err, "image %.19s...: its read order", image);
	tb_read_order_t *o = NULL;
	rc = tb_read_order_decode((const uint8_t *)data, len, image, &o, err);
	free(data);
	if (rc < 0)
		return tb_error_prefix(err, "image %.19s...: its read order refused", image);
	if (tb_read_order_fits(o, ix, nlayers, err) < 0) {
		tb_read_order_free(o);
		tb_error_prefix(
		    err, "image %.19s...: its read order does not fit this host's indexes", image);
		err->code = TB_ECONFLICT;
		return TB_ECONFLICT;
	}
	*out = o;
	return 0;
}

int tb_read_order_publish(tb_store_t *store, const tb_read_order_t *o, int replace, tb_error_t *err)
{
	char key[100];
	tb_object_info_t info;
	uint8_t *data = NULL;
	size_t len;
	int rc;

	tb_read_order_key(key, sizeof(key), o->image);
	if (replace && (rc = tb_store_delete(store, key, err)) < 0)
		return tb_error_prefix(err, "image %.19s...: its refused read order", o->image);
	if (!replace && (rc = tb_store_head(store, key, &info, err)) != TB_ENOTFOUND)
		return rc < 0 ? tb_error_prefix(err, "image %.19s...: its read order", o->image)
			      : tb_error_set(err, TB_EEXIST,
					     "image %.19s...: a read order is recorded", o->image);
	if ((rc = tb_read_order_encode(o, &data, &len, err)) < 0)
		return tb_error_prefix(err, "image %.19s...", o->image);
	rc = tb_store_put_bytes(store, key, data, len, NULL, err);
	free(data);
	if (rc == TB_EINVAL) /* other bytes there: another run's came first */
		return tb_error_set(err, TB_EEXIST, "image %.19s...: a read order is recorded",
				    o->image);
	if (rc < 0)
		return tb_error_prefix(err, "image %.19s...: its read order into the store",
				       o->image);
	return 0;
}
