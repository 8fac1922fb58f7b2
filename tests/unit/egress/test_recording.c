/*
 * test_recording.c: the egress recording (recording.h) written and read
 * back: exchanges that overlap, each whole; no header that carries a
 * credential, each one named as removed; bodies capped and a request's
 * hashed whole; every prefix of the stream readable, one cut inside a
 * record said to be truncated; the whole recording capped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "recording.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char *secret_headers[] = { "X-Session" };

static tb_endpoint_t endpoint(void)
{
	tb_endpoint_t ep = { 0 };
	ep.name = "llm";
	ep.credential.header = "X-Api-Key";
	ep.record = true;
	ep.secret_headers = (tb_strlist_t){ 1, secret_headers };
	return ep;
}

static tb_http_request_t request(void)
{
	tb_http_request_t q = { .method = "POST", .target = "/llm/v1/chat" };
	const char *h[][2] = {
		{ "Content-Type", "application/json" }, { "Authorization", "Bearer agent-secret" },
		{ "x-api-key", "sk-client-sent-this" }, { "Cookie", "session=cookie-secret" },
		{ "X-Session", "session-secret" },      { "X-Taskbox-Token", "tb1.token-secret" },
		{ "Accept", "text/event-stream" }
	};
	for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++)
		q.headers[q.nheaders++] = (tb_http_header_t){ h[i][0], h[i][1] };
	return q;
}

/* The memfd's bytes, malloc'd. */
static char *contents(int fd, size_t *len)
{
	off_t n = lseek(fd, 0, SEEK_END);
	char *b = malloc((size_t)n + 1);
	assert_non_null(b);
	assert_int_equal(pread(fd, b, (size_t)n, 0), n);
	*len = (size_t)n;
	return b;
}

static const char *header_of(const tb_rec_header_t *h, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcasecmp(h[i].name, name))
			return h[i].value;
	return NULL;
}

/* Two exchanges, the second answered while the first streams. */
static char *record_two(size_t *len, uint64_t max_body_kib)
{
	tb_recording_conf_t conf = { max_body_kib, 64 };
	tb_endpoint_t ep = endpoint();
	tb_http_request_t q = request();
	tb_recorder_t *r;
	tb_error_t err;
	uint8_t task[] = { 0x81, 0xa2, 'i', 'd', 0xa1, 't' }; /* {"id": "t"} */
	tb_bytes_t tb = { sizeof(task), task };
	int fd = memfd_create("test-recording", 0);

	assert_true(fd >= 0);
	assert_int_equal(tb_recorder_new(&r, fd, &conf, "t-1", 2, &tb, &err), 0);
	tb_rec_exchange_t *a = tb_rec_begin(r, &ep, "POST", "/v1/chat?stream=1", &q);
	tb_rec_exchange_t *b = tb_rec_begin(r, &ep, "GET", "/v1/models", &q);
	assert_non_null(a);
	assert_non_null(b);
	char body[3000];
	memset(body, 'q', sizeof(body));
	tb_rec_request_body(a, body, 1000);
	tb_rec_request_body(a, body + 1000, 2000);
	const char head[] = "Content-Type: text/event-stream\r\nSet-Cookie: s=answer-secret\r\n"
			    "X-Session: session-secret\r\nX-Request-Id: r-1\r\n";
	tb_rec_response(a, 200, head, strlen(head), 1);
	tb_rec_chunk(a, "data: one\n\n", 11);
	tb_rec_response(b, 200, "Content-Type: application/json\r\n", 32, 0);
	tb_rec_chunk(b, "{\"models\":[]}", 13);
	tb_rec_end(b, NULL);
	tb_rec_chunk(a, "data: two\n\n", 11);
	tb_rec_end(a, "the response was cut short");
	tb_recorder_free(r);
	char *out = contents(fd, len);
	close(fd);
	return out;
}

static void test_recording__exchanges_read_back_whole_without_secrets(void **state)
{
	tb_recording_t rec;
	tb_error_t err;
	size_t len;
	unsigned char sum[32];
	char hex[65];

	(void)state;
	char *bytes = record_two(&len, 2); /* bodies kept to 2 KiB */
	/* no credential anywhere in the stream */
	const char *secrets[] = { "agent-secret",   "sk-client-sent-this", "cookie-secret",
				  "session-secret", "tb1.token-secret",    "answer-secret" };
	for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++)
		if (memmem(bytes, len, secrets[i], strlen(secrets[i])))
			fail_msg("'%s' is in the recording", secrets[i]);
	assert_int_equal(tb_recording_read(&rec, bytes, len, &err), 0);
	assert_string_equal(rec.task_id, "t-1");
	assert_int_equal(rec.attempt, 2);
	assert_int_equal(rec.task_len, 6);
	assert_false(rec.truncated);
	assert_int_equal(rec.n, 2);
	const tb_rec_exchange_read_t *a = &rec.xs[0], *b = &rec.xs[1];
	assert_int_equal(a->x, 0);
	assert_string_equal(a->method, "POST");
	assert_string_equal(a->target, "/v1/chat?stream=1");
	assert_string_equal(a->endpoint, "llm");
	assert_int_equal(a->nheaders, 2); /* Content-Type, Accept */
	assert_string_equal(header_of(a->headers, a->nheaders, "Accept"), "text/event-stream");
	/* 3000 bytes up, 2048 kept, hashed whole */
	assert_int_equal(a->body_bytes, 3000);
	assert_int_equal(a->body_len, 2048);
	char body[3000];
	memset(body, 'q', sizeof(body));
	SHA256((unsigned char *)body, sizeof(body), sum);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", sum[i]);
	assert_string_equal(a->body_sha256, hex);
	assert_true(a->has_response && a->stream);
	assert_int_equal(a->status, 200);
	assert_int_equal(a->nrheaders, 2); /* Content-Type, X-Request-Id */
	assert_string_equal(header_of(a->rheaders, a->nrheaders, "X-Request-Id"), "r-1");
	assert_int_equal(a->npieces, 2);
	assert_memory_equal(a->pieces[1].data, "data: two\n\n", 11);
	assert_true(a->ended);
	assert_string_equal(a->error, "the response was cut short");
	assert_int_equal(a->answer_bytes, 22);
	assert_string_equal(b->method, "GET");
	assert_false(b->stream);
	assert_true(b->ended);
	assert_null(b->error);
	assert_int_equal(b->body_bytes, 0);
	assert_int_equal(b->npieces, 1);
	/* the removed headers are named, their values nowhere */
	assert_non_null(memmem(bytes, len, "Authorization", 13));
	assert_non_null(memmem(bytes, len, "Set-Cookie", 10));
	tb_recording_free(&rec);
	free(bytes);
}

/* Any prefix reads: one that ends between records as a shorter
 * recording, one that ends inside a record as truncated; what was read
 * never says an exchange ended that did not. */
static void test_recording__every_prefix_is_a_readable_recording(void **state)
{
	tb_recording_t rec, whole;
	tb_error_t err;
	size_t len;
	int truncated = 0, shorter = 0;

	(void)state;
	char *bytes = record_two(&len, 1024);
	assert_int_equal(tb_recording_read(&whole, bytes, len, &err), 0);
	for (size_t cut = 1; cut < len; cut++) {
		if (tb_recording_read(&rec, bytes, cut, &err) != 0) {
			/* only the header itself may be cut short of being one */
			assert_true(strstr(err.msg, "empty") != NULL);
			continue;
		}
		truncated += rec.truncated;
		shorter += !rec.truncated;
		assert_true(rec.n <= whole.n);
		for (size_t i = 0; i < rec.n; i++)
			if (rec.xs[i].ended)
				assert_true(whole.xs[i].ended);
		tb_recording_free(&rec);
	}
	assert_true(truncated > 0);
	assert_true(shorter > 0);
	tb_recording_free(&whole);
	/* not a recording at all */
	assert_int_equal(tb_recording_read(&rec, "\x81\xa1x\x01", 4, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "not an egress recording"));
	free(bytes);
}

/* Past max_mb, one "full" record and nothing after it. */
static void test_recording__a_full_recording_stops_and_says_so(void **state)
{
	tb_recording_conf_t conf = { 4096, 1 }; /* bodies to 4 MiB, all to 1 MiB */
	tb_endpoint_t ep = endpoint();
	tb_http_request_t q = request();
	tb_recorder_t *r;
	tb_recording_t rec;
	tb_error_t err;
	size_t len;
	int fd = memfd_create("test-recording", 0);
	char *big = calloc(1, 700 << 10);

	(void)state;
	assert_non_null(big);
	assert_int_equal(tb_recorder_new(&r, fd, &conf, "t-2", 1, NULL, &err), 0);
	for (int i = 0; i < 3; i++) { /* 2.1 MiB of answers */
		tb_rec_exchange_t *x = tb_rec_begin(r, &ep, "GET", "/big", &q);
		tb_rec_response(x, 200, "", 0, 0);
		tb_rec_chunk(x, big, 700 << 10);
		tb_rec_end(x, NULL);
	}
	int cut = 0;
	assert_true(tb_recorder_bytes(r, &cut) <= 1u << 20);
	assert_true(cut);
	tb_recorder_free(r);
	char *bytes = contents(fd, &len);
	assert_int_equal(tb_recording_read(&rec, bytes, len, &err), 0);
	assert_true(rec.full);
	assert_int_equal(rec.n, 1); /* the second did not fit: nothing of it */
	assert_true(rec.xs[0].ended);
	tb_recording_free(&rec);
	free(bytes);
	free(big);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recording__exchanges_read_back_whole_without_secrets),
		cmocka_unit_test(test_recording__every_prefix_is_a_readable_recording),
		cmocka_unit_test(test_recording__a_full_recording_stops_and_says_so),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
