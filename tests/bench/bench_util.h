/*
 * bench_util.h: what the benchmark programs share: the clock, median and
 * p99, and the output row (a table line, or an element of a JSON array).
 */
#ifndef TB_BENCH_UTIL_H
#define TB_BENCH_UTIL_H

#include "tb/store.h"

#include <stdint.h>

/** Whether rows print as JSON (set once, from --json). */
extern int tb_bench_json;

double tb_bench_mono_ms(void);
uint64_t tb_bench_wall_ms(void);

/** Sorts @p t and gives its median and 99th percentile (0 when empty). */
void tb_bench_stats(double *t, int n, double *median, double *p99);

/**
 * One figure: suite, name, unit, median and p99, and, with @p baseline,
 * the ratio median / @p base. ms print to the microsecond, other units
 * with two decimals.
 */
void tb_bench_row(const char *suite, const char *name, const char *unit, double median, double p99,
		  const char *baseline, double base);

/**
 * Makes the store's bucket, or makes sure it is there to use: the local
 * SeaweedFS answers "BucketAlreadyExists" (someone else's) for a bucket
 * of ours kept across a restart, so a refused creation is accepted when
 * the bucket can be listed. @return 0; -1 with @p err the creation's.
 */
int tb_bench_bucket(tb_store_t *s, tb_error_t *err);

/** A "Key:" line's value in /proc/self/status (VmRSS:, VmHWM:), in KiB;
 * -1 when missing. */
long tb_bench_status_kib(const char *key);

/** Resets this process's peak resident memory (VmHWM) to what it holds
 * now. @return 0, or -1 (said) */
int tb_bench_reset_peak(void);

/** Closes the JSON array (prints "[]" if no row came); no-op for tables. */
void tb_bench_end(void);

#endif
