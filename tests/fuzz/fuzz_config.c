/*
 * fuzz_config.c: runtime files (TB_FUZZ_RUNTIME) or recipe manifests
 * (TB_FUZZ_RECIPE) from arbitrary bytes: every refusal must say why.
 */
#include "tb/jsonconf.h"
#include "tb/recipe_manifest.h"
#include "tb/runtime.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_error_t err;
	int rc;

#if defined(TB_FUZZ_RECIPE)
	tb_recipe_manifest_t m;
	rc = tb_recipe_manifest_parse(&m, (const char *)data, size, "fuzz", &err);
	tb_recipe_manifest_free(&m);
#else
	tb_runtime_t rt;
	json_t *doc = NULL;
	rc = tb_jsonconf_parse(&doc, (const char *)data, size, 1u << 20, "fuzz", &err);
	if (rc == 0) {
		rc = tb_jsonconf_decode(&tb_schema_runtime, &rt, doc, tb_runtime_defaults, NULL,
					"fuzz", &err);
		tb_runtime_free(&rt);
		json_decref(doc);
	}
#endif
	if (rc != 0 && err.msg[0] == '\0')
		abort();
	return 0;
}
