/*
 * bench_artifacts.c: the artifact store's speed and memory against curl
 * doing the same to the same server in the same run. For each S3 path
 * (s3:// SigV4 over libcurl, s3v2:// libs3): 100 objects of 64 KiB up and
 * down (per-object latency and aggregate MB/s), and one 256 MiB object up
 * and down (MB/s and peak RSS of the process doing it), in five rounds
 * where ours and curl's take turns going first. The baseline is the curl
 * command: one process per batch, so it reuses its connection too. curl
 * sends its uploads unsigned and checks nothing, where ours compute two
 * checksums before an upload and sign its payload: so the 256 MiB put is
 * also set beside curl doing that same work, `openssl dgst -sha256` then a
 * PUT whose signed payload hash the server checks ("vs signing").
 *
 * The server shares this machine's cores with the client, and a 256 MiB
 * put keeps it busy on all of them: so the put's wall time follows the
 * CPU that the client and the server spend on it together, and the bench
 * prints both (core-seconds, user and system), the server's when given
 * its pid; for the 256 MiB get too (its time moves most with the
 * machine's memory: see drop_cached in store.c).
 *
 *   bench_artifacts [--json] [--server-pid PID]
 *                   (reads TASKBOX_TEST_S3_*; tests/bench/run starts the
 *                    server and sets them)
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "tb/store.h"

#define SMALL_N 100
#define SMALL_SIZE (64 << 10)
#define BIG_SIZE (256ull << 20)
#define ROUNDS 5
#define BUCKET "tb-bench-artifacts"

extern char **environ;

typedef struct row {
	char name[64];
	char unit[16];
	double median, p99, baseline;
	int has_baseline;
} row_t;

static row_t rows[64];
static int nrows;
static char tmp[64] = "/tmp/tb-bench-art-XXXXXX";
static int server_pid; /* the S3 server's, for its CPU; 0: not known */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void add(const char *name, const char *unit, double median, double p99, double base)
{
	row_t *r = &rows[nrows++];
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->unit, sizeof(r->unit), "%s", unit);
	r->median = median, r->p99 = p99, r->baseline = base, r->has_baseline = base > 0;
}

static void make_file(const char *path, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	static char block[1 << 20];
	uint32_t x = 2463534242u;

	for (size_t i = 0; i < sizeof(block); i += 4) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		memcpy(block + i, &x, 4);
	}
	for (uint64_t done = 0; done < size;) {
		size_t n = size - done < sizeof(block) ? (size_t)(size - done) : sizeof(block);
		if (write(fd, block, n) != (ssize_t)n)
			exit(1);
		done += n;
	}
	close(fd);
}

/* The CPU seconds (user and system) the S3 server has used; 0 when its
 * pid is not known or its stat cannot be read. */
static double server_cpu(void)
{
	char path[64], buf[1024], *p;
	unsigned long long utime, stime;
	FILE *f;
	size_t n;

	if (!server_pid)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", server_pid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* after the command's ")": state is field 3, utime 14, stime 15 */
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
		   &stime) != 2)
		return 0;
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The CPU seconds (user and system) of the children waited for so far. */
static double children_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_CHILDREN, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* What one timed transfer cost in CPU: its client's, the server's. */
typedef struct cpu {
	double client, server;
} cpu_t;

static cpu_t cpu_mark(void)
{
	return (cpu_t){ children_cpu(), server_cpu() };
}

static cpu_t cpu_since(cpu_t mark)
{
	cpu_t now = cpu_mark();
	return (cpu_t){ now.client - mark.client, now.server - mark.server };
}

/* Runs argv; returns wall seconds, and the child's peak RSS in KiB. */
static double run(char **argv, long *rss_kib)
{
	struct rusage ru;
	int status;
	pid_t pid;
	double t0 = now();

	if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0)
		return -1;
	if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	if (rss_kib)
		*rss_kib = ru.ru_maxrss;
	return now() - t0;
}

/* Before each timed 256 MiB transfer, ours or curl's: the last one's
 * 256 MiB of dirty pages (the server's copy, the downloaded file) written
 * out first, or their writeback lands on whichever transfer comes next
 * (single rounds of either side took 2-3x as long). */
static void settle(void)
{
	sync();
}

/* curl PUTs or GETs @p n objects in one process; returns seconds. The
 * payload goes unsigned, or with @p sha (hex) as its signed hash and its
 * x-amz-meta-sha256, as ours go. */
static double curl_batch(const char *endpoint, const char *bucket, const char *base, int n, int put,
			 const char *file, const char *sha, long *rss)
{
	char **argv = calloc((size_t)(n * 4 + 16), sizeof(char *));
	char sigv4[128], user[256], region[64], down_path[128], h_sha[128], h_meta[128];
	int a = 0;

	snprintf(down_path, sizeof(down_path), "%s/curl-down", tmp);

	snprintf(region, sizeof(region), "%s", getenv("TASKBOX_TEST_S3_REGION"));
	snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", region);
	snprintf(user, sizeof(user), "%s:%s", getenv("AWS_ACCESS_KEY_ID"),
		 getenv("AWS_SECRET_ACCESS_KEY"));
	argv[a++] = "curl";
	argv[a++] = "-sf";
	argv[a++] = "--aws-sigv4";
	argv[a++] = sigv4;
	argv[a++] = "--user";
	argv[a++] = user;
	snprintf(h_sha, sizeof(h_sha), "x-amz-content-sha256: %s", sha ? sha : "UNSIGNED-PAYLOAD");
	argv[a++] = "-H";
	argv[a++] = h_sha;
	if (sha) {
		snprintf(h_meta, sizeof(h_meta), "x-amz-meta-sha256: %s", sha);
		argv[a++] = "-H";
		argv[a++] = h_meta;
	}
	for (int i = 0; i < n; i++) {
		char *url = malloc(512);
		snprintf(url, 512, "%s/%s/curl/%s-%d", endpoint, bucket, base, i);
		/* Downloads go to a real file, as ours do. */
		argv[a++] = put ? "-T" : "-o";
		argv[a++] = (char *)(put ? file : down_path);
		argv[a++] = url;
	}
	double t = run(argv, rss);
	for (int i = 0; i < a; i++)
		if (argv[i] && !strncmp(argv[i], endpoint, strlen(endpoint)))
			free(argv[i]);
	free(argv);
	return t;
}

/* Hashes @p file, then curl PUTs it with that hash signed: what ours do,
 * with the tools; returns seconds for both. */
static double curl_signed_put(const char *endpoint, const char *bucket, const char *base,
			      const char *file)
{
	/* openssl, which uses the CPU's SHA instructions as ours does
	 * (coreutils' sha256sum does not, and takes 7x as long) */
	char *argv[] = { "openssl", "dgst", "-sha256", "-r", (char *)file, NULL }, sha[65] = "";
	posix_spawn_file_actions_t fa;
	int fds[2], status;
	pid_t pid;

	settle();
	double t0 = now();
	if (pipe(fds) < 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	/* all of its output (the hash, then " *<file>"), so it never
	 * writes to a closed pipe; the hash is the first 64 characters */
	char line[512];
	size_t got = 0;
	while (rc == 0 && got < sizeof(line) - 1) {
		ssize_t n = read(fds[0], line + got, sizeof(line) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	if (got >= 64)
		memcpy(sha, line, 64);
	if (rc != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) || got < 64 || strspn(sha, "0123456789abcdef") != 64)
		return -1;
	if (curl_batch(endpoint, bucket, base, 1, 1, file, sha, NULL) < 0)
		return -1;
	return now() - t0;
}

/* The median and the lowest of ROUNDS rates. */
static double median(const double *v)
{
	double c[ROUNDS];
	memcpy(c, v, sizeof(c));
	qsort(c, ROUNDS, sizeof(double), cmp);
	return c[ROUNDS / 2];
}

static double slowest(const double *v)
{
	double m = v[0];
	for (int i = 1; i < ROUNDS; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}

static double highest(const double *v)
{
	double m = v[0];
	for (int i = 1; i < ROUNDS; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

typedef struct keys {
	char **v;
	size_t n, cap;
} keys_t;

static int note_key(void *ud, const char *key, const tb_object_info_t *info)
{
	keys_t *k = ud;
	(void)info;
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 256;
		char **v = realloc(k->v, cap * sizeof(*v));
		if (!v)
			return 1; /* stop: what was noted is still deleted */
		k->v = v, k->cap = cap;
	}
	if (!(k->v[k->n] = strdup(key)))
		return 1;
	k->n++;
	return 0;
}

/* Deletes every object this run wrote through @p s (its prefix holds
 * curl's too): listed first, then deleted, so no page of the listing
 * shifts under the deletes. */
static void clean_up(tb_store_t *s, const char *scheme)
{
	keys_t k = { 0 };
	tb_error_t err;
	size_t failed = 0;

	if (tb_store_list(s, "", note_key, &k, &err) < 0)
		fprintf(stderr, "bench %s: listing what to delete: %s\n", scheme, err.msg);
	for (size_t i = 0; i < k.n; i++) {
		failed += tb_store_delete(s, k.v[i], &err) < 0;
		free(k.v[i]);
	}
	if (failed)
		fprintf(stderr, "bench %s: %zu objects could not be deleted (last: %s)\n", scheme,
			failed, err.msg);
	free(k.v);
}

/* Peak RSS of a child that does one 256 MiB put or get through @p s. */
static double big_in_child(tb_store_t *s, const char *key, const char *file, int put, long *rss)
{
	struct rusage ru;
	int status;

	settle();
	double t0 = now();
	pid_t pid = fork();

	if (pid == 0) {
		tb_error_t err;
		char out[128];
		snprintf(out, sizeof(out), "%s/big-down", tmp);
		int rc = put ? tb_store_put_file(s, key, file, NULL, &err)
			     : tb_store_get_file(s, key, out, 0, NULL, &err);
		if (rc)
			fprintf(stderr, "bench: %s\n", err.msg);
		_exit(rc ? 1 : 0);
	}
	if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	*rss = ru.ru_maxrss;
	return now() - t0;
}

static void bench_path(const char *scheme, const char *endpoint)
{
	char url[128], bucket[96], small[128], big[128], name[96], key[256];
	tb_store_config_t cfg = { 0 };
	static double up[SMALL_N * ROUNDS], down[SMALL_N * ROUNDS];
	tb_store_t *s;
	tb_error_t err;

	/* One bucket for every run (each new bucket is a new SeaweedFS
	 * collection, which takes volumes of a limited supply), this run's
	 * objects under its own prefix (pid and time: a pid comes round
	 * again), deleted at the end; curl's too. */
	snprintf(bucket, sizeof(bucket), "%s/%d-%lld-%s", BUCKET, (int)getpid(),
		 (long long)time(NULL), scheme);
	snprintf(url, sizeof(url), "%s://%s", scheme, bucket);
	cfg.url = url, cfg.endpoint = (char *)endpoint,
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(&s, &cfg, &err) || tb_bench_bucket(s, &err)) {
		fprintf(stderr, "bench %s: %s\n", scheme, err.msg);
		return;
	}
	snprintf(small, sizeof(small), "%s/small.bin", tmp);
	snprintf(big, sizeof(big), "%s/big.bin", tmp);

	/* Warm-up, untimed: a new bucket makes the server grow volumes on
	 * the first writes (hundreds of ms on SeaweedFS), which would land on
	 * whichever client goes first. */
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "warm/%d", i);
		tb_store_put_file(s, key, small, NULL, &err);
	}
	curl_batch(endpoint, bucket, "warm", 10, 1, small, NULL, NULL);

	/* ROUNDS rounds, ours and curl's alternating which goes first (the
	 * machine is shared: one sample each swung the ratio by 2x); MB/s as
	 * the median over the rounds, the slowest round in the p99 column. */
	double mb = (double)SMALL_N * SMALL_SIZE / 1e6, bmb = (double)BIG_SIZE / 1e6;
	double r_up[ROUNDS], r_down[ROUNDS], c_up[ROUNDS], c_down[ROUNDS];
	double b_up[ROUNDS], b_down[ROUNDS], cb_up[ROUNDS], cb_down[ROUNDS], cs_up[ROUNDS];
	/* CPU of each round's 256 MiB put: client and server, client and
	 * server together; ours, bare curl's, curl's signing */
	double o_cli[ROUNDS], o_srv[ROUNDS], o_all[ROUNDS];
	double c_cli[ROUNDS], c_srv[ROUNDS], s_all[ROUNDS];
	double g_cli[ROUNDS], g_srv[ROUNDS], cg_cli[ROUNDS], cg_srv[ROUNDS]; /* gets' CPU */
	long rss_up = 0, rss_down = 0, c_rss_up = 0, c_rss_down = 0;
	for (int round = 0; round < ROUNDS; round++) {
		char base[32];
		long rss;
		snprintf(base, sizeof(base), "small-r%d", round);
		for (int side = 0; side < 2; side++) {
			if ((side == 0) == (round % 2 == 0)) { /* ours */
				double t0 = now();
				for (int i = 0; i < SMALL_N; i++) {
					double t = now();
					snprintf(key, sizeof(key), "small/%d/%d", round, i);
					if (tb_store_put_file(s, key, small, NULL, &err))
						fprintf(stderr, "bench: %s\n", err.msg);
					up[round * SMALL_N + i] = (now() - t) * 1e3;
				}
				r_up[round] = mb / (now() - t0);
				t0 = now();
				for (int i = 0; i < SMALL_N; i++) {
					char out[128];
					double t = now();
					snprintf(key, sizeof(key), "small/%d/%d", round, i);
					snprintf(out, sizeof(out), "%s/small-down", tmp);
					if (tb_store_get_file(s, key, out, 0, NULL, &err))
						fprintf(stderr, "bench: %s\n", err.msg);
					down[round * SMALL_N + i] = (now() - t) * 1e3;
				}
				r_down[round] = mb / (now() - t0);
				snprintf(key, sizeof(key), "big/%d", round);
				cpu_t c = cpu_mark(); /* big_in_child settles first */
				double t = big_in_child(s, key, big, 1, &rss);
				c = cpu_since(c);
				o_cli[round] = c.client, o_srv[round] = c.server;
				o_all[round] = c.client + c.server;
				b_up[round] = t > 0 ? bmb / t : 0;
				rss_up = rss > rss_up ? rss : rss_up;
				c = cpu_mark();
				t = big_in_child(s, key, big, 0, &rss);
				c = cpu_since(c);
				g_cli[round] = c.client, g_srv[round] = c.server;
				b_down[round] = t > 0 ? bmb / t : 0;
				rss_down = rss > rss_down ? rss : rss_down;
			} else { /* curl */
				double t = curl_batch(endpoint, bucket, base, SMALL_N, 1, small,
						      NULL, NULL);
				c_up[round] = t > 0 ? mb / t : 0;
				t = curl_batch(endpoint, bucket, base, SMALL_N, 0, NULL, NULL,
					       NULL);
				c_down[round] = t > 0 ? mb / t : 0;
				snprintf(base, sizeof(base), "big-signed-r%d", round);
				cpu_t c = cpu_mark(); /* so does curl_signed_put */
				t = curl_signed_put(endpoint, bucket, base, big);
				c = cpu_since(c);
				s_all[round] = c.client + c.server;
				cs_up[round] = t > 0 ? bmb / t : 0;
				snprintf(base, sizeof(base), "big-r%d", round);
				settle();
				c = cpu_mark();
				t = curl_batch(endpoint, bucket, base, 1, 1, big, NULL, &rss);
				c = cpu_since(c);
				c_cli[round] = c.client, c_srv[round] = c.server;
				cb_up[round] = t > 0 ? bmb / t : 0;
				c_rss_up = rss > c_rss_up ? rss : c_rss_up;
				settle();
				c = cpu_mark();
				t = curl_batch(endpoint, bucket, base, 1, 0, NULL, NULL, &rss);
				c = cpu_since(c);
				cg_cli[round] = c.client, cg_srv[round] = c.server;
				cb_down[round] = t > 0 ? bmb / t : 0;
				c_rss_down = rss > c_rss_down ? rss : c_rss_down;
				snprintf(base, sizeof(base), "small-r%d", round);
			}
		}
	}
	qsort(up, SMALL_N * ROUNDS, sizeof(double), cmp);
	qsort(down, SMALL_N * ROUNDS, sizeof(double), cmp);
	snprintf(name, sizeof(name), "%s 100x64KiB put", scheme);
	add(name, "MB/s", median(r_up), slowest(r_up), median(c_up));
	snprintf(name, sizeof(name), "%s 64KiB put latency", scheme);
	add(name, "ms", up[SMALL_N * ROUNDS / 2], up[SMALL_N * ROUNDS * 99 / 100], 0);
	snprintf(name, sizeof(name), "%s 100x64KiB get", scheme);
	add(name, "MB/s", median(r_down), slowest(r_down), median(c_down));
	snprintf(name, sizeof(name), "%s 64KiB get latency", scheme);
	add(name, "ms", down[SMALL_N * ROUNDS / 2], down[SMALL_N * ROUNDS * 99 / 100], 0);
	snprintf(name, sizeof(name), "%s 256MiB put", scheme);
	add(name, "MB/s", median(b_up), slowest(b_up), median(cb_up));
	snprintf(name, sizeof(name), "%s 256MiB put vs signing", scheme);
	add(name, "MB/s", median(b_up), slowest(b_up), median(cs_up));
	snprintf(name, sizeof(name), "%s 256MiB put client CPU", scheme);
	add(name, "core-s", median(o_cli), highest(o_cli), median(c_cli));
	if (server_pid) {
		snprintf(name, sizeof(name), "%s 256MiB put server CPU", scheme);
		add(name, "core-s", median(o_srv), highest(o_srv), median(c_srv));
		snprintf(name, sizeof(name), "%s 256MiB put CPU vs signing", scheme);
		add(name, "core-s", median(o_all), highest(o_all), median(s_all));
	}
	snprintf(name, sizeof(name), "%s 256MiB get", scheme);
	add(name, "MB/s", median(b_down), slowest(b_down), median(cb_down));
	snprintf(name, sizeof(name), "%s 256MiB get client CPU", scheme);
	add(name, "core-s", median(g_cli), highest(g_cli), median(cg_cli));
	if (server_pid) {
		snprintf(name, sizeof(name), "%s 256MiB get server CPU", scheme);
		add(name, "core-s", median(g_srv), highest(g_srv), median(cg_srv));
	}
	snprintf(name, sizeof(name), "%s 256MiB put peak RSS", scheme);
	add(name, "MiB", rss_up / 1024.0, rss_up / 1024.0, c_rss_up / 1024.0);
	snprintf(name, sizeof(name), "%s 256MiB get peak RSS", scheme);
	add(name, "MiB", rss_down / 1024.0, rss_down / 1024.0, c_rss_down / 1024.0);
	clean_up(s, scheme);
	tb_store_close(s);
}

int main(int argc, char **argv)
{
	const char *endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT");
	int json = 0;
	char path[128], cmd[128];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--server-pid") && i + 1 < argc) {
			char *end;
			long pid = strtol(argv[++i], &end, 10);
			if (*end || pid <= 0 || pid > 1 << 22) {
				fprintf(stderr, "bench_artifacts: --server-pid: not a pid: '%s'\n",
					argv[i]);
				return 2;
			}
			server_pid = (int)pid;
		} else {
			fprintf(stderr, "usage: bench_artifacts [--json] [--server-pid PID]\n");
			return 2;
		}
	}
	if (!endpoint || !getenv("TASKBOX_TEST_S3_ACCESS_KEY")) {
		fprintf(stderr,
			"bench_artifacts: TASKBOX_TEST_S3_* not set (tests/bench/run sets it)\n");
		return 1;
	}
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	if (!mkdtemp(tmp))
		return 1;
	snprintf(path, sizeof(path), "%s/small.bin", tmp);
	make_file(path, SMALL_SIZE);
	snprintf(path, sizeof(path), "%s/big.bin", tmp);
	make_file(path, BIG_SIZE);
	bench_path("s3", endpoint);
	bench_path("s3v2", endpoint);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	if (system(cmd) != 0)
		return 1;

	if (json) {
		printf("[");
		for (int i = 0; i < nrows; i++) {
			printf(
			    "%s\n {\"suite\": \"artifacts\", \"name\": \"%s\", \"unit\": \"%s\", "
			    "\"median\": %.2f, \"p99\": %.2f",
			    i ? "," : "", rows[i].name, rows[i].unit, rows[i].median, rows[i].p99);
			if (rows[i].has_baseline)
				printf(", \"baseline\": \"curl %.2f\", \"ratio\": %.2f",
				       rows[i].baseline, rows[i].median / rows[i].baseline);
			printf("}");
		}
		printf("\n]\n");
		return 0;
	}
	printf("artifacts: against the S3 server at %s, curl as the baseline\n", endpoint);
	printf("  %-28s %10s %10s %10s %8s\n", "figure", "median", "p99", "curl", "ratio");
	for (int i = 0; i < nrows; i++) {
		printf("  %-28s %10.2f %10.2f", rows[i].name, rows[i].median, rows[i].p99);
		if (rows[i].has_baseline)
			printf(" %10.2f %7.2fx", rows[i].baseline,
			       rows[i].median / rows[i].baseline);
		else
			printf(" %10s %8s", "", "");
		printf("  %s\n", rows[i].unit);
	}
	printf("  MB/s: median of %d rounds, the p99 column the slowest; higher is better (ratio "
	       ">= 0.83 is within 1.2x of curl); RSS: lower is better, flat in file size\n"
	       "  curl sends unsigned and checks nothing; \"vs signing\": openssl dgst -sha256, "
	       "then curl with that hash as its signed payload hash and x-amz-meta-sha256\n"
	       "  CPU: core-seconds (user + system) of the process doing the put, and of the S3 "
	       "server meanwhile%s; lower is better, the p99 column the most. The server shares "
	       "the %ld cores, so a put's wall time follows the two together\n",
	       ROUNDS, server_pid ? "" : " (not shown: no --server-pid)",
	       sysconf(_SC_NPROCESSORS_ONLN));
	return 0;
}
