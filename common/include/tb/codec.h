/*
 * codec.h: the table-driven MessagePack codec behind every taskbox message.
 *
 * Each message type (task, follow-up, event, verdict, manifest, DLQ record)
 * is a plain C struct described by a tb_schema_t: one tb_field_t per field
 * with its wire name, type, whether it is required, and its bounds. One
 * decoder and one encoder walk those tables, so every message gets the same
 * strictness: the input is structurally scanned before unpacking
 * (mpack_scan.h), every field is type-checked, every string, list and blob
 * is capped, strings must be UTF-8 without NUL, duplicate keys and unknown
 * major versions are refused, and the error names the field and the reason
 * ("task: field 'recipe.commit': expected 40 lowercase hex digits").
 *
 * Canonical form (what the encoder writes and the examples in schemas/ use):
 * a map whose first keys are "schema" and "v", then the fields in table
 * order; absent optional fields and empty optional collections omitted;
 * integers in their shortest form. Decoding canonical bytes and encoding
 * the result gives the same bytes. Unknown keys are ignored on decode (a
 * newer minor version may add optional fields) and not re-encoded.
 *
 * This file owns the generic walk; the tables live in schema_<name>.c and
 * the JSON conversion in json_mpack.h.
 */
#ifndef TB_CODEC_H
#define TB_CODEC_H

#include "tb/error.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Containers used inside message structs. All memory they point to is
 * owned by the enclosing message and released by tb_msg_free(). */
typedef struct tb_kv {
	char *key;
	char *value;
} tb_kv_t;

typedef struct tb_strmap { /* string → string, in wire order */
	size_t n;
	tb_kv_t *items;
} tb_strmap_t;

typedef struct tb_strlist {
	size_t n;
	char **items;
} tb_strlist_t;

typedef struct tb_list { /* n structs of the field's sub-schema */
	size_t n;
	void *items;
} tb_list_t;

typedef struct tb_bytes {
	size_t len;
	uint8_t *data;
} tb_bytes_t;

typedef enum tb_ftype {
	TB_FT_STR,     /* char *: NUL-terminated UTF-8; min/max in bytes */
	TB_FT_U64,     /* uint64_t; min/max value */
	TB_FT_F64,     /* double; min/max value (as integers) */
	TB_FT_BOOL,    /* bool */
	TB_FT_ENUM,    /* int: index into names; a string on the wire */
	TB_FT_STRMAP,  /* tb_strmap_t; max entries, item_max bytes per string */
	TB_FT_STRLIST, /* tb_strlist_t; max entries, item_max bytes each */
	TB_FT_OBJ,     /* embedded struct of sub */
	TB_FT_LIST,    /* tb_list_t of sub; max entries */
	TB_FT_MAP,     /* tb_bytes_t: any map, kept as canonical MessagePack */
	TB_FT_BIN,     /* tb_bytes_t: raw bytes (bin on the wire); max bytes */
} tb_ftype_t;

#define TB_FF_REQUIRED 0x1u

/**
 * Extra validation of a decoded (or to-be-encoded) value. Returns 0 if it
 * is acceptable, otherwise writes a short reason into @p why.
 */
typedef int (*tb_check_fn)(const void *value, char *why, size_t whylen);

typedef struct tb_schema tb_schema_t;

typedef struct tb_field {
	const char *name;
	tb_ftype_t type;
	unsigned flags;
	size_t offset;            /* offsetof() in the struct */
	uint64_t min, max;        /* meaning depends on type, see tb_ftype_t */
	size_t item_max;          /* STRMAP/STRLIST: bytes per string */
	const tb_schema_t *sub;   /* OBJ, LIST */
	const char *const *names; /* ENUM: NULL-terminated */
	tb_check_fn check;
} tb_field_t;

/*
 * Optional scalars (U64, F64, BOOL, ENUM without TB_FF_REQUIRED) record
 * whether they are present in a uint32_t mask in the struct at has_offset,
 * bit i for field i; producers set the bit with TB_SET_HAS. Strings are
 * absent when NULL, collections when empty, objects when all their fields
 * are absent.
 */
struct tb_schema {
	const char *name;  /* wire value of "schema" for messages */
	size_t size;       /* sizeof the struct */
	size_t has_offset; /* offsetof the presence mask */
	const tb_field_t *fields;
	size_t nfields;
	/* Cross-field rules, run after the fields decoded; may be NULL. */
	int (*check)(const void *obj, tb_error_t *err);
	size_t max_bytes; /* messages: cap on the encoded size */
	bool strict;      /* refuse unknown keys (configuration files) */
};

#define TB_HAS(obj, i) (((obj)->has >> (i)) & 1u)
#define TB_SET_HAS(obj, i) ((obj)->has |= (1u << (i)))

/* The major version this build reads and writes. */
#define TB_SCHEMA_VERSION 1

/**
 * Decodes one message of @p schema from @p data into @p out.
 * @param[out] out zero-filled by the call; on success owns heap memory that
 *             the caller releases with tb_msg_free(schema, out); on failure
 *             left zero-filled
 * @return 0; TB_ETOOBIG over schema->max_bytes; TB_EVERSION for an unknown
 *         major version; TB_EINVAL for anything else malformed
 */
int tb_msg_decode(const tb_schema_t *schema, void *out, const void *data, size_t len,
		  tb_error_t *err);

/**
 * Decodes an already-unpacked map (a nested object or a document converted
 * from JSON) with the same rules, without the "schema"/"v" header.
 * @param path prefix for error messages ("task", "recipe.judges[2]")
 */
int tb_obj_decode(const tb_schema_t *schema, void *out, const msgpack_object *map, const char *path,
		  tb_error_t *err);

/**
 * Validates @p obj and encodes it in canonical form.
 * @param[out] out an initialised sbuffer the bytes are appended to; the
 *             caller owns it (msgpack_sbuffer_destroy)
 * @return 0, TB_EINVAL if @p obj breaks a rule (the message says which),
 *         TB_ETOOBIG over schema->max_bytes, TB_ENOMEM
 */
int tb_msg_encode(msgpack_sbuffer *out, const tb_schema_t *schema, const void *obj,
		  tb_error_t *err);

/**
 * Validates @p obj and encodes it as a nested object (no "schema"/"v"
 * header): the counterpart of tb_obj_decode(), for a part of a message
 * that is also sent on its own (a manifest's usage in a result event).
 * @param path prefix for error messages
 * @return 0, TB_EINVAL if @p obj breaks a rule, TB_ENOMEM
 */
int tb_obj_encode(msgpack_sbuffer *out, const tb_schema_t *schema, const void *obj,
		  const char *path, tb_error_t *err);

/** Releases everything @p obj owns and zero-fills it. NULL-safe. */
void tb_msg_free(const tb_schema_t *schema, void *obj);

/**
 * Reads the "schema" and "v" keys of a message without decoding the rest,
 * so a consumer of a topic that carries several kinds can dispatch.
 * @param[out] out set to the matching schema from tb_schemas[]
 * @return 0, TB_EVERSION, TB_ENOTFOUND for an unknown schema name, TB_EINVAL
 */
int tb_msg_peek(const tb_schema_t **out, const void *data, size_t len, tb_error_t *err);

/** True if @p s holds @p n bytes of valid UTF-8 without NUL. */
bool tb_utf8_valid(const uint8_t *s, size_t n);

/** Drops a character a byte-wise cut left half-written at the end of the
 * NUL-terminated @p s (snprintf truncates bytes, not characters). */
void tb_utf8_trim(char *s);

/** Makes the NUL-terminated @p s valid UTF-8 in place: each byte that does
 * not begin a whole, valid character (stray bytes of another encoding, a
 * character cut at either end) becomes '?'. For text from outside (an
 * agent's output, a judge's reason) that goes into a message. */
void tb_utf8_sanitize(char *s);

/**
 * Decodes whatever message @p data is (by its "schema" key) and appends its
 * canonical encoding to @p out: validation and normalisation in one call.
 * @return 0, or the decoder's or encoder's error
 */
int tb_msg_canonical(msgpack_sbuffer *out, const void *data, size_t len, tb_error_t *err);

/* Common checks usable as tb_field_t.check. */
int tb_check_id(const void *value, char *why, size_t whylen);      /* ids */
int tb_check_commit(const void *value, char *why, size_t whylen);  /* 40 hex */
int tb_check_relpath(const void *value, char *why, size_t whylen); /* a/b */
int tb_check_sha256(const void *value, char *why, size_t whylen);  /* 64 hex */
int tb_check_label(const void *value, char *why, size_t whylen);   /* keys */

/** Every message schema, NULL-terminated. */
extern const tb_schema_t *const tb_schemas[];

#endif
