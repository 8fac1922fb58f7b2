/*
 * proxy_mask.h: finding a provider's secret in bytes on their way into the
 * sandbox, whichever way an upstream echoes it: as it is, or
 * percent-encoded, in upper, lower or mixed case hex, the characters that
 * need no escape escaped too, or any mix of these. The proxy (proxy.c)
 * masks what it finds and holds back a tail that may be the start of an
 * echo until the next bytes decide. It does not know JSON, base64 or any
 * other encoding: docs/egress.md, "The network boundary", says so.
 */
#ifndef TB_PROXY_MASK_H
#define TB_PROXY_MASK_H

#include <stddef.h>

/** The most bytes one echo of @p secret can take: every byte as %XX. */
size_t tb_mask_max_len(const char *secret);

/**
 * Overwrites every echo of @p secret in @p s (@p len bytes) with '*', one
 * per byte of the echo. @return the number of echoes masked
 */
size_t tb_mask_apply(const char *secret, char *s, size_t len);

/**
 * The length of the longest tail of @p s that is the start of an echo of
 * @p secret and could be completed by bytes still to come: hold it back.
 * Call after tb_mask_apply() on the same bytes.
 */
size_t tb_mask_pending(const char *secret, const char *s, size_t len);

#endif
