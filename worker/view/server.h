/*
 * server.h: `taskbox view`'s web server (libmicrohttpd, a thread per
 * connection, at most MAX_CONNECTIONS): the page and its files, built
 * into the binary (assets.h), and the JSON API it reads:
 *
 *   GET /api/tasks?recipe=&runtime=&status=&q=&since=&until=&offset=&limit=
 *   GET /api/task?id=ID[&attempt=N]     summary, attempts, N's manifest
 *   GET /api/events?id=ID[&attempt=N]   the events (history.h)
 *   GET /api/live?id=ID                 new events, server-sent (live.h)
 *   GET /api/artifact?key=KEY           a file an attempt saved, as a download
 *   GET /api/fleet                      workers, results per minute, lag, the feed
 *   GET /api/dlq                        the latest dead letters
 *   POST /api/followup {"id", "text"}   a further prompt (actions.h)
 *   POST /api/end {"id"}                the end of a session
 *   POST /api/share {"key", "seconds"}  a signed URL of a saved file
 *   POST /api/dlq/send {"partition", "offset"}  a dead letter sent back
 *
 * Everything a task produced is data: the API answers JSON, the page
 * renders it as text, and every answer carries a Content-Security-Policy
 * that runs no script but the page's own (no inline script, no eval), no
 * frames, no form posts elsewhere. A download is an attachment of type
 * application/octet-stream, never rendered.
 *
 * Who may ask: bound to loopback, requests whose Host is that loopback
 * address (a page elsewhere cannot reach it through DNS rebinding);
 * bound elsewhere, a token is required (a cookie set by /login?token=,
 * or Authorization: Bearer). Requests that change anything are POSTs
 * carrying the page's CSRF token in X-Taskbox-CSRF, from the same origin.
 */
#ifndef TB_VIEW_SERVER_H
#define TB_VIEW_SERVER_H

#include "feed.h"
#include "index.h"
#include "live.h"

#include "tb/config.h"
#include "tb/error.h"
#include "tb/ledger.h"
#include "tb/store.h"

typedef struct tb_view_server tb_view_server_t;

typedef struct tb_view_server_conf {
	const char *listen; /* host:port; port 0: any */
	const char *token;  /* required unless listen is loopback; NULL: none */
	const tb_config_t *cfg;
	tb_view_index_t *index;
	tb_view_live_t *live;
	tb_view_feed_t *feed;
	tb_store_t *store;   /* NULL: no manifests, no downloads */
	tb_ledger_t *ledger; /* NULL: no workers listed */
} tb_view_server_conf_t;

/** @return 0; TB_EINVAL (listen, or a token missing); TB_EIO (cannot
 * listen there) */
int tb_view_server_start(tb_view_server_t **out, const tb_view_server_conf_t *conf,
			 tb_error_t *err);

/** The port it listens on. */
unsigned tb_view_server_port(const tb_view_server_t *s);

/**
 * Its address as a browser opens it, "http://HOST:PORT" (no slash): the
 * host given to listen, or for a wildcard address (0.0.0.0, ::) the
 * machine's name when it resolves, else an address of one of its
 * interfaces. The server's own: valid until tb_view_server_stop().
 */
const char *tb_view_server_url(const tb_view_server_t *s);

void tb_view_server_stop(tb_view_server_t *s);

#endif
