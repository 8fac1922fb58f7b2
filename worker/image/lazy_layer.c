/*
 * lazy_layer.c: what describes a layer of an image read on demand
 * (image.h tb_image_lazy_open): its table of contents when its manifest
 * annotates one (eStargz for a gzip layer, zstd:chunked for a zstd
 * one), else, for a gzip layer, the index the fleet pinned for it.
 *
 * The TOC comes first: it needs no whole pull anywhere (an image no
 * worker has seen starts lazily), and its points are the files' own
 * chunks (reading a small file fetches that file's member or frames,
 * not a span of megabytes). It is trusted only through the manifest,
 * read by its digest: the TOC's SHA-256 must be the annotation's, and
 * each chunk is checked against the TOC's digest of it when read
 * (layer_estargz.h, layer_zstd_chunked.h). A TOC that cannot be used
 * (not that format after all, not the one annotated, one the parser
 * refuses, a fetch that failed) is said in the log and counted, and a
 * gzip layer's pinned index is looked for; with neither, the layer is
 * pulled whole, with its image. A zstd layer has no index: without a
 * TOC (or without libzstd in this build) it is pulled whole.
 *
 * A TOC is parsed within what the image's other layers left of its
 * budget (tb_toc_budget_t: TB_IMAGE_TOC_BYTES_MAX of TOC JSON and
 * TB_IMAGE_MAX_ENTRIES entries, all layers together), refused before it
 * is allocated past it, so a hostile image of many big TOCs costs this
 * worker no more memory than one image's worth.
 */
#include "cache_int.h"

#include "layer_estargz.h"
#include "layer_zstd_chunked.h"
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

/* Layer @p d's TOC (eStargz or zstd:chunked, by its compression), opened
 * through @p blob. @return 0; TB_ENOMEM; 1 when it cannot be used (the
 * reason in @p err, said in the log). */
static int open_toc(const tb_oci_desc_t *d, tb_source_blob_t *blob, tb_toc_budget_t *budget,
		    tb_layer_index_t **out, uint64_t *fetched, tb_error_t *err)
{
	counted_t f = { blob, 0 };
	int rc;

	if (d->compression == TB_OCI_ZSTD) {
#ifdef TB_HAVE_ZSTD_CHUNKED
		tb_zstd_chunked_layer_t z = { d->digest, d->size, d->toc_digest,
					      d->toc_position[0] ? d->toc_position : NULL, budget };
		rc = tb_zstd_chunked_open(&z, fetch_counted, &f, out, err);
#else
		rc = tb_error_set(err, TB_EINVAL,
				  "layer %s is zstd:chunked, which this build does not read "
				  "natively (no libzstd)",
				  d->digest);
#endif
	} else {
		tb_estargz_layer_t l = { d->digest, d->size, d->toc_digest, budget };
		rc = tb_estargz_open(&l, fetch_counted, &f, out, err);
	}
	*fetched += f.bytes;
	if (rc == 0) {
		tb_metrics_layer_index("toc");
		return 0;
	}
	if (rc == TB_ENOMEM)
		return rc;
	tb_metrics_layer_index("toc_refused");
	tb_warn(NULL, "image cache: layer %.19s...: its TOC is not used: %s", d->digest, err->msg);
	return 1;
}

int tb_image_lazy_layer(tb_image_cache_t *c, const tb_oci_desc_t *d, tb_source_blob_t *blob,
			tb_toc_budget_t *budget, tb_layer_index_t **out, uint64_t *fetched,
			tb_error_t *err)
{
	char toc[TB_ERROR_MSG_MAX] = "";
	int rc;

	*out = NULL;
	if (d->toc_digest[0]) {
		if ((rc = open_toc(d, blob, budget, out, fetched, err)) <= 0)
			return rc;
		snprintf(toc, sizeof(toc), "%s", err->msg);
	}
	if (d->compression == TB_OCI_ZSTD) {
		if (!toc[0])
			tb_error_set(err, TB_EINVAL, "is zstd, with no zstd:chunked TOC annotated");
		else
			tb_error_set(err, TB_EINVAL, "its zstd:chunked TOC is refused (%.800s)",
				     toc);
		return 1;
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
