/*
 * agent_events.c: line splitting, per-type validation (jansson), and a
 * token bucket.
 */
#include "tb/agent_events.h"

#include "tb/json_mpack.h"
#include "tb/schema_event.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void tb_linebuf_init(tb_linebuf_t *lb, size_t max)
{
	memset(lb, 0, sizeof(*lb));
	lb->max = max;
}

void tb_linebuf_free(tb_linebuf_t *lb)
{
	free(lb->buf);
	memset(lb, 0, sizeof(*lb));
}

int tb_linebuf_feed(tb_linebuf_t *lb, const char *data, size_t n, tb_line_fn fn, void *ud)
{
	while (n > 0) {
		const char *nl = memchr(data, '\n', n);
		size_t take = nl ? (size_t)(nl - data) : n;

		if (lb->discarding) {
			/* the rest of a line already reported as too long */
		} else if (lb->len + take > lb->max) {
			fn(ud, NULL, lb->len + take, 1);
			lb->len = 0;
			lb->discarding = 1;
		} else if (take) {
			if (lb->len + take > lb->cap) {
				size_t cap = lb->cap ? lb->cap : 4096;
				while (cap < lb->len + take)
					cap *= 2;
				if (cap > lb->max)
					cap = lb->max;
				char *bigger = realloc(lb->buf, cap);
				if (!bigger)
					return TB_ENOMEM;
				lb->buf = bigger, lb->cap = cap;
			}
			memcpy(lb->buf + lb->len, data, take);
			lb->len += take;
		}
		if (!nl)
			break;
		if (!lb->discarding && lb->len > 0)
			fn(ud, lb->buf, lb->len, 0);
		lb->len = 0;
		lb->discarding = 0;
		data = nl + 1;
		n -= take + 1;
	}
	return 0;
}

static int need_string(json_t *obj, const char *key, tb_error_t *err)
{
	if (!json_is_string(json_object_get(obj, key)))
		return tb_error_set(err, TB_EINVAL, "'%s' must be a string", key);
	return 0;
}

int tb_agent_parse_line(int *type, tb_bytes_t *payload, const char *line, size_t len,
			tb_error_t *err)
{
	static const struct {
		const char *name;
		int type;
	} types[] = {
		{ "message", TB_EV_MESSAGE },         { "tool-call", TB_EV_TOOL_CALL },
		{ "tool-result", TB_EV_TOOL_RESULT }, { "thought", TB_EV_THOUGHT },
		{ "turn-ended", TB_EV_TURN },
	};
	json_error_t jerr;
	msgpack_sbuffer sb;
	json_t *obj;
	int rc = 0;

	memset(payload, 0, sizeof(*payload));
	obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj)
		return tb_error_set(err, TB_EINVAL, "not JSON: %s (column %d)", jerr.text,
				    jerr.column);
	if (!json_is_object(obj)) {
		json_decref(obj);
		return tb_error_set(err, TB_EINVAL, "not a JSON object");
	}
	const char *name = json_string_value(json_object_get(obj, "type"));
	*type = -1;
	for (size_t i = 0; name && i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(name, types[i].name))
			*type = types[i].type;
	if (*type < 0) {
		rc = tb_error_set(err, TB_EINVAL, "unknown or missing 'type' (%.40s)",
				  name ? name : "none");
		goto out;
	}
	switch (*type) {
	case TB_EV_MESSAGE: {
		const char *role = json_string_value(json_object_get(obj, "role"));
		if (!role ||
		    (strcmp(role, "assistant") && strcmp(role, "user") && strcmp(role, "system")))
			rc = tb_error_set(err, TB_EINVAL,
					  "message: 'role' must be assistant, user or system");
		else
			rc = need_string(obj, "text", err);
		break;
	}
	case TB_EV_TOOL_CALL:
		if ((rc = need_string(obj, "id", err)) == 0 &&
		    (rc = need_string(obj, "name", err)) == 0 && !json_object_get(obj, "input"))
			rc = tb_error_set(err, TB_EINVAL, "tool-call: 'input' is missing");
		break;
	case TB_EV_TOOL_RESULT:
		if ((rc = need_string(obj, "id", err)) == 0 && !json_object_get(obj, "output"))
			rc = tb_error_set(err, TB_EINVAL, "tool-result: 'output' is missing");
		break;
	case TB_EV_THOUGHT:
		rc = need_string(obj, "text", err);
		break;
	case TB_EV_TURN:
		json_object_set_new(obj, "state", json_string("turn-ended"));
		break;
	}
	if (rc < 0)
		goto out;
	json_object_del(obj, "type"); /* it is the event's own field */
	msgpack_sbuffer_init(&sb);
	if ((rc = tb_json_to_mpack(&sb, obj, err)) < 0) {
		msgpack_sbuffer_destroy(&sb);
		goto out;
	}
	payload->len = sb.size;
	payload->data = (uint8_t *)msgpack_sbuffer_release(&sb);
out:
	json_decref(obj);
	return rc;
}

int tb_agent_error_payload(tb_bytes_t *out, int code, const char *reason)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	char clean[4097];
	size_t rlen = strnlen(reason, 4096);
	const char *name = tb_error_name(code);

	/* A reason may quote the agent's bytes, cut anywhere: keep it ASCII
	 * so every consumer can decode the event. */
	for (size_t i = 0; i < rlen; i++)
		clean[i] = (unsigned char)reason[i] < 0x20 || (unsigned char)reason[i] >= 0x7f
			       ? '?'
			       : reason[i];
	clean[rlen] = '\0';
	reason = clean;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, 2) || msgpack_pack_str_with_body(&pk, "code", 4) ||
	    msgpack_pack_str_with_body(&pk, name, strlen(name)) ||
	    msgpack_pack_str_with_body(&pk, "reason", 6) ||
	    msgpack_pack_str_with_body(&pk, reason, rlen)) {
		msgpack_sbuffer_destroy(&sb);
		return TB_ENOMEM;
	}
	out->len = sb.size;
	out->data = (uint8_t *)msgpack_sbuffer_release(&sb);
	return 0;
}

void tb_rate_init(tb_rate_t *r, uint64_t per_second, uint64_t now_ms)
{
	r->per_second = (double)(per_second ? per_second : 1);
	r->burst = r->per_second;
	r->tokens = r->burst;
	r->last_ms = now_ms;
}

uint64_t tb_rate_take(tb_rate_t *r, uint64_t now_ms)
{
	if (now_ms > r->last_ms) {
		r->tokens += (double)(now_ms - r->last_ms) * r->per_second / 1000.0;
		if (r->tokens > r->burst)
			r->tokens = r->burst;
		r->last_ms = now_ms;
	}
	if (r->tokens >= 1.0) {
		r->tokens -= 1.0;
		return 0;
	}
	return (uint64_t)((1.0 - r->tokens) * 1000.0 / r->per_second) + 1;
}
