/*
 * test_image_ref.c: image references pinned by digest (tb/image_ref.h).
 */
#include "tb/image_ref.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define D "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_image_ref__registry_forms(void **state)
{
	tb_image_ref_t r;
	tb_error_t err;
	(void)state;

	assert_int_equal(tb_image_ref_parse(&r, "registry.example.com/team/py312@" D, &err), 0);
	assert_int_equal(r.layout, 0);
	assert_string_equal(r.registry, "registry.example.com");
	assert_string_equal(r.repository, "team/py312");
	assert_string_equal(r.digest, D);
	assert_int_equal(tb_image_ref_parse(&r, "127.0.0.1:5000/a/b-c__d.e:v1.2@" D, &err), 0);
	assert_string_equal(r.registry, "127.0.0.1:5000");
	assert_string_equal(r.repository, "a/b-c__d.e");
	assert_int_equal(tb_image_ref_parse(&r, "localhost/x@" D, &err), 0);
	assert_string_equal(r.registry, "localhost");
}

static void test_image_ref__layout_form(void **state)
{
	tb_image_ref_t r;
	tb_error_t err;
	(void)state;

	assert_int_equal(tb_image_ref_parse(&r, "oci-layout:/var/lib/images/py/@" D, &err), 0);
	assert_int_equal(r.layout, 1);
	assert_string_equal(r.repository, "/var/lib/images/py");
	assert_int_equal(tb_image_ref_allowed(&r, "/var/lib/images"), 1);
	assert_int_equal(tb_image_ref_allowed(&r, "/var/lib/images/"), 1);
	assert_int_equal(tb_image_ref_allowed(&r, "/var/lib/ima"), 0);
	assert_int_equal(tb_image_ref_allowed(&r, "/"), 1);
}

static void test_image_ref__refusals_say_why(void **state)
{
	static const struct {
		const char *ref, *says;
	} bad[] = {
		{ "registry.example.com/team/py312:3.12", "not pinned" },
		{ "registry.example.com/team/py312", "not pinned" },
		{ "registry.example.com/team/py312@sha256:abc", "64 lowercase hex" },
		{ "registry.example.com/team/py312@" D "0", "64 lowercase hex" },
		{ "registry.example.com/team/py312@md5:0123", "64 lowercase hex" },
		{ "team/py312@" D, "names no registry" },
		{ "py312@" D, "names no registry" },
		{ "registry.example.com/Team/py312@" D, "bad repository component 'Team'" },
		{ "registry.example.com/team//py312@" D, "bad repository component ''" },
		{ "registry.example.com/team/-py@" D, "bad repository component" },
		{ "registry.example.com/@" D, "no repository" },
		{ "oci-layout:relative/path@" D, "absolute path" },
		{ "oci-layout:/a/../etc@" D, "must be plain" },
		{ "oci-layout:/a/./b@" D, "must be plain" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_image_ref_t r;
		tb_error_t err;
		if (tb_image_ref_parse(&r, bad[i].ref, &err) != TB_EINVAL)
			fail_msg("'%s' was taken", bad[i].ref);
		if (!strstr(err.msg, bad[i].says))
			fail_msg("'%s': '%s' does not say '%s'", bad[i].ref, err.msg, bad[i].says);
	}
}

static void test_image_ref__allow_prefixes_are_whole_components(void **state)
{
	tb_image_ref_t r;
	tb_error_t err;
	(void)state;

	assert_int_equal(tb_image_ref_parse(&r, "registry.example.com/team/py312@" D, &err), 0);
	assert_int_equal(tb_image_ref_allowed(&r, "registry.example.com"), 1);
	assert_int_equal(tb_image_ref_allowed(&r, "registry.example.com/"), 1);
	assert_int_equal(tb_image_ref_allowed(&r, "registry.example.com/team"), 1);
	assert_int_equal(tb_image_ref_allowed(&r, "registry.example.com/team/py312"), 1);
	assert_int_equal(tb_image_ref_allowed(&r, "registry.example.com/te"), 0);
	assert_int_equal(tb_image_ref_allowed(&r, "registry.example"), 0);
	assert_int_equal(tb_image_ref_allowed(&r, "other.example.com"), 0);
	assert_int_equal(tb_image_ref_allowed(&r, ""), 0);
	assert_int_equal(tb_image_ref_allowed(&r, "/"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_image_ref__registry_forms),
		cmocka_unit_test(test_image_ref__layout_form),
		cmocka_unit_test(test_image_ref__refusals_say_why),
		cmocka_unit_test(test_image_ref__allow_prefixes_are_whole_components),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
