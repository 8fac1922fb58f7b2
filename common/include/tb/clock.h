/*
 * clock.h: the one clock. Monotonic time for every timeout, deadline,
 * back-off and duration (it never jumps when the machine's time is set);
 * wall time only for timestamps that people and other programs read (an
 * event's ts, a manifest's started_at, a ledger record's time, "how long
 * ago" against such a timestamp). Nothing else in the tree calls
 * clock_gettime() for these.
 */
#ifndef TB_CLOCK_H
#define TB_CLOCK_H

#include <stdint.h>

/** Milliseconds of CLOCK_MONOTONIC: for timeouts and durations. */
uint64_t tb_mono_ms(void);

/** Microseconds of CLOCK_MONOTONIC: for short durations. */
uint64_t tb_mono_us(void);

/** Milliseconds since the Unix epoch (CLOCK_REALTIME): for timestamps. */
uint64_t tb_wall_ms(void);

#endif
