/*
 * fault.c: the armed fault point (fault.h). Set once at start, before any
 * thread; counted atomically after.
 */
#include "tb/fault.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char armed[64];
static const char *armed_name; /* NULL: nothing armed */
static int armed_crash;        /* ":crash": dies of SIGSEGV, as a bug would */
static unsigned long armed_at = 1;
static atomic_ulong arrivals;

const char *tb_fault_init(void)
{
	const char *v = getenv("TASKBOX_FAULT");
	const char *at;

	if (!v || !v[0])
		return NULL;
	size_t len = strlen(v);
	static const char crash[] = ":crash";
	if (len > sizeof(crash) - 1 && !strcmp(v + len - (sizeof(crash) - 1), crash)) {
		armed_crash = 1;
		len -= sizeof(crash) - 1;
	}
	at = memchr(v, '@', len);
	snprintf(armed, sizeof(armed), "%.*s", at ? (int)(at - v) : (int)len, v);
	if (at) {
		char *end;
		armed_at = strtoul(at + 1, &end, 10);
		if (end != v + len || !armed_at)
			armed_at = 1;
	}
	armed_name = armed;
	return armed_name;
}

int tb_fault_hit(const char *name)
{
	if (!armed_name || strcmp(name, armed_name))
		return 0;
	return atomic_fetch_add(&arrivals, 1) + 1 == armed_at;
}

void tb_fault_point(const char *name)
{
	if (!tb_fault_hit(name))
		return;
	/* write(2), not stdio: another thread may hold stderr's lock */
	char line[128];
	int n = snprintf(line, sizeof(line), "taskbox: fault point %s reached: %s\n", name,
			 armed_crash ? "crashing" : "dying");
	if (write(STDERR_FILENO, line, (size_t)(n > 0 ? n : 0)) < 0) {
		/* nothing to do: we are about to die anyway */
	}
	/* a crash goes through the worker's fatal-signal handler (its black
	 * box); a SIGKILL, as from outside, leaves no word */
	if (armed_crash)
		raise(SIGSEGV);
	kill(getpid(), SIGKILL);
	pause();
}
