/*
 * codec.c: the generic decoder and encoder over tb_schema_t tables.
 *
 * Decoding: bounds check → structural scan → msgpack_unpack → header →
 * one pass over the map's keys, dispatching each to its field. Every
 * allocation made while decoding is owned by the output struct, so a
 * failure anywhere is undone by tb_msg_free(). Encoding validates with the
 * same table before writing, so a worker can never publish a message its
 * own decoder would refuse.
 */
#include "tb/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb/mpack_scan.h"

#define PATH_MAX_LEN 256

static void *field_ptr(const tb_field_t *f, void *obj)
{
	return (char *)obj + f->offset;
}

static const void *field_cptr(const tb_field_t *f, const void *obj)
{
	return (const char *)obj + f->offset;
}

static uint32_t *has_mask(const tb_schema_t *s, void *obj)
{
	return (uint32_t *)((char *)obj + s->has_offset);
}

static uint32_t has_cmask(const tb_schema_t *s, const void *obj)
{
	return *(const uint32_t *)((const char *)obj + s->has_offset);
}

static bool is_optional_scalar(const tb_field_t *f)
{
	return !(f->flags & TB_FF_REQUIRED) && (f->type == TB_FT_U64 || f->type == TB_FT_F64 ||
						f->type == TB_FT_BOOL || f->type == TB_FT_ENUM);
}

/* ------------------------------------------------------------------ free */

static void free_fields(const tb_schema_t *s, void *obj);

static void free_field(const tb_field_t *f, void *obj)
{
	void *p = field_ptr(f, obj);

	switch (f->type) {
	case TB_FT_STR:
		free(*(char **)p);
		break;
	case TB_FT_STRMAP: {
		tb_strmap_t *m = p;
		for (size_t i = 0; i < m->n; i++) {
			free(m->items[i].key);
			free(m->items[i].value);
		}
		free(m->items);
		break;
	}
	case TB_FT_STRLIST: {
		tb_strlist_t *l = p;
		for (size_t i = 0; i < l->n; i++)
			free(l->items[i]);
		free(l->items);
		break;
	}
	case TB_FT_OBJ:
		free_fields(f->sub, p);
		break;
	case TB_FT_LIST: {
		tb_list_t *l = p;
		for (size_t i = 0; i < l->n; i++)
			free_fields(f->sub, (char *)l->items + i * f->sub->size);
		free(l->items);
		break;
	}
	case TB_FT_MAP:
	case TB_FT_BIN:
		free(((tb_bytes_t *)p)->data);
		break;
	default:
		break;
	}
}

static void free_fields(const tb_schema_t *s, void *obj)
{
	for (size_t i = 0; i < s->nfields; i++)
		free_field(&s->fields[i], obj);
	memset(obj, 0, s->size);
}

void tb_msg_free(const tb_schema_t *schema, void *obj)
{
	if (obj)
		free_fields(schema, obj);
}

/* ---------------------------------------------------------------- checks */

void tb_utf8_trim(char *s)
{
	size_t n = strlen(s);

	for (size_t cut = 0; cut < 4 && cut <= n; cut++)
		if (tb_utf8_valid((const uint8_t *)s, n - cut)) {
			s[n - cut] = '\0';
			return;
		}
}

void tb_utf8_sanitize(char *s)
{
	uint8_t *u = (uint8_t *)s;

	for (size_t i = 0; u[i];) {
		size_t len = u[i] < 0x80             ? 1
			     : (u[i] & 0xe0) == 0xc0 ? 2
			     : (u[i] & 0xf0) == 0xe0 ? 3
			     : (u[i] & 0xf8) == 0xf0 ? 4
						     : 0;
		size_t have = 0;
		while (have < len && u[i + have])
			have++;
		if (len && have == len && tb_utf8_valid(u + i, len)) {
			i += len;
		} else {
			u[i++] = '?'; /* then what follows is looked at afresh */
		}
	}
}

bool tb_utf8_valid(const uint8_t *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t c = s[i];
		size_t need;
		uint32_t cp;
		if (c == 0)
			return false; /* we keep C strings: NUL is refused */
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			need = 1, cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			need = 2, cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			need = 3, cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i - 1 < need)
			return false;
		for (size_t k = 1; k <= need; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		/* overlong forms, surrogates, beyond U+10FFFF */
		if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
		    (need == 3 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += need + 1;
	}
	return true;
}

static bool all_hex(const char *s, size_t want)
{
	size_t n = strlen(s);

	if (n != want)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int tb_check_commit(const void *value, char *why, size_t whylen)
{
	if (all_hex(value, 40))
		return 0;
	snprintf(why, whylen, "expected a full commit id (40 lowercase hex digits)");
	return -1;
}

int tb_check_sha256(const void *value, char *why, size_t whylen)
{
	if (all_hex(value, 64))
		return 0;
	snprintf(why, whylen, "expected a SHA-256 (64 lowercase hex digits)");
	return -1;
}

int tb_check_id(const void *value, char *why, size_t whylen)
{
	const char *s = value;

	if (s[0] == '.' || s[0] == '-') {
		snprintf(why, whylen, "must not start with '%c'", s[0]);
		return -1;
	}
	for (; *s; s++) {
		char c = *s;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.')) {
			snprintf(why, whylen, "may hold only letters, digits, '-', '_' and '.'");
			return -1;
		}
	}
	return 0;
}

int tb_check_label(const void *value, char *why, size_t whylen)
{
	const char *s = value;

	for (; *s; s++) {
		char c = *s;
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		      c == '.' || c == '/')) {
			snprintf(why, whylen,
				 "label keys may hold only a-z, 0-9, '-', '_', '.' and '/'");
			return -1;
		}
	}
	return 0;
}

int tb_check_relpath(const void *value, char *why, size_t whylen)
{
	const char *s = value;
	const char *seg = s;

	if (s[0] == '/') {
		snprintf(why, whylen, "must be a relative path");
		return -1;
	}
	for (const char *p = s;; p++) {
		if (*p == '/' || *p == '\0') {
			size_t n = (size_t)(p - seg);
			if (n == 0 || (n == 1 && seg[0] == '.') ||
			    (n == 2 && seg[0] == '.' && seg[1] == '.')) {
				snprintf(why, whylen,
					 "empty, '.' and '..' path segments are not allowed");
				return -1;
			}
			if (*p == '\0')
				break;
			seg = p + 1;
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- decode */

static int decode_fields(const tb_schema_t *s, void *obj, const msgpack_object *map,
			 const char *path, tb_error_t *err);

static const char *otype_name(msgpack_object_type t)
{
	switch (t) {
	case MSGPACK_OBJECT_NIL:
		return "nil";
	case MSGPACK_OBJECT_BOOLEAN:
		return "boolean";
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		return "integer";
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		return "negative integer";
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		return "float";
	case MSGPACK_OBJECT_STR:
		return "string";
	case MSGPACK_OBJECT_ARRAY:
		return "array";
	case MSGPACK_OBJECT_MAP:
		return "map";
	case MSGPACK_OBJECT_BIN:
		return "binary";
	case MSGPACK_OBJECT_EXT:
		return "extension";
	default:
		return "unknown";
	}
}

#define FAIL(code, ...)                                                                            \
	do {                                                                                       \
		char m_[512];                                                                      \
		snprintf(m_, sizeof(m_), __VA_ARGS__);                                             \
		return tb_error_set(err, (code), "field '%s': %s", path, m_);                      \
	} while (0)

#define WANT(otype, what)                                                                          \
	do {                                                                                       \
		if (o->type != (otype))                                                            \
			FAIL(TB_EINVAL, "expected %s, got %s", (what), otype_name(o->type));       \
	} while (0)

/* Copies a msgpack string into a new C string after the common checks. */
/* Whether entry @p i's key is also an earlier entry's. */
static int key_seen_before(const tb_strmap_t *m, size_t i)
{
	for (size_t k = 0; k < i; k++)
		if (strcmp(m->items[k].key, m->items[i].key) == 0)
			return 1;
	return 0;
}

static int dup_str(char **out, const msgpack_object *o, uint64_t min, uint64_t max,
		   tb_check_fn check, const char *path, tb_error_t *err)
{
	char why[256];
	uint32_t n;

	WANT(MSGPACK_OBJECT_STR, "a string");
	n = o->via.str.size;
	if (n > max)
		FAIL(TB_ETOOBIG, "%u bytes, at most %llu allowed", n, (unsigned long long)max);
	if (n < min)
		FAIL(TB_EINVAL, "%u bytes, at least %llu required", n, (unsigned long long)min);
	if (!tb_utf8_valid((const uint8_t *)o->via.str.ptr, n))
		FAIL(TB_EINVAL, "not valid UTF-8 (or contains NUL)");
	*out = malloc((size_t)n + 1);
	if (!*out)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	if (n)
		memcpy(*out, o->via.str.ptr, n);
	(*out)[n] = '\0';
	if (check && check(*out, why, sizeof(why)) != 0)
		FAIL(TB_EINVAL, "%s", why);
	return 0;
}

/* Re-packs any msgpack object into canonical bytes. */
static int repack(tb_bytes_t *out, const msgpack_object *o, uint64_t max, const char *path,
		  tb_error_t *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_object(&pk, *o) != 0) {
		msgpack_sbuffer_destroy(&sb);
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	}
	if (sb.size > max) {
		size_t n = sb.size;
		msgpack_sbuffer_destroy(&sb);
		FAIL(TB_ETOOBIG, "%zu bytes, at most %llu allowed", n, (unsigned long long)max);
	}
	out->len = sb.size;
	out->data = (uint8_t *)msgpack_sbuffer_release(&sb);
	return 0;
}

/* An enum's name into its index; a wrong one is told with every right one. */
static int decode_enum(const tb_field_t *f, int *p, const msgpack_object *o, const char *path,
		       tb_error_t *err)
{
	char names[256];
	size_t at = 0;

	WANT(MSGPACK_OBJECT_STR, "a string");
	names[0] = '\0';
	for (int i = 0; f->names[i]; i++) {
		if (strlen(f->names[i]) == o->via.str.size &&
		    memcmp(f->names[i], o->via.str.ptr, o->via.str.size) == 0) {
			*p = i;
			return 0;
		}
		if (at < sizeof(names))
			at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s",
					       i ? ", " : "", f->names[i]);
	}
	FAIL(TB_EINVAL, "'%.*s' is not one of the allowed values (%s)",
	     (int)(o->via.str.size > 64 ? 64 : o->via.str.size), o->via.str.ptr, names);
}

static int decode_field(const tb_field_t *f, void *obj, const msgpack_object *o, const char *path,
			tb_error_t *err)
{
	void *p = field_ptr(f, obj);
	char sub[PATH_MAX_LEN];
	int rc;

	switch (f->type) {
	case TB_FT_STR:
		return dup_str(p, o, f->min, f->max, f->check, path, err);
	case TB_FT_U64:
		WANT(MSGPACK_OBJECT_POSITIVE_INTEGER, "a non-negative integer");
		if (o->via.u64 < f->min || o->via.u64 > f->max)
			FAIL(TB_EINVAL, "%llu is outside %llu..%llu",
			     (unsigned long long)o->via.u64, (unsigned long long)f->min,
			     (unsigned long long)f->max);
		*(uint64_t *)p = o->via.u64;
		return 0;
	case TB_FT_F64: {
		double d;
		if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
			d = o->via.f64;
		else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			d = (double)o->via.u64;
		else
			FAIL(TB_EINVAL, "expected a number, got %s", otype_name(o->type));
		if (!(d >= (double)f->min && d <= (double)f->max))
			FAIL(TB_EINVAL, "%g is outside %llu..%llu", d, (unsigned long long)f->min,
			     (unsigned long long)f->max);
		*(double *)p = d;
		return 0;
	}
	case TB_FT_BOOL:
		WANT(MSGPACK_OBJECT_BOOLEAN, "a boolean");
		*(bool *)p = o->via.boolean;
		return 0;
	case TB_FT_ENUM:
		return decode_enum(f, p, o, path, err);
	case TB_FT_STRMAP: {
		tb_strmap_t *m = p;
		WANT(MSGPACK_OBJECT_MAP, "a map");
		if (o->via.map.size > f->max)
			FAIL(TB_ETOOBIG, "%u entries, at most %llu allowed", o->via.map.size,
			     (unsigned long long)f->max);
		if (o->via.map.size == 0)
			return 0;
		m->items = calloc(o->via.map.size, sizeof(*m->items));
		if (!m->items)
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[i];
			snprintf(sub, sizeof(sub), "%s key %u", path, i);
			m->n = i + 1;
			if ((rc = dup_str(&m->items[i].key, &kv->key, 1, f->item_max, f->check, sub,
					  err)) < 0)
				return rc;
			if (key_seen_before(m, i))
				FAIL(TB_EINVAL, "duplicate key '%s'", m->items[i].key);
			snprintf(sub, sizeof(sub), "%s.%s", path, m->items[i].key);
			if ((rc = dup_str(&m->items[i].value, &kv->val, 0, f->item_max, NULL, sub,
					  err)) < 0)
				return rc;
		}
		return 0;
	}
	case TB_FT_STRLIST: {
		tb_strlist_t *l = p;
		WANT(MSGPACK_OBJECT_ARRAY, "an array");
		if (o->via.array.size > f->max)
			FAIL(TB_ETOOBIG, "%u entries, at most %llu allowed", o->via.array.size,
			     (unsigned long long)f->max);
		if (o->via.array.size < f->min)
			FAIL(TB_EINVAL, "%u entries, at least %llu required", o->via.array.size,
			     (unsigned long long)f->min);
		if (o->via.array.size == 0)
			return 0;
		l->items = calloc(o->via.array.size, sizeof(*l->items));
		if (!l->items)
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			snprintf(sub, sizeof(sub), "%s[%u]", path, i);
			l->n = i + 1;
			if ((rc = dup_str(&l->items[i], &o->via.array.ptr[i], 0, f->item_max,
					  f->check, sub, err)) < 0)
				return rc;
		}
		return 0;
	}
	case TB_FT_OBJ:
		WANT(MSGPACK_OBJECT_MAP, "a map");
		return decode_fields(f->sub, p, o, path, err);
	case TB_FT_LIST: {
		tb_list_t *l = p;
		WANT(MSGPACK_OBJECT_ARRAY, "an array");
		if (o->via.array.size > f->max)
			FAIL(TB_ETOOBIG, "%u entries, at most %llu allowed", o->via.array.size,
			     (unsigned long long)f->max);
		if (o->via.array.size < f->min)
			FAIL(TB_EINVAL, "%u entries, at least %llu required", o->via.array.size,
			     (unsigned long long)f->min);
		if (o->via.array.size == 0)
			return 0;
		l->items = calloc(o->via.array.size, f->sub->size);
		if (!l->items)
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			const msgpack_object *e = &o->via.array.ptr[i];
			snprintf(sub, sizeof(sub), "%s[%u]", path, i);
			l->n = i + 1;
			if (e->type != MSGPACK_OBJECT_MAP)
				return tb_error_set(err, TB_EINVAL,
						    "field '%s': expected a map, got %s", sub,
						    otype_name(e->type));
			if ((rc = decode_fields(f->sub, (char *)l->items + i * f->sub->size, e, sub,
						err)) < 0)
				return rc;
		}
		return 0;
	}
	case TB_FT_MAP:
		WANT(MSGPACK_OBJECT_MAP, "a map");
		return repack(p, o, f->max, path, err);
	case TB_FT_BIN: {
		tb_bytes_t *b = p;
		WANT(MSGPACK_OBJECT_BIN, "binary data");
		if (o->via.bin.size > f->max)
			FAIL(TB_ETOOBIG, "%u bytes, at most %llu allowed", o->via.bin.size,
			     (unsigned long long)f->max);
		b->data = malloc(o->via.bin.size ? o->via.bin.size : 1);
		if (!b->data)
			return tb_error_set(err, TB_ENOMEM, "out of memory");
		if (o->via.bin.size)
			memcpy(b->data, o->via.bin.ptr, o->via.bin.size);
		b->len = o->via.bin.size;
		return 0;
	}
	}
	return tb_error_set(err, TB_EINVAL, "field '%s': unsupported type", path);
}

static bool key_is(const msgpack_object *k, const char *name)
{
	size_t n = strlen(name);
	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	       memcmp(k->via.str.ptr, name, n) == 0;
}

static bool known_key(const tb_schema_t *s, const msgpack_object *key)
{
	for (size_t k = 0; k < s->nfields; k++)
		if (key_is(key, s->fields[k].name))
			return true;
	return false;
}

static int decode_fields(const tb_schema_t *s, void *obj, const msgpack_object *map,
			 const char *path, tb_error_t *err)
{
	uint64_t seen = 0; /* one bit per field: duplicates and required */
	char sub[PATH_MAX_LEN];
	int rc;

	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object_kv *kv = &map->via.map.ptr[i];
		if (kv->key.type != MSGPACK_OBJECT_STR)
			return tb_error_set(err, TB_EINVAL,
					    "%s: map key %u is %s, expected a string", path, i,
					    otype_name(kv->key.type));
		for (size_t k = 0; k < s->nfields; k++) {
			const tb_field_t *f = &s->fields[k];
			if (!key_is(&kv->key, f->name))
				continue;
			snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", f->name);
			if (seen & (1ull << k))
				return tb_error_set(err, TB_EINVAL, "field '%s': appears twice",
						    sub);
			seen |= 1ull << k;
			if ((rc = decode_field(f, obj, &kv->val, sub, err)) < 0)
				return rc;
			if (is_optional_scalar(f))
				*has_mask(s, obj) |= 1u << k;
			break;
		}
		/* Unknown keys are ignored in messages: a newer minor version
		 * may add optional fields. Their values were bounded by the
		 * scan. Configuration files are strict: an unknown key there
		 * is a typo that would silently fall back to a default. */
		if (s->strict && !known_key(s, &kv->key))
			return tb_error_set(
			    err, TB_EINVAL, "unknown key '%s%s%.*s'", path, *path ? "." : "",
			    (int)(kv->key.via.str.size > 64 ? 64 : kv->key.via.str.size),
			    kv->key.via.str.ptr);
	}
	for (size_t k = 0; k < s->nfields; k++) {
		if ((s->fields[k].flags & TB_FF_REQUIRED) && !(seen & (1ull << k)))
			return tb_error_set(err, TB_EINVAL, "field '%s%s%s': required but missing",
					    path, *path ? "." : "", s->fields[k].name);
	}
	/* a nested map's check names its path; the top's is named by the
	 * caller (the message kind, the file) */
	if (s->check && (rc = s->check(obj, err)) < 0)
		return *path ? tb_error_prefix(err, "%s", path) : rc;
	return 0;
}

int tb_obj_decode(const tb_schema_t *schema, void *out, const msgpack_object *map, const char *path,
		  tb_error_t *err)
{
	int rc;

	memset(out, 0, schema->size);
	if (map->type != MSGPACK_OBJECT_MAP)
		return tb_error_set(err, TB_EINVAL, "%s: expected a map, got %s", path,
				    otype_name(map->type));
	rc = decode_fields(schema, out, map, path, err);
	if (rc < 0)
		tb_msg_free(schema, out);
	return rc;
}

/* What a MessagePack value beginning with byte @p b is (the spec's
 * first-byte table). */
static const char *first_byte_kind(uint8_t b)
{
	static const struct {
		uint8_t lo, hi;
		const char *kind;
	} kinds[] = {
		{ 0x00, 0x7f, "an integer" },   { 0x80, 0x8f, "a map" },
		{ 0x90, 0x9f, "an array" },     { 0xa0, 0xbf, "a string" },
		{ 0xc0, 0xc0, "nil" },          { 0xc1, 0xc1, "a byte MessagePack never uses" },
		{ 0xc2, 0xc3, "a boolean" },    { 0xc4, 0xc6, "binary" },
		{ 0xc7, 0xc9, "an extension" }, { 0xca, 0xcb, "a float" },
		{ 0xcc, 0xd3, "an integer" },   { 0xd4, 0xd8, "an extension" },
		{ 0xd9, 0xdb, "a string" },     { 0xdc, 0xdd, "an array" },
		{ 0xde, 0xdf, "a map" },        { 0xe0, 0xff, "an integer" },
	};
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (b >= kinds[i].lo && b <= kinds[i].hi)
			return kinds[i].kind;
	return "a byte MessagePack never uses";
}

/* Unpacks @p data after the bounds and structure checks. A message is
 * one map: anything else is said as such first (random bytes are not
 * "a value with trailing bytes" to a person reading the DLQ). */
static int unpack_checked(msgpack_unpacked *up, const void *data, size_t len, size_t max,
			  const char *what, tb_error_t *err)
{
	const uint8_t *b = data;
	size_t off = 0;
	int rc;

	if (len > max)
		return tb_error_set(err, TB_ETOOBIG, "%s: %zu bytes, at most %zu allowed", what,
				    len, max);
	if (len == 0)
		return tb_error_set(err, TB_EINVAL,
				    "%s: empty, where a MessagePack map was expected", what);
	if (!((b[0] >= 0x80 && b[0] <= 0x8f) || b[0] == 0xde || b[0] == 0xdf))
		return tb_error_set(err, TB_EINVAL,
				    "%s: not a MessagePack map: its %zu bytes begin with %s "
				    "(first byte 0x%02x)",
				    what, len, first_byte_kind(b[0]), b[0]);
	if ((rc = tb_mpack_scan(data, len, TB_MPACK_MAX_DEPTH, err)) < 0)
		return tb_error_prefix(err, "%s: not valid MessagePack", what);
	msgpack_unpacked_init(up);
	if (msgpack_unpack_next(up, data, len, &off) != MSGPACK_UNPACK_SUCCESS) {
		msgpack_unpacked_destroy(up);
		return tb_error_set(err, TB_EINVAL, "%s: not valid MessagePack", what);
	}
	if (up->data.type != MSGPACK_OBJECT_MAP) {
		rc = tb_error_set(err, TB_EINVAL, "%s: expected a map, got %s", what,
				  otype_name(up->data.type));
		msgpack_unpacked_destroy(up);
		return rc;
	}
	return 0;
}

/* @p key's value in @p map, or NULL; *dup set if the key is there twice. */
static const msgpack_object *map_get(const msgpack_object *map, const char *key, int *dup)
{
	const msgpack_object *found = NULL;

	for (uint32_t i = 0; i < map->via.map.size; i++)
		if (key_is(&map->via.map.ptr[i].key, key)) {
			*dup |= found != NULL;
			found = &map->via.map.ptr[i].val;
		}
	return found;
}

/* Checks "v" and returns the schema named by "schema" (NULL if unknown). */
static int read_header(const tb_schema_t **out, const msgpack_object *map, tb_error_t *err)
{
	int dup_name = 0, dup_v = 0;
	const msgpack_object *name = map_get(map, "schema", &dup_name);
	const msgpack_object *v = map_get(map, "v", &dup_v);

	if (dup_name || dup_v)
		return tb_error_set(err, TB_EINVAL, "field '%s': appears twice",
				    dup_name ? "schema" : "v");
	if (!name)
		return tb_error_set(err, TB_EINVAL, "field 'schema': required but missing");
	if (name->type != MSGPACK_OBJECT_STR)
		return tb_error_set(err, TB_EINVAL, "field 'schema': expected a string, got %s",
				    otype_name(name->type));
	if (!v)
		return tb_error_set(err, TB_EINVAL, "field 'v': required but missing");
	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return tb_error_set(err, TB_EINVAL,
				    "field 'v': expected a positive integer version, got %s",
				    otype_name(v->type));
	*out = NULL;
	for (size_t i = 0; tb_schemas[i]; i++)
		if (key_is(name, tb_schemas[i]->name))
			*out = tb_schemas[i];
	if (!*out)
		return tb_error_set(
		    err, TB_ENOTFOUND, "field 'schema': unknown message kind '%.*s'",
		    (int)(name->via.str.size > 64 ? 64 : name->via.str.size), name->via.str.ptr);
	if (v->via.u64 != TB_SCHEMA_VERSION)
		return tb_error_set(
		    err, TB_EVERSION,
		    "field 'v': version %llu is not supported (this build reads %d)",
		    (unsigned long long)v->via.u64, TB_SCHEMA_VERSION);
	return 0;
}

int tb_msg_peek(const tb_schema_t **out, const void *data, size_t len, tb_error_t *err)
{
	msgpack_unpacked up;
	int rc;

	if ((rc = unpack_checked(&up, data, len, 16u << 20, "message", err)) < 0)
		return rc;
	rc = read_header(out, &up.data, err);
	msgpack_unpacked_destroy(&up);
	return rc;
}

int tb_msg_decode(const tb_schema_t *schema, void *out, const void *data, size_t len,
		  tb_error_t *err)
{
	const tb_schema_t *named;
	msgpack_unpacked up;
	int rc;

	memset(out, 0, schema->size);
	if ((rc = unpack_checked(&up, data, len, schema->max_bytes, schema->name, err)) < 0)
		return rc;
	if ((rc = read_header(&named, &up.data, err)) < 0) {
		tb_error_prefix(err, "%s", schema->name);
		goto cleanup;
	}
	if (named != schema) {
		rc = tb_error_set(err, TB_EINVAL, "%s: message is a '%s', not a '%s'", schema->name,
				  named->name, schema->name);
		goto cleanup;
	}
	if ((rc = decode_fields(schema, out, &up.data, "", err)) < 0) {
		tb_error_prefix(err, "%s", schema->name);
		tb_msg_free(schema, out);
	}
cleanup:
	msgpack_unpacked_destroy(&up);
	return rc;
}

/* ---------------------------------------------------------------- encode */

static bool obj_present(const tb_schema_t *s, const void *obj);

static bool field_present(const tb_schema_t *s, size_t k, const void *obj)
{
	const tb_field_t *f = &s->fields[k];
	const void *p = field_cptr(f, obj);

	if (is_optional_scalar(f))
		return (has_cmask(s, obj) >> k) & 1u;
	switch (f->type) {
	case TB_FT_STR:
		return *(char *const *)p != NULL;
	case TB_FT_STRMAP:
		return ((const tb_strmap_t *)p)->n > 0;
	case TB_FT_STRLIST:
		return ((const tb_strlist_t *)p)->n > 0;
	case TB_FT_LIST:
		return ((const tb_list_t *)p)->n > 0;
	case TB_FT_OBJ:
		return obj_present(f->sub, p);
	case TB_FT_MAP:
	case TB_FT_BIN:
		return ((const tb_bytes_t *)p)->data != NULL;
	default:
		return true; /* required scalars */
	}
}

static bool obj_present(const tb_schema_t *s, const void *obj)
{
	for (size_t k = 0; k < s->nfields; k++)
		if (field_present(s, k, obj))
			return true;
	return false;
}

static int pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);
	return msgpack_pack_str_with_body(pk, s, n);
}

static int check_str(const char *s, uint64_t min, uint64_t max, tb_check_fn check, const char *path,
		     tb_error_t *err)
{
	char why[256];
	size_t n = strlen(s);

	if (n > max)
		FAIL(TB_ETOOBIG, "%zu bytes, at most %llu allowed", n, (unsigned long long)max);
	if (n < min)
		FAIL(TB_EINVAL, "%zu bytes, at least %llu required", n, (unsigned long long)min);
	if (!tb_utf8_valid((const uint8_t *)s, n))
		FAIL(TB_EINVAL, "not valid UTF-8");
	if (check && check(s, why, sizeof(why)) != 0)
		FAIL(TB_EINVAL, "%s", why);
	return 0;
}

static int encode_fields(msgpack_packer *pk, const tb_schema_t *s, const void *obj,
			 const char *path, size_t extra, tb_error_t *err);

static int encode_field(msgpack_packer *pk, const tb_field_t *f, const void *obj, const char *path,
			tb_error_t *err)
{
	const void *p = field_cptr(f, obj);
	char sub[PATH_MAX_LEN];
	int rc;

	switch (f->type) {
	case TB_FT_STR:
		if ((rc = check_str(*(char *const *)p, f->min, f->max, f->check, path, err)) < 0)
			return rc;
		return pack_str(pk, *(char *const *)p);
	case TB_FT_U64: {
		uint64_t v = *(const uint64_t *)p;
		if (v < f->min || v > f->max)
			FAIL(TB_EINVAL, "%llu is outside %llu..%llu", (unsigned long long)v,
			     (unsigned long long)f->min, (unsigned long long)f->max);
		return msgpack_pack_uint64(pk, v);
	}
	case TB_FT_F64: {
		double d = *(const double *)p;
		if (!(d >= (double)f->min && d <= (double)f->max))
			FAIL(TB_EINVAL, "%g is outside %llu..%llu", d, (unsigned long long)f->min,
			     (unsigned long long)f->max);
		return msgpack_pack_double(pk, d);
	}
	case TB_FT_BOOL:
		return *(const bool *)p ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
	case TB_FT_ENUM: {
		int v = *(const int *)p;
		int n = 0;
		while (f->names[n])
			n++;
		if (v < 0 || v >= n)
			FAIL(TB_EINVAL, "enum value %d out of range", v);
		return pack_str(pk, f->names[v]);
	}
	case TB_FT_STRMAP: {
		const tb_strmap_t *m = p;
		if (m->n > f->max)
			FAIL(TB_ETOOBIG, "%zu entries, at most %llu allowed", m->n,
			     (unsigned long long)f->max);
		msgpack_pack_map(pk, m->n);
		for (size_t i = 0; i < m->n; i++) {
			snprintf(sub, sizeof(sub), "%s.%s", path, m->items[i].key);
			if ((rc = check_str(m->items[i].key, 1, f->item_max, f->check, sub, err)) <
				0 ||
			    (rc = check_str(m->items[i].value, 0, f->item_max, NULL, sub, err)) < 0)
				return rc;
			if (key_seen_before(m, i)) /* the decoder would refuse it */
				FAIL(TB_EINVAL, "duplicate key '%s'", m->items[i].key);
			pack_str(pk, m->items[i].key);
			pack_str(pk, m->items[i].value);
		}
		return 0;
	}
	case TB_FT_STRLIST: {
		const tb_strlist_t *l = p;
		if (l->n > f->max || l->n < f->min)
			FAIL(TB_EINVAL, "%zu entries, %llu..%llu allowed", l->n,
			     (unsigned long long)f->min, (unsigned long long)f->max);
		msgpack_pack_array(pk, l->n);
		for (size_t i = 0; i < l->n; i++) {
			snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
			if ((rc = check_str(l->items[i], 0, f->item_max, f->check, sub, err)) < 0)
				return rc;
			pack_str(pk, l->items[i]);
		}
		return 0;
	}
	case TB_FT_OBJ:
		return encode_fields(pk, f->sub, p, path, 0, err);
	case TB_FT_LIST: {
		const tb_list_t *l = p;
		if (l->n > f->max || l->n < f->min)
			FAIL(TB_EINVAL, "%zu entries, %llu..%llu allowed", l->n,
			     (unsigned long long)f->min, (unsigned long long)f->max);
		msgpack_pack_array(pk, l->n);
		for (size_t i = 0; i < l->n; i++) {
			snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
			if ((rc = encode_fields(pk, f->sub,
						(const char *)l->items + i * f->sub->size, sub, 0,
						err)) < 0)
				return rc;
		}
		return 0;
	}
	case TB_FT_MAP:
	case TB_FT_BIN: {
		const tb_bytes_t *b = p;
		if (b->len > f->max)
			FAIL(TB_ETOOBIG, "%zu bytes, at most %llu allowed", b->len,
			     (unsigned long long)f->max);
		if (f->type == TB_FT_BIN) {
			msgpack_pack_bin(pk, b->len);
			return msgpack_pack_bin_body(pk, b->data, b->len);
		}
		/* Already canonical MessagePack; must be exactly one map. */
		if (b->len == 0 ||
		    !((b->data[0] & 0xf0) == 0x80 || b->data[0] == 0xde || b->data[0] == 0xdf))
			FAIL(TB_EINVAL, "expected a MessagePack map");
		if (tb_mpack_scan(b->data, b->len, TB_MPACK_MAX_DEPTH, err) < 0)
			return tb_error_prefix(err, "field '%s'", path);
		return pk->callback(pk->data, (const char *)b->data, b->len);
	}
	}
	return tb_error_set(err, TB_EINVAL, "field '%s': unsupported type", path);
}

static int encode_fields(msgpack_packer *pk, const tb_schema_t *s, const void *obj,
			 const char *path, size_t extra, tb_error_t *err)
{
	char sub[PATH_MAX_LEN];
	size_t n = extra;
	int rc;

	if (s->check && (rc = s->check(obj, err)) < 0)
		return *path ? tb_error_prefix(err, "%s", path) : rc;
	for (size_t k = 0; k < s->nfields; k++) {
		bool present = field_present(s, k, obj);
		if (!present && (s->fields[k].flags & TB_FF_REQUIRED))
			return tb_error_set(err, TB_EINVAL, "field '%s%s%s': required but missing",
					    path, *path ? "." : "", s->fields[k].name);
		n += present;
	}
	msgpack_pack_map(pk, n);
	if (extra) { /* message header */
		pack_str(pk, "schema");
		pack_str(pk, s->name);
		pack_str(pk, "v");
		msgpack_pack_uint64(pk, TB_SCHEMA_VERSION);
	}
	for (size_t k = 0; k < s->nfields; k++) {
		const tb_field_t *f = &s->fields[k];
		if (!field_present(s, k, obj))
			continue;
		snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", f->name);
		pack_str(pk, f->name);
		if ((rc = encode_field(pk, f, obj, sub, err)) < 0)
			return rc;
	}
	return 0;
}

/* msgpack-c reports a failed realloc as -1 from every pack call; rather
 * than check each one, out-of-memory aborts, as docs/architecture.md's conventions allow. */
static int sbuffer_write(void *data, const char *buf, size_t len)
{
	if (msgpack_sbuffer_write(data, buf, len) != 0)
		abort();
	return 0;
}

int tb_obj_encode(msgpack_sbuffer *out, const tb_schema_t *schema, const void *obj,
		  const char *path, tb_error_t *err)
{
	msgpack_packer pk;
	size_t start = out->size;
	int rc;

	msgpack_packer_init(&pk, out, sbuffer_write);
	if ((rc = encode_fields(&pk, schema, obj, path, 0, err)) < 0)
		out->size = start;
	return rc;
}

int tb_msg_encode(msgpack_sbuffer *out, const tb_schema_t *schema, const void *obj, tb_error_t *err)
{
	msgpack_packer pk;
	size_t start = out->size;
	int rc;

	msgpack_packer_init(&pk, out, sbuffer_write);
	if ((rc = encode_fields(&pk, schema, obj, "", 2, err)) < 0) {
		out->size = start;
		return tb_error_prefix(err, "%s", schema->name);
	}
	if (out->size - start > schema->max_bytes) {
		size_t n = out->size - start;
		out->size = start;
		return tb_error_set(err, TB_ETOOBIG,
				    "%s: encoded to %zu bytes, at most %zu allowed", schema->name,
				    n, schema->max_bytes);
	}
	return 0;
}
