/*
 * test_codec.c: the message codecs against the examples in schemas/ and
 * against every kind of malformed input we can think of.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "tb/codec.h"
#include "tb/json_mpack.h"
#include "tb/schema_dlq.h"
#include "tb/schema_event.h"
#include "tb/schema_followup.h"
#include "tb/schema_manifest.h"
#include "tb/schema_task.h"
#include "tb/schema_verdict.h"

/* Decodes @p data as whatever it names and re-encodes it. */
static int round_trip(msgpack_sbuffer *out, const void *data, size_t len, tb_error_t *err)
{
	return tb_msg_canonical(out, data, len, err);
}

/* The task example as a JSON tree, to mutate into malformed variants. */
static json_t *task_json(void)
{
	json_error_t jerr;
	json_t *j = json_load_file(TB_SOURCE_DIR "/schemas/examples/task.json", 0, &jerr);
	assert_non_null(j);
	return j;
}

/* Packs @p j and decodes it as a task; returns the code, fills @p err. */
static int decode_task_json(json_t *j, tb_error_t *err)
{
	msgpack_sbuffer sb;
	tb_task_t task;
	int rc;

	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_json_to_mpack(&sb, j, err), 0);
	rc = tb_msg_decode(&tb_schema_task, &task, sb.data, sb.size, err);
	if (rc == 0)
		tb_msg_free(&tb_schema_task, &task);
	msgpack_sbuffer_destroy(&sb);
	json_decref(j);
	return rc;
}

static void assert_contains(const char *haystack, const char *needle)
{
	if (!strstr(haystack, needle))
		fail_msg("expected '%s' in: %s", needle, haystack);
}

static void test_examples__round_trip_byte_for_byte(void **state)
{
	char **hex = th_examples(".hex");
	size_t count = 0;

	(void)state;
	for (size_t i = 0; hex[i]; i++, count++) {
		msgpack_sbuffer out;
		tb_error_t err;
		size_t len;
		uint8_t *bytes = th_read_hex(hex[i], &len);
		msgpack_sbuffer_init(&out);
		if (round_trip(&out, bytes, len, &err) != 0)
			fail_msg("%s: %s", hex[i], err.msg);
		if (out.size != len || memcmp(out.data, bytes, len) != 0)
			fail_msg("%s: re-encoding differs (%zu vs %zu bytes)", hex[i], out.size,
				 len);
		msgpack_sbuffer_destroy(&out);
		free(bytes);
	}
	assert_true(count >= 6); /* one per message kind at least */
	th_free_list(hex);
}

static void test_examples__json_encodes_to_the_hex_bytes(void **state)
{
	char **js = th_examples(".json");

	(void)state;
	for (size_t i = 0; js[i]; i++) {
		char hexpath[1024];
		json_error_t jerr;
		msgpack_sbuffer sb;
		tb_error_t err;
		size_t len;
		json_t *doc = json_load_file(js[i], 0, &jerr);
		assert_non_null(doc);
		snprintf(hexpath, sizeof(hexpath), "%.*s.hex", (int)(strlen(js[i]) - 5), js[i]);
		uint8_t *want = th_read_hex(hexpath, &len);
		msgpack_sbuffer_init(&sb);
		assert_int_equal(tb_json_to_mpack(&sb, doc, &err), 0);
		if (sb.size != len || memcmp(sb.data, want, len) != 0)
			fail_msg("%s does not encode to %s", js[i], hexpath);
		msgpack_sbuffer_destroy(&sb);
		json_decref(doc);
		free(want);
	}
	th_free_list(js);
}

static void test_decode__every_truncation_is_refused(void **state)
{
	char **hex = th_examples(".hex");

	(void)state;
	for (size_t i = 0; hex[i]; i++) {
		size_t len;
		uint8_t *bytes = th_read_hex(hex[i], &len);
		for (size_t cut = 0; cut < len; cut++) {
			msgpack_sbuffer out;
			tb_error_t err;
			/* A copy of exactly @cut bytes, so ASan sees any overread. */
			uint8_t *part = malloc(cut ? cut : 1);
			memcpy(part, bytes, cut);
			msgpack_sbuffer_init(&out);
			int rc = round_trip(&out, part, cut, &err);
			if (rc == 0)
				fail_msg("%s cut at %zu decoded", hex[i], cut);
			assert_true(strlen(err.msg) > 0);
			msgpack_sbuffer_destroy(&out);
			free(part);
		}
		free(bytes);
	}
	th_free_list(hex);
}

/* replay_from names another task; replay's settings need it and are
 * known ones. */
static void test_decode__a_replay_is_checked(void **state)
{
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_set_new(j, "replay_from", json_string("t-earlier"));
	json_object_set_new(
	    j, "replay",
	    json_pack("{s:i,s:s,s:s}", "attempt", 2, "mode", "fill", "pace", "recorded"));
	assert_int_equal(decode_task_json(j, &err), 0);

	j = task_json();
	json_object_set_new(j, "replay", json_pack("{s:s}", "mode", "fill"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'replay': needs 'replay_from'");

	j = task_json();
	json_object_set_new(j, "replay_from",
			    json_string(json_string_value(json_object_get(j, "id"))));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "a task cannot replay itself");

	j = task_json();
	json_object_set_new(j, "replay_from", json_string("t-earlier"));
	json_object_set_new(j, "replay", json_pack("{s:s}", "mode", "loose"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "replay.mode");
}

static void test_decode__wrong_type_names_the_field(void **state)
{
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_set_new(j, "id", json_integer(5));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'id'");
	assert_contains(err.msg, "expected a string, got integer");

	j = task_json();
	json_object_set_new(json_object_get(j, "limits"), "memory_mb", json_string("lots"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'limits.memory_mb'");

	j = task_json();
	json_object_set_new(j, "inputs", json_string("notes.txt"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'inputs': expected an array");
}

static void test_decode__oversized_fields_are_refused(void **state)
{
	tb_error_t err;
	json_t *j = task_json();
	char *big = malloc(TB_PROMPT_MAX_BYTES + 2);

	(void)state;
	memset(big, 'x', TB_PROMPT_MAX_BYTES + 1);
	big[TB_PROMPT_MAX_BYTES + 1] = '\0';
	json_object_set_new(j, "prompt", json_string(big));
	assert_int_equal(decode_task_json(j, &err), TB_ETOOBIG);
	assert_contains(err.msg, "field 'prompt'");
	assert_contains(err.msg, "at most 262144");

	/* Exactly at the cap is fine. */
	big[TB_PROMPT_MAX_BYTES] = '\0';
	j = task_json();
	json_object_set_new(j, "prompt", json_string(big));
	assert_int_equal(decode_task_json(j, &err), 0);
	free(big);

	j = task_json();
	json_t *labels = json_object();
	for (int i = 0; i < 40; i++) {
		char k[16];
		snprintf(k, sizeof(k), "k%d", i);
		json_object_set_new(labels, k, json_string("v"));
	}
	json_object_set_new(j, "labels", labels);
	assert_int_equal(decode_task_json(j, &err), TB_ETOOBIG);
	assert_contains(err.msg, "field 'labels': 40 entries");
}

static void test_decode__oversized_message_is_refused_before_parsing(void **state)
{
	size_t len = TB_TASK_MAX_BYTES + 1;
	uint8_t *junk = calloc(1, len);
	tb_task_t task;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_msg_decode(&tb_schema_task, &task, junk, len, &err), TB_ETOOBIG);
	assert_contains(err.msg, "at most 1048576");
	free(junk);
}

static void test_decode__unknown_major_version_is_refused(void **state)
{
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_set_new(j, "v", json_integer(2));
	assert_int_equal(decode_task_json(j, &err), TB_EVERSION);
	assert_contains(err.msg, "version 2 is not supported");

	j = task_json();
	json_object_del(j, "v");
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'v'");
}

/* The header's two fields say what is wrong with them, as every other
 * field does; a message that is not a map at all says so first; a
 * follow-up's reason names its kind once. */
static void test_decode__reasons_say_what_is_wrong(void **state)
{
	static const uint8_t random_bytes[] = { 0x63, 0x9a, 0x01, 0xff, 0x42 };
	tb_followup_t f;
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_set_new(j, "schema", json_integer(1));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'schema': expected a string, got integer");
	j = task_json();
	json_object_set_new(j, "v", json_string("1"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'v': expected a positive integer version, got string");
	assert_int_equal(tb_msg_decode(&tb_schema_task, &(tb_task_t){ 0 }, random_bytes,
				       sizeof(random_bytes), &err),
			 TB_EINVAL);
	assert_contains(err.msg, "not a MessagePack map: its 5 bytes begin with an integer "
				 "(first byte 0x63)");
	assert_int_equal(tb_msg_decode(&tb_schema_task, &(tb_task_t){ 0 }, "", 0, &err), TB_EINVAL);
	assert_contains(err.msg, "empty, where a MessagePack map was expected");
	j = json_pack("{s:s,s:i,s:s,s:i,s:s,s:s,s:i}", "schema", "followup", "v", 1, "task_id",
		      "t1", "seq", 2, "kind", "end", "text", "x", "sent_at", 1);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), 0);
	json_decref(j);
	assert_int_equal(tb_msg_decode(&tb_schema_followup, &f, sb.data, sb.size, &err), TB_EINVAL);
	msgpack_sbuffer_destroy(&sb);
	assert_string_equal(err.msg, "followup: field 'text': not allowed when kind is 'end'");
}

static void test_decode__other_kind_or_unknown_kind_is_refused(void **state)
{
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_set_new(j, "schema", json_string("followup"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "is a 'followup', not a 'task'");

	j = task_json();
	json_object_set_new(j, "schema", json_string("banana"));
	assert_int_equal(decode_task_json(j, &err), TB_ENOTFOUND);
	assert_contains(err.msg, "unknown message kind 'banana'");
}

static void test_decode__missing_required_field_is_named(void **state)
{
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_del(json_object_get(j, "recipe"), "commit");
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'recipe.commit': required but missing");
}

static void test_decode__commit_must_be_full_hex(void **state)
{
	const char *bad[] = { "main", "3f2a9c1", "3F2A9C1E8B7D6A5F4E3D2C1B0A9F8E7D6C5B4A39",
			      "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3z" };

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_error_t err;
		json_t *j = task_json();
		json_object_set_new(json_object_get(j, "recipe"), "commit", json_string(bad[i]));
		assert_int_not_equal(decode_task_json(j, &err), 0);
		assert_contains(err.msg, "field 'recipe.commit'");
	}
}

static void test_decode__ids_and_paths_are_checked(void **state)
{
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_set_new(j, "id", json_string("../../etc"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'id'");

	j = task_json();
	json_object_set_new(json_array_get(json_object_get(j, "inputs"), 0), "name",
			    json_string("../escape"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'inputs[0].name'");

	j = task_json();
	json_object_set_new(json_array_get(json_object_get(j, "inputs"), 0), "name",
			    json_string("/etc/passwd"));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "relative path");
}

static void test_decode__duplicate_keys_are_refused(void **state)
{
	/* Built by hand: JSON cannot say it. The header's own keys, then a
	 * field, each twice. */
	static const char *const twice[] = { "schema", "v", "id" };
	msgpack_sbuffer sb;
	msgpack_packer pk;
	tb_error_t err;
	tb_task_t task;

	(void)state;
	for (size_t t = 0; t < 3; t++) {
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 5);
		for (int copy = 0; copy < 2; copy++) {
			if (copy == 0 || t == 0) {
				msgpack_pack_str_with_body(&pk, "schema", 6);
				msgpack_pack_str_with_body(&pk, "task", 4);
			}
			if (copy == 0 || t == 1) {
				msgpack_pack_str_with_body(&pk, "v", 1);
				msgpack_pack_uint8(&pk, 1);
			}
			if (copy == 0 || t == 2) {
				msgpack_pack_str_with_body(&pk, "id", 2);
				msgpack_pack_str_with_body(&pk, "a", 1);
			}
		}
		/* four entries so far; the fifth makes the count honest */
		msgpack_pack_str_with_body(&pk, "prompt", 6);
		msgpack_pack_str_with_body(&pk, "p", 1);
		assert_int_equal(tb_msg_decode(&tb_schema_task, &task, sb.data, sb.size, &err),
				 TB_EINVAL);
		char want[64];
		snprintf(want, sizeof(want), "field '%s': appears twice", twice[t]);
		assert_contains(err.msg, want);
		msgpack_sbuffer_destroy(&sb);
	}

	json_t *j = task_json();
	msgpack_sbuffer_init(&sb);
	/* Append a second "prompt" entry by patching the map header. */
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), 0);
	json_decref(j);
	assert_int_equal((uint8_t)sb.data[0] & 0xf0, 0x80); /* a fixmap */
	sb.data[0] = (char)((uint8_t)sb.data[0] + 1);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_str_with_body(&pk, "again", 5);
	assert_int_equal(tb_msg_decode(&tb_schema_task, &task, sb.data, sb.size, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'prompt': appears twice");
	msgpack_sbuffer_destroy(&sb);
}

static void test_decode__invalid_utf8_and_nul_are_refused(void **state)
{
	const char *bad[] = { "a\xff", "\xc0\xaf", "\xed\xa0\x80", "ab\xe2\x82" };

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_error_t err;
		json_t *j = task_json();
		json_object_set_new(j, "prompt", json_stringn_nocheck(bad[i], strlen(bad[i])));
		assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
		assert_contains(err.msg, "UTF-8");
	}
	tb_error_t err;
	json_t *j = task_json();
	json_object_set_new(j, "prompt", json_stringn("a\0b", 3));
	assert_int_equal(decode_task_json(j, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'prompt'");
}

static void test_decode__hostile_container_counts_do_not_allocate(void **state)
{
	/* fixmap{ "schema": array32 claiming 2^32-1 elements } */
	const uint8_t arr[] = { 0x81, 0xa6, 's',  'c',  'h',  'e', 'm',
				'a',  0xdd, 0xff, 0xff, 0xff, 0xff };
	const uint8_t map[] = { 0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0 };
	const uint8_t str[] = { 0xdb, 0x7f, 0xff, 0xff, 0xff, 'a' };
	tb_task_t task;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_msg_decode(&tb_schema_task, &task, arr, sizeof(arr), &err), TB_EINVAL);
	assert_contains(err.msg, "claims 4294967295 elements");
	assert_int_equal(tb_msg_decode(&tb_schema_task, &task, map, sizeof(map), &err), TB_EINVAL);
	assert_int_equal(tb_msg_decode(&tb_schema_task, &task, str, sizeof(str), &err), TB_EINVAL);
}

static void test_decode__unknown_fields_are_ignored(void **state)
{
	tb_error_t err;
	json_t *j = task_json();

	(void)state;
	json_object_set_new(j, "priority_hint", json_integer(7));
	assert_int_equal(decode_task_json(j, &err), 0);
}

static void test_decode__random_bytes_never_crash(void **state)
{
	/* Bounded: 20000 inputs from a fixed seed, plus mutations of the
	 * examples. ASan/UBSan turn any memory error into a failure. */
	char **hex = th_examples(".hex");
	unsigned seed = 12345;
	uint8_t buf[600];

	(void)state;
	for (int iter = 0; iter < 20000; iter++) {
		size_t len;
		msgpack_sbuffer out;
		tb_error_t err;
		if (iter % 2 == 0) {
			len = (size_t)(rand_r(&seed) % sizeof(buf));
			for (size_t i = 0; i < len; i++)
				buf[i] = (uint8_t)rand_r(&seed);
		} else {
			size_t n = 0;
			while (hex[n])
				n++;
			uint8_t *ex = th_read_hex(hex[(size_t)rand_r(&seed) % n], &len);
			if (len > sizeof(buf))
				len = sizeof(buf);
			memcpy(buf, ex, len);
			free(ex);
			for (int m = 0; m < 1 + rand_r(&seed) % 4; m++)
				buf[(size_t)rand_r(&seed) % len] = (uint8_t)rand_r(&seed);
		}
		uint8_t *exact = malloc(len ? len : 1);
		memcpy(exact, buf, len);
		msgpack_sbuffer_init(&out);
		(void)round_trip(&out, exact, len, &err);
		msgpack_sbuffer_destroy(&out);
		free(exact);
	}
	th_free_list(hex);
}

static void test_encode__refuses_what_decode_would_refuse(void **state)
{
	msgpack_sbuffer sb;
	tb_error_t err;
	tb_task_t task = { 0 };
	char id[] = "ok-id", commit[] = "nothex", url[] = "u", prompt[] = "p", rt[] = "default";

	(void)state;
	msgpack_sbuffer_init(&sb);
	/* id missing */
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &task, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'id': required but missing");
	assert_int_equal(sb.size, 0);

	task.id = id, task.recipe.url = url, task.recipe.commit = commit;
	task.prompt = prompt, task.runtime = rt, task.submitted_at = 1;
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &task, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'recipe.commit'");
	assert_int_equal(sb.size, 0);

	/* a label twice */
	char good[] = "0123456789abcdef0123456789abcdef01234567", k[] = "team", v[] = "x";
	tb_kv_t kv[2] = { { k, v }, { k, v } };
	task.recipe.commit = good;
	task.labels.items = kv, task.labels.n = 2;
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &task, &err), TB_EINVAL);
	assert_contains(err.msg, "duplicate key 'team'");
	assert_int_equal(sb.size, 0);
	task.labels.n = 1; /* once is fine */
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_task, &task, &err), 0);
	msgpack_sbuffer_destroy(&sb);
}

static void test_encode__optional_scalars_follow_the_presence_mask(void **state)
{
	msgpack_sbuffer sb;
	tb_error_t err;
	tb_verdict_t v = { 0 }, back;
	char task[] = "t", judge[] = "j";

	(void)state;
	v.task_id = task, v.judge = judge, v.attempt = 1, v.outcome = TB_VERDICT_FAIL;
	v.score = 0.5; /* not marked present: must not be written */
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_verdict, &v, &err), 0);
	assert_int_equal(tb_msg_decode(&tb_schema_verdict, &back, sb.data, sb.size, &err), 0);
	assert_false(TB_HAS(&back, TB_VERDICT_F_SCORE));
	tb_msg_free(&tb_schema_verdict, &back);

	TB_SET_HAS(&v, TB_VERDICT_F_SCORE);
	sb.size = 0;
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_verdict, &v, &err), 0);
	assert_int_equal(tb_msg_decode(&tb_schema_verdict, &back, sb.data, sb.size, &err), 0);
	assert_true(TB_HAS(&back, TB_VERDICT_F_SCORE));
	assert_true(back.score == 0.5);
	tb_msg_free(&tb_schema_verdict, &back);

	v.score = 1.5; /* out of 0..1 */
	sb.size = 0;
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_verdict, &v, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'score'");
	msgpack_sbuffer_destroy(&sb);
}

/*
 * The manifest's environment says what unpacking the image dropped or
 * changed: counts and first names decode from the example and encode back
 * the same; a count of 0 is absent rather than written, and a name
 * without its count is refused either way.
 */
static void test_manifest__what_an_image_lost_round_trips(void **state)
{
	json_error_t jerr;
	json_t *j = json_load_file(TB_SOURCE_DIR "/schemas/examples/manifest.json", 0, &jerr);
	msgpack_sbuffer sb, again;
	tb_manifest_t m;
	tb_error_t err;

	(void)state;
	assert_non_null(j);
	msgpack_sbuffer_init(&sb);
	msgpack_sbuffer_init(&again);
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), 0);
	if (tb_msg_decode(&tb_schema_manifest, &m, sb.data, sb.size, &err) != 0)
		fail_msg("%s", err.msg);
	tb_environment_altered_t *a = &m.environment.altered;
	assert_true(TB_HAS(a, TB_ALTERED_DEVICES) && TB_HAS(a, TB_ALTERED_SETID));
	assert_false(TB_HAS(a, TB_ALTERED_IDS));
	assert_int_equal(a->devices, 2);
	assert_int_equal(a->setid, 1);
	assert_string_equal(a->device_path, "dev/console");
	assert_string_equal(a->setid_path, "usr/bin/passwd");
	assert_null(a->ids_path);
	assert_int_equal(tb_msg_encode(&again, &tb_schema_manifest, &m, &err), 0);
	assert_int_equal(again.size, sb.size);
	assert_memory_equal(again.data, sb.data, sb.size);
	/* a name with no count: refused on the way out */
	a->ids_path = strdup("home/x");
	again.size = 0;
	assert_int_equal(tb_msg_encode(&again, &tb_schema_manifest, &m, &err), TB_EINVAL);
	assert_contains(err.msg, "ids_path");
	tb_msg_free(&tb_schema_manifest, &m);
	/* ... and on the way in; and a count of 0 is never written */
	json_t *alt = json_object_get(json_object_get(j, "environment"), "altered");
	json_object_set_new(alt, "ids_path", json_string("home/x"));
	sb.size = 0;
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), 0);
	assert_int_equal(tb_msg_decode(&tb_schema_manifest, &m, sb.data, sb.size, &err), TB_EINVAL);
	assert_contains(err.msg, "ids_path");
	json_object_del(alt, "ids_path");
	json_object_set_new(alt, "devices", json_integer(0));
	sb.size = 0;
	assert_int_equal(tb_json_to_mpack(&sb, j, &err), 0);
	assert_int_equal(tb_msg_decode(&tb_schema_manifest, &m, sb.data, sb.size, &err), TB_EINVAL);
	assert_contains(err.msg, "devices");
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_destroy(&again);
	json_decref(j);
}

static void test_followup__prompt_needs_text_and_end_has_none(void **state)
{
	msgpack_sbuffer sb;
	tb_error_t err;
	tb_followup_t f = { 0 };
	char id[] = "chat-7", text[] = "hi";

	(void)state;
	f.task_id = id, f.seq = 1, f.kind = TB_FOLLOWUP_PROMPT, f.sent_at = 1;
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_followup, &f, &err), TB_EINVAL);
	assert_contains(err.msg, "required when kind is 'prompt'");
	f.kind = TB_FOLLOWUP_END, f.text = text;
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_followup, &f, &err), TB_EINVAL);
	assert_contains(err.msg, "not allowed when kind is 'end'");
	f.seq = 0, f.text = NULL;
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_followup, &f, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'seq'");
	msgpack_sbuffer_destroy(&sb);
}

static void test_event__payload_must_be_a_bounded_map(void **state)
{
	msgpack_sbuffer sb;
	tb_error_t err;
	tb_event_t ev = { 0 };
	char id[] = "t";
	uint8_t not_map[] = { 0x91, 0x01 };

	(void)state;
	ev.task_id = id, ev.attempt = 1, ev.type = TB_EV_MESSAGE;
	ev.payload.data = not_map, ev.payload.len = sizeof(not_map);
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_event, &ev, &err), TB_EINVAL);
	assert_contains(err.msg, "field 'payload'");

	ev.payload.len = TB_EVENT_PAYLOAD_MAX + 1;
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_event, &ev, &err), TB_ETOOBIG);
	assert_string_equal(tb_event_type_name(TB_EV_TOOL_CALL), "tool-call");
	assert_null(tb_event_type_name(TB_EV__COUNT));
	msgpack_sbuffer_destroy(&sb);
}

static void test_peek__names_the_kind(void **state)
{
	size_t len;
	uint8_t *b = th_read_hex(TB_SOURCE_DIR "/schemas/examples/followup.hex", &len);
	const tb_schema_t *s = NULL;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_msg_peek(&s, b, len, &err), 0);
	assert_ptr_equal(s, &tb_schema_followup);
	free(b);
}

/* A byte-wise cut that split a character loses the half character only. */
static void test_utf8__trim_drops_a_half_character(void **state)
{
	char cut[] = "caf\xc3";                /* "café" cut inside the é */
	char whole[] = "caf\xc3\xa9";          /* whole: kept */
	char three[] = "\xe2\x82\xac\xe2\x82"; /* "€" and two bytes of another */
	char empty[] = "";

	(void)state;
	tb_utf8_trim(cut);
	assert_string_equal(cut, "caf");
	tb_utf8_trim(whole);
	assert_string_equal(whole, "caf\xc3\xa9");
	tb_utf8_trim(three);
	assert_string_equal(three, "\xe2\x82\xac");
	tb_utf8_trim(empty);
	assert_string_equal(empty, "");
}

/* Text from outside becomes valid UTF-8: stray and cut bytes become '?',
 * whole characters stay. */
static void test_utf8__sanitize_keeps_characters_and_marks_the_rest(void **state)
{
	char latin1[] = "caf\xe9 ok";               /* Latin-1 é */
	char cut_front[] = "\xa9 and \xe2\x82\xac"; /* a tail that starts mid-é */
	char cut_end[] = "x\xe2\x82";               /* a head that ends mid-€ */
	char overlong[] = "\xc0\xafx";              /* an overlong '/' */
	char surrogate[] = "\xed\xa0\x80y";         /* U+D800 */
	char binary[] = "\xff\xfe\x01";
	char fine[] = "na\xc3\xafve \xf0\x9f\x99\x82";

	(void)state;
	tb_utf8_sanitize(latin1);
	assert_string_equal(latin1, "caf? ok");
	tb_utf8_sanitize(cut_front);
	assert_string_equal(cut_front, "? and \xe2\x82\xac");
	tb_utf8_sanitize(cut_end);
	assert_string_equal(cut_end, "x??");
	tb_utf8_sanitize(overlong);
	assert_string_equal(overlong, "??x"); /* (no trigraphs: ??x, ??y) */
	tb_utf8_sanitize(surrogate);
	assert_string_equal(surrogate, "???y");
	tb_utf8_sanitize(binary);
	assert_string_equal(binary, "??\x01");
	tb_utf8_sanitize(fine);
	assert_string_equal(fine, "na\xc3\xafve \xf0\x9f\x99\x82");
	assert_true(tb_utf8_valid((const uint8_t *)binary, strlen(binary)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_utf8__trim_drops_a_half_character),
		cmocka_unit_test(test_utf8__sanitize_keeps_characters_and_marks_the_rest),
		cmocka_unit_test(test_examples__round_trip_byte_for_byte),
		cmocka_unit_test(test_manifest__what_an_image_lost_round_trips),
		cmocka_unit_test(test_examples__json_encodes_to_the_hex_bytes),
		cmocka_unit_test(test_decode__every_truncation_is_refused),
		cmocka_unit_test(test_decode__wrong_type_names_the_field),
		cmocka_unit_test(test_decode__oversized_fields_are_refused),
		cmocka_unit_test(test_decode__a_replay_is_checked),
		cmocka_unit_test(test_decode__oversized_message_is_refused_before_parsing),
		cmocka_unit_test(test_decode__unknown_major_version_is_refused),
		cmocka_unit_test(test_decode__reasons_say_what_is_wrong),
		cmocka_unit_test(test_decode__other_kind_or_unknown_kind_is_refused),
		cmocka_unit_test(test_decode__missing_required_field_is_named),
		cmocka_unit_test(test_decode__commit_must_be_full_hex),
		cmocka_unit_test(test_decode__ids_and_paths_are_checked),
		cmocka_unit_test(test_decode__duplicate_keys_are_refused),
		cmocka_unit_test(test_decode__invalid_utf8_and_nul_are_refused),
		cmocka_unit_test(test_decode__hostile_container_counts_do_not_allocate),
		cmocka_unit_test(test_decode__unknown_fields_are_ignored),
		cmocka_unit_test(test_decode__random_bytes_never_crash),
		cmocka_unit_test(test_encode__refuses_what_decode_would_refuse),
		cmocka_unit_test(test_encode__optional_scalars_follow_the_presence_mask),
		cmocka_unit_test(test_followup__prompt_needs_text_and_end_has_none),
		cmocka_unit_test(test_event__payload_must_be_a_bounded_map),
		cmocka_unit_test(test_peek__names_the_kind),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
