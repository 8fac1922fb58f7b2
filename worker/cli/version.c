/*
 * version.c: what `taskbox --version` says (cmd.h): this build's version,
 * commit and build type (tb/version.h), and the version of each library
 * as the running program has it, read from the library where it can say
 * (a distribution's update changes them without a rebuild).
 */
#include "cmd.h"

#include "tb/version.h"

#include <archive.h>
#include <curl/curl.h>
#include <git2.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <microhttpd.h>
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse3/fuse_lowlevel.h>
#include <msgpack.h>
#include <openssl/crypto.h>
#include <seccomp.h>

void tb_cmd_print_version(FILE *out)
{
	const struct scmp_version *sc = seccomp_version();
	int gmaj = 0, gmin = 0, grev = 0;

	git_libgit2_version(&gmaj, &gmin, &grev);
	fprintf(out, "taskbox %s (commit %s, %s build)\n", TB_VERSION, TB_GIT_COMMIT,
		TB_BUILD_TYPE);
	fprintf(out, "librdkafka %s\n", rd_kafka_version_str());
	fprintf(out, "libgit2 %d.%d.%d\n", gmaj, gmin, grev);
	fprintf(out, "libseccomp %u.%u.%u\n", sc ? sc->major : 0, sc ? sc->minor : 0,
		sc ? sc->micro : 0);
	fprintf(out, "hiredis %d.%d.%d (built with)\n", HIREDIS_MAJOR, HIREDIS_MINOR,
		HIREDIS_PATCH);
	fprintf(out, "libcurl %s\n", curl_version_info(CURLVERSION_NOW)->version);
	fprintf(out, "%s\n", archive_version_string());
	fprintf(out, "libmicrohttpd %s\n", MHD_get_version());
	fprintf(out, "libfuse3 %s\n", fuse_pkgversion());
	fprintf(out, "msgpack-c %s\n", msgpack_version());
	fprintf(out, "jansson %s (built with)\n", JANSSON_VERSION);
	fprintf(out, "%s\n", OpenSSL_version(OPENSSL_VERSION));
}
