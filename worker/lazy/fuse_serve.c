/*
 * fuse_serve.c: the FUSE serving core (fuse_serve.h): the device, the
 * session, the detached mount and the threads that serve it.
 */
#include "fuse_serve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

struct tb_fuse_server {
	struct fuse_session *se;
	int dev; /* /dev/fuse: the session's once it took it (dev_taken) */
	int dev_taken;
	int stop; /* an eventfd: written once to stop */
	pthread_t threads[TB_FUSE_THREADS_MAX];
	unsigned nthreads;
};

static void *serve(void *arg)
{
	tb_fuse_server_t *s = arg;
	struct fuse_buf fbuf = { .mem = NULL };
	struct pollfd p[2] = { { .fd = s->dev, .events = POLLIN },
			       { .fd = s->stop, .events = POLLIN } };

	while (!fuse_session_exited(s->se)) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break; /* stopping */
		if (!(p[0].revents & POLLIN)) {
			if (p[0].revents & (POLLERR | POLLHUP))
				break; /* the connection is gone */
			continue;
		}
		int n = fuse_session_receive_buf(s->se, &fbuf);
		if (n == -EAGAIN || n == -EINTR)
			continue; /* another thread took it */
		if (n <= 0)
			break; /* 0: unmounted; < 0: the device failed */
		fuse_session_process_buf(s->se, &fbuf);
	}
	free(fbuf.mem);
	return NULL;
}

/* A detached FUSE mount on device fd @p dev. The mount fd, or -errno. */
static int make_mount(int dev, const tb_fuse_serve_conf_t *c)
{
	char num[16];
	int fsfd = fsopen("fuse", FSOPEN_CLOEXEC), mfd = -1, e = 0;
	unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			 (c->noexec ? MOUNT_ATTR_NOEXEC : 0);

	if (fsfd < 0)
		return -errno;
	snprintf(num, sizeof(num), "%d", dev);
	if (fsconfig(fsfd, FSCONFIG_SET_STRING, "source", c->source, 0) < 0 ||
	    fsconfig(fsfd, FSCONFIG_SET_STRING, "fd", num, 0) < 0 ||
	    fsconfig(fsfd, FSCONFIG_SET_STRING, "rootmode", c->rootmode, 0) < 0 ||
	    fsconfig(fsfd, FSCONFIG_SET_STRING, "user_id", "0", 0) < 0 ||
	    fsconfig(fsfd, FSCONFIG_SET_STRING, "group_id", "0", 0) < 0 ||
	    fsconfig(fsfd, FSCONFIG_SET_FLAG, "allow_other", NULL, 0) < 0 ||
	    fsconfig(fsfd, FSCONFIG_SET_FLAG, "default_permissions", NULL, 0) < 0 ||
	    fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
	    (mfd = fsmount(fsfd, FSMOUNT_CLOEXEC, attrs)) < 0)
		e = errno;
	close(fsfd);
	return mfd >= 0 ? mfd : -e;
}

/* The kernel reads a FUSE file ahead by 128 KiB at most, whatever the
 * file system asks for at init (it keeps the smaller). A sequential
 * reader then costs a request, two wakeups and a reply every 128 KiB:
 * on two cores a cold read went at two thirds of its speed with 1 MiB.
 * The mount's own read-ahead (sysfs, by its device) is raised. Best
 * effort: without /sys, reads only stay small. Threads must be serving:
 * fstat asks the file system. */
static void widen_readahead(int mount_fd, unsigned kb)
{
	struct stat st;
	char path[96];

	if (!kb || fstat(mount_fd, &st) < 0)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
		 minor(st.st_dev));
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char num[16];
	int n = snprintf(num, sizeof(num), "%u", kb);
	if (write(fd, num, (size_t)n) != n) { /* refused: reads stay small */
	}
	close(fd);
}

/* The session on /dev/fuse, and the mount of it. */
static int open_session(tb_fuse_server_t *s, const tb_fuse_serve_conf_t *c, const char *what,
			int *mount_fd, tb_error_t *err)
{
	char *argv[] = { (char *)"taskbox", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);
	char dev_path[32];

	if ((s->dev = open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK)) < 0)
		return tb_error_errno(err, TB_EIO, errno, "%s: open /dev/fuse", what);
	if ((s->stop = eventfd(0, EFD_CLOEXEC)) < 0)
		return tb_error_errno(err, TB_EIO, errno, "%s: eventfd", what);
	s->se = fuse_session_new(&args, c->ops, sizeof(*c->ops), c->userdata);
	fuse_opt_free_args(&args); /* copied in, or added to */
	if (!s->se)
		return tb_error_set(err, TB_ENOMEM, "%s: a FUSE session", what);
	/* "/dev/fd/N": libfuse takes the device as it is (and closes it) */
	snprintf(dev_path, sizeof(dev_path), "/dev/fd/%d", s->dev);
	if (fuse_session_mount(s->se, dev_path) != 0)
		return tb_error_set(err, TB_EIO, "%s: FUSE refused the device", what);
	s->dev_taken = 1;
	if ((*mount_fd = make_mount(s->dev, c)) < 0) {
		int e = -*mount_fd;
		*mount_fd = -1;
		return tb_error_errno(err, TB_EIO, e, "%s: mount FUSE", what);
	}
	return 0;
}

int tb_fuse_serve_start(tb_fuse_server_t **out, const tb_fuse_serve_conf_t *conf, const char *what,
			int *mount_fd, tb_error_t *err)
{
	tb_fuse_server_t *s = calloc(1, sizeof(*s));
	unsigned want = conf->threads ? conf->threads : 1;
	int rc;

	*out = NULL;
	*mount_fd = -1;
	if (!s)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	s->dev = s->stop = -1;
	if ((rc = open_session(s, conf, what, mount_fd, err)) < 0)
		goto fail;
	if (want > TB_FUSE_THREADS_MAX)
		want = TB_FUSE_THREADS_MAX;
	for (; s->nthreads < want; s->nthreads++)
		if (pthread_create(&s->threads[s->nthreads], NULL, serve, s) != 0)
			break;
	if (!s->nthreads) {
		rc = tb_error_set(err, TB_EIO, "%s: no thread to serve it", what);
		close(*mount_fd);
		*mount_fd = -1;
		goto fail;
	}
	widen_readahead(*mount_fd, conf->readahead_kb);
	*out = s;
	return 0;
fail:
	tb_fuse_serve_stop(s);
	return rc;
}

unsigned tb_fuse_serve_threads(const tb_fuse_server_t *s)
{
	return s->nthreads;
}

void tb_fuse_serve_stop(tb_fuse_server_t *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	/* cannot fail: an eventfd written once */
	if (s->stop >= 0 && write(s->stop, &one, sizeof(one)) != (ssize_t)sizeof(one))
		abort();
	for (unsigned i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	if (s->se)
		fuse_session_destroy(s->se); /* closes a device it took: the
					      * kernel fails what still waits */
	if (!s->dev_taken && s->dev >= 0)
		close(s->dev);
	if (s->stop >= 0)
		close(s->stop);
	free(s);
}

void tb_fuse_reply_dir(fuse_req_t req, size_t size, off_t off, size_t n, tb_fuse_dirent_fn entry,
		       void *arg)
{
	char *buf = malloc(size ? size : 1);
	size_t used = 0;

	if (!buf || off < 0) {
		free(buf);
		fuse_reply_err(req, !buf ? ENOMEM : EINVAL);
		return;
	}
	for (size_t k = (size_t)off; k < n; k++) {
		struct stat st = { 0 };
		const char *name = k == 0 ? "." : "..";
		entry(arg, k, &name, &st);
		size_t need =
		    fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(k + 1));
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}
