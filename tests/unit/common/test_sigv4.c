/*
 * test_sigv4.c: Signature V4 against the worked examples in AWS's S3
 * documentation ("Signature Calculations for the Authorization Header" and
 * "Query String Authentication"): same inputs, same signatures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tb/sigv4.h"

static const tb_sigv4_creds_t aws = {
	.access_key = "AKIAIOSFODNN7EXAMPLE",
	.secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	.region = "us-east-1",
	.service = "s3",
};
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define DATE "20130524T000000Z"
#define HOST "examplebucket.s3.amazonaws.com"

static void check(const char *method, const char *path, const char *query,
		  const tb_sigv4_header_t *h, size_t n, const char *payload, const char *want)
{
	char auth[TB_SIGV4_AUTH_MAX];
	tb_error_t err;

	assert_int_equal(tb_sigv4_authorization(auth, sizeof(auth), &aws, method, path, query, h, n,
						payload, DATE, &err),
			 0);
	if (strcmp(auth, want) != 0)
		fail_msg("got  %s\nwant %s", auth, want);
}

static void test_sigv4__get_object_with_range(void **state)
{
	tb_sigv4_header_t h[] = { { "Host", HOST },
				  { "Range", "bytes=0-9" },
				  { "x-amz-content-sha256", EMPTY_SHA },
				  { "x-amz-date", DATE } };
	(void)state;
	check(
	    "GET", "/test.txt", "", h, 4, EMPTY_SHA,
	    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
	    "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
	    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

static void test_sigv4__put_object_encodes_the_path(void **state)
{
	const char *sha = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
	tb_sigv4_header_t h[] = { { "Date", "Fri, 24 May 2013 00:00:00 GMT" },
				  { "Host", HOST },
				  { "x-amz-content-sha256", sha },
				  { "x-amz-date", DATE },
				  { "x-amz-storage-class", "REDUCED_REDUNDANCY" } };
	char body_sha[65];

	(void)state;
	tb_sha256_hex(body_sha, "Welcome to Amazon S3.", 21);
	assert_string_equal(body_sha, sha);
	check(
	    "PUT", "/test$file.text", "", h, 5, sha,
	    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
	    "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, "
	    "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

static void test_sigv4__query_without_value_and_sorting(void **state)
{
	tb_sigv4_header_t h[] = { { "Host", HOST },
				  { "x-amz-content-sha256", EMPTY_SHA },
				  { "x-amz-date", DATE } };
	(void)state;
	check(
	    "GET", "/", "lifecycle", h, 3, EMPTY_SHA,
	    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
	    "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
	    "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
	/* Given out of order, signed sorted. */
	check(
	    "GET", "/", "prefix=J&max-keys=2", h, 3, EMPTY_SHA,
	    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
	    "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
	    "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

static void test_sigv4__presigned_url(void **state)
{
	char url[2048];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_sigv4_presign(url, sizeof(url), &aws, "https://" HOST, HOST,
					  "/test.txt", 86400, DATE, &err),
			 0);
	assert_string_equal(
	    url,
	    "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
	    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
	    "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
	    "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigv4__get_object_with_range),
		cmocka_unit_test(test_sigv4__put_object_encodes_the_path),
		cmocka_unit_test(test_sigv4__query_without_value_and_sorting),
		cmocka_unit_test(test_sigv4__presigned_url),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
