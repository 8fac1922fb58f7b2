/*
 * fuzz_agent.c: arbitrary agent output through the line splitter and the
 * event parser: no crash, and every accepted line's payload is a map the
 * event encoder takes.
 */
#include "tb/agent_events.h"
#include "tb/schema_event.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void on_line(void *ud, const char *line, size_t len, int too_long)
{
	tb_event_t ev = { 0 };
	msgpack_sbuffer sb;
	tb_error_t err;
	int type;

	(void)ud;
	if (too_long)
		return;
	if (tb_agent_parse_line(&type, &ev.payload, line, len, &err) != 0) {
		if (!err.msg[0])
			abort();
		return;
	}
	ev.task_id = (char *)"fuzz";
	ev.attempt = 1;
	ev.type = type;
	msgpack_sbuffer_init(&sb);
	int rc = tb_msg_encode(&sb, &tb_schema_event, &ev, &err);
	if (rc != 0 && rc != TB_ETOOBIG)
		abort(); /* an accepted line must make a valid event */
	msgpack_sbuffer_destroy(&sb);
	free(ev.payload.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_linebuf_t lb;

	tb_linebuf_init(&lb, 4096);
	/* In two reads, so lines straddle them. */
	tb_linebuf_feed(&lb, (const char *)data, size / 2, on_line, NULL);
	tb_linebuf_feed(&lb, (const char *)data + size / 2, size - size / 2, on_line, NULL);
	tb_linebuf_free(&lb);
	return 0;
}
