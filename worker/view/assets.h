/*
 * assets.h: the page's files (worker/view/assets/), built into the
 * binary by embed.cmake: no toolchain of the web's is needed to build or
 * run the viewer.
 */
#ifndef TB_VIEW_ASSETS_H
#define TB_VIEW_ASSETS_H

#include <stddef.h>

typedef struct tb_view_asset {
	const char *name; /* "app.js" */
	const char *type; /* its Content-Type */
	const unsigned char *data;
	size_t len;
} tb_view_asset_t;

extern const tb_view_asset_t tb_view_assets[];
extern const size_t tb_view_nassets;

#endif
