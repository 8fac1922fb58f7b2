/*
 * test_collect.c: outputs out of a real sandbox into the store, with every
 * unsafe kind of output refused; and inputs from the store (by key and by
 * an earlier task's manifest) into a sandbox's /inputs, from a directory
 * store and, with the test S3 server, from both S3 stores. As root; skips
 * (77) otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "collect.h"
#include "fixture.h"
#include "inputs.h"
#include "sandbox.h"
#include "tb/sys/store.h" /* a backend of its own, or one called bypassing the checks */
#include "tb/crc32c.h"
#include "tb/sigv4.h"

#include <fcntl.h>

static tb_fixture_t F;

static tb_sandbox_spec_t spec(const char *base, const char *inputs)
{
	static char name[2][32];
	static int k;
	char *n = name[k++ % 2];
	snprintf(n, 32, "%s-%d", base, getpid());
	return (tb_sandbox_spec_t){ .name = n,
				    .hostname = "collect",
				    .slot = 2,
				    .work_root = F.work,
				    .group = "tbcollect",
				    .ro_binds = &tb_fixture_binds,
				    .inputs_dir = inputs,
				    .workspace_mb = 8,
				    .outputs_mb = 8,
				    .memory_mb = 128,
				    .pids = 64,
				    .max_open_files = 64,
				    .max_file_mb = 8 };
}

static int run_sh(tb_sandbox_t *sb, const char *script, char *out, size_t cap)
{
	const char *argv[] = { "/bin/sh", "-c", script, NULL };
	const char *env[] = { "PATH=/usr/bin:/bin", NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	tb_sandbox_exit_t e;
	tb_error_t err;
	int fds[2], id;

	assert_int_equal(pipe(fds), 0);
	ex.stdout_fd = fds[1];
	ex.stderr_fd = fds[1];
	if (tb_sandbox_spawn(sb, &id, &ex, &err) != 0)
		fail_msg("%s", err.msg);
	close(fds[1]);
	assert_int_equal(tb_sandbox_wait(sb, id, 30000, &e, &err), 0);
	ssize_t n = read(fds[0], out, cap - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	return e.end == TB_SANDBOX_EXITED ? e.code : -1;
}

static const char *reason_of(const tb_manifest_t *m, const char *path)
{
	for (size_t i = 0; i < m->refused.n; i++) {
		const tb_refused_t *r = (const tb_refused_t *)m->refused.items + i;
		if (!strcmp(r->path, path))
			return r->reason;
	}
	return NULL;
}

static void test_collect__saves_regular_files_and_refuses_the_rest(void **state)
{
	tb_sandbox_spec_t s = spec("c1", NULL);
	tb_collect_limits_t lim = { .max_files = 3, .max_bytes = 1 << 20 };
	tb_manifest_t m = { 0 };
	tb_sandbox_t *sb;
	tb_error_t err;
	char out[512], outputs[128], got[128];

	(void)state;
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), 0);
	assert_int_equal(
	    run_sh(sb,
		   "cd /outputs && echo alpha > a.txt && mkdir sub && echo beta > sub/b.txt"
		   " && echo gamma > sub/c.txt && echo delta > sub/d.txt"
		   " && head -c 2000000 /dev/zero > z-big.bin"
		   " && ln -s /etc/passwd link && ln -s a.txt inner-link"
		   " && mkfifo fifo && touch \"$(printf 'bad\\377name')\"",
		   out, sizeof(out)),
	    0);
	snprintf(outputs, sizeof(outputs), "/proc/%d/root/outputs", (int)tb_sandbox_init_pid(sb));
	if (tb_collect_outputs(&m, F.store, outputs, "tasks/t-c1/1/outputs/", &lim, &err) != 0)
		fail_msg("collect: %s", err.msg);
	assert_int_equal(m.artifacts.n, 3);
	const tb_artifact_t *a = m.artifacts.items;
	assert_string_equal(a[0].path, "a.txt");
	assert_string_equal(a[1].path, "sub/b.txt");
	assert_string_equal(a[2].path, "sub/c.txt");
	assert_string_equal(a[0].key, "tasks/t-c1/1/outputs/a.txt");
	assert_string_equal(reason_of(&m, "sub/d.txt"), "over the file count limit");
	assert_string_equal(reason_of(&m, "z-big.bin"), "over the file count limit");
	assert_string_equal(reason_of(&m, "link"), "symbolic link (links are not followed)");
	assert_string_equal(reason_of(&m, "inner-link"), "symbolic link (links are not followed)");
	assert_string_equal(reason_of(&m, "fifo"), "not a regular file (fifo)");
	assert_string_equal(reason_of(&m, "bad?name"), "name is not valid UTF-8");
	snprintf(got, sizeof(got), "%s/got.txt", F.root);
	assert_int_equal(
	    tb_store_get_file(F.store, "tasks/t-c1/1/outputs/sub/b.txt", got, 0, NULL, &err), 0);
	FILE *f = fopen(got, "r");
	assert_non_null(fgets(out, sizeof(out), f));
	fclose(f);
	assert_string_equal(out, "beta\n");
	/* The whole manifest, refusals included, passes its own schema. */
	m.task_id = strdup("t-c1");
	m.attempt = 1;
	m.recipe.url = strdup("file:///recipes/x");
	m.recipe.commit = strdup("0123456789abcdef0123456789abcdef01234567");
	m.conversation_key = strdup("tasks/t-c1/1/conversation.msgpack");
	msgpack_sbuffer sb2;
	msgpack_sbuffer_init(&sb2);
	if (tb_msg_encode(&sb2, &tb_schema_manifest, &m, &err) != 0)
		fail_msg("manifest: %s", err.msg);
	msgpack_sbuffer_destroy(&sb2);
	tb_msg_free(&tb_schema_manifest, &m);

	/* With room for one file of 2 MB, the size cap speaks instead. */
	tb_manifest_t m2 = { 0 };
	lim.max_files = 100;
	lim.max_bytes = 1000;
	assert_int_equal(
	    tb_collect_outputs(&m2, F.store, outputs, "tasks/t-c1/2/outputs/", &lim, &err), 0);
	assert_string_equal(reason_of(&m2, "z-big.bin"), "over the size limit");
	tb_msg_free(&tb_schema_manifest, &m2);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
}

/* A device and a socket, which an agent cannot leave in its sandbox's
 * /outputs (no device nodes in its user namespace; a socket needs a tool
 * to bind it), in a host directory collected the same way. */
static void test_collect__devices_and_sockets_are_refused(void **state)
{
	tb_collect_limits_t lim = { .max_files = 10, .max_bytes = 1 << 20 };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	tb_manifest_t m = { 0 };
	tb_error_t err;
	char dir[128], path[192];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/odd-outputs", F.root);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/dev-null", dir);
	if (mknod(path, S_IFCHR | 0600, makedev(1, 3)) != 0)
		fail_msg("mknod %s: %s", path, strerror(errno));
	assert_true((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", dir) <
		    sizeof(sa.sun_path));
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	snprintf(path, sizeof(path), "%s/plain.txt", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("plain\n", f);
	fclose(f);
	if (tb_collect_outputs(&m, F.store, dir, "tasks/t-c4/1/outputs/", &lim, &err) != 0)
		fail_msg("collect: %s", err.msg);
	close(sock);
	assert_int_equal(m.artifacts.n, 1);
	assert_string_equal(((const tb_artifact_t *)m.artifacts.items)[0].path, "plain.txt");
	assert_int_equal(m.refused.n, 2);
	assert_string_equal(reason_of(&m, "dev-null"), "not a regular file (device)");
	assert_string_equal(reason_of(&m, "sock"), "not a regular file (socket)");
	tb_msg_free(&tb_schema_manifest, &m);
	unlink(sa.sun_path);
	unlink(path);
	snprintf(path, sizeof(path), "%s/dev-null", dir);
	unlink(path);
	rmdir(dir);
}

/* 1,100 fifos: a thousand refusals are listed, one entry counts the rest,
 * and the manifest still fits its schema. */
static void test_collect__a_flood_of_refusals_is_summed_up(void **state)
{
	tb_sandbox_spec_t s = spec("c3", NULL);
	tb_collect_limits_t lim = { .max_files = 10, .max_bytes = 1 << 20 };
	tb_manifest_t m = { 0 };
	tb_sandbox_t *sb;
	tb_error_t err;
	char out[512], outputs[128];

	(void)state;
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), 0);
	assert_int_equal(run_sh(sb, "cd /outputs && mkfifo $(seq -f f%04g 1100)", out, sizeof(out)),
			 0);
	snprintf(outputs, sizeof(outputs), "/proc/%d/root/outputs", (int)tb_sandbox_init_pid(sb));
	if (tb_collect_outputs(&m, F.store, outputs, "tasks/t-c3/1/outputs/", &lim, &err) != 0)
		fail_msg("collect: %s", err.msg);
	assert_int_equal(m.artifacts.n, 0);
	assert_int_equal(m.refused.n, 1001);
	assert_string_equal(reason_of(&m, "f1000"), "not a regular file (fifo)");
	assert_null(reason_of(&m, "f1001"));
	assert_string_equal(reason_of(&m, "(more)"), "100 more files were refused; not listed");
	m.task_id = strdup("t-c3");
	m.attempt = 1;
	m.recipe.url = strdup("file:///recipes/x");
	m.recipe.commit = strdup("0123456789abcdef0123456789abcdef01234567");
	m.conversation_key = strdup("tasks/t-c3/1/conversation.msgpack");
	msgpack_sbuffer sb2;
	msgpack_sbuffer_init(&sb2);
	if (tb_msg_encode(&sb2, &tb_schema_manifest, &m, &err) != 0)
		fail_msg("manifest: %s", err.msg);
	msgpack_sbuffer_destroy(&sb2);
	tb_msg_free(&tb_schema_manifest, &m);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
}

/*
 * Names no object store can be trusted to hold are refused up front, the
 * same on every store ('..' or '.' between backslashes, which S3 servers
 * read as a path; control characters), and an object the store itself
 * refuses (here a key over its 1024 bytes, though the path is under its
 * own cap) is refused on its own: the other files are saved and the
 * collection succeeds, where a failure would have run the attempt again.
 * A backslash alone is fine. Run on the directory store and both S3 ones;
 * on S3 (SigV4), the server's own 400 about a key is the object's
 * refusal (TB_EINVAL), not the store failing.
 */
static void test_collect__names_a_store_cannot_hold_are_refused(void **state)
{
	tb_sandbox_spec_t s = spec("c4", NULL);
	tb_collect_limits_t lim = { .max_files = 20, .max_bytes = 1 << 20 };
	tb_manifest_t m = { 0 };
	tb_sandbox_t *sb;
	tb_error_t err;
	char out[512], outputs[128], prefix[64], deep[1100];

	(void)state;
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), 0);
	assert_int_equal(run_sh(sb,
				"cd /outputs && echo 1 > '..\\..\\escape' && echo 2 > 'a\\.\\b' && "
				"echo 3 > \"ctl$(printf '\\001')x\" && echo 4 > 'back\\slash' && "
				"echo 5 > fine.txt && mkdir 'd\\..' && echo 6 > 'd\\../f' && "
				"d=$(printf 'x%.0s' $(seq 1 250)) && mkdir -p $d/$d/$d/$d && "
				"echo 7 > $d/$d/$d/$d/long",
				out, sizeof(out)),
			 0);
	snprintf(outputs, sizeof(outputs), "/proc/%d/root/outputs", (int)tb_sandbox_init_pid(sb));
	snprintf(prefix, sizeof(prefix), "tasks/t-c4-%s/1/outputs/", F.store->ops->name);
	if (tb_collect_outputs(&m, F.store, outputs, prefix, &lim, &err) != 0)
		fail_msg("collect: %s", err.msg);
	const char *pieces = "name has a '.' or '..' piece between backslashes, which object "
			     "stores read as a path and refuse";
	assert_string_equal(reason_of(&m, "..\\..\\escape"), pieces);
	assert_string_equal(reason_of(&m, "a\\.\\b"), pieces);
	assert_string_equal(reason_of(&m, "d\\.."), pieces);
	assert_string_equal(reason_of(&m, "ctl?x"),
			    "name has a control character, which object stores refuse");
	/* four directories of 250 x's and "long": 1008 bytes, a key of over 1024 */
	char *at = deep;
	for (int i = 0; i < 4; i++, at += 251) {
		memset(at, 'x', 250);
		at[250] = '/';
	}
	snprintf(at, 8, "long");
	const char *long_why = reason_of(&m, deep);
	if (!long_why || !strstr(long_why, "the store refused it: ") ||
	    !strstr(long_why, "over the 1024 an object key may have"))
		fail_msg("the long key's refusal: %s", long_why ? long_why : "none");
	assert_int_equal(m.artifacts.n, 2);
	const tb_artifact_t *a = m.artifacts.items;
	assert_string_equal(a[0].path, "back\\slash");
	assert_string_equal(a[1].path, "fine.txt");
	tb_msg_free(&tb_schema_manifest, &m);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	if (!strcmp(F.store->ops->name, "s3")) { /* the server's 400, as such */
		char key[128];
		snprintf(key, sizeof(key), "%s..\\..\\escape", prefix);
		assert_int_equal(tb_store_put_bytes(F.store, key, "x", 1, NULL, &err), TB_EINVAL);
		if (!strstr(err.msg, "HTTP 400"))
			fail_msg("the server's refusal: %s", err.msg);
	}
}

/* Puts @p m as @p key, encoded. */
static void put_manifest(const char *key, const tb_manifest_t *m)
{
	msgpack_sbuffer sb;
	tb_error_t err;

	msgpack_sbuffer_init(&sb);
	assert_int_equal(tb_msg_encode(&sb, &tb_schema_manifest, m, &err), 0);
	assert_int_equal(tb_store_put_bytes(F.store, key, sb.data, sb.size, NULL, &err), 0);
	msgpack_sbuffer_destroy(&sb);
}

/* Attempts of @p task in @p l up to @p attempt, that one done with
 * @p manifest ("" dead-lettered). */
static void ledger_done(tb_ledger_t *l, const char *task, uint64_t attempt, const char *manifest)
{
	uint64_t att = 0;
	tb_error_t err;

	while (att < attempt) /* the same worker takes its own lease over */
		assert_int_equal(tb_ledger_begin(l, task, 60000, &att, &err), 0);
	assert_int_equal(tb_ledger_done(l, task, att, manifest, &err), 0);
}

/* tb_inputs_fetch, every input downloaded whole. */
static int fetch(tb_ledger_t *ledger, const tb_task_t *task, const char *dir, tb_error_t *err)
{
	tb_inputs_t in;
	int rc = tb_inputs_fetch(F.store, ledger, task, dir, 0, &in, err);
	tb_inputs_free(&in);
	return rc;
}

static void test_inputs__by_key_and_by_earlier_task_reach_the_sandbox(void **state)
{
	tb_input_t in[2] = {
		{ .name = "notes.txt", .artifact = "tasks/t-prev/2/outputs/notes.txt" },
		{ .name = "prior/summary.md", .task = "t-prev", .path = "summary.md" }
	};
	tb_task_t task = { .inputs = { 2, in } };
	tb_artifact_t art[2] = {
		{ .path = "summary.md", .key = "tasks/t-prev/2/outputs/summary.md", .size = 8 },
		{ .path = "unasked.txt", .key = "tasks/t-prev/2/outputs/unasked.txt", .size = 7 }
	};
	tb_manifest_t m = { .task_id = "t-prev",
			    .attempt = 2,
			    .conversation_key = "tasks/t-prev/2/c",
			    .recipe = { "file:///r", "0123456789abcdef0123456789abcdef01234567" },
			    .artifacts = { 2, art } };
	tb_object_info_t info, info2;
	tb_sandbox_t *box;
	tb_ledger_t *ledger;
	tb_error_t err;
	char dir[160], out[256];

	(void)state;
	assert_int_equal(tb_ledger_memory_open(&ledger, "test", &err), 0);
	assert_int_equal(tb_store_put_bytes(F.store, in[0].artifact, "my notes", 8, NULL, &err), 0);
	assert_int_equal(tb_store_put_bytes(F.store, art[0].key, "summary!", 8, &info, &err), 0);
	art[0].sha256 = info.sha256;
	/* an output of the earlier task that this one does not name */
	assert_int_equal(tb_store_put_bytes(F.store, art[1].key, "unasked", 7, &info2, &err), 0);
	art[1].sha256 = info2.sha256;
	put_manifest("tasks/t-prev/2/manifest.msgpack", &m);

	/* Not done yet (the ledger has not seen it, then an attempt runs):
	 * the task waits, retried as the platform's failures are. */
	snprintf(dir, sizeof(dir), "%s/inputs-0", F.root);
	assert_int_equal(fetch(ledger, &task, dir, &err), TB_ERETRY);
	assert_non_null(strstr(err.msg, "input prior/summary.md: task t-prev is not done"));
	uint64_t att;
	assert_int_equal(tb_ledger_begin(ledger, "t-prev", 60000, &att, &err), 0);
	assert_int_equal(fetch(ledger, &task, dir, &err), TB_ERETRY);
	assert_non_null(strstr(err.msg, "not done yet (1 attempts so far)"));

	/* Attempt 2 is the one done. A third attempt's manifest, newer in
	 * the store but never done (its run fenced out, say), is not read. */
	ledger_done(ledger, "t-prev", 2, "tasks/t-prev/2/manifest.msgpack");
	tb_artifact_t art3 = { .path = "summary.md",
			       .key = "tasks/t-prev/3/outputs/summary.md",
			       .size = 8 };
	tb_manifest_t m3 = m;
	m3.attempt = 3, m3.artifacts.n = 1, m3.artifacts.items = &art3;
	assert_int_equal(tb_store_put_bytes(F.store, art3.key, "not-this", 8, &info2, &err), 0);
	art3.sha256 = info2.sha256;
	put_manifest("tasks/t-prev/3/manifest.msgpack", &m3);

	snprintf(dir, sizeof(dir), "%s/inputs-1", F.root);
	if (fetch(ledger, &task, dir, &err) != 0)
		fail_msg("fetch: %s", err.msg);
	tb_sandbox_spec_t s = spec("c2", dir);
	if (tb_sandbox_create(&box, F.policy, &s, &err) != 0)
		fail_msg("create: %s", err.msg);
	/* The inputs, only those named, on a read-only mount (its flags, not
	 * just the files' modes). */
	assert_int_equal(run_sh(box,
				"cat /inputs/notes.txt /inputs/prior/summary.md; "
				"(echo x > /inputs/notes.txt) 2>/dev/null || echo ' read-only'; "
				"find /inputs -type f | sort; "
				"grep ' /inputs ' /proc/self/mountinfo | "
				"{ read -r id up dev src mnt opts rest; echo \"${opts%%,*}\"; }",
				out, sizeof(out)),
			 0);
	assert_string_equal(out, "my notessummary! read-only\n"
				 "/inputs/notes.txt\n/inputs/prior/summary.md\nro\n");
	assert_int_equal(tb_sandbox_destroy(box, &err), 0);

	/* A wrong checksum or a missing input can never succeed: poison. */
	in[0].sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
	snprintf(dir, sizeof(dir), "%s/inputs-2", F.root);
	assert_int_equal(fetch(ledger, &task, dir, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "the task expects"));

	/* A record claiming the SHA-256 the task expects, over other content
	 * (whose CRC-32C is right, so the transfer itself passes): the input
	 * is checked against what arrived, not against the record, and the
	 * store is found damaged. */
	static char forged[] = "tasks/t-prev/2/outputs/forged.txt";
	char path[200], want[65];
	if (!strcmp(F.store->ops->name, "s3")) {
		/* A SigV4 put signs the SHA-256 it records as its payload's,
		 * and the server refuses a body that is not that: no forging
		 * through this store. */
		printf("s3: a forged record cannot be put (the server checks it)\n");
		goto missing;
	}
	tb_object_info_t sums = { .size = 6 };
	snprintf(path, sizeof(path), "%s/forged.txt", F.root);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("forged", f);
	fclose(f);
	tb_sha256_hex(want, "my notes", 8);
	snprintf(sums.sha256, sizeof(sums.sha256), "%s", want);
	snprintf(sums.crc32c, sizeof(sums.crc32c), "%08x", (unsigned)tb_crc32c(0, "forged", 6));
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(F.store->ops->put(F.store, forged, fd, &sums, NULL, &err), 0);
	close(fd);
	in[0].artifact = forged;
	in[0].sha256 = want;
	snprintf(dir, sizeof(dir), "%s/inputs-forged", F.root);
	assert_int_equal(fetch(ledger, &task, dir, &err), TB_EIO);
	assert_non_null(strstr(err.msg, "checksum mismatch"));
missing:
	in[0].artifact = "tasks/t-prev/2/outputs/notes.txt";
	in[0].sha256 = NULL;
	in[1].path = "missing.md";
	snprintf(dir, sizeof(dir), "%s/inputs-3", F.root);
	assert_int_equal(fetch(ledger, &task, dir, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "has no output 'missing.md'"));

	/* A task that was dead-lettered has no outputs, and never will. */
	ledger_done(ledger, "t-dead", 1, "");
	in[1].task = "t-dead";
	snprintf(dir, sizeof(dir), "%s/inputs-4", F.root);
	assert_int_equal(fetch(ledger, &task, dir, &err), TB_EPOISON);
	assert_non_null(strstr(err.msg, "task t-dead was dead-lettered"));

	/* Without a ledger, an earlier task's output cannot be resolved. */
	assert_int_equal(fetch(NULL, &task, dir, &err), TB_EINVAL);
	tb_ledger_close(ledger);
}

/* A scratch directory, the seccomp F.policy, and the store: a directory
 * (@p scheme NULL) or a bucket of this run's own on the test S3 server
 * (dropped by tests/run afterwards, as test_store's are). */
static int setup_with(const char *scheme)
{
	tb_store_config_t cfg = { 0 };
	tb_error_t err;
	char url[128];

	/* the directory F.store, or an S3 one with a bucket of its own */
	if (tb_fixture_setup(&F, "collect", "tbcollect", scheme ? 0 : TB_FIXTURE_STORE) < 0)
		return -1;
	if (!scheme)
		return 0;
	snprintf(url, sizeof(url), "%s://tb-%s-%d/collect", scheme, scheme, (int)getpid());
	cfg.url = url, cfg.endpoint = getenv("TASKBOX_TEST_S3_ENDPOINT"),
	cfg.region = getenv("TASKBOX_TEST_S3_REGION");
	if (tb_store_open(&F.store, &cfg, &err) || tb_store_create_bucket(F.store, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		tb_fixture_teardown(&F);
		return -1;
	}
	return 0;
}

static int setup(void **state)
{
	(void)state;
	return setup_with(NULL);
}

static int setup_s3(void **state)
{
	(void)state;
	return setup_with("s3");
}

static int setup_s3v2(void **state)
{
	(void)state;
	return setup_with("s3v2");
}

static int teardown(void **state)
{
	(void)state;
	return tb_fixture_teardown(&F);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_collect__saves_regular_files_and_refuses_the_rest),
		cmocka_unit_test(test_collect__a_flood_of_refusals_is_summed_up),
		cmocka_unit_test(test_collect__devices_and_sockets_are_refused),
		cmocka_unit_test(test_collect__names_a_store_cannot_hold_are_refused),
		cmocka_unit_test(test_inputs__by_key_and_by_earlier_task_reach_the_sandbox),
	};
	/* Inputs through each S3 store too: an earlier task's output is
	 * found through a listing, which each store parses its own way. */
	const struct CMUnitTest via_s3[] = {
		cmocka_unit_test(test_inputs__by_key_and_by_earlier_task_reach_the_sandbox),
		cmocka_unit_test(test_collect__names_a_store_cannot_hold_are_refused),
	};
	if (geteuid() != 0) {
		printf("SKIP: sandboxes need root\n");
		return 77;
	}
	int failed = cmocka_run_group_tests_name("directory store", tests, setup, teardown);
	if (!getenv("TASKBOX_TEST_S3_ENDPOINT") || !getenv("TASKBOX_TEST_S3_ACCESS_KEY") ||
	    !getenv("TASKBOX_TEST_S3_SECRET_KEY")) {
		printf("inputs through S3 not tested: no TASKBOX_TEST_S3_* (deploy/local/services "
		       "env)\n");
		return failed;
	}
	setenv("AWS_ACCESS_KEY_ID", getenv("TASKBOX_TEST_S3_ACCESS_KEY"), 1);
	setenv("AWS_SECRET_ACCESS_KEY", getenv("TASKBOX_TEST_S3_SECRET_KEY"), 1);
	failed += cmocka_run_group_tests_name("s3", via_s3, setup_s3, teardown);
	failed += cmocka_run_group_tests_name("s3v2", via_s3, setup_s3v2, teardown);
	return failed;
}
