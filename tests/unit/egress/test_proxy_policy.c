/*
 * test_proxy_policy.c: what the egress proxy allows, how it normalises
 * paths, and how it reads and renders provider credentials.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy_policy.h"

static char *post[] = { "POST" };
static char *get_head[] = { "GET", "HEAD" };
static char *v1[] = { "/v1/" };
static char *models[] = { "/models", "/v2/models/" };

static tb_endpoint_t eps[] = {
	{ .name = "llm",
	  .host = "llm.example.test",
	  .port = 443,
	  .scheme = "https",
	  .methods = { 1, post },
	  .path_prefixes = { 1, v1 },
	  .credential = { .header = "Authorization", .format = "Bearer {}", .env = "TB_T_KEY" } },
	{ .name = "search",
	  .host = "Search.Example.Test",
	  .port = 8080,
	  .scheme = "http",
	  .methods = { 2, get_head },
	  .path_prefixes = { 2, models },
	  .credential = { .query = "api_key", .env = "TB_T_KEY" } },
	{ .name = "open", .host = "open.example.test", .port = 80, .scheme = "http" },
	/* the same host again, for other paths */
	{ .name = "llm-admin",
	  .host = "llm.example.test",
	  .port = 443,
	  .scheme = "https",
	  .methods = { 2, get_head },
	  .path_prefixes = { 1, models } },
};
static const tb_list_t list = { sizeof(eps) / sizeof(eps[0]), eps };

static tb_proxy_decision_t *decide(const char *method, const char *binding, const char *host,
				   unsigned port, const char *path)
{
	static tb_proxy_decision_t d;
	tb_proxy_target_t t = { method, binding, host, port, path };
	tb_proxy_policy_decide(&d, &list, &t);
	return &d;
}

static void test_proxy_policy__allows_binding_method_and_prefix(void **state)
{
	(void)state;
	tb_proxy_decision_t *d = decide("POST", "llm", NULL, 0, "/v1/chat?stream=1");
	assert_int_equal(d->status, 0);
	assert_string_equal(d->endpoint->name, "llm");
	assert_string_equal(d->path, "/v1/chat");
	assert_string_equal(d->query, "stream=1");
	assert_int_equal(decide("GET", "open", NULL, 0, "/anything/at/all")->status, 0);
	assert_int_equal(decide("DELETE", "open", NULL, 0, "/")->status, 0);
}

static void test_proxy_policy__refuses_with_a_reason(void **state)
{
	tb_proxy_decision_t *d;
	(void)state;
	d = decide("GET", "llm", NULL, 0, "/v1/chat");
	assert_int_equal(d->status, 403);
	assert_non_null(strstr(d->reason, "method GET is not allowed for endpoint 'llm'"));
	assert_non_null(strstr(d->reason, "POST"));
	d = decide("POST", "llm", NULL, 0, "/v2/chat");
	assert_int_equal(d->status, 403);
	assert_non_null(strstr(d->reason, "outside endpoint 'llm'"));
	d = decide("POST", "nope", NULL, 0, "/v1/chat");
	assert_int_equal(d->status, 403);
	assert_null(d->endpoint);
	assert_non_null(strstr(d->reason, "no endpoint named 'nope'"));
	/* methods are upper-case, exactly */
	assert_int_equal(decide("post", "llm", NULL, 0, "/v1/x")->status, 400);
	assert_int_equal(decide("POSTX", "llm", NULL, 0, "/v1/x")->status, 403);
	/* the prefix "/v1/" does not match "/v1" or "/v10/" */
	assert_int_equal(decide("POST", "llm", NULL, 0, "/v1")->status, 403);
	assert_int_equal(decide("POST", "llm", NULL, 0, "/v10/x")->status, 403);
}

static void test_proxy_policy__matches_hosts_by_name(void **state)
{
	tb_proxy_decision_t *d;
	(void)state;
	d = decide("GET", NULL, "search.example.test", 0, "/models/x");
	assert_int_equal(d->status, 0);
	assert_string_equal(d->endpoint->name, "search");
	/* case and a trailing dot do not matter; the port must match when given */
	assert_int_equal(decide("GET", NULL, "SEARCH.example.test.", 8080, "/models")->status, 0);
	assert_int_equal(decide("GET", NULL, "search.example.test", 80, "/models")->status, 403);
	d = decide("GET", NULL, "evil.example.test", 0, "/models");
	assert_int_equal(d->status, 403);
	assert_non_null(strstr(d->reason, "host 'evil.example.test' is not in"));
	/* a suffix or prefix of an allowed name is another name */
	assert_int_equal(decide("GET", NULL, "xsearch.example.test", 0, "/models")->status, 403);
	assert_int_equal(decide("GET", NULL, "search.example.test.evil", 0, "/models")->status,
			 403);
	/* two endpoints on one host: the one that allows the request */
	d = decide("GET", NULL, "llm.example.test", 0, "/models/list");
	assert_int_equal(d->status, 0);
	assert_string_equal(d->endpoint->name, "llm-admin");
	d = decide("POST", NULL, "llm.example.test", 443, "/v1/chat");
	assert_int_equal(d->status, 0);
	assert_string_equal(d->endpoint->name, "llm");
	d = decide("PUT", NULL, "llm.example.test", 0, "/v1/chat");
	assert_int_equal(d->status, 403);
	assert_string_equal(d->endpoint->name, "llm");
}

static void test_proxy_policy__refuses_paths_read_two_ways(void **state)
{
	const char *bad[] = {
		"/v1/../admin",
		"/v1/..",
		"/v1/./x",
		"/v1/%2e%2e/admin",
		"/v1/%2E./admin",
		"/v1%2fadmin",
		"/v1/a%2Fb",
		"/v1/a%5cb",
		"/v1/a\\b",
		"/v1/a%00b",
		"/v1/a%0d%0ab",
		"/v1/a%zzb",
		"/v1/a%2",
		"/v1/a\x01",
		"/v1/a\x7f",
		"/v1/\xc3\xa9",
		"/v1/a#frag",
		"v1/x",
		"",
		"/v1/a b",
		"/v1/x?a=\x01b",
		"/v1/x?a=%zz",
		"/v1/x?a b=1",
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_proxy_decision_t *d = decide("POST", "llm", NULL, 0, bad[i]);
		if (d->status != 400)
			fail_msg("path %zu '%s' got %d (%s)", i, bad[i], d->status, d->reason);
	}
	/* what is not a dot segment is fine */
	assert_int_equal(decide("POST", "llm", NULL, 0, "/v1/a..b/.c/c..")->status, 0);
	assert_int_equal(decide("POST", "llm", NULL, 0, "/v1/a%20b")->status, 0);
}

static void test_proxy_policy__refuses_path_parameters_double_and_overlong_escapes(void **state)
{
	const char *bad[] = {
		"/v1/..;/admin",          /* Tomcat: "/admin" */
		"/v1/..%3B/x",            /* the same, encoded */
		"/v1/.;/x",               /* Tomcat: "/v1/x" */
		"/v1/x;y=1",              /* a path parameter anywhere */
		"/v1/%3bx",               /* encoded ';' */
		"/v1/%252e%252e/admin",   /* "%2e%2e" decoded once, ".." twice */
		"/v1/%25",                /* any encoded '%' */
		"/v1/%C0%AE%C0%AE/admin", /* overlong '.' */
		"/v1/%c3%a9",             /* any escape above 0x7e */
		"/v1/%80",
		"/v1/%7f",
		"/v1/...", /* a segment starting with ".." */
		"/v1/..d",
		"/v1/..%20",
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_proxy_decision_t *d = decide("POST", "llm", NULL, 0, bad[i]);
		if (d->status != 400)
			fail_msg("path %zu '%s' got %d (%s)", i, bad[i], d->status, d->reason);
	}
	/* the query is not a path: left as it is */
	assert_int_equal(decide("POST", "llm", NULL, 0, "/v1/x?a=%25;b=%C0")->status, 0);
}

static void test_proxy_policy__prefixes_match_whole_segments(void **state)
{
	(void)state;
	/* "/models" (no trailing '/'): itself and what is under it */
	assert_int_equal(decide("GET", "search", NULL, 0, "/models")->status, 0);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models/")->status, 0);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models/x/y")->status, 0);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models-internal")->status, 403);
	assert_int_equal(decide("GET", "search", NULL, 0, "/modelsx/y")->status, 403);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models%2Dx")->status, 403);
	/* "/v2/models/" (trailing '/'): what is under it only */
	assert_int_equal(decide("GET", "search", NULL, 0, "/v2/models/x")->status, 0);
	assert_int_equal(decide("GET", "search", NULL, 0, "/v2/models")->status, 403);
	assert_int_equal(decide("GET", "search", NULL, 0, "/v2/models-x/")->status, 403);
}

/* @p text as an address: 1 internal, 0 not. */
static int internal(const char *text)
{
	struct sockaddr_in a4 = { .sin_family = AF_INET };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 };
	if (inet_pton(AF_INET, text, &a4.sin_addr) == 1)
		return tb_proxy_addr_internal((struct sockaddr *)&a4);
	if (inet_pton(AF_INET6, text, &a6.sin6_addr) == 1)
		return tb_proxy_addr_internal((struct sockaddr *)&a6);
	fail_msg("not an address: %s", text);
	return -1;
}

static void test_proxy_policy__internal_addresses_cover_private_and_embedded_ranges(void **state)
{
	/* Classified only: nothing here is ever contacted. */
	static const char *const inside[] = {
		"127.0.0.1",
		"127.255.0.9",
		"0.0.0.0",
		"0.1.2.3",
		"10.0.0.1",
		"10.255.255.255",
		"172.16.0.1",
		"172.31.255.255",
		"192.168.0.1",
		"192.168.255.254",
		"100.64.0.1",
		"100.127.255.255",
		"169.254.169.254",
		"192.0.0.8",
		"198.18.0.1",
		"198.19.255.255",
		"224.0.0.1",
		"239.255.255.250",
		"240.0.0.1",
		"255.255.255.255",
		"::1",
		"::",
		"fe80::1",
		"febf::1",
		"fec0::1",
		"fc00::1",
		"fd12:3456::1",
		"ff02::1",
		"::ffff:10.0.0.1",
		"::ffff:127.0.0.1",
		"::ffff:169.254.169.254",
		"::10.0.0.1",
		"::127.0.0.1",
		"::192.168.1.1",
		"64:ff9b::a00:1",
		"64:ff9b::7f00:1",
		"64:ff9b::c0a8:101",
		"64:ff9b:1::8.8.8.8",
		"2002:a00:1::1",
		"2002:7f00:1::",
		"2001:0:4136:e378:8000:63bf:f5ff:fffe", /* Teredo, client 10.0.0.1 */
		"100::1",
	};
	static const char *const outside[] = {
		"8.8.8.8",          "1.1.1.1",
		"11.0.0.1",         "9.255.255.255",
		"172.15.255.255",   "172.32.0.1",
		"192.167.255.255",  "192.169.0.1",
		"100.63.255.255",   "100.128.0.1",
		"169.253.0.1",      "198.17.255.255",
		"198.20.0.1",       "223.255.255.255",
		"2606:4700::1111",  "2a00:1450::1",
		"::ffff:8.8.8.8",   "::8.8.8.8",
		"64:ff9b::808:808", "2002:808:808::1",
		"2001:db8::1",      "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
		"fbff::1",          "fe00::1",
	};
	(void)state;
	for (size_t i = 0; i < sizeof(inside) / sizeof(inside[0]); i++)
		if (internal(inside[i]) != 1)
			fail_msg("%s should be internal", inside[i]);
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++)
		if (internal(outside[i]) != 0)
			fail_msg("%s should not be internal", outside[i]);
}

static void test_proxy_policy__normalises_unreserved_escapes(void **state)
{
	char path[TB_PROXY_PATH_MAX], query[TB_PROXY_PATH_MAX];
	tb_error_t err;
	(void)state;
	assert_int_equal(tb_proxy_path_normalise(path, query, "/%76%31/%7e%41%3a%3A?x=%2f", &err),
			 0);
	assert_string_equal(path, "/v1/~A%3A%3A");
	assert_string_equal(query, "x=%2f");
	tb_proxy_decision_t *d = decide("POST", "llm", NULL, 0, "/%761/chat");
	assert_int_equal(d->status, 0);
	assert_string_equal(d->path, "/v1/chat");
	/* over the cap */
	char *big = malloc(TB_PROXY_PATH_MAX + 10);
	memset(big, 'a', TB_PROXY_PATH_MAX + 9);
	big[0] = '/';
	big[TB_PROXY_PATH_MAX + 9] = '\0';
	assert_int_equal(tb_proxy_path_normalise(path, query, big, &err), TB_EINVAL);
	free(big);
	/* a refusal leaves the path empty, not written up to where it
	 * stopped and unterminated (the audit says the path it refused) */
	memset(path, 'x', sizeof(path));
	memset(query, 'x', sizeof(query));
	assert_int_equal(tb_proxy_path_normalise(path, query, "/v1%2fadmin?q=1", &err), TB_EINVAL);
	assert_string_equal(path, "");
	assert_string_equal(query, "");
	assert_int_equal(tb_proxy_path_normalise(path, query, "/v1/../admin", &err), TB_EINVAL);
	assert_string_equal(path, "");
}

static void test_proxy_policy__query_credential_cannot_be_set_by_the_client(void **state)
{
	(void)state;
	assert_int_equal(decide("GET", "search", NULL, 0, "/models?q=1")->status, 0);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models?q=1&api_key=x")->status, 400);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models?api%5Fkey=x")->status, 400);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models?api_key")->status, 400);
	/* in any case: a provider may read API_KEY as api_key */
	assert_int_equal(decide("GET", "search", NULL, 0, "/models?API_KEY=x")->status, 400);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models?q=1&Api%5FKey=x")->status, 400);
	assert_int_equal(decide("GET", "search", NULL, 0, "/models?my_api_key=1")->status, 0);
}

static void test_proxy_policy__secrets_from_env_and_file(void **state)
{
	tb_credential_t env = { .header = "Authorization", .env = "TB_T_SECRET" };
	char file[] = "/tmp/tb-policy-secret-XXXXXX";
	tb_credential_t fc = { .header = "X-Key", .file = file };
	char *s;
	tb_error_t err;

	(void)state;
	unsetenv("TB_T_SECRET");
	assert_int_equal(tb_proxy_secret_load(&s, &env, &err), TB_ENOTFOUND);
	assert_non_null(strstr(err.msg, "TB_T_SECRET"));
	setenv("TB_T_SECRET", "sk-test-123", 1);
	assert_int_equal(tb_proxy_secret_load(&s, &env, &err), 0);
	assert_string_equal(s, "sk-test-123");
	tb_proxy_secret_free(s);
	setenv("TB_T_SECRET", "sk\r\nX-Injected: 1", 1);
	assert_int_equal(tb_proxy_secret_load(&s, &env, &err), TB_EINVAL);
	assert_null(strstr(err.msg, "Injected")); /* never the secret in a message */
	unsetenv("TB_T_SECRET");

	int fd = mkstemp(file);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "from-a-file\n", 12), 12);
	close(fd);
	assert_int_equal(tb_proxy_secret_load(&s, &fc, &err), 0);
	assert_string_equal(s, "from-a-file");
	tb_proxy_secret_free(s);
	unlink(file);
	assert_int_equal(tb_proxy_secret_load(&s, &fc, &err), TB_ENOTFOUND);
}

static void test_proxy_policy__renders_header_and_query_forms(void **state)
{
	tb_credential_t bearer = { .header = "Authorization", .format = "Bearer {}" };
	tb_credential_t plain = { .header = "X-Api-Key" };
	tb_credential_t query = { .query = "key", .format = "k {}" };
	char *v;
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_proxy_credential_render(&v, &bearer, "sk-1", &err), 0);
	assert_string_equal(v, "Bearer sk-1");
	tb_proxy_secret_free(v);
	assert_int_equal(tb_proxy_credential_render(&v, &plain, "sk-1", &err), 0);
	assert_string_equal(v, "sk-1");
	tb_proxy_secret_free(v);
	assert_int_equal(tb_proxy_credential_render(&v, &query, "a+b/c&d", &err), 0);
	assert_string_equal(v, "k%20a%2Bb%2Fc%26d");
	tb_proxy_secret_free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proxy_policy__allows_binding_method_and_prefix),
		cmocka_unit_test(test_proxy_policy__refuses_with_a_reason),
		cmocka_unit_test(test_proxy_policy__matches_hosts_by_name),
		cmocka_unit_test(test_proxy_policy__refuses_paths_read_two_ways),
		cmocka_unit_test(
		    test_proxy_policy__refuses_path_parameters_double_and_overlong_escapes),
		cmocka_unit_test(test_proxy_policy__prefixes_match_whole_segments),
		cmocka_unit_test(
		    test_proxy_policy__internal_addresses_cover_private_and_embedded_ranges),
		cmocka_unit_test(test_proxy_policy__normalises_unreserved_escapes),
		cmocka_unit_test(test_proxy_policy__query_credential_cannot_be_set_by_the_client),
		cmocka_unit_test(test_proxy_policy__secrets_from_env_and_file),
		cmocka_unit_test(test_proxy_policy__renders_header_and_query_forms),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
