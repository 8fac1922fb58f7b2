/*
 * preflight.c: the configuration's runtimes, checked before a worker
 * takes a task (preflight.h). A worker whose runtimes_dir named nothing
 * started without a word and dead-lettered every task as "unknown
 * runtime": this says so at start, naming the key and the file.
 */
#include "preflight.h"

#include "tb/jsonconf.h"
#include "tb/runtime.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tb_preflight_origin(char *buf, size_t len, const char *key, const char *file)
{
	char var[128];

	tb_jsonconf_env_name(var, sizeof(var), "TASKBOX", key);
	snprintf(buf, len, "%s", getenv(var) ? var : file ? file : "the defaults");
	return buf;
}

int tb_preflight_runtimes(char *out, size_t len, const tb_config_t *cfg, const char *file,
			  tb_error_t *err)
{
	char where[4200];
	const char *from = tb_preflight_origin(where, sizeof(where), "runtimes_dir", file);
	char first[TB_ERROR_MSG_MAX] = "", path[4400];
	size_t pos = 0;
	int valid = 0;
	DIR *d = opendir(cfg->runtimes_dir);

	out[0] = '\0';
	if (!d)
		return tb_error_errno(err, errno == ENOENT ? TB_ENOTFOUND : TB_EINVAL, errno,
				      "runtimes_dir %s (from %s): cannot read it",
				      cfg->runtimes_dir, from);
	for (struct dirent *e; (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n <= 5 || strcmp(e->d_name + n - 5, ".json"))
			continue;
		tb_runtime_t rt;
		tb_error_t rerr;
		snprintf(path, sizeof(path), "%s/%s", cfg->runtimes_dir, e->d_name);
		if (tb_runtime_load(&rt, path, &rerr) < 0) {
			if (!first[0])
				snprintf(first, sizeof(first), "%s", rerr.msg);
			continue;
		}
		tb_runtime_free(&rt);
		valid++;
		if (pos < len)
			pos += (size_t)snprintf(out + pos, len - pos, "%s%.*s", pos ? ", " : "",
						(int)(n - 5), e->d_name);
	}
	closedir(d);
	if (!valid)
		return tb_error_set(
		    err, TB_EINVAL,
		    "runtimes_dir %s (from %s) holds no valid runtime (<name>.json)%s%s",
		    cfg->runtimes_dir, from, first[0] ? ": " : "", first);
	return 0;
}
