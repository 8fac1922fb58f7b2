/*
 * blackbox.c: the worker's own death, said for its successor
 * (blackbox.h). The handler touches only this file's static data, the
 * thread's own slot of thread-local storage and write(2).
 */
#include "blackbox.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_BYTES 512

static const int fatal[] = { SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL };
#define NFATAL (sizeof(fatal) / sizeof(fatal[0]))

static int box_fd = -1;
static char box_path[4096]; /* removed at a clean close when nothing was said */
static struct sigaction before[NFATAL];
static int installed;

/* The task this thread works for: written by the thread itself, read by
 * its own signal handler (which interrupts it, so no lock is needed; the
 * strings are kept terminated at every step). */
static __thread struct {
	char task[256];
	char attempt[24];
	char phase[32];
} self;

static void copy(char *dst, size_t cap, const char *src)
{
	size_t n = 0;
	dst[0] = '\0';
	for (; src && src[n] && n + 1 < cap; n++)
		dst[n] = src[n] == '\t' || src[n] == '\n' ? ' ' : src[n];
	dst[n] = '\0';
}

void tb_blackbox_enter(const char *task, uint64_t attempt)
{
	char num[24];
	int i = (int)sizeof(num) - 1;

	num[i] = '\0';
	do
		num[--i] = (char)('0' + attempt % 10);
	while ((attempt /= 10) && i > 0);
	self.task[0] = '\0'; /* the handler sees none while it changes */
	copy(self.phase, sizeof(self.phase), task ? "received" : "");
	copy(self.attempt, sizeof(self.attempt), num + i);
	copy(self.task, sizeof(self.task), task);
}

void tb_blackbox_phase(const char *phase)
{
	copy(self.phase, sizeof(self.phase), phase);
}

/* Appends @p s to @p line at *@p n, within LINE_MAX_BYTES. */
static void put(char *line, size_t *n, const char *s)
{
	while (*s && *n + 1 < LINE_MAX_BYTES)
		line[(*n)++] = *s++;
}

static void on_fatal(int sig)
{
	char line[LINE_MAX_BYTES], num[8];
	size_t n = 0;
	int i = (int)sizeof(num) - 1, e = errno;

	num[i] = '\0';
	for (int v = sig; i > 0 && (v || i == (int)sizeof(num) - 1); v /= 10)
		num[--i] = (char)('0' + v % 10);
	put(line, &n, "crashed\t");
	put(line, &n, num + i);
	put(line, &n, "\t");
	put(line, &n, self.task[0] ? self.task : "-");
	put(line, &n, "\t");
	put(line, &n, self.task[0] ? self.attempt : "0");
	put(line, &n, "\t");
	put(line, &n, self.task[0] && self.phase[0] ? self.phase : "-");
	line[n++] = '\n';
	if (box_fd >= 0 && write(box_fd, line, n) < 0) {
		/* nothing more can be done while dying */
	}
	/* Dies of the signal as it would have: the default action, raised
	 * again (returning would run a faulting instruction again, but not
	 * a signal raised with raise() or kill()). */
	signal(sig, SIG_DFL);
	errno = e;
	raise(sig);
}

int tb_blackbox_open(const char *path, tb_error_t *err)
{
	struct sigaction sa;

	tb_blackbox_close();
	box_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (box_fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "black box %s", path);
	snprintf(box_path, sizeof(box_path), "%s", path);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESETHAND | SA_NODEFER;
	for (size_t i = 0; i < NFATAL; i++)
		sigaction(fatal[i], &sa, &before[i]);
	installed = 1;
	return 0;
}

void tb_blackbox_close(void)
{
	if (installed)
		for (size_t i = 0; i < NFATAL; i++)
			sigaction(fatal[i], &before[i], NULL);
	installed = 0;
	struct stat st;
	/* a worker that ends cleanly leaves no empty box behind (one that
	 * still holds an unkept death keeps it for the next start) */
	if (box_fd >= 0 && fstat(box_fd, &st) == 0 && st.st_size == 0)
		unlink(box_path);
	if (box_fd >= 0)
		close(box_fd);
	box_fd = -1;
}

/* One line into @p d. @return 0, or -1 for a line that is not one. */
static int parse(char *line, tb_blackbox_death_t *d)
{
	char *f[5], *save = line;
	int n = 0;

	for (char *p = line; n < 5; p++) {
		if (*p == '\t' || *p == '\0') {
			int end = *p == '\0';
			*p = '\0';
			f[n++] = save;
			save = p + 1;
			if (end)
				break;
		}
	}
	if (n != 5 || strcmp(f[0], "crashed"))
		return -1;
	char *e1, *e2;
	long sig = strtol(f[1], &e1, 10);
	unsigned long long attempt = strtoull(f[3], &e2, 10);
	if (*e1 || *e2 || sig <= 0 || sig > 64)
		return -1;
	memset(d, 0, sizeof(*d));
	d->signal = (int)sig;
	d->attempt = attempt;
	if (strcmp(f[2], "-") && attempt)
		snprintf(d->task, sizeof(d->task), "%s", f[2]);
	snprintf(d->phase, sizeof(d->phase), "%s", strcmp(f[4], "-") ? f[4] : "");
	return 0;
}

int tb_blackbox_read(const char *path, void (*fn)(void *ud, const tb_blackbox_death_t *d), void *ud,
		     tb_error_t *err)
{
	FILE *f = fopen(path, "re");
	char line[LINE_MAX_BYTES + 2];
	tb_blackbox_death_t d;
	int n = 0;

	if (!f)
		return errno == ENOENT ? 0
				       : tb_error_errno(err, TB_EIO, errno, "black box %s", path);
	/* bounded: a file of more than 1000 deaths is read to its 1000th */
	while (n < 1000 && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (parse(line, &d) == 0) {
			fn(ud, &d);
			n++;
		}
	}
	fclose(f);
	return n;
}

void tb_blackbox_forget(const char *path)
{
	if (truncate(path, 0) < 0 && errno != ENOENT) {
		/* kept again next time: a death said twice is one attempt's */
	}
}
