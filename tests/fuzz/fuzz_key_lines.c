/*
 * fuzz_key_lines.c: tb_jsonconf_key_line() (`taskbox config show`'s file
 * lines) on any text jansson accepts as a configuration file: every key
 * of every object, four deep, is found on a line of the text, and a key
 * that is not there is not found. Aborts when either fails.
 */
#include "tb/jsonconf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every key under @p obj, at @p depth of @p path, checked against the
 * text's @p lines lines. */
static void check(const char *text, size_t size, int lines, const json_t *obj, const char **path,
		  size_t depth)
{
	const char *key;
	json_t *value;

	path[depth] = "\x01 no such key";
	if (tb_jsonconf_key_line(text, size, path, depth + 1) != 0)
		abort();
	json_object_foreach((json_t *)obj, key, value)
	{
		path[depth] = key;
		int line = tb_jsonconf_key_line(text, size, path, depth + 1);
		if (line < 1 || line > lines)
			abort();
		if (json_is_object(value) && depth + 1 < DEPTH)
			check(text, size, lines, value, path, depth + 1);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data, *path[DEPTH];
	json_error_t jerr;
	json_t *doc = json_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
	int lines = 1;

	if (!json_is_object(doc)) {
		json_decref(doc);
		return 0;
	}
	for (size_t i = 0; i < size; i++)
		lines += text[i] == '\n';
	check(text, size, lines, doc, path, 0);
	json_decref(doc);
	return 0;
}
