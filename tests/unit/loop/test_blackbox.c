/*
 * test_blackbox.c: what a worker says of its own death
 * (worker/loop/blackbox.h): a crash in a task's thread is said against
 * that task's attempt and phase, one in a thread of no task against
 * none, the process still dies of its signal, and the lines read back as
 * written (a torn or foreign line skipped).
 */
#include "blackbox.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char path[64];

static int setup(void **state)
{
	(void)state;
	snprintf(path, sizeof(path), "/tmp/tb-blackbox-XXXXXX");
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

typedef struct seen {
	tb_blackbox_death_t d[8];
	int n;
} seen_t;

static void collect(void *ud, const tb_blackbox_death_t *d)
{
	seen_t *s = ud;
	if (s->n < 8)
		s->d[s->n++] = *d;
}

static void *crash_in_task(void *arg)
{
	int sig = *(int *)arg;
	tb_blackbox_enter("task-7", 12);
	tb_blackbox_phase("collected");
	raise(sig);
	return NULL;
}

/* A child with the box open crashes with @p sig, in a task's thread
 * (@p in_task) or in its main thread; it must die of that signal. */
static void crash_child(int sig, int in_task)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tb_error_t err;
		if (tb_blackbox_open(path, &err) != 0)
			_exit(3);
		if (in_task) {
			pthread_t th;
			pthread_create(&th, NULL, crash_in_task, &sig);
			pthread_join(th, NULL);
		} else {
			tb_blackbox_enter("task-8", 1); /* and left again: no task */
			tb_blackbox_enter(NULL, 0);
			raise(sig);
		}
		_exit(4); /* not reached: the signal ends it */
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), sig);
}

static void test_blackbox__a_crash_is_said_against_its_threads_task(void **state)
{
	seen_t s = { .n = 0 };
	tb_error_t err;

	(void)state;
	crash_child(SIGSEGV, 1);
	crash_child(SIGABRT, 0);
	crash_child(SIGBUS, 1);
	assert_int_equal(tb_blackbox_read(path, collect, &s, &err), 3);
	assert_int_equal(s.d[0].signal, SIGSEGV);
	assert_string_equal(s.d[0].task, "task-7");
	assert_int_equal(s.d[0].attempt, 12);
	assert_string_equal(s.d[0].phase, "collected");
	assert_int_equal(s.d[1].signal, SIGABRT);
	assert_string_equal(s.d[1].task, ""); /* no task's thread */
	assert_int_equal(s.d[2].signal, SIGBUS);
	/* kept elsewhere: forgotten, and read as none */
	tb_blackbox_forget(path);
	s.n = 0;
	assert_int_equal(tb_blackbox_read(path, collect, &s, &err), 0);
	unlink(path);
	assert_int_equal(tb_blackbox_read(path, collect, &s, &err), 0); /* missing: none */
}

static void test_blackbox__lines_that_are_not_deaths_are_skipped(void **state)
{
	seen_t s = { .n = 0 };
	tb_error_t err;
	FILE *f = fopen(path, "w");

	(void)state;
	assert_non_null(f);
	fputs("crashed\t11\tt1\t3\trecorded\n", f);
	fputs("crashed\t11\tt2\n", f);              /* torn */
	fputs("hello\t11\tt3\t1\tx\n", f);          /* not ours */
	fputs("crashed\tx\tt4\t1\tcollected\n", f); /* no signal */
	fputs("crashed\t6\t-\t0\t-\n", f);          /* no task */
	fputs("crashed\t7\tt5\t2\t-\n", f);         /* no phase said */
	fputs("crashed\t11\tt6\t4\tsettled", f);    /* its newline lost */
	fclose(f);
	assert_int_equal(tb_blackbox_read(path, collect, &s, &err), 4);
	assert_string_equal(s.d[0].task, "t1");
	assert_string_equal(s.d[1].task, "");
	assert_string_equal(s.d[2].task, "t5");
	assert_string_equal(s.d[2].phase, "");
	assert_string_equal(s.d[3].task, "t6");
	assert_string_equal(s.d[3].phase, "settled");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_blackbox__a_crash_is_said_against_its_threads_task, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_blackbox__lines_that_are_not_deaths_are_skipped, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
