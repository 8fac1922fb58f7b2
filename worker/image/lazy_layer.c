/*
 * lazy_layer.c: what describes a layer of an image read on demand
 * (image.h tb_image_lazy_open): its eStargz TOC when its manifest
 * annotates one, else the index the fleet pinned for it.
 *
 * The TOC comes first: it needs no whole pull anywhere (an image no
 * worker has seen starts lazily), and its points are the files' own
 * chunks (reading a small file fetches that file's gzip member, not a
 * span of megabytes). It is trusted only through the manifest, read by
 * its digest: the TOC's SHA-256 must be the annotation's, and each chunk
 * is checked against the TOC's digest of it when read
 * (layer_estargz.h). A TOC that cannot be used (not eStargz after all,
 * not the one annotated, one the parser refuses, a fetch that failed)
 * is said in the log and counted, and the pinned index is looked for;
 * with neither, the layer is pulled whole, with its image.
 */
#include "cache_int.h"

#include "layer_estargz.h"
#include "tb/log.h"
#include "tb/metrics.h"

#include <stdio.h>
#include <string.h>

/* tb_image_source_fetch, counting the bytes fetched. */
typedef struct counted {
	tb_source_blob_t *blob;
	uint64_t bytes;
} counted_t;

static int64_t fetch_counted(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	counted_t *c = arg;
	int64_t got = tb_image_source_fetch(c->blob, off, buf, len, err);
	if (got > 0)
		c->bytes += (uint64_t)got;
	return got;
}

/* Layer @p d's TOC, opened through @p blob. @return 0; TB_ENOMEM; 1 when
 * it cannot be used (the reason in @p err, said in the log). */
static int open_toc(const tb_oci_desc_t *d, tb_source_blob_t *blob, tb_layer_index_t **out,
		    uint64_t *fetched, tb_error_t *err)
{
	tb_estargz_layer_t l = { d->digest, d->size, d->toc_digest };
	counted_t f = { blob, 0 };
	int rc = tb_estargz_open(&l, fetch_counted, &f, out, err);

	*fetched += f.bytes;
	if (rc == 0) {
		tb_metrics_layer_index("toc");
		return 0;
	}
	if (rc == TB_ENOMEM)
		return rc;
	tb_metrics_layer_index("toc_refused");
	tb_warn(NULL, "image cache: layer %.19s...: its eStargz TOC is not used: %s", d->digest,
		err->msg);
	return 1;
}

int tb_image_lazy_layer(tb_image_cache_t *c, const tb_oci_desc_t *d, tb_source_blob_t *blob,
			tb_layer_index_t **out, uint64_t *fetched, tb_error_t *err)
{
	char toc[TB_ERROR_MSG_MAX] = "";
	int rc;

	*out = NULL;
	if (d->toc_digest[0]) {
		if ((rc = open_toc(d, blob, out, fetched, err)) <= 0)
			return rc;
		snprintf(toc, sizeof(toc), "%s", err->msg);
	}
	if ((rc = tb_image_cache_find_index(c, d->digest, out, err)) == 0)
		return 0;
	if (rc == TB_ENOMEM)
		return rc;
	if (!toc[0]) {
		tb_error_prefix(err, "has no index");
		return 1;
	}
	char index[TB_ERROR_MSG_MAX];
	snprintf(index, sizeof(index), "%s", err->msg);
	tb_error_set(err, TB_EINVAL,
		     "its eStargz TOC is refused (%.400s), and it has no index (%.400s)", toc,
		     index);
	return 1;
}
