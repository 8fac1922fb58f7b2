/*
 * jsonconf_lines.c: where a key of a configuration file is, by line.
 * jansson keeps no position for the values it parsed (only for its
 * errors), so `taskbox config show` finds each key's line with a light
 * pass over the text itself: text jansson has accepted, so valid JSON,
 * which only needs strings, nesting and scalars told apart. Keys are
 * compared decoded ("\u0073lots" is slots) and only where the path says
 * (an object's key, never a string value or an element of an array).
 */
#include "tb/jsonconf.h"

#include <string.h>

typedef struct scan {
	const char *p, *end;
} scan_t;

static void skip_space(scan_t *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* Past the string that starts at s->p (its opening quote). */
static void skip_string(scan_t *s)
{
	for (s->p++; s->p < s->end && *s->p != '"'; s->p++)
		if (*s->p == '\\')
			s->p++;
	if (s->p < s->end)
		s->p++;
}

/* Past the value at s->p: a string, an object or array (strings inside
 * them skipped whole, so their brackets do not count), or a scalar (to
 * the comma, space or bracket that ends it). */
static void skip_value(scan_t *s)
{
	int depth = 0;

	while (s->p < s->end) {
		char c = *s->p;
		if (c == '"') {
			skip_string(s);
			if (!depth)
				return;
			continue;
		}
		if (c == '{' || c == '[') {
			depth++;
		} else if (c == '}' || c == ']') {
			if (!depth)
				return; /* the enclosing one's end, after a scalar */
			if (--depth == 0) {
				s->p++;
				return;
			}
		} else if (!depth &&
			   (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
			return;
		}
		s->p++;
	}
}

/* Whether the string at [@p from, @p to) (quotes included) decodes to
 * @p key. */
static int key_is(const char *from, const char *to, const char *key)
{
	size_t n = (size_t)(to - from) - 2, klen = strlen(key);

	if (!memchr(from + 1, '\\', n))
		return n == klen && !memcmp(from + 1, key, n);
	json_error_t jerr;
	json_t *s = json_loadb(from, (size_t)(to - from), JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
	int same = json_is_string(s) && json_string_length(s) == klen &&
		   !memcmp(json_string_value(s), key, klen);
	json_decref(s);
	return same;
}

/* In the object at s->p, the key @p key: s->p left at its opening quote
 * with its value at *@p value. @return 1 found, 0 not. */
static int find_key(scan_t *s, const char *key, const char **value)
{
	if (s->p >= s->end || *s->p != '{')
		return 0;
	for (s->p++;;) {
		skip_space(s);
		if (s->p >= s->end || *s->p != '"')
			return 0; /* '}': the object ends without it */
		const char *at = s->p;
		skip_string(s);
		int same = key_is(at, s->p, key);
		skip_space(s);
		s->p++; /* ':' */
		skip_space(s);
		if (same) {
			*value = s->p;
			s->p = at;
			return 1;
		}
		skip_value(s);
		skip_space(s);
		if (s->p >= s->end || *s->p != ',')
			return 0;
		s->p++;
	}
}

int tb_jsonconf_key_line(const char *text, size_t len, const char *const *path, size_t depth)
{
	scan_t s = { text, text + len };
	const char *value = NULL;
	int line = 1;

	skip_space(&s);
	for (size_t i = 0; i < depth; i++) {
		if (!find_key(&s, path[i], &value))
			return 0;
		if (i + 1 < depth)
			s.p = value;
	}
	for (const char *c = text; c < s.p; c++)
		line += *c == '\n';
	return depth ? line : 0;
}
