/*
 * json_mpack.c: recursive conversion, depth-capped at TB_MPACK_MAX_DEPTH so
 * hostile input cannot exhaust the stack. Base64 for "$bin" is OpenSSL's.
 */
#include "tb/json_mpack.h"

#include "tb/encoding.h"
#include "tb/mpack_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int sb_write(void *data, const char *buf, size_t len)
{
	if (msgpack_sbuffer_write(data, buf, len) != 0)
		abort(); /* out of memory */
	return 0;
}

static int bin_from_base64(msgpack_packer *pk, const char *b64, size_t n, tb_error_t *err)
{
	unsigned char *raw = malloc(n / 4 * 3 + 1);
	ssize_t len;

	if (!raw)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	/* canonical: padded to whole quads, '=' only at the end */
	if ((len = tb_base64_decode(raw, n / 4 * 3 + 1, b64, n, TB_BASE64_PAD)) < 0) {
		free(raw);
		return tb_error_set(err, TB_EINVAL,
				    "$bin: not valid base64 (padded, standard alphabet)");
	}
	msgpack_pack_bin(pk, (size_t)len);
	msgpack_pack_bin_body(pk, raw, (size_t)len);
	free(raw);
	return 0;
}

static int to_mpack(msgpack_packer *pk, const json_t *j, int depth, tb_error_t *err)
{
	const char *key;
	json_t *val;
	size_t i;
	int rc;

	if (depth > TB_MPACK_MAX_DEPTH)
		return tb_error_set(err, TB_EINVAL, "nested deeper than %d", TB_MPACK_MAX_DEPTH);
	switch (json_typeof(j)) {
	case JSON_OBJECT:
		if (json_object_size(j) == 1 && (val = json_object_get(j, "$bin")) &&
		    json_is_string(val))
			return bin_from_base64(pk, json_string_value(val), json_string_length(val),
					       err);
		msgpack_pack_map(pk, json_object_size(j));
		json_object_foreach((json_t *)j, key, val)
		{
			msgpack_pack_str_with_body(pk, key, strlen(key));
			if ((rc = to_mpack(pk, val, depth + 1, err)) < 0)
				return rc;
		}
		return 0;
	case JSON_ARRAY:
		msgpack_pack_array(pk, json_array_size(j));
		json_array_foreach(j, i, val)
		{
			if ((rc = to_mpack(pk, val, depth + 1, err)) < 0)
				return rc;
		}
		return 0;
	case JSON_STRING:
		return msgpack_pack_str_with_body(pk, json_string_value(j), json_string_length(j));
	case JSON_INTEGER: {
		json_int_t v = json_integer_value(j);
		return v >= 0 ? msgpack_pack_uint64(pk, (uint64_t)v)
			      : msgpack_pack_int64(pk, (int64_t)v);
	}
	case JSON_REAL:
		return msgpack_pack_double(pk, json_real_value(j));
	case JSON_TRUE:
		return msgpack_pack_true(pk);
	case JSON_FALSE:
		return msgpack_pack_false(pk);
	case JSON_NULL:
		return msgpack_pack_nil(pk);
	}
	return tb_error_set(err, TB_EINVAL, "unknown JSON type");
}

int tb_json_to_mpack(msgpack_sbuffer *out, const json_t *json, tb_error_t *err)
{
	msgpack_packer pk;
	size_t start = out->size;
	int rc;

	msgpack_packer_init(&pk, out, sb_write);
	if ((rc = to_mpack(&pk, json, 1, err)) < 0)
		out->size = start;
	return rc;
}

static json_t *bin_to_json(const char *data, uint32_t n)
{
	size_t cap = 4 * ((size_t)n / 3 + 1) + 1;
	char *b64 = malloc(cap);
	json_t *j;

	if (!b64)
		return NULL;
	tb_base64_encode(b64, cap, data, n, 0); /* fits: cap is 4 per 3, and a NUL */
	j = json_pack("{s:s}", "$bin", b64);
	free(b64);
	return j;
}

static int to_json(json_t **out, const msgpack_object *o, int depth, tb_error_t *err)
{
	json_t *j = NULL, *v;
	int rc;

	*out = NULL;
	if (depth > TB_MPACK_MAX_DEPTH)
		return tb_error_set(err, TB_EINVAL, "nested deeper than %d", TB_MPACK_MAX_DEPTH);
	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		j = json_null();
		break;
	case MSGPACK_OBJECT_BOOLEAN:
		j = json_boolean(o->via.boolean);
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		if (o->via.u64 > (uint64_t)INT64_MAX)
			return tb_error_set(err, TB_EINVAL,
					    "integer %llu does not fit JSON's int64",
					    (unsigned long long)o->via.u64);
		j = json_integer((json_int_t)o->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		j = json_integer(o->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		if (!isfinite(o->via.f64))
			return tb_error_set(err, TB_EINVAL, "JSON cannot hold NaN or infinity");
		j = json_real(o->via.f64);
		break;
	case MSGPACK_OBJECT_STR:
		if (!(j = json_stringn(o->via.str.size ? o->via.str.ptr : "", o->via.str.size)))
			return tb_error_set(err, TB_EINVAL, "string is not valid UTF-8");
		break;
	case MSGPACK_OBJECT_BIN:
		j = bin_to_json(o->via.bin.ptr, o->via.bin.size);
		break;
	case MSGPACK_OBJECT_ARRAY:
		if (!(j = json_array()))
			break;
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			if ((rc = to_json(&v, &o->via.array.ptr[i], depth + 1, err)) < 0) {
				json_decref(j);
				return rc;
			}
			json_array_append_new(j, v);
		}
		break;
	case MSGPACK_OBJECT_MAP:
		if (!(j = json_object()))
			break;
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[i];
			char key[1024];
			if (kv->key.type != MSGPACK_OBJECT_STR ||
			    kv->key.via.str.size >= sizeof(key) ||
			    (kv->key.via.str.size &&
			     memchr(kv->key.via.str.ptr, 0, kv->key.via.str.size))) {
				json_decref(j);
				return tb_error_set(err, TB_EINVAL,
						    "map key %u is not a short string", i);
			}
			if (kv->key.via.str.size)
				memcpy(key, kv->key.via.str.ptr, kv->key.via.str.size);
			key[kv->key.via.str.size] = '\0';
			if ((rc = to_json(&v, &kv->val, depth + 1, err)) < 0) {
				json_decref(j);
				return rc;
			}
			if (json_object_set_new(j, key, v) != 0) {
				json_decref(j);
				return tb_error_set(err, TB_EINVAL, "map key %u is not valid UTF-8",
						    i);
			}
		}
		break;
	default:
		return tb_error_set(err, TB_EINVAL, "extension types are not used by taskbox");
	}
	if (!j)
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	*out = j;
	return 0;
}

int tb_mpack_to_json(json_t **out, const void *data, size_t len, tb_error_t *err)
{
	msgpack_unpacked up;
	size_t off = 0;
	int rc;

	*out = NULL;
	if ((rc = tb_mpack_scan(data, len, TB_MPACK_MAX_DEPTH, err)) < 0)
		return rc;
	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS) {
		msgpack_unpacked_destroy(&up);
		return tb_error_set(err, TB_EINVAL, "not valid MessagePack");
	}
	rc = to_json(out, &up.data, 1, err);
	msgpack_unpacked_destroy(&up);
	return rc;
}
