/*
 * init_util.c: taskbox-sandbox-init's helpers: strings into fixed buffers,
 * a reply to the worker, a build step's failure, the raw id system calls
 * (libc's would signal every thread; init has one, and its children run
 * on borrowed memory), directories, small files and closing descriptors.
 * System calls and caller-given buffers only, like all of init.
 */
#include "init_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Appends @p s to @p buf (NUL-terminated, capacity @p cap). */
void cat(char *buf, size_t cap, const char *s)
{
	size_t n = strnlen(buf, cap - 1), m = strnlen(s, cap - 1 - n);
	memcpy(buf + n, s, m);
	buf[n + m] = '\0';
}

void join(char *out, size_t cap, const char *a, const char *b)
{
	out[0] = '\0';
	cat(out, cap, a);
	cat(out, cap, b);
}

void utoa(char *out, size_t cap, unsigned long long v)
{
	char tmp[24];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v && n < 23);
	size_t i = 0;
	while (n > 0 && i + 1 < cap)
		out[i++] = tmp[--n];
	out[i] = '\0';
}

void send_resp(uint32_t op, int32_t id, int32_t pid, int32_t status, int32_t err, const char *msg)
{
	tb_sbp_resp_t r;

	memset(&r, 0, sizeof(r));
	r.op = op, r.id = id, r.pid = pid, r.status = status, r.err = err;
	if (msg)
		cat(r.msg, sizeof(r.msg), msg);
	/* A full socket means the worker stopped reading; nothing to do. */
	(void)send(TB_SBP_INIT_FD, &r, sizeof(r), MSG_NOSIGNAL);
}

/* Reports a build step that failed and exits: the worker reads the step
 * and errno and turns them into the error message. */
_Noreturn void fail(const char *step, const char *what, int errnum)
{
	char msg[256] = "";
	cat(msg, sizeof(msg), step);
	if (what) {
		cat(msg, sizeof(msg), " ");
		cat(msg, sizeof(msg), what);
	}
	send_resp(TB_SBP_FAILED, 0, 0, 0, errnum, msg);
	_exit(1);
}

int raw_setresuid(uid_t r, uid_t e, uid_t s)
{
	return (int)syscall(SYS_setresuid, r, e, s);
}

int raw_setresgid(gid_t r, gid_t e, gid_t s)
{
	return (int)syscall(SYS_setresgid, r, e, s);
}

int raw_setgroups(size_t n, const gid_t *list)
{
	return (int)syscall(SYS_setgroups, n, list);
}

/* mkdir -p for an absolute path, each component 0755. */
int mkdir_p(const char *path)
{
	char buf[PATH_LEN];
	size_t n = strnlen(path, sizeof(buf) - 1);

	memcpy(buf, path, n);
	buf[n] = '\0';
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] == '/' || buf[i] == '\0') {
			char c = buf[i];
			buf[i] = '\0';
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				return -1;
			buf[i] = c;
		}
	}
	return 0;
}

int write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	size_t len = strlen(text);

	if (fd < 0)
		return -1;
	if (write(fd, text, len) != (ssize_t)len) {
		int e = errno;
		close(fd);
		errno = e ? e : EIO;
		return -1;
	}
	return close(fd);
}

/* Closes descriptors @p lo to @p hi; one at a time (up to the open-file
 * limit) where close_range() is missing (Linux before 5.9). */
void close_fds(unsigned lo, unsigned hi)
{
	struct rlimit rl;
	unsigned max = 1u << 20;

	if (lo > hi || syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < max)
		max = (unsigned)rl.rlim_cur;
	for (unsigned fd = lo; fd <= hi && fd < max; fd++)
		close((int)fd);
}
