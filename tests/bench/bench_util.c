/*
 * bench_util.c: see bench_util.h.
 */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int stop_at_first(void *ud, const char *key, const tb_object_info_t *info)
{
	(void)ud, (void)key, (void)info;
	return 1;
}

int tb_bench_bucket(tb_store_t *s, tb_error_t *err)
{
	tb_error_t ignored;

	if (tb_store_create_bucket(s, err) == 0)
		return 0;
	return tb_store_list(s, "", stop_at_first, NULL, &ignored) == 0 ? 0 : -1;
}

int tb_bench_json;
static int first_row = 1;

double tb_bench_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

uint64_t tb_bench_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void tb_bench_stats(double *t, int n, double *median, double *p99)
{
	if (n <= 0) {
		*median = *p99 = 0;
		return;
	}
	qsort(t, (size_t)n, sizeof(double), cmp_double);
	*median = t[n / 2];
	*p99 = t[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
}

void tb_bench_row(const char *suite, const char *name, const char *unit, double median, double p99,
		  const char *baseline, double base)
{
	double ratio = base > 0 ? median / base : 0;

	if (tb_bench_json) {
		printf("%s\n {\"suite\": \"%s\", \"name\": \"%s\", \"unit\": \"%s\", \"median\": "
		       "%.3f, \"p99\": %.3f",
		       first_row ? "[" : ",", suite, name, unit, median, p99);
		if (baseline)
			printf(", \"baseline\": \"%s\", \"ratio\": %.2f", baseline, ratio);
		printf("}");
	} else {
		int prec = strcmp(unit, "ms") == 0 ? 3 : 2;
		printf("  %-8s %-44s %10.*f %10.*f %-7s", suite, name, prec, median, prec, p99,
		       unit);
		if (baseline)
			printf("  %.2fx %s", ratio, baseline);
		printf("\n");
	}
	first_row = 0;
	fflush(stdout);
}

void tb_bench_end(void)
{
	if (tb_bench_json)
		printf("%s\n", first_row ? "[]" : "\n]");
}

long tb_bench_status_kib(const char *key)
{
	char line[256];
	long kib = -1;
	size_t n = strlen(key);
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n))
			kib = strtol(line + n, NULL, 10);
	if (f)
		fclose(f);
	return kib;
}

int tb_bench_reset_peak(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	int rc = fd >= 0 && write(fd, "5", 1) == 1 ? 0 : -1; /* resets VmHWM to VmRSS */
	if (rc < 0)
		fprintf(stderr, "bench: cannot reset the peak RSS: %s\n", strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}
