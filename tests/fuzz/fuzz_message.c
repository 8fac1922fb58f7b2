/*
 * fuzz_message.c: one decoder under fuzzing (TB_FUZZ_SCHEMA names it).
 *
 * Properties checked, beyond "no crash, no leak, no UB": whatever the
 * decoder accepts, the encoder accepts too; the canonical bytes decode
 * again; and encoding is idempotent (canonical form is a fixed point).
 */
#include TB_FUZZ_HEADER

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const tb_schema_t *s = &TB_FUZZ_SCHEMA;
	void *msg = calloc(1, s->size), *again = calloc(1, s->size);
	msgpack_sbuffer a, b;
	tb_error_t err;

	if (!msg || !again)
		abort();
	msgpack_sbuffer_init(&a);
	msgpack_sbuffer_init(&b);
	if (tb_msg_decode(s, msg, data, size, &err) != 0) {
		if (err.msg[0] == '\0')
			abort(); /* every refusal says why */
		goto out;
	}
	int rc = tb_msg_encode(&a, s, msg, &err);
	if (rc == TB_ETOOBIG)
		goto out; /* a non-canonical number may grow on re-encoding */
	if (rc != 0) {
		fprintf(stderr, "decoded but does not encode: %s\n", err.msg);
		abort();
	}
	if (tb_msg_decode(s, again, a.data, a.size, &err) != 0) {
		fprintf(stderr, "canonical bytes do not decode: %s\n", err.msg);
		abort();
	}
	if (tb_msg_encode(&b, s, again, &err) != 0 || a.size != b.size ||
	    memcmp(a.data, b.data, a.size) != 0) {
		fprintf(stderr, "encoding is not idempotent\n");
		abort();
	}
out:
	tb_msg_free(s, msg);
	tb_msg_free(s, again);
	free(msg);
	free(again);
	msgpack_sbuffer_destroy(&a);
	msgpack_sbuffer_destroy(&b);
	return 0;
}
