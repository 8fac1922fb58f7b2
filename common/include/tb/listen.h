/*
 * listen.h: a server's "HOST:PORT" setting ("0.0.0.0:9464", "[::1]:8080",
 * "localhost:0") read and resolved, for the worker's metrics endpoint and
 * taskbox view alike.
 */
#ifndef TB_LISTEN_H
#define TB_LISTEN_H

#include "tb/error.h"

#include <netdb.h>
#include <stddef.h>

/**
 * Resolves @p listen for a listening TCP socket (AI_PASSIVE).
 * @param[out] out the address (freeaddrinfo() it)
 * @param[out] host its host part, brackets off ("::1"), @p hostlen bytes
 * @param what the setting's name in errors ("metrics_listen", "--listen")
 * @param example a value shown when @p listen is not HOST:PORT (or NULL)
 * @return 0; TB_EINVAL naming @p what and why
 */
int tb_listen_resolve(struct addrinfo **out, char *host, size_t hostlen, const char *what,
		      const char *listen, const char *example, tb_error_t *err);

#endif
