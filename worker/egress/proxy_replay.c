/*
 * proxy_replay.c: a request answered from an earlier attempt's egress
 * recording (replay.h) instead of its upstream (proxy_int.h). The
 * request's whole body is read first (it names the recorded exchange by
 * its hash); a match is played back (its status, headers and body, at
 * once or at the recorded pace) without a connection anywhere and without
 * the credential; a request that matches nothing is refused (strict) or
 * sent to its upstream with the body read (fill).
 */
#include "proxy_int.h"
#include "tb/encoding.h"
#include "recording.h"
#include "replay.h"

#include "tb/clock.h"
#include "tb/codec.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPLAY_BODY_MAX (16u << 20) /* a request body a replay holds to match it */

/* The client's whole body read (tb_proxy_read_body; a provider's may
 * have been already), its SHA-256 into @p sha. @return 0, or the status
 * to refuse with (400, 408, 413). */
static int read_body(tb_proxy_exchange_t *x, char sha[65])
{
	unsigned char sum[32];
	unsigned int n = 0;
	int status = tb_proxy_read_body(x, REPLAY_BODY_MAX);

	snprintf(sha, 65, "%s", TB_REC_EMPTY_SHA256);
	if (status || !x->mem_len)
		return status;
	if (!EVP_Digest(x->mem_body, x->mem_len, sum, &n, tb_rec_sha256(), NULL) || n != 32)
		return 413;
	tb_hex(sha, sum, sizeof(sum));
	return 0;
}

/* Waits until @p at (monotonic ms): -1 when the proxy stops. */
static int wait_until(tb_proxy_conn_t *c, uint64_t at)
{
	uint64_t now = tb_mono_ms();
	if (at <= now)
		return 0;
	struct pollfd pf = { c->p->stop_fd, POLLIN, 0 };
	int rc = poll(&pf, 1, (int)(at - now > 600000 ? 600000 : at - now));
	return rc != 0 || atomic_load(&c->p->stopping) ? -1 : 0;
}

/* The recorded answer's headers as the proxy passes headers on. */
static int recorded_head(tb_proxy_exchange_t *x, const tb_rec_exchange_read_t *e)
{
	size_t len = 0;

	for (size_t i = 0; i < e->nrheaders; i++)
		len += strlen(e->rheaders[i].name) + strlen(e->rheaders[i].value) + 4;
	if (!(x->rhead = malloc(len + 1)))
		return -1;
	x->rlen = 0;
	for (size_t i = 0; i < e->nrheaders; i++)
		x->rlen += (size_t)snprintf(x->rhead + x->rlen, len + 1 - x->rlen, "%s: %s\r\n",
					    e->rheaders[i].name, e->rheaders[i].value);
	return 0;
}

/* Why the recorded answer @p e cannot be played whole, or NULL: it
 * failed, the recording ends inside it, or kept only its start. */
static const char *cut_short(const tb_rec_exchange_read_t *e)
{
	return e->error        ? e->error
	       : !e->ended     ? "the recording ends inside this answer"
	       : e->answer_cut ? "the recording kept only the start of this answer"
			       : NULL;
}

/* The recorded answer's body to the client, at its pace when @p paced.
 * @return 0, or -1 (the client failed, or the proxy stops) */
static int send_pieces(tb_proxy_exchange_t *x, const tb_rec_exchange_read_t *e, int paced,
		       uint64_t t0)
{
	for (size_t i = 0; i < e->npieces && !x->resp_nobody; i++) {
		if ((paced && wait_until(x->c, t0 + e->pieces[i].at_ms) < 0) ||
		    tb_proxy_send_body(x, (const char *)e->pieces[i].data, e->pieces[i].len) < 0)
			return -1;
		x->bytes_in += e->pieces[i].len;
	}
	return 0;
}

/* Plays recorded exchange @p e back as the answer to @p x. */
static int play(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d,
		const tb_rec_exchange_read_t *e, uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	int paced = tb_replay_pace(c->p->conf.replay) == TB_REPLAY_RECORDED, whole = 0;
	char why[600] = "";
	size_t total = 0;

	c->replay_state = "replayed";
	c->upstream = 1;        /* an answer, if not the upstream's now: no refusal */
	if (!e->has_response) { /* the original got none: nor does this */
		snprintf(why, sizeof(why), "replayed: %.580s",
			 e->error ? e->error : "no answer was recorded");
		tb_rec_end(x->rec, why);
		x->rec = NULL;
		tb_proxy_refuse(c, 502, why);
		tb_proxy_audit(c, x->req.method, x->ep->host, d->path, x->ep, 502, 0, x->mem_len,
			       t0, why);
		return 0;
	}
	/* An answer that was cut short, or kept in part, ends short again:
	 * no length, no last chunk, the connection closed. */
	if (cut_short(e))
		snprintf(why, sizeof(why), "replayed: %.560s", cut_short(e));
	for (size_t i = 0; i < e->npieces; i++)
		total += e->pieces[i].len;
	x->status = e->status;
	if (e->stream)
		snprintf(x->ctype, sizeof(x->ctype), "text/event-stream");
	if (!e->stream && !why[0])
		snprintf(x->rlength, sizeof(x->rlength), "%zu", total);
	if (recorded_head(x, e) < 0 || (paced && wait_until(c, t0 + e->response_ms) < 0) ||
	    tb_proxy_send_head(x) < 0)
		goto out;
	if (send_pieces(x, e, paced, t0) < 0)
		goto out;
	if (!why[0] && x->resp_chunked && tb_proxy_send_str(c, "0\r\n\r\n", 5) < 0)
		goto out;
	whole = !why[0];
out:
	tb_proxy_audit(c, x->req.method, x->ep->host, d->path, x->ep, (int)x->status, x->bytes_in,
		       x->mem_len, t0,
		       why[0]          ? why
		       : x->client_err ? "the client went away"
				       : NULL);
	tb_rec_end(x->rec, why[0] ? why : NULL);
	x->rec = NULL;
	free(x->rhead);
	x->rhead = NULL;
	return whole && !x->client_err && x->req.keep_alive;
}

/* A request of a strict replay that matches nothing: refused, in JSON,
 * the request named. */
static void refuse_miss(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, const char *target,
			const char *sha, uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	tb_replay_t *rp = c->p->conf.replay;
	char why[700], body[2048]; /* why, JSON-escaped at worst twice as long */

	c->replay_state = "missed";
	tb_replay_missed(rp, x->req.method, target, sha);
	snprintf(why, sizeof(why),
		 "replay of %.150s: no recorded exchange matches %.16s %.300s (body sha256 "
		 "%.12s...)",
		 tb_replay_from(rp), x->req.method, target, sha);
	tb_utf8_sanitize(why); /* the target may be any bytes: the message is text */
	json_t *o = json_pack("{s:{s:s,s:s}}", "error", "type", "replay_miss", "message", why);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	snprintf(body, sizeof(body), "%s", text ? text : "{\"error\":{\"type\":\"replay_miss\"}}");
	free(text);
	json_decref(o);
	tb_proxy_refuse_body(c, 409, "application/json", body, NULL);
	tb_proxy_audit(c, x->req.method, x->ep->host, d->path, x->ep, 409, 0, x->mem_len, t0, why);
}

int tb_proxy_answer(tb_proxy_exchange_t *x, const tb_proxy_decision_t *d, uint64_t t0)
{
	tb_proxy_conn_t *c = x->c;
	tb_replay_t *rp = c->p->conf.replay;
	char target[2 * TB_PROXY_PATH_MAX + 2], sha[65];
	int status, keep = 0;

	if (!rp)
		return tb_proxy_forward(x, d, t0);
	snprintf(target, sizeof(target), "%s%s%s", d->path, d->query[0] ? "?" : "", d->query);
	if ((status = read_body(x, sha)) != 0) {
		const char *why = status == 413   ? "a replayed task's request body is held to "
						    "16 MiB to be matched"
				  : status == 408 ? "the request body stalled"
						  : "malformed or truncated request body";
		tb_proxy_refuse(c, status, why);
		tb_proxy_audit(c, x->req.method, x->ep->host, d->path, x->ep, status, 0, x->mem_len,
			       t0, why);
		goto out;
	}
	const tb_rec_exchange_read_t *e =
	    tb_replay_take(rp, x->ep->name, x->req.method, target, sha);
	if (e) {
		x->rec = tb_proxy_record_begin(x, d);
		keep = play(x, d, e, t0);
	} else if (tb_replay_mode(rp) == TB_REPLAY_STRICT) {
		refuse_miss(x, d, target, sha, t0);
	} else if (tb_proxy_may_go_upstream(x, d, t0)) { /* fill: asked, and recorded */
		c->replay_state = "passed";
		keep = tb_proxy_forward(x, d, t0);
	}
out:
	return keep; /* x->mem_body is its request's (serve() frees it) */
}
