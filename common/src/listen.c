/*
 * listen.c: a server's HOST:PORT setting resolved (listen.h).
 */
#include "tb/listen.h"

#include <stdio.h>
#include <string.h>

int tb_listen_resolve(struct addrinfo **out, char *host, size_t hostlen, const char *what,
		      const char *listen, const char *example, tb_error_t *err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	const char *colon = strrchr(listen, ':');

	*out = NULL;
	if (!colon || colon == listen || (size_t)(colon - listen) >= hostlen || !colon[1])
		return tb_error_set(err, TB_EINVAL, "%s '%s': expected host:port%s%s%s", what,
				    listen, example ? " (e.g. " : "", example ? example : "",
				    example ? ")" : "");
	size_t hl = (size_t)(colon - listen);
	if (hl >= 2 && listen[0] == '[' && listen[hl - 1] == ']') /* [::1]:9464 */
		memcpy(host, listen + 1, hl - 2), host[hl - 2] = '\0';
	else
		memcpy(host, listen, hl), host[hl] = '\0';
	int gai = getaddrinfo(host, colon + 1, &hints, out);
	if (gai) {
		*out = NULL;
		return tb_error_set(err, TB_EINVAL, "%s '%s': %s", what, listen, gai_strerror(gai));
	}
	return 0;
}
