/*
 * proxy.c: the egress proxy's listener in the sandbox's network
 * namespace, its accept thread, start and stop (the contract and the
 * design are in proxy.h; its other files in proxy_int.h). What a request
 * may do is proxy_policy.c's; how its bytes are read is proxy_http.c's;
 * what an agent line means is agent_events.c's.
 *
 * Why a thread per connection rather than one event loop: the upstream
 * side is libcurl's easy interface, whose callbacks may block (a request
 * body read from the client, a response written to a slow client), and
 * a sandbox has few connections at a time (max_conns caps them). Each
 * blocking wait has a deadline and also watches the proxy's stop eventfd,
 * so tb_proxy_stop() ends everything promptly.
 */
#include "proxy_int.h"
#include "tb/encoding.h"

#include "proxy_mask.h"
#include "tb/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* --------------------------------------------------------- accepting */

static void conn_free(tb_proxy_conn_t *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c->head);
	if (c->hold)
		OPENSSL_cleanse(c->hold, c->p->max_mask);
	free(c->hold);
	free(c);
}

/* Joins and frees finished connections (all of them when @p all). */
static void reap(tb_proxy_t *p, int all)
{
	tb_proxy_conn_t *gone = NULL, **pp;

	pthread_mutex_lock(&p->lock);
	for (pp = &p->conns; *pp;) {
		tb_proxy_conn_t *c = *pp;
		if (all || c->done) {
			*pp = c->next;
			c->next = gone;
			gone = c;
		} else {
			pp = &c->next;
		}
	}
	pthread_mutex_unlock(&p->lock);
	while (gone) {
		tb_proxy_conn_t *c = gone;
		gone = c->next;
		pthread_join(c->th, NULL);
		conn_free(c);
	}
}

static void overloaded(tb_proxy_t *p, int fd)
{
	static const char body[] = "taskbox proxy: too many connections from this task\n";
	char msg[256];
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 sizeof(body) - 1, body);
	ssize_t w = send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)w;
	if (p->conf.audit) {
		tb_proxy_audit_t a = { .method = "-",
				       .host = "",
				       .path = "",
				       .status = 503,
				       .reason = "too many connections from this task",
				       .refused = 1 };
		p->conf.audit(p->conf.audit_ud, &a);
	}
	close(fd);
}

static void *accept_main(void *arg)
{
	tb_proxy_t *p = arg;

	while (!atomic_load(&p->stopping)) {
		struct pollfd pf[2] = { { p->listen_fd, POLLIN, 0 }, { p->stop_fd, POLLIN, 0 } };
		int n = poll(pf, 2, 500);
		reap(p, 0);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0 || pf[1].revents)
			continue;
		for (;;) {
			int fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd < 0)
				break;
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			pthread_mutex_lock(&p->lock);
			int full = p->live >= p->conf.max_conns;
			pthread_mutex_unlock(&p->lock);
			if (full) {
				overloaded(p, fd);
				continue;
			}
			tb_proxy_conn_t *c = calloc(1, sizeof(*c));
			size_t cap = p->conf.max_head_bytes;
			if (!c || !(c->buf = malloc(cap)) || !(c->head = malloc(cap + 1)) ||
			    (p->max_mask && !(c->hold = malloc(p->max_mask)))) {
				if (c) {
					c->p = p;
					c->fd = -1;
					conn_free(c);
				}
				overloaded(p, fd);
				continue;
			}
			c->p = p, c->fd = fd, c->cap = cap;
			pthread_mutex_lock(&p->lock);
			p->live++;
			if (pthread_create(&c->th, NULL, tb_proxy_conn_main, c) != 0) {
				p->live--;
				pthread_mutex_unlock(&p->lock);
				c->fd = -1;
				conn_free(c);
				overloaded(p, fd);
				continue;
			}
			c->next = p->conns;
			p->conns = c;
			pthread_mutex_unlock(&p->lock);
		}
	}
	return NULL;
}

/* ------------------------------------------------------------- setup */

struct listen_job {
	pid_t pid;
	unsigned port;
	int fd;
	int errnum;
	const char *step;
};

static void make_listener(struct listen_job *j)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)j->port) };
	int one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	j->step = "socket";
	if ((j->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		goto fail;
	setsockopt(j->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	j->step = "bind 127.0.0.1";
	if (bind(j->fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		goto fail;
	j->step = "listen";
	if (listen(j->fd, 64) < 0)
		goto fail;
	return;
fail:
	j->errnum = errno;
	if (j->fd >= 0)
		close(j->fd);
	j->fd = -1;
}

/* A thread of its own joins the namespace: setns() moves only the calling
 * thread, and this one ends right after, so no thread of the worker is
 * left inside. The socket keeps the namespace it was created in. */
static void *listen_in_netns(void *arg)
{
	struct listen_job *j = arg;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)j->pid);
	j->step = "open the network namespace";
	int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0) {
		j->errnum = errno;
		return NULL;
	}
	j->step = "join the network namespace";
	if (setns(ns, CLONE_NEWNET) < 0) {
		j->errnum = errno;
		close(ns);
		return NULL;
	}
	close(ns);
	make_listener(j);
	return NULL;
}

int tb_proxy_listen(int *out, pid_t netns_of, unsigned port, tb_error_t *err)
{
	struct listen_job j = { netns_of, port, -1, 0, "" };
	pthread_t th;

	*out = -1;
	if (port > 65535)
		return tb_error_set(err, TB_EINVAL, "proxy: bad port %u", port);
	if (netns_of <= 0) {
		make_listener(&j);
	} else {
		int rc = pthread_create(&th, NULL, listen_in_netns, &j);
		if (rc != 0)
			return tb_error_errno(err, TB_EIO, rc, "proxy: start a thread");
		pthread_join(th, NULL);
	}
	if (j.fd < 0)
		return tb_error_errno(err, TB_EIO, j.errnum, "proxy: %s (port %u, process %d)",
				      j.step, port, (int)netns_of);
	*out = j.fd;
	return 0;
}

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void secrets_free(tb_proxy_t *p)
{
	for (size_t i = 0; p->secrets && i < p->nsecrets; i++) {
		tb_proxy_secret_free(p->secrets[i].value);
		tb_proxy_secret_free(p->secrets[i].mask);
	}
	free(p->secrets);
	p->secrets = NULL;
}

/* The rate bucket of endpoint @p ep, whose secret is @p raw (NULL: it
 * has no credential), into @p out (33 bytes): see tb_proxy_secret_t. */
static void rate_bucket(char *out, const tb_endpoint_t *ep, const char *raw)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	char *text = NULL;
	int n = raw ? asprintf(&text, "taskbox-rate\n%s", raw)
		    : asprintf(&text, "taskbox-rate-host\n%s:%llu", ep->host,
			       (unsigned long long)ep->port);

	if (n < 0)
		abort(); /* out of memory: docs/architecture.md, "Conventions" */
	SHA256((const unsigned char *)text, (size_t)n, md);
	OPENSSL_cleanse(text, (size_t)n);
	free(text);
	tb_hex(out, md, 16); /* the first half: 32 digits */
}

static int secrets_load(tb_proxy_t *p, tb_error_t *err)
{
	const tb_list_t *eps = p->conf.endpoints;

	p->nsecrets = eps ? eps->n : 0;
	if (p->nsecrets && !(p->secrets = calloc(p->nsecrets, sizeof(tb_proxy_secret_t))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	for (size_t i = 0; i < p->nsecrets; i++) {
		const tb_credential_t *cr = &((const tb_endpoint_t *)eps->items)[i].credential;
		tb_proxy_secret_t *s = &p->secrets[i];
		const tb_endpoint_t *ep = &((const tb_endpoint_t *)eps->items)[i];
		char *raw = NULL;
		tb_error_t e;
		if (!cr->header && !cr->query) {
			if (ep->rate_limit.has)
				rate_bucket(s->bucket, ep, NULL);
			continue;
		}
		if (tb_proxy_secret_load(&raw, cr, &e) < 0 ||
		    tb_proxy_credential_render(&s->value, cr, raw, &e) < 0) {
			snprintf(s->why, sizeof(s->why), "%.350s", e.msg);
			tb_proxy_secret_free(raw);
			continue;
		}
		if (ep->rate_limit.has)
			rate_bucket(s->bucket, ep, raw);
		if (strlen(raw) >= MASK_MIN) {
			s->mask = raw;
			if (tb_mask_max_len(raw) > p->max_mask)
				p->max_mask = tb_mask_max_len(raw);
		} else {
			tb_proxy_secret_free(raw);
		}
	}
	return 0;
}

int tb_proxy_start(tb_proxy_t **out, const tb_proxy_conf_t *conf, tb_error_t *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	tb_proxy_t *p;
	int rc;

	*out = NULL;
	if (!conf->key || !conf->task_id || strlen(conf->task_id) > 128 || conf->listen_fd < 0) {
		if (conf->listen_fd >= 0)
			close(conf->listen_fd);
		return tb_error_set(err, TB_EINVAL, "proxy: needs a socket, a key and a task id");
	}
	if (!(p = calloc(1, sizeof(*p)))) {
		close(conf->listen_fd);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	pthread_once(&once, curl_init_once);
	p->conf = *conf;
	p->listen_fd = conf->listen_fd;
	p->stop_fd = -1;
	p->key = *conf->key;
	p->conf.key = &p->key;
	snprintf(p->task_id, sizeof(p->task_id), "%s", conf->task_id);
	p->conf.task_id = p->task_id;
#define DEFAULT(f, v) p->conf.f = p->conf.f ? p->conf.f : (v)
	DEFAULT(max_conns, 32);
	DEFAULT(max_head_bytes, 16384);
	DEFAULT(header_timeout_ms, 10000);
	DEFAULT(idle_timeout_ms, 30000);
	DEFAULT(io_timeout_ms, 60000);
	DEFAULT(connect_timeout_ms, 10000);
	DEFAULT(max_event_bytes, 65536);
#undef DEFAULT
	if (p->conf.max_head_bytes < 1024)
		p->conf.max_head_bytes = 1024;
	pthread_mutex_init(&p->lock, NULL);
	if (getsockname(p->listen_fd, (struct sockaddr *)&a, &alen) < 0 ||
	    a.sin_family != AF_INET) {
		rc = tb_error_errno(err, TB_EINVAL, errno, "proxy: not a TCP/IPv4 socket");
		goto fail;
	}
	p->port = ntohs(a.sin_port);
	if ((p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "proxy: eventfd");
		goto fail;
	}
	if ((rc = secrets_load(p, err)) < 0)
		goto fail;
	if ((rc = pthread_create(&p->accept_th, NULL, accept_main, p)) != 0) {
		rc = tb_error_errno(err, TB_EIO, rc, "proxy: start its thread");
		goto fail;
	}
	p->accept_started = 1;
	*out = p;
	return 0;
fail:
	tb_proxy_stop(p);
	return rc;
}

unsigned tb_proxy_port(const tb_proxy_t *p)
{
	return p->port;
}

void tb_proxy_stop(tb_proxy_t *p)
{
	if (!p)
		return;
	atomic_store(&p->stopping, 1);
	if (p->stop_fd >= 0) {
		uint64_t one = 1;
		ssize_t w = write(p->stop_fd, &one, sizeof(one));
		(void)w;
	}
	if (p->accept_started)
		pthread_join(p->accept_th, NULL);
	/* Wake connection threads blocked on their clients. */
	pthread_mutex_lock(&p->lock);
	for (tb_proxy_conn_t *c = p->conns; c; c = c->next)
		if (c->fd >= 0)
			shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&p->lock);
	reap(p, 1);
	if (p->listen_fd >= 0)
		close(p->listen_fd);
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	secrets_free(p);
	tb_task_token_key_wipe(&p->key);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
