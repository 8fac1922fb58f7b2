/*
 * test_intake.c: every message on the tasks topic has one of three
 * outcomes: a task, a follow-up, or a DLQ record (cause "malformed") that
 * says why not, keeps the original bytes (cut at TB_DLQ_ORIGINAL_MAX) and
 * where they came from, and is itself a valid record: a producer's key
 * names the task only when it is a valid task id.
 */
#include "intake.h"

#include "helpers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tb/schema_event.h"

static uint8_t *example(const char *name, size_t *len)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/schemas/examples/%s", TB_SOURCE_DIR, name);
	return th_read_hex(path, len);
}

static tb_msg_origin_t origin_of(const char *key)
{
	return (tb_msg_origin_t){ "tasks", 3, 42, key, key ? strlen(key) : 0 };
}

/* Decodes @p value as intake does; for a dead letter, checks what every
 * DLQ record must hold, and that it encodes under its own schema. */
static tb_intake_kind_t intake(tb_intake_t *in, const void *value, size_t len,
			       const tb_msg_origin_t *o)
{
	assert_int_equal(tb_intake_decode(in, value, len, o, 1234), 0);
	if (in->kind != TB_INTAKE_DEAD)
		return in->kind;

	msgpack_sbuffer sb;
	tb_error_t err;
	size_t keep = len > TB_DLQ_ORIGINAL_MAX ? TB_DLQ_ORIGINAL_MAX : len;
	assert_int_equal(in->dlq.cause, TB_DLQ_MALFORMED);
	assert_int_equal(in->dlq.ts, 1234);
	assert_string_equal(in->dlq.topic, o->topic);
	assert_true(TB_HAS(&in->dlq, TB_DLQ_F_PARTITION) && in->dlq.partition == 3);
	assert_true(TB_HAS(&in->dlq, TB_DLQ_F_OFFSET) && in->dlq.offset == 42);
	assert_int_equal(in->dlq.original.len, keep);
	assert_memory_equal(in->dlq.original.data, value, keep);
	msgpack_sbuffer_init(&sb);
	if (tb_msg_encode(&sb, &tb_schema_dlq, &in->dlq, &err) != 0)
		fail_msg("the DLQ record does not encode: %s", err.msg);
	msgpack_sbuffer_destroy(&sb);
	return in->kind;
}

static void test_intake__a_task_and_a_followup_are_decoded(void **state)
{
	tb_msg_origin_t o = origin_of("t-20261129-0001");
	tb_intake_t in;
	size_t len;
	uint8_t *bytes = example("task.hex", &len);

	(void)state;
	assert_int_equal(intake(&in, bytes, len, &o), TB_INTAKE_TASK);
	assert_string_equal(in.task.id, "t-20261129-0001");
	assert_string_equal(in.task.runtime, "default");
	tb_intake_free(&in);
	free(bytes);

	bytes = example("followup.hex", &len);
	assert_int_equal(intake(&in, bytes, len, &o), TB_INTAKE_FOLLOWUP);
	assert_true(in.followup.seq >= 1);
	tb_intake_free(&in);
	free(bytes);
}

/* A valid message of another kind (an event, a verdict, a DLQ record)
 * sent to the tasks topic by mistake. */
static void test_intake__another_kind_of_message_is_dead_lettered(void **state)
{
	const char *kinds[][2] = { { "event-phase.hex", "'event'" },
				   { "verdict.hex", "'verdict'" },
				   { "dlq.hex", "'dlq'" },
				   { "manifest.hex", "'manifest'" } };
	tb_msg_origin_t o = origin_of("t-7");

	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		tb_intake_t in;
		size_t len;
		uint8_t *bytes = example(kinds[i][0], &len);
		assert_int_equal(intake(&in, bytes, len, &o), TB_INTAKE_DEAD);
		assert_non_null(strstr(in.dlq.reason, kinds[i][1]));
		assert_non_null(strstr(in.dlq.reason, "does not belong on the tasks topic"));
		assert_string_equal(in.dlq.task_id, "t-7"); /* the producer's key */
		tb_intake_free(&in);
		free(bytes);
	}
}

static void test_intake__garbage_is_dead_lettered_with_the_decoders_reason(void **state)
{
	tb_msg_origin_t o = origin_of("t-8");
	tb_intake_t in;

	(void)state;
	assert_int_equal(intake(&in, "\xc1\xc1", 2, &o), TB_INTAKE_DEAD);
	assert_non_null(strstr(in.dlq.reason, "not a MessagePack map"));
	assert_string_equal(in.dlq.task_id, "t-8");
	tb_intake_free(&in);

	/* empty */
	assert_int_equal(intake(&in, "", 0, &o), TB_INTAKE_DEAD);
	assert_true(strlen(in.dlq.reason) > 0);
	tb_intake_free(&in);

	/* a task with a field missing names the field */
	assert_int_equal(intake(&in, "\x82\xa6schema\xa4task\xa1v\x01", 16, &o), TB_INTAKE_DEAD);
	assert_non_null(strstr(in.dlq.reason, "required but missing"));
	tb_intake_free(&in);
}

/* A key that is not a valid task id (a path, a NUL inside, too long, not
 * UTF-8) does not become the record's task id: the record must not fail
 * its own schema. */
static void test_intake__a_key_names_the_task_only_when_it_is_an_id(void **state)
{
	char long_key[200];
	const char *bad[] = { "../etc", "a b", "\xff\xfe", long_key };
	tb_intake_t in;

	(void)state;
	memset(long_key, 'k', sizeof(long_key) - 1);
	long_key[sizeof(long_key) - 1] = '\0';
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_msg_origin_t o = origin_of(bad[i]);
		assert_int_equal(intake(&in, "\xc1", 1, &o), TB_INTAKE_DEAD);
		assert_null(in.dlq.task_id);
		tb_intake_free(&in);
	}
	tb_msg_origin_t o = { "tasks", 3, 42, "t-9\0x", 5 }; /* NUL inside */
	assert_int_equal(intake(&in, "\xc1", 1, &o), TB_INTAKE_DEAD);
	assert_null(in.dlq.task_id);
	tb_intake_free(&in);
	o = origin_of(NULL); /* no key */
	assert_int_equal(intake(&in, "\xc1", 1, &o), TB_INTAKE_DEAD);
	assert_null(in.dlq.task_id);
	tb_intake_free(&in);
}

/* A message past the record's limit keeps its first TB_DLQ_ORIGINAL_MAX
 * bytes, and the record still fits Kafka's default message size. */
static void test_intake__a_huge_message_is_cut_to_fit_its_record(void **state)
{
	size_t len = 1040000;
	uint8_t *huge = malloc(len);
	tb_msg_origin_t o = origin_of("t-10");
	tb_intake_t in;
	msgpack_sbuffer sb;
	tb_error_t err;

	(void)state;
	assert_non_null(huge);
	memset(huge, 0xc1, len);
	assert_int_equal(intake(&in, huge, len, &o), TB_INTAKE_DEAD);
	assert_int_equal(in.dlq.original.len, TB_DLQ_ORIGINAL_MAX);
	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_dlq, &in.dlq, &err), 0);
	assert_true(sb.size < 1000000);
	msgpack_sbuffer_destroy(&sb);
	tb_intake_free(&in);
	free(huge);
}

/* tb_intake_dead_letter's own limits: a reason cut at 4096 bytes, an
 * empty one replaced, the topic cut at 249. */
static void test_intake__a_refusal_fits_the_record_schema(void **state)
{
	char reason[5000], topic[300];
	tb_msg_origin_t o = { topic, -1, -1, NULL, 0 };
	tb_dlq_t rec;
	msgpack_sbuffer sb;
	tb_error_t err;

	(void)state;
	memset(reason, 'r', sizeof(reason) - 1);
	reason[sizeof(reason) - 1] = '\0';
	memset(topic, 't', sizeof(topic) - 1);
	topic[sizeof(topic) - 1] = '\0';
	assert_int_equal(tb_intake_dead_letter(&rec, TB_DLQ_POISON, reason, "t-11", "x", 1, &o, 99),
			 0);
	assert_int_equal(strlen(rec.reason), 4096);
	assert_int_equal(strlen(rec.topic), 249);
	assert_false(TB_HAS(&rec, TB_DLQ_F_PARTITION));
	assert_false(TB_HAS(&rec, TB_DLQ_F_OFFSET));
	assert_string_equal(rec.task_id, "t-11");
	msgpack_sbuffer_init(&sb);
	if (tb_msg_encode(&sb, &tb_schema_dlq, &rec, &err) != 0)
		fail_msg("does not encode: %s", err.msg);
	msgpack_sbuffer_destroy(&sb);
	tb_msg_free(&tb_schema_dlq, &rec);

	assert_int_equal(tb_intake_dead_letter(&rec, TB_DLQ_POISON, "", NULL, "", 0, &o, 99), 0);
	assert_string_equal(rec.reason, "unknown");
	tb_msg_free(&tb_schema_dlq, &rec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_intake__a_task_and_a_followup_are_decoded),
		cmocka_unit_test(test_intake__another_kind_of_message_is_dead_lettered),
		cmocka_unit_test(test_intake__garbage_is_dead_lettered_with_the_decoders_reason),
		cmocka_unit_test(test_intake__a_key_names_the_task_only_when_it_is_an_id),
		cmocka_unit_test(test_intake__a_huge_message_is_cut_to_fit_its_record),
		cmocka_unit_test(test_intake__a_refusal_fits_the_record_schema),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
