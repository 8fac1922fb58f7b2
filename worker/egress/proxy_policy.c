/*
 * proxy_policy.c: the egress proxy's decisions and credentials
 * (proxy_policy.h). No sockets and no state: every function works on what
 * it is given.
 */
#include "proxy_policy.h"

#include "tb/encoding.h"
#include "tb/fsutil.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int unreserved(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '~' || c == '.';
}

/* The path of @p *sp (to its '?' or end) into @p path, checked, its
 * unreserved escapes decoded; *sp then at the '?' or the end. */
static int path_part(char *path, const char **sp, tb_error_t *err)
{
	const char *s = *sp;
	size_t o = 0;

	for (; *s && *s != '?'; s++) {
		unsigned char c = (unsigned char)*s;
		if (o + 4 >= TB_PROXY_PATH_MAX)
			return tb_error_set(err, TB_EINVAL, "the path is over %d bytes",
					    TB_PROXY_PATH_MAX - 4);
		if (c < 0x20 || c > 0x7e)
			return tb_error_set(err, TB_EINVAL,
					    "the path holds a control character or a byte above "
					    "0x7e");
		/* ';': Tomcat, Jetty and Spring cut "path parameters" off each
		 * segment before routing ("/v1/..;/admin" is "/admin" to them),
		 * others route on the raw segment, and the APIs an agent calls
		 * use no matrix parameters: refused rather than read one way. */
		if (c == '\\' || c == ' ' || c == '#' || c == ';')
			return tb_error_set(err, TB_EINVAL, "the path holds '%c'", c);
		if (c != '%') {
			path[o++] = (char)c;
			continue;
		}
		int hi = tb_hex_digit(s[1]), lo = hi < 0 ? -1 : tb_hex_digit(s[2]);
		if (hi < 0 || lo < 0)
			return tb_error_set(err, TB_EINVAL, "the path holds a bad %%-escape");
		unsigned char v = (unsigned char)(hi << 4 | lo);
		/* the escape's digits, in upper case, as said and kept */
		char h1 = (char)toupper((unsigned char)s[1]),
		     h2 = (char)toupper((unsigned char)s[2]);
		/* What a server may decode into a separator or a dot segment
		 * after the prefix was checked: refused, never guessed at.
		 * '%' itself ("%252e" is "%2e" once, "." twice), ';' (see
		 * above), and bytes above 0x7f: "%C0%AE" is an overlong '.'
		 * that lenient UTF-8 decoders accept. */
		if (v == '/' || v == '\\' || v == '.' || v == '%' || v == ';' || v < 0x20 ||
		    v >= 0x7f)
			return tb_error_set(err, TB_EINVAL,
					    "the path holds an encoded '/', '\\', '.', '%%', ';', "
					    "control character or byte above 0x7e (%%%c%c)",
					    h1, h2);
		if (unreserved(v)) {
			path[o++] = (char)v;
		} else {
			path[o++] = '%';
			path[o++] = h1;
			path[o++] = h2;
		}
		s += 2;
	}
	path[o] = '\0';
	*sp = s;
	return 0;
}

/* What a server reads another way: dot segments. */
static int dot_segments(const char *path, tb_error_t *err)
{
	/* Dot segments: "/a/../b" and "/a/./b" read differently on each side;
	 * so may any segment that starts with "..": "..;" (see ';' above),
	 * "...", and what a server trims ("..\t", ".. ") to "..". */
	for (const char *seg = path; seg;) {
		seg++;
		const char *next = strchr(seg, '/');
		size_t n = next ? (size_t)(next - seg) : strlen(seg);
		if ((n == 1 && seg[0] == '.') || (n >= 2 && seg[0] == '.' && seg[1] == '.'))
			return tb_error_set(
			    err, TB_EINVAL,
			    "the path holds a '.' segment or one starting with '..'");
		seg = next;
	}
	return 0;
}

/* The query @p s (after its '?') into @p query, checked, not decoded. */
static int query_part(char *query, const char *s, tb_error_t *err)
{
	size_t q = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (q + 1 >= TB_PROXY_PATH_MAX)
			return tb_error_set(err, TB_EINVAL, "the query is over %d bytes",
					    TB_PROXY_PATH_MAX - 1);
		if (c <= 0x20 || c > 0x7e || c == '#')
			return tb_error_set(err, TB_EINVAL,
					    "the query holds a space, a control character, "
					    "'#' or a byte above 0x7e");
		if (c == '%' && (tb_hex_digit(s[1]) < 0 || tb_hex_digit(s[2]) < 0))
			return tb_error_set(err, TB_EINVAL, "the query holds a bad %%-escape");
		query[q++] = (char)c;
	}
	query[q] = '\0';
	return 0;
}

int tb_proxy_path_normalise(char *path, char *query, const char *target, tb_error_t *err)
{
	const char *s = target;
	int rc;

	path[0] = query[0] = '\0';
	if (!s || s[0] != '/')
		return tb_error_set(err, TB_EINVAL, "the path must start with '/'");
	if ((rc = path_part(path, &s, err)) == 0 && (rc = dot_segments(path, err)) == 0 &&
	    *s == '?')
		rc = query_part(query, s + 1, err);
	/* a refusal leaves nothing half-written: callers may say the path */
	if (rc < 0)
		path[0] = query[0] = '\0';
	return rc;
}

int tb_proxy_policy_method_ok(const tb_endpoint_t *ep, const char *method)
{
	if (!ep->methods.n)
		return 1;
	for (size_t i = 0; i < ep->methods.n; i++)
		if (strcmp(ep->methods.items[i], method) == 0)
			return 1;
	return 0;
}

int tb_proxy_policy_path_ok(const tb_endpoint_t *ep, const char *path)
{
	if (!ep->path_prefixes.n)
		return 1;
	/* Whole segments: "/v1" admits "/v1" and "/v1/...", not "/v1-internal". */
	for (size_t i = 0; i < ep->path_prefixes.n; i++) {
		const char *p = ep->path_prefixes.items[i];
		size_t n = strlen(p);
		if (strncmp(path, p, n) == 0 &&
		    (n == 0 || p[n - 1] == '/' || path[n] == '\0' || path[n] == '/'))
			return 1;
	}
	return 0;
}

static int internal_v4(uint32_t a)
{
	return (a >> 24) == 0 ||                 /* 0/8 "this network" */
	       (a >> 24) == 10 ||                /* 10/8 private */
	       (a >> 22) == (100u << 2 | 1) ||   /* 100.64/10 shared (carrier NAT) */
	       (a >> 24) == 127 ||               /* 127/8 loopback */
	       (a >> 16) == (169u << 8 | 254) || /* 169.254/16 link-local, metadata */
	       (a >> 20) == (172u << 4 | 1) ||   /* 172.16/12 private */
	       (a >> 8) == (192u << 16) ||       /* 192.0.0/24 protocol assignments */
	       (a >> 16) == (192u << 8 | 168) || /* 192.168/16 private */
	       (a >> 17) == (198u << 7 | 9) ||   /* 198.18/15 benchmarking */
	       (a >> 28) >= 14;                  /* 224/4 multicast, 240/4, broadcast */
}

static uint32_t v4_at(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

int tb_proxy_addr_internal(const struct sockaddr *sa)
{
	static const uint8_t zero[12];
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };

	if (sa->sa_family == AF_INET)
		return internal_v4(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family != AF_INET6)
		return 1;
	const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	/* IPv4 inside IPv6: mapped ::ffff:a.b.c.d, compatible ::a.b.c.d (and
	 * so :: and ::1), NAT64 64:ff9b::a.b.c.d: the IPv4 address decides
	 * (a NAT64 gateway forwards to it). 6to4 2002:AABB:CCDD::, Teredo
	 * 2001:0::/32 (the client address inverted in the last 4 bytes). */
	if (!memcmp(b, mapped, 12) || !memcmp(b, zero, 12) || !memcmp(b, nat64, 12))
		return internal_v4(v4_at(b + 12));
	if (b[0] == 0x20 && b[1] == 0x02)
		return internal_v4(v4_at(b + 2));
	if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0)
		return internal_v4(~v4_at(b + 12));
	return (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 &&
		b[5] == 1) ||                               /* 64:ff9b:1::/48 local NAT64 */
	       (b[0] == 0x01 && !memcmp(b + 1, zero, 7)) || /* 100::/64 discard */
	       (b[0] & 0xfe) == 0xfc ||                     /* fc00::/7 unique local */
	       (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) ||   /* fe80::/10 link-local */
	       (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) ||   /* fec0::/10 site-local */
	       b[0] == 0xff;                                /* ff00::/8 multicast */
}

/* "a, b, c" of a list, for reasons. */
static void join(char *out, size_t cap, const tb_strlist_t *l)
{
	size_t o = 0;
	out[0] = '\0';
	for (size_t i = 0; i < l->n && o + 1 < cap; i++) {
		int n = snprintf(out + o, cap - o, "%s%s", i ? ", " : "", l->items[i]);
		if (n < 0)
			break;
		o += (size_t)n;
	}
}

/* 1 if the query sets parameter @p name (compared after decoding, and
 * without regard to case: some providers read `API_KEY` as `api_key`,
 * so the client may set the credential's parameter in no spelling). */
static int query_sets(const char *query, const char *name)
{
	for (const char *p = query; *p;) {
		const char *amp = strchr(p, '&'), *e = amp ? amp : p + strlen(p);
		const char *eq = memchr(p, '=', (size_t)(e - p));
		size_t klen = (size_t)((eq ? eq : e) - p);
		char buf[256];
		if (klen >= sizeof(buf))
			klen = sizeof(buf) - 1;
		tb_percent_decode(buf, p, klen, 1);
		if (strcasecmp(buf, name) == 0)
			return 1;
		p = amp ? amp + 1 : e;
	}
	return 0;
}

static int valid_method(const char *m)
{
	size_t n = 0;
	for (; m[n]; n++)
		if (m[n] < 'A' || m[n] > 'Z')
			return 0;
	return n >= 1 && n <= 16;
}

/* Host names compare without case and without one trailing dot. */
static int same_host(const char *want, const char *got)
{
	size_t wn = strlen(want), gn = strlen(got);
	if (wn && want[wn - 1] == '.')
		wn--;
	if (gn && got[gn - 1] == '.')
		gn--;
	return wn == gn && strncasecmp(want, got, wn) == 0;
}

void tb_proxy_policy_decide(tb_proxy_decision_t *out, const tb_list_t *endpoints,
			    const tb_proxy_target_t *req)
{
	const tb_endpoint_t *eps = endpoints ? endpoints->items : NULL;
	size_t n = endpoints ? endpoints->n : 0;
	const tb_endpoint_t *ep = NULL;
	char list[400];
	tb_error_t err;

	out->status = 403;
	out->endpoint = NULL;
	out->reason[0] = out->path[0] = out->query[0] = '\0';
	if (!req->method || !valid_method(req->method)) {
		out->status = 400;
		snprintf(out->reason, sizeof(out->reason), "bad method");
		return;
	}
	if (tb_proxy_path_normalise(out->path, out->query, req->path, &err) < 0) {
		out->status = 400;
		snprintf(out->reason, sizeof(out->reason), "%.400s", err.msg);
		return;
	}
	if (req->binding) {
		for (size_t i = 0; i < n && !ep; i++)
			if (strcmp(eps[i].name, req->binding) == 0)
				ep = &eps[i];
		if (!ep) {
			snprintf(out->reason, sizeof(out->reason),
				 "no endpoint named '%.100s' in the runtime's network.allow",
				 req->binding);
			return;
		}
	} else if (req->host) {
		/* The first endpoint for this host (and port) that allows the
		 * request; failing that the first for the host, for the reason. */
		for (size_t i = 0; i < n; i++) {
			if (!same_host(eps[i].host, req->host) ||
			    (req->port && req->port != eps[i].port))
				continue;
			if (!ep)
				ep = &eps[i];
			if (tb_proxy_policy_method_ok(&eps[i], req->method) &&
			    tb_proxy_policy_path_ok(&eps[i], out->path)) {
				ep = &eps[i];
				break;
			}
		}
		if (!ep) {
			snprintf(out->reason, sizeof(out->reason),
				 "host '%.200s'%s is not in the runtime's network.allow", req->host,
				 req->port ? " at that port" : "");
			return;
		}
	} else {
		out->status = 400;
		snprintf(out->reason, sizeof(out->reason), "the request names no endpoint");
		return;
	}
	out->endpoint = ep;
	if (!tb_proxy_policy_method_ok(ep, req->method)) {
		join(list, sizeof(list), &ep->methods);
		snprintf(out->reason, sizeof(out->reason),
			 "method %.16s is not allowed for endpoint '%.64s' (allowed: %.300s)",
			 req->method, ep->name, list);
		return;
	}
	if (!tb_proxy_policy_path_ok(ep, out->path)) {
		join(list, sizeof(list), &ep->path_prefixes);
		snprintf(out->reason, sizeof(out->reason),
			 "path '%.180s' is outside endpoint '%.64s''s path prefixes (%.200s)",
			 out->path, ep->name, list);
		return;
	}
	if (ep->credential.query && query_sets(out->query, ep->credential.query)) {
		out->status = 400;
		snprintf(out->reason, sizeof(out->reason),
			 "the query may not set '%.100s': the proxy adds it", ep->credential.query);
		return;
	}
	out->status = 0;
}

int tb_proxy_secret_load(char **out, const tb_credential_t *cred, tb_error_t *err)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = 0;

	*out = NULL;
	if (cred->env) {
		const char *v = getenv(cred->env);
		if (!v || !v[0])
			return tb_error_set(err, TB_ENOTFOUND,
					    "credential: the worker's environment has no %s",
					    cred->env);
		len = strlen(v);
		if (len > TB_PROXY_SECRET_MAX)
			return tb_error_set(err, TB_ETOOBIG, "credential: %s is over %d bytes",
					    cred->env, TB_PROXY_SECRET_MAX);
		if (!(buf = strdup(v)))
			return tb_error_set(err, TB_ENOMEM, "out of memory");
	} else if (cred->file) {
		/* a newline past the bound is allowed, and taken off below */
		if ((rc = tb_read_file(cred->file, TB_PROXY_SECRET_MAX + 2, &buf, &len, err)) < 0)
			return rc == TB_ETOOBIG ? tb_error_set(err, TB_ETOOBIG,
							       "credential: %s is over %d bytes",
							       cred->file, TB_PROXY_SECRET_MAX)
						: tb_error_prefix(err, "credential");
		if (rc == 0 && len && buf[len - 1] == '\n')
			len--;
		if (rc == 0 && len && buf[len - 1] == '\r')
			len--;
		if (rc == 0 && len > TB_PROXY_SECRET_MAX)
			rc = tb_error_set(err, TB_ETOOBIG, "credential: %s is over %d bytes",
					  cred->file, TB_PROXY_SECRET_MAX);
		else if (rc == 0 && !len)
			rc = tb_error_set(err, TB_ENOTFOUND, "credential: %s is empty", cred->file);
		if (rc == 0)
			buf[len] = '\0';
	} else {
		return tb_error_set(err, TB_EINVAL, "credential: names neither env nor file");
	}
	for (size_t i = 0; rc == 0 && i < len; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
			rc =
			    tb_error_set(err, TB_EINVAL, "credential: %s holds a control character",
					 cred->env ? cred->env : cred->file);
	if (rc < 0) {
		OPENSSL_cleanse(buf, len);
		free(buf);
		return rc;
	}
	*out = buf;
	return 0;
}

void tb_proxy_secret_free(char *secret)
{
	if (!secret)
		return;
	OPENSSL_cleanse(secret, strlen(secret));
	free(secret);
}

int tb_proxy_credential_render(char **out, const tb_credential_t *cred, const char *secret,
			       tb_error_t *err)
{
	const char *fmt = cred->format ? cred->format : "{}";
	const char *at = strstr(fmt, "{}");
	size_t slen = strlen(secret), flen = strlen(fmt);
	char *v;

	*out = NULL;
	if (!at)
		at = fmt + flen, flen += 2; /* no {}: the secret after the text */
	size_t vlen = flen - 2 + slen;
	if (!(v = malloc(vlen + 1)))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	size_t pre = (size_t)(at - fmt);
	memcpy(v, fmt, pre);
	memcpy(v + pre, secret, slen);
	memcpy(v + pre + slen, at + (at[0] ? 2 : 0), flen - 2 - pre);
	v[vlen] = '\0';
	if (cred->query) {
		char *q = malloc(vlen * 3 + 1);
		if (!q) {
			tb_proxy_secret_free(v);
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		}
		tb_percent_encode(q, vlen * 3 + 1, v, 0); /* fits: 3 bytes a byte */
		tb_proxy_secret_free(v);
		v = q;
	}
	*out = v;
	return 0;
}
