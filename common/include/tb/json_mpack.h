/*
 * json_mpack.h: conversion between JSON (jansson) and MessagePack.
 *
 * Used where people and other programs speak JSON: the schema examples,
 * `taskbox submit --file task.json`, the agent protocol (JSON lines) and
 * `taskbox watch --json`. Objects become maps with keys in document order,
 * integers take their shortest MessagePack form, reals are float64, and a
 * JSON object of exactly {"$bin": "<base64>"} stands for MessagePack binary
 * (bin), since JSON has no bytes type. Extension types are refused.
 */
#ifndef TB_JSON_MPACK_H
#define TB_JSON_MPACK_H

#include "tb/error.h"

#include <jansson.h>
#include <msgpack.h>

/**
 * Appends the MessagePack form of @p json to @p out.
 * @return 0, TB_EINVAL (nesting deeper than 16, bad base64), TB_ENOMEM
 */
int tb_json_to_mpack(msgpack_sbuffer *out, const json_t *json, tb_error_t *err);

/**
 * Converts one MessagePack value to JSON.
 * @param[out] out a new reference the caller releases with json_decref()
 * @return 0, TB_EINVAL (malformed, non-string map key, extension type,
 *         integer beyond JSON's int64), TB_ENOMEM
 */
int tb_mpack_to_json(json_t **out, const void *data, size_t len, tb_error_t *err);

#endif
