/*
 * clock.c: the two clocks of clock.h.
 */
#include "tb/clock.h"

#include <time.h>

static uint64_t read_us(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t tb_mono_ms(void)
{
	return read_us(CLOCK_MONOTONIC) / 1000;
}

uint64_t tb_mono_us(void)
{
	return read_us(CLOCK_MONOTONIC);
}

uint64_t tb_wall_ms(void)
{
	return read_us(CLOCK_REALTIME) / 1000;
}
