/*
 * bench_layer_index.c: what a gzip layer's seekable index costs and
 * gives (worker/image/layer_index.h), on a layer on local disk (the page
 * cache warm):
 *
 *   index size      the encoded index, against the layer's bytes
 *   build           the index built from the whole blob (its digest
 *                   checked, every span hashed, the tar listed), against
 *                   plain decompression of the same blob (zlib, no hash)
 *   4 KiB read      a 4 KiB read from the middle of the tar stream
 *                   through the index (a span fetched with pread, hashed,
 *                   inflated from its access point), against
 *                   decompressing from the start to the same bytes
 *   bytes fetched   the compressed bytes such a read fetches
 *
 * Numbers for reading, never asserted.
 *
 * Usage: bench_layer_index --layer FILE.tar.gz [--span BYTES] [-n ROUNDS] [--json]
 */
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "bench_util.h"
#include "layer_index.h"
#include "tb/encoding.h"

#define READ 4096
#define ROUNDS_MAX 100

typedef struct src {
	int fd;
	uint64_t fetched;
} src_t;

static void die(const char *what, const char *why)
{
	fprintf(stderr, "bench_layer_index: %s: %s\n", what, why);
	exit(1);
}

static int64_t src_read(void *arg, void *buf, size_t len, tb_error_t *err)
{
	ssize_t n = read(((src_t *)arg)->fd, buf, len);
	return n < 0 ? tb_error_set(err, TB_EIO, "read") : (int64_t)n;
}

static int64_t src_fetch(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	src_t *s = arg;
	size_t got = 0;
	while (got < len) {
		ssize_t n = pread(s->fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (n <= 0)
			return n < 0 ? tb_error_set(err, TB_EIO, "pread") : (int64_t)got;
		got += (size_t)n;
	}
	s->fetched += got;
	return (int64_t)got;
}

static void digest_of(int fd, char out[72])
{
	static unsigned char buf[1 << 20];
	unsigned char sum[32];
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	ssize_t n;
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	lseek(fd, 0, SEEK_SET);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		EVP_DigestUpdate(md, buf, (size_t)n);
	EVP_DigestFinal_ex(md, sum, NULL);
	EVP_MD_CTX_free(md);
	memcpy(out, "sha256:", 7);
	tb_hex(out + 7, sum, sizeof(sum));
}

/* Plain decompression of the blob, member after member, until @p upto
 * bytes of output (0: all). @return the bytes of output. */
static uint64_t inflate_plain(int fd, uint64_t upto)
{
	static unsigned char in[1 << 18], out[1 << 18];
	z_stream z = { 0 };
	uint64_t total = 0;
	int zr = Z_OK;
	inflateInit2(&z, 31);
	lseek(fd, 0, SEEK_SET);
	while (!upto || total < upto) {
		if (!z.avail_in) {
			ssize_t n = read(fd, in, sizeof(in));
			if (n <= 0)
				break;
			z.next_in = in;
			z.avail_in = (uInt)n;
		}
		if (zr == Z_STREAM_END)
			inflateReset(&z);
		z.next_out = out;
		z.avail_out = sizeof(out);
		zr = inflate(&z, Z_NO_FLUSH);
		total += sizeof(out) - z.avail_out;
		if (zr != Z_OK && zr != Z_STREAM_END)
			die("inflate", z.msg ? z.msg : "error");
	}
	inflateEnd(&z);
	return total;
}

static tb_layer_index_t *build(int fd, const char *digest, uint64_t span)
{
	src_t s = { fd, 0 };
	tb_layer_index_t *ix;
	tb_error_t err;
	lseek(fd, 0, SEEK_SET);
	if (tb_layer_index_build(digest, span, src_read, &s, &ix, &err) < 0)
		die("build", err.msg);
	return ix;
}

static void bench_build(int fd, const char *digest, uint64_t span, int rounds)
{
	double plain[ROUNDS_MAX], built[ROUNDS_MAX], pm, pp, bm, bp;
	for (int i = 0; i < rounds; i++) {
		double t0 = tb_bench_mono_ms();
		inflate_plain(fd, 0);
		double t1 = tb_bench_mono_ms();
		tb_layer_index_free(build(fd, digest, span));
		built[i] = tb_bench_mono_ms() - t1;
		plain[i] = t1 - t0;
	}
	tb_bench_stats(plain, rounds, &pm, &pp);
	tb_bench_stats(built, rounds, &bm, &bp);
	tb_bench_row("seekable", "decompress the layer (zlib)", "ms", pm, pp, NULL, 0);
	tb_bench_row("seekable", "build its index", "ms", bm, bp, "decompress", pm);
}

static void bench_reads(int fd, const tb_layer_index_t *ix, int rounds)
{
	double through[ROUNDS_MAX], from_start[ROUNDS_MAX], bytes[ROUNDS_MAX];
	double tm, tp, fm, fp, km, kp;
	static uint8_t buf[READ];
	uint32_t x = 12345;
	tb_error_t err;
	for (int i = 0; i < rounds; i++) {
		x = x * 1103515245u + 12345u;
		uint64_t off =
		    ix->total_out / 2 + (x % (ix->total_out / 8 + 1)) - ix->total_out / 16;
		src_t s = { fd, 0 };
		double t0 = tb_bench_mono_ms();
		if (tb_layer_index_read(ix, src_fetch, &s, off, buf, READ, &err) < 0)
			die("read", err.msg);
		double t1 = tb_bench_mono_ms();
		inflate_plain(fd, off + READ);
		from_start[i] = tb_bench_mono_ms() - t1;
		through[i] = t1 - t0;
		bytes[i] = (double)s.fetched / 1024;
	}
	tb_bench_stats(from_start, rounds, &fm, &fp);
	tb_bench_stats(through, rounds, &tm, &tp);
	tb_bench_stats(bytes, rounds, &km, &kp);
	tb_bench_row("seekable", "4 KiB from the middle, from the start", "ms", fm, fp, NULL, 0);
	tb_bench_row("seekable", "4 KiB from the middle, through the index", "ms", tm, tp,
		     "from the start", fm);
	tb_bench_row("seekable", "  compressed bytes it fetched", "KiB", km, kp, NULL, 0);
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	uint64_t span = 0;
	int rounds = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--layer") && i + 1 < argc)
			path = argv[++i];
		else if (!strcmp(argv[i], "--span") && i + 1 < argc)
			span = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			rounds = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--json"))
			tb_bench_json = 1;
		else
			die("usage", "--layer FILE.tar.gz [--span BYTES] [-n ROUNDS] [--json]");
	}
	if (!path || rounds < 1 || rounds > ROUNDS_MAX)
		die("usage", "--layer FILE.tar.gz [--span BYTES] [-n 1..100] [--json]");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char digest[72];
	if (fd < 0 || fstat(fd, &st) < 0)
		die(path, "cannot open");
	digest_of(fd, digest);
	bench_build(fd, digest, span, rounds);
	tb_layer_index_t *ix = build(fd, digest, span);
	uint8_t *enc;
	size_t n;
	tb_error_t err;
	if (tb_layer_index_encode(ix, &enc, &n, digest, &err) < 0)
		die("encode", err.msg);
	double mib = (double)st.st_size / 1048576, out = (double)ix->total_out / 1048576;
	tb_bench_row("seekable", "the layer (gzip)", "MiB", mib, mib, NULL, 0);
	tb_bench_row("seekable", "  its tar stream", "MiB", out, out, NULL, 0);
	tb_bench_row("seekable", "  its access points", "count", (double)ix->npoints,
		     (double)ix->npoints, NULL, 0);
	tb_bench_row("seekable", "its index, encoded", "KiB", (double)n / 1024, (double)n / 1024,
		     "layer", (double)st.st_size / 1024);
	double pct = 100.0 * (double)n / (double)st.st_size;
	tb_bench_row("seekable", "  its index, of the layer", "%", pct, pct, NULL, 0);
	bench_reads(fd, ix, rounds * 4 > ROUNDS_MAX ? ROUNDS_MAX : rounds * 4);
	tb_bench_end();
	free(enc);
	tb_layer_index_free(ix);
	close(fd);
	return 0;
}
