/*
 * proxy_policy.h: what the egress proxy lets through, and the provider
 * credentials it adds (schemas/runtime.md, "network.allow").
 *
 * Pure decisions, no sockets: given the runtime's endpoints and one
 * request (its method, which endpoint it names and its path), allow it
 * and say where it goes, or refuse it with a status and a reason a human
 * can act on. An endpoint is named either by its binding name (the
 * reverse-proxy form, http://127.0.0.1:<port>/<name>/<path>) or by the
 * host (and port) of an absolute-form URI (the forward-proxy form,
 * HTTP_PROXY): the host is matched by name against the endpoint's
 * configured host; the upstream is always the configured host, never
 * what the client wrote.
 *
 * Paths are matched against path_prefixes after normalisation, whole
 * segments at a time ("/v1" admits "/v1" and "/v1/x", not "/v1-internal";
 * "/v1/" admits "/v1/x" only), and a path a server might read differently
 * from how it is matched is refused rather than guessed at: "." segments
 * and segments starting with ".." ("..", "..;", "..."), ';' (path
 * parameters, which some servers cut off each segment before routing),
 * encoded '/', '\', '.', '%', ';' and control characters (%2f, %5c, %2e,
 * %25, %3b, %00), escapes of bytes above 0x7e (%C0%AE, an overlong '.'),
 * bad escapes, backslashes, control characters, bytes above 0x7e,
 * fragments. Percent-escapes of other unreserved characters are decoded
 * (RFC 3986 6.2.2.2) and the remaining escapes upper-cased, so "/%76%31/"
 * matches the prefix "/v1/".
 *
 * This file also reads secrets (from the worker's environment or a file,
 * as the endpoint's credential says) and renders them; it does not hold
 * them beyond the calls (proxy.c does).
 */
#ifndef TB_PROXY_POLICY_H
#define TB_PROXY_POLICY_H

#include "tb/codec.h"
#include "tb/error.h"
#include "tb/runtime.h"

#include <stddef.h>
#include <sys/socket.h>

#define TB_PROXY_PATH_MAX 8192
#define TB_PROXY_SECRET_MAX 8192

typedef struct tb_proxy_target {
	const char *method;  /* as the client sent it */
	const char *binding; /* reverse-proxy form: the first path segment; or NULL */
	const char *host;    /* forward-proxy form: the URI's host; or NULL */
	unsigned port;       /* forward form: the URI's port, 0 when it gave none */
	const char *path;    /* what follows: "/..." with an optional "?query" */
} tb_proxy_target_t;

typedef struct tb_proxy_decision {
	int status;                    /* 0: allowed; else 400 or 403 */
	const tb_endpoint_t *endpoint; /* the endpoint named (also when refused), or NULL */
	char reason[512];              /* when refused: why, for the client and the audit */
	char path[TB_PROXY_PATH_MAX];  /* normalised path, no query */
	char query[TB_PROXY_PATH_MAX]; /* the query without '?', possibly empty */
} tb_proxy_decision_t;

/**
 * Decides one request against @p endpoints (tb_endpoint_t items).
 * @param[out] out always filled: status 0 and the endpoint when allowed
 */
void tb_proxy_policy_decide(tb_proxy_decision_t *out, const tb_list_t *endpoints,
			    const tb_proxy_target_t *req);

/**
 * Normalises the path of a request target ("/a/b?q"), as described above.
 * @param path out, TB_PROXY_PATH_MAX bytes
 * @param query out, TB_PROXY_PATH_MAX bytes: what follows '?' (checked
 *        for control characters, spaces and bytes above 0x7e, not decoded)
 * @return 0; TB_EINVAL with the reason in @p err, @p path and @p query
 *         then empty (never half-written)
 */
int tb_proxy_path_normalise(char *path, char *query, const char *target, tb_error_t *err);

/** 1 if @p method (upper-case) is allowed by @p ep (any when none are listed). */
int tb_proxy_policy_method_ok(const tb_endpoint_t *ep, const char *method);

/** 1 if normalised @p path is under one of @p ep's prefixes, whole
 * segments (a prefix ending in '/', or the path equal to the prefix or
 * going on with '/'); any path when there are none. */
int tb_proxy_policy_path_ok(const tb_endpoint_t *ep, const char *path);

/**
 * 1 if @p sa is an address on this machine or its networks, which a name
 * the runtime allows must not come to resolve to (DNS rebinding):
 * loopback, unspecified, "this network" 0/8, private (10/8, 172.16/12,
 * 192.168/16, fc00::/7, fec0::/10), shared 100.64/10, link-local
 * (169.254/16, where metadata services live, fe80::/10), 192.0.0/24,
 * 198.18/15, multicast, reserved and broadcast, 100::/64, 64:ff9b:1::/48;
 * IPv4 carried in IPv6 (::ffff:a.b.c.d, ::a.b.c.d, NAT64 64:ff9b::a.b.c.d,
 * 6to4 2002::/16, Teredo 2001::/32) judged by its IPv4 address. Other
 * families: 1.
 */
int tb_proxy_addr_internal(const struct sockaddr *sa);

/**
 * Reads the secret of @p cred: the worker's environment variable or the
 * file it names (its content without one trailing newline).
 * @param[out] out released with tb_proxy_secret_free()
 * @return 0; TB_ENOTFOUND when the variable or file is missing or empty;
 *         TB_ETOOBIG over TB_PROXY_SECRET_MAX; TB_EINVAL when it holds a
 *         control character (it could split a header); the message names
 *         the variable or file, never the secret
 */
int tb_proxy_secret_load(char **out, const tb_credential_t *cred, tb_error_t *err);

/** Wipes and frees a secret (NULL is fine). */
void tb_proxy_secret_free(char *secret);

/**
 * The value to send: the credential's format with {} replaced by
 * @p secret ("Bearer {}"), or the secret alone; for the query form,
 * percent-encoded as a query value.
 * @param[out] out released with tb_proxy_secret_free()
 * @return 0; TB_ENOMEM
 */
int tb_proxy_credential_render(char **out, const tb_credential_t *cred, const char *secret,
			       tb_error_t *err);

#endif
