/*
 * config_show.h: the effective worker configuration with where each value
 * came from, for `taskbox config show`: every key of the configuration's
 * table (schemas/config.md), the value a command uses (directories as
 * resolved), and its source: the file and the line of the key, the
 * TASKBOX_* variable that won over it, or the built-in default.
 * Credentials are masked, never shown.
 */
#ifndef TB_CONFIG_SHOW_H
#define TB_CONFIG_SHOW_H

#include "tb/config.h"

#include <jansson.h>

/** What a masked value is shown as (its length not given away). */
#define TB_CONFIG_MASK "********"

/**
 * The configuration @p cfg as tb_cmd_load_config() loaded it from
 * @p file (tb_cmd_config_file(); NULL: none), key by key.
 * @param[out] out a new reference: {"file": FILE or null, "keys": {KEY:
 *             {"value": V or null, "source": "file" | "env" | "default",
 *             "file" and "line" (source file), "variable" (source env),
 *             "given" (a relative directory, as given), "masked": true
 *             (credentials in it were masked)}}}, KEY as schemas/config.md
 *             names it ("kafka.brokers"), in the schema's order, "v" first
 * @return 0, or < 0 with @p err (the file unreadable since, memory)
 */
int tb_config_show(json_t **out, const tb_config_t *cfg, const char *file, tb_error_t *err);

/**
 * Whether the kafka.properties setting @p name holds a credential: its
 * name has password, secret, token, credential, key, pem, jaas or
 * username in it, or it is sasl.oauthbearer.config (librdkafka's
 * sensitive settings, and the like).
 */
int tb_config_secret_property(const char *name);

/**
 * @p text (a URL) with the password of its user information masked
 * ("redis://u:p@h" -> "redis://u:********@h"), into @p out.
 * @return 1 when it had one, 0 when not (@p text copied as it is)
 */
int tb_config_mask_url(char *out, size_t len, const char *text);

#endif
