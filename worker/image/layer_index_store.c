/*
 * layer_index_store.c: a layer's index published to the store and pinned,
 * and found again by its pin (layer_index_store.h). What to trust is
 * decided here: only the pin, never the store's object or its metadata
 * (which say whether to publish again, not whether to believe).
 */
#include "layer_index_store.h"

#include "tb/image_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tb_layer_index_key(char *out, size_t cap, const char *layer, const char *digest)
{
	snprintf(out, cap, "layer-indexes/%.64s/%.64s", layer + 7, digest + 7);
}

/* Puts @p data at @p key; an object with other bytes there (which no
 * worker wrote: the key names these bytes) is removed first. */
static int put_object(tb_store_t *store, const char *key, const uint8_t *data, size_t len,
		      tb_error_t *err)
{
	int rc = tb_store_put_bytes(store, key, data, len, NULL, err);

	if (rc != TB_EINVAL)
		return rc;
	if ((rc = tb_store_delete(store, key, err)) < 0)
		return rc;
	return tb_store_put_bytes(store, key, data, len, NULL, err);
}

int tb_layer_index_publish(const tb_layer_indexes_t *where, const tb_layer_index_t *ix,
			   char digest[72], char pinned[72], tb_error_t *err)
{
	char d[72], p[72], key[200];
	uint8_t *data = NULL;
	size_t len;
	int rc;

	if ((rc = tb_layer_index_encode(ix, &data, &len, d, err)) < 0)
		return tb_error_prefix(err, "layer %s: its index", ix->layer);
	tb_layer_index_key(key, sizeof(key), ix->layer, d);
	/* the object first: a pin names only what the store was given */
	if ((rc = put_object(where->store, key, data, len, err)) < 0)
		tb_error_prefix(err, "layer %s: its index into the store", ix->layer);
	else if ((rc = where->pins.put(where->pins.arg, ix->layer, d, p, err)) < 0)
		tb_error_prefix(err, "layer %s: pinning its index", ix->layer);
	free(data);
	if (rc == 0 && digest)
		snprintf(digest, 72, "%s", d);
	if (rc == 0 && pinned)
		snprintf(pinned, 72, "%s", p);
	return rc;
}

int tb_layer_index_published(const tb_layer_indexes_t *where, const char *layer, tb_error_t *err)
{
	char pin[72], key[200];
	tb_object_info_t info;
	int rc = where->pins.get(where->pins.arg, layer, pin, err);

	if (rc == TB_ENOTFOUND)
		return 0;
	if (rc < 0)
		return tb_error_prefix(err, "layer %s: its index's pin", layer);
	if (!tb_digest_valid(pin))
		return 0; /* not a digest: a new pin once this one lapses */
	tb_layer_index_key(key, sizeof(key), layer, pin);
	if ((rc = tb_store_head(where->store, key, &info, err)) == TB_ENOTFOUND)
		return 0;
	if (rc < 0)
		return tb_error_prefix(err, "layer %s: its index in the store", layer);
	/* the store's word, enough to decide to publish again (finding it
	 * checks the bytes against the pin) */
	return !strcmp(info.sha256, pin + 7);
}

int tb_layer_index_find(const tb_layer_indexes_t *where, const char *layer, tb_layer_index_t **out,
			tb_error_t *err)
{
	char pin[72], key[200], *data = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	if ((rc = where->pins.get(where->pins.arg, layer, pin, err)) == TB_ENOTFOUND)
		return tb_error_set(err, TB_ENOTFOUND, "layer %s: no index pinned", layer);
	if (rc < 0)
		return tb_error_prefix(err, "layer %s: its index's pin", layer);
	if (!tb_digest_valid(pin))
		return tb_error_set(err, TB_EINVAL, "layer %s: its index's pin is not a digest",
				    layer);
	tb_layer_index_key(key, sizeof(key), layer, pin);
	rc = tb_store_get_bytes(where->store, key, TB_LAYER_INDEX_BYTES_MAX, &data, &len, err);
	if (rc == TB_ENOTFOUND || rc == TB_ETOOBIG)
		rc = tb_error_set(err, TB_EINVAL, "layer %s: index %.19s...: %s", layer, pin,
				  rc == TB_ENOTFOUND ? "not in the store" : "too big");
	else if (rc < 0)
		tb_error_prefix(err, "layer %s: index %.19s...", layer, pin);
	else if (tb_layer_index_decode((const uint8_t *)data, len, layer, pin, out, err) < 0) {
		tb_error_prefix(err, "layer %s: the store's index refused", layer);
		rc = err->code = TB_EINVAL; /* a later version's too: pulled whole */
	}
	free(data);
	return rc;
}

int tb_layer_index_at_pull(const tb_layer_indexes_t *where, const char *layer,
			   tb_layer_read_fn read, void *arg, tb_error_t *err)
{
	tb_layer_index_t *ix = NULL;
	int rc;

	if ((rc = tb_layer_index_published(where, layer, err)) != 0)
		return rc < 0 ? rc : 0;
	if ((rc = tb_layer_index_build(layer, 0, read, arg, &ix, err)) < 0)
		return rc;
	rc = tb_layer_index_publish(where, ix, NULL, NULL, err);
	tb_layer_index_free(ix);
	return rc < 0 ? rc : 1;
}
