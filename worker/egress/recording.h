/*
 * recording.h: the egress recording of one attempt (schemas/recording.md):
 * every exchange with an endpoint the runtime marks "record", as the
 * proxy passed it, into one MessagePack stream the lifecycle stores as
 * the attempt's egress.msgpack.
 *
 * The stream is a header, then, per exchange, its records in order:
 * request, response, chunk..., end. Exchanges that overlap interleave,
 * each record naming its exchange ("x", numbered in the order requests
 * began). Every record is whole when it is written, and written with
 * one write(): any prefix of the stream that ends at a record boundary is
 * a recording, so an attempt cut short at any moment (its agent killed
 * mid-stream, its deadline, the proxy stopped) stores a readable one that
 * says which exchanges did not end.
 *
 * What is never recorded: the injected credential (it is added to the
 * upstream request, never to the client's headers recorded here), the
 * headers that carry credentials (Authorization, Proxy-Authorization,
 * Cookie, X-Taskbox-Token, the endpoint's credential header, its
 * secret_headers; Set-Cookie and the secret_headers of answers), each
 * named in the record as removed. Answers are recorded as the agent got
 * them: with every echo of the secret masked.
 *
 * Bodies are capped: each body at max_body_bytes (the rest counted, not
 * kept), the whole stream at max_bytes (then one "full" record, and no
 * more). A request body is hashed whole (SHA-256) whatever the cap: a
 * replay matches requests by method, target and that hash.
 *
 * Thread-safe: the proxy's connection threads record at once. Each
 * exchange is one thread's; its records are buffered and written when
 * the buffer passes 64 KiB and at its end, so a streamed answer costs
 * flat memory.
 */
#ifndef TB_RECORDING_H
#define TB_RECORDING_H

#include "proxy_http.h"
#include "tb/error.h"
#include "tb/runtime.h"

#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tb_recorder tb_recorder_t;
typedef struct tb_rec_exchange tb_rec_exchange_t;

/**
 * Starts a recording into @p fd (appended to; the caller keeps and closes
 * it) with its header record: the attempt of @p task_id, @p task the
 * task's canonical MessagePack map (what a replay re-runs, its inputs
 * among it; may be NULL).
 * @param[out] out freed with tb_recorder_free()
 * @return 0; TB_ENOMEM; TB_EIO (the header could not be written)
 */
int tb_recorder_new(tb_recorder_t **out, int fd, const tb_recording_conf_t *conf,
		    const char *task_id, uint64_t attempt, const tb_bytes_t *task, tb_error_t *err);

/** SHA-256, fetched once for every digest of a recording or a replay
 * (OpenSSL 3 looks an algorithm up on each EVP_sha256() init). */
const EVP_MD *tb_rec_sha256(void);

/** The hex SHA-256 of no bytes. */
#define TB_REC_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/** Frees @p r (NULL is fine); every exchange must have ended. */
void tb_recorder_free(tb_recorder_t *r);

/** The stream's bytes so far, and whether it was cut at max_bytes or
 * failed to write (then it stopped: what it holds stands). */
uint64_t tb_recorder_bytes(tb_recorder_t *r, int *cut);

/**
 * An exchange begins: the client's request @p req to endpoint @p ep,
 * @p method and @p target (normalised path and query) as they go
 * upstream. NULL without memory (then nothing of it is recorded).
 */
tb_rec_exchange_t *tb_rec_begin(tb_recorder_t *r, const tb_endpoint_t *ep, const char *method,
				const char *target, const tb_http_request_t *req);

/** Request body bytes, as they go upstream. */
void tb_rec_request_body(tb_rec_exchange_t *x, const void *data, size_t len);

/** The answer's status and header lines ("Name: value\r\n"...), as the
 * client gets them; @p stream: it is text/event-stream. */
void tb_rec_response(tb_rec_exchange_t *x, long status, const char *head, size_t len, int stream);

/** Answer body bytes, as the client gets them (masked). */
void tb_rec_chunk(tb_rec_exchange_t *x, const void *data, size_t len);

/** The exchange ends (@p error: why it failed or was cut, or NULL);
 * its last records are written and @p x freed. NULL is fine. */
void tb_rec_end(tb_rec_exchange_t *x, const char *error);

/* ------------------------------------------------ recording_read.c */

/* One header of a recorded request or answer. */
typedef struct tb_rec_header {
	char *name, *value;
} tb_rec_header_t;

/* One piece of a recorded answer's body, @p at_ms after its request
 * began. */
typedef struct tb_rec_piece {
	uint64_t at_ms;
	uint8_t *data;
	size_t len;
} tb_rec_piece_t;

/* One exchange as read back: what each of its records said. */
typedef struct tb_rec_exchange_read {
	uint64_t x;
	int has_request;
	char *endpoint, *method, *target;
	uint64_t at; /* ms since the epoch */
	tb_rec_header_t *headers;
	size_t nheaders;
	uint8_t *body;
	size_t body_len;
	uint64_t body_bytes; /* the whole body's, body_len of them kept */
	char body_sha256[65];
	int has_response;
	long status;
	uint64_t response_ms;
	tb_rec_header_t *rheaders;
	size_t nrheaders;
	int stream;
	tb_rec_piece_t *pieces;
	size_t npieces;
	int ended; /* its end record was read */
	uint64_t end_ms, answer_bytes, answer_cut;
	char *error; /* why it failed or was cut, or NULL */
} tb_rec_exchange_read_t;

/* A recording as read back: its header and its exchanges by number. */
typedef struct tb_recording {
	char *task_id;
	uint64_t attempt, started_at;
	uint8_t *task; /* the task's MessagePack map, or NULL */
	size_t task_len;
	tb_rec_exchange_read_t *xs; /* in the order their requests began */
	size_t n;
	int truncated; /* it ends inside a record */
	int full;      /* it was cut at its max_bytes */
} tb_recording_t;

/**
 * Reads the recording in @p data. A stream that ends inside a record is
 * read up to its last whole one (truncated set); exchanges with no end
 * record are left ended 0.
 * @param[out] out released with tb_recording_free(), on success only
 * @return 0; TB_EINVAL (not a recording, or a record that is not one,
 *         said with its offset); TB_ENOMEM
 */
int tb_recording_read(tb_recording_t *out, const void *data, size_t len, tb_error_t *err);

void tb_recording_free(tb_recording_t *r);

#endif
