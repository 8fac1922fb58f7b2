/*
 * helpers.h: small file and hex helpers shared by the unit tests. Test
 * code only; nothing here is linked into taskbox.
 */
#ifndef TB_TEST_HELPERS_H
#define TB_TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole file; aborts the test on failure. Caller frees. */
char *th_read_file(const char *path, size_t *len);

/* Reads a .hex file into bytes; aborts the test on failure. Caller frees. */
uint8_t *th_read_hex(const char *path, size_t *len);

/* Lists files in schemas/examples ending in @p suffix, NULL-terminated,
 * full paths. Caller frees with th_free_list. */
char **th_examples(const char *suffix);
void th_free_list(char **list);

#endif
