/*
 * test_sandbox.c: real sandboxes, as root, trying to break them. Every
 * escape attempt runs /recipe/sandbox_probe inside a sandbox and must be
 * stopped; every limit must end the offender with its own reason while
 * this process (standing in for the worker) carries on; and a thousand
 * sandboxes must leave nothing behind. Skips (77) when not root or when
 * the kernel refuses user namespaces.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fixture.h"
#include "sandbox.h"
#include "sandbox_cgroup.h"
#include "sandbox_ids.h"
#include "image_fs.h"
#include "lazy_fs.h"
#include "tb/encoding.h"
#include "tb/health.h"
#include "sandbox_pool.h"

static tb_fixture_t F;
static char recipe[128];
static char canary[128];
static const char *group = "tbtest";
static const char *probe_image; /* set: spec() builds on this image tree */
static int counter;
extern char **environ;

static tb_sandbox_spec_t spec(void)
{
	static char name[32];
	snprintf(name, sizeof(name), "s%d", ++counter);
	return (tb_sandbox_spec_t){
		.name = name,
		.hostname = "task-test",
		.slot = 1,
		.work_root = F.work,
		.group = group,
		.ro_binds = &tb_fixture_binds,
		.recipe_dir = recipe,
		.workspace_mb = 8,
		.outputs_mb = 8,
		.memory_mb = 64,
		.pids = 32,
		.cpu_millis = 1000,
		.max_open_files = 64,
		.max_file_mb = 64,
		.wall_ms = 0,
		.image_tree = probe_image,
		.writable_mb = 8,
	};
}

/* Runs argv in a fresh sandbox; captures stdout into @p out. */
static tb_sandbox_exit_t run(tb_sandbox_spec_t s, const char *const *argv, char *out, size_t cap)
{
	const char *env[] = { "PATH=/usr/bin:/bin", "HOME=/workspace", NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	tb_sandbox_exit_t e;
	tb_sandbox_t *sb;
	tb_error_t err;
	int pipefd[2], id;

	assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
	ex.stdout_fd = pipefd[1];
	ex.stderr_fd = pipefd[1];
	if (tb_sandbox_create(&sb, F.policy, &s, &err) != 0)
		fail_msg("create: %s", err.msg);
	if (tb_sandbox_spawn(sb, &id, &ex, &err) != 0)
		fail_msg("spawn %s: %s", argv[0], err.msg);
	close(pipefd[1]);
	if (tb_sandbox_wait(sb, id, 60000, &e, &err) != 0)
		fail_msg("wait: %s", err.msg);
	ssize_t n = read(pipefd[0], out, cap - 1);
	out[n > 0 ? n : 0] = '\0';
	close(pipefd[0]);
	if (tb_sandbox_destroy(sb, &err) != 0)
		fail_msg("destroy: %s", err.msg);
	return e;
}

static void probe(const char *what, const char *arg)
{
	const char *argv[] = { "/recipe/sandbox_probe", what, arg, NULL };
	char out[4096];
	tb_sandbox_exit_t e = run(spec(), argv, out, sizeof(out));

	if (e.end != TB_SANDBOX_EXITED || e.code != 0)
		fail_msg("probe %s %s was not stopped (end %d code %d): %s", what, arg, e.end,
			 e.code, out);
}

/*
 * An image's tree as the root: its own files (no host binds), their
 * owners as the image gave them (idmapped), the image's users with the
 * sandbox's added, read-only once assigned; /workspace and the rest as
 * with any root. The tree is made here with busybox-static.
 */
static void test_sandbox__an_image_tree_is_the_root(void **state)
{
	char tree[200], cmd[4096], out[4096];
	(void)state;
	if (access("/bin/busybox", X_OK) != 0 ||
	    system("file -L /bin/busybox | grep -q static") != 0)
		skip(); /* deploy/local/install-deps test installs busybox-static */
	snprintf(tree, sizeof(tree), "%s/image-tree", F.root);
	snprintf(cmd, sizeof(cmd),
		 "set -e; rm -rf %s; mkdir -p %s/bin %s/etc %s/home/app %s/usr/share; "
		 "cp /bin/busybox %s/bin/; ln -s busybox %s/bin/sh; "
		 "echo 'root:x:0:0::/root:/bin/sh' > %s/etc/passwd; "
		 "echo 'app:x:2000:2000::/home/app:/bin/sh' >> %s/etc/passwd; "
		 "echo 'app:x:2000:' > %s/etc/group; echo from-the-image > %s/usr/share/marker; "
		 "chown 2000:2000 %s/home/app; chmod 0750 %s/home/app",
		 tree, tree, tree, tree, tree, tree, tree, tree, tree, tree, tree, tree, tree);
	assert_int_equal(system(cmd), 0);
	tb_sandbox_spec_t s = spec();
	s.image_tree = tree;
	s.writable_mb = 8;
	const char *argv[] = { "/bin/sh", "-c",
			       "cat /usr/share/marker; busybox stat -c 'app %u:%g %a' /home/app; "
			       "test -e /usr/bin/python3 && echo host-visible; "
			       "grep -c '^app:x:2000' /etc/passwd; grep -c ':x:1000:' /etc/passwd; "
			       "grep -c '^judge1:x:1001' /etc/passwd; "
			       "touch /usr/share/new 2>/dev/null && echo root-writable; "
			       "echo w > /workspace/w && cat /workspace/w; id -u",
			       NULL };
	tb_sandbox_exit_t e = run(s, argv, out, sizeof(out));
	if (e.end != TB_SANDBOX_EXITED || e.code != 0)
		fail_msg("the image's shell failed (end %d code %d): %s", e.end, e.code, out);
	const char *want = "from-the-image\napp 2000:2000 750\n1\n1\n1\nw\n1000\n";
	if (strcmp(out, want) != 0)
		fail_msg("inside the image root:\n%s\nwanted:\n%s", out, want);
	/* the tree on the host is as it was */
	snprintf(cmd, sizeof(cmd), "test ! -e %s/workspace && test ! -e %s/usr/share/new", tree,
		 tree);
	assert_int_equal(system(cmd), 0);
}

/* Runs argv in @p sb as @p uid (0: the agent's); its stdout and stderr
 * into @p out. */
static tb_sandbox_exit_t run_as(tb_sandbox_t *sb, unsigned uid, const char *const *argv, char *out,
				size_t cap)
{
	const char *env[] = { "PATH=/usr/bin:/bin", "HOME=/workspace", NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, uid };
	tb_sandbox_exit_t e;
	tb_error_t err;
	int fds[2], id;

	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	ex.stdout_fd = ex.stderr_fd = fds[1];
	if (tb_sandbox_spawn(sb, &id, &ex, &err) != 0)
		fail_msg("spawn %s: %s", argv[0], err.msg);
	close(fds[1]);
	if (tb_sandbox_wait(sb, id, 60000, &e, &err) != 0)
		fail_msg("wait: %s", err.msg);
	ssize_t n = read(fds[0], out, cap - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	return e;
}

static tb_sandbox_exit_t run_in(tb_sandbox_t *sb, const char *const *argv, char *out, size_t cap)
{
	return run_as(sb, 0, argv, out, cap);
}

/* Runs the shell @p script in @p sb as @p uid. */
static tb_sandbox_exit_t sh_as(tb_sandbox_t *sb, unsigned uid, const char *script, char *out,
			       size_t cap)
{
	const char *argv[] = { "/bin/sh", "-c", script, NULL };
	return run_as(sb, uid, argv, out, cap);
}

/*
 * The agent writes into an image's root where the image lets it (here a
 * tool directory the image gave uid 1000), up to writable_mb; the judges
 * then see the image as it was built: the agent's replacement of the
 * tool and its new file are not there, the root is read-only, and the
 * rest of a judge's view (the agent's /workspace, /proc, /dev, /recipe,
 * /etc/hosts) is in place.
 */
static void test_sandbox__judges_see_the_image_without_the_agents_layer(void **state)
{
	char tree[200], cmd[4096], out[4096];
	tb_sandbox_t *sb;
	tb_error_t err;
	(void)state;
	if (system("file -L /bin/busybox | grep -q static") != 0)
		skip();
	snprintf(tree, sizeof(tree), "%s/tool-tree", F.root);
	snprintf(
	    cmd, sizeof(cmd),
	    "set -e; rm -rf %s; mkdir -p %s/bin %s/etc %s/opt/tool; cp /bin/busybox %s/bin/; "
	    "ln -s busybox %s/bin/sh; printf '#!/bin/sh\\necho pristine\\n' > %s/opt/tool/run; "
	    "chmod 0755 %s/opt/tool/run; chown -R 1000:1000 %s/opt/tool",
	    tree, tree, tree, tree, tree, tree, tree, tree, tree);
	assert_int_equal(system(cmd), 0);
	tb_sandbox_spec_t s = spec();
	s.image_tree = tree;
	s.writable_mb = 4;
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), 0);
	tb_sandbox_exit_t e =
	    sh_as(sb, 0,
		  "printf '#!/bin/sh\\necho forged\\n' > /opt/tool/run && /opt/tool/run; "
		  "echo new > /opt/tool/new && cat /opt/tool/new; "
		  "dd if=/dev/zero of=/opt/tool/big bs=1M count=8 2>/dev/null || echo capped; "
		  "rm -f /opt/tool/big; echo w > /workspace/w",
		  out, sizeof(out));
	if (e.end != TB_SANDBOX_EXITED || strcmp(out, "forged\nnew\ncapped\n") != 0)
		fail_msg("the agent in its writable layer (end %d code %d):\n%s", e.end, e.code,
			 out);
	for (unsigned j = 0; j < 2; j++) {
		if (tb_sandbox_judge_view(sb, TB_SANDBOX_JUDGE_ID + j, &err) != 0)
			fail_msg("judge view: %s", err.msg);
		e = sh_as(sb, TB_SANDBOX_JUDGE_ID + j,
			  "/opt/tool/run; test -e /opt/tool/new && echo planted; "
			  "touch /judged 2>/dev/null && echo root-writable; "
			  "cat /workspace/w; test -e /recipe/sandbox_probe && echo recipe; "
			  "grep -c task-test /etc/hosts; cat /etc/hostname; echo; "
			  "head -c 4 /proc/self/status; echo; echo x > /dev/null && echo dev; "
			  "touch /tmp/t && echo tmp; id -u",
			  out, sizeof(out));
		snprintf(cmd, sizeof(cmd),
			 "pristine\nw\nrecipe\n1\ntask-test\nName\ndev\ntmp\n%u\n",
			 TB_SANDBOX_JUDGE_ID + j);
		if (e.end != TB_SANDBOX_EXITED || strcmp(out, cmd) != 0)
			fail_msg("judge %u (end %d code %d) saw:\n%s\nwanted:\n%s", j, e.end,
				 e.code, out, cmd);
	}
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	/* the tree on the host is as it was */
	snprintf(cmd, sizeof(cmd), "grep -q pristine %s/opt/tool/run && test ! -e %s/opt/tool/new",
		 tree, tree);
	assert_int_equal(system(cmd), 0);
}

/* A gzip layer in memory, read by ranges; and the file system an image
 * root served through FUSE is, started for one sandbox's ids. */
typedef struct served {
	uint8_t *p;
	size_t n, at;
	char digest[72];
	tb_layer_index_t *ix;
	tb_image_fs_t *fs;
	uint32_t id_base;
} served_t;

static int64_t served_read(void *arg, void *buf, size_t len, tb_error_t *err)
{
	served_t *l = arg;
	(void)err;
	size_t n = l->n - l->at < len ? l->n - l->at : len;
	memcpy(buf, l->p + l->at, n);
	l->at += n;
	return (int64_t)n;
}

static int64_t served_fetch(void *arg, uint64_t off, void *buf, size_t len, tb_error_t *err)
{
	served_t *l = arg;
	if (off > l->n || len > l->n - off)
		return tb_error_set(err, TB_EINVAL, "a range past the layer");
	memcpy(buf, l->p + off, len);
	return (int64_t)len;
}

static int served_root(void *arg, uint32_t id_base, tb_error_t *err)
{
	served_t *l = arg;
	tb_image_fs_layer_t layer = { l->ix, served_fetch, l, NULL };
	tb_image_fs_conf_t conf = {
		.layers = &layer, .nlayers = 1, .limits = { 1u << 30, 100000 }, .id_base = id_base
	};
	int mfd, rc = tb_image_fs_start(&l->fs, &conf, &mfd, err);
	l->id_base = id_base;
	return rc < 0 ? rc : mfd;
}

/* @p tree as one gzip layer and its index, into @p l. */
static void served_layer(served_t *l, const char *tree)
{
	char cmd[1024], path[300];
	unsigned char sum[32];
	tb_error_t err;

	snprintf(path, sizeof(path), "%s/layer.tar.gz", F.root);
	snprintf(cmd, sizeof(cmd), "tar -C %s --numeric-owner -czf %s .", tree, path);
	assert_int_equal(system(cmd), 0);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	l->n = (size_t)ftell(f);
	rewind(f);
	assert_non_null(l->p = malloc(l->n));
	assert_int_equal(fread(l->p, 1, l->n, f), l->n);
	fclose(f);
	EVP_Digest(l->p, l->n, sum, NULL, EVP_sha256(), NULL);
	memcpy(l->digest, "sha256:", 7);
	tb_hex(l->digest + 7, sum, sizeof(sum));
	if (tb_layer_index_build(l->digest, TB_LAYER_INDEX_SPAN_MIN, served_read, l, &l->ix, &err))
		fail_msg("index: %s", err.msg);
}

/*
 * An image's root served through FUSE from its layer's index (the lazy
 * root, worker/lazy/image_fs.h) is a root like an unpacked tree: the
 * sandbox hands the file system its range of host ids, an overlay puts
 * the agent's writable layer over it, the owners are the image's inside
 * (uid 2000's home, the tool uid 1000's), and the judges see it as the
 * image built it.
 */
static void test_sandbox__an_image_served_through_fuse_is_the_root(void **state)
{
	char tree[200], cmd[4096], out[4096];
	served_t l = { 0 };
	tb_sandbox_t *sb;
	tb_error_t err;
	(void)state;
	if (system("file -L /bin/busybox | grep -q static") != 0 ||
	    access("/dev/fuse", R_OK | W_OK) != 0)
		skip();
	snprintf(tree, sizeof(tree), "%s/served-tree", F.root);
	snprintf(cmd, sizeof(cmd),
		 "set -e; rm -rf %s; mkdir -p %s/bin %s/etc %s/opt/tool %s/home/app; "
		 "cp /bin/busybox %s/bin/; ln -s busybox %s/bin/sh; "
		 "printf '#!/bin/sh\\necho pristine\\n' > %s/opt/tool/run; "
		 "chmod 0755 %s/opt/tool/run; chown -R 1000:1000 %s/opt/tool; "
		 "chown 2000:2000 %s/home/app; chmod 0750 %s/home/app",
		 tree, tree, tree, tree, tree, tree, tree, tree, tree, tree, tree, tree);
	assert_int_equal(system(cmd), 0);
	served_layer(&l, tree);
	tb_sandbox_spec_t s = spec();
	s.image_tree = NULL;
	s.image_root = served_root;
	s.image_root_arg = &l;
	s.writable_mb = 4;
	if (tb_sandbox_create(&sb, F.policy, &s, &err) != 0)
		fail_msg("create: %s", err.msg);
	assert_non_null(l.fs);
	assert_true(l.id_base >= 200000);
	tb_sandbox_exit_t e = sh_as(sb, 0,
				    "busybox stat -c '%u:%g %a' /home/app /opt/tool/run; "
				    "printf '#!/bin/sh\\necho forged\\n' > /opt/tool/run && "
				    "/opt/tool/run; echo w > /workspace/w",
				    out, sizeof(out));
	if (e.end != TB_SANDBOX_EXITED || strcmp(out, "2000:2000 750\n1000:1000 755\nforged\n"))
		fail_msg("the agent on the served root (end %d code %d):\n%s", e.end, e.code, out);
	assert_int_equal(tb_sandbox_judge_view(sb, TB_SANDBOX_JUDGE_ID, &err), 0);
	e = sh_as(sb, TB_SANDBOX_JUDGE_ID, "/opt/tool/run; cat /workspace/w", out, sizeof(out));
	if (e.end != TB_SANDBOX_EXITED || strcmp(out, "pristine\nw\n") != 0)
		fail_msg("the judge on the served root (end %d code %d):\n%s", e.end, e.code, out);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	char why[512];
	assert_int_equal(tb_image_fs_error(l.fs, why, sizeof(why)), 0);
	tb_image_fs_stop(l.fs);
	tb_layer_index_free(l.ix);
	free(l.p);
}

static int refused_root(void *arg, uint32_t id_base, tb_error_t *err)
{
	(void)id_base;
	*(int *)arg += 1;
	return tb_error_set(err, TB_ETOOBIG, "a tree the rules refuse");
}

/* A root that cannot be served fails the sandbox with its reason (the
 * task then pulls the image whole), asked once, leaving nothing, and
 * says nothing of the host (the worker stays ready); a spec with both a
 * tree and a served root is refused before anything. */
static void test_sandbox__a_root_that_cannot_be_served_fails_the_sandbox(void **state)
{
	tb_sandbox_t *sb = NULL;
	tb_error_t err;
	int asked = 0;
	(void)state;
	tb_sandbox_spec_t s = spec();
	s.image_tree = NULL;
	s.image_root = refused_root;
	s.image_root_arg = &asked;
	s.writable_mb = 4;
	tb_health_dep(TB_DEP_SANDBOX, 1, "a sandbox was built");
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), TB_ETOOBIG);
	assert_null(sb);
	assert_int_equal(asked, 1);
	assert_true(tb_health_dep_up(TB_DEP_SANDBOX));
	if (!strstr(err.msg, "the image's root: a tree the rules refuse"))
		fail_msg("a refused root said: %s", err.msg);
	s.image_tree = "/nonexistent";
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), TB_EINVAL);
	assert_int_equal(asked, 1);
}

/* An image whose /etc, /dev and /tmp are links out of it (absolute and
 * relative) and whose /etc/passwd would be a FIFO: init, which builds on
 * host paths until its pivot, makes them directories of the overlay
 * first; nothing lands on the host, and the sandbox works. */
static void test_sandbox__an_image_cannot_lead_init_out(void **state)
{
	char tree[200], host[200], cmd[4096], out[4096];
	(void)state;
	if (system("file -L /bin/busybox | grep -q static") != 0)
		skip();
	snprintf(tree, sizeof(tree), "%s/hostile-tree", F.root);
	snprintf(host, sizeof(host), "%s/host-side", F.root);
	snprintf(cmd, sizeof(cmd),
		 "set -e; rm -rf %s %s; mkdir -p %s/bin %s; cp /bin/busybox %s/bin/; "
		 "ln -s busybox %s/bin/sh; ln -s %s %s/etc; ln -s ../../../../../../..%s %s/dev; "
		 "ln -s %s %s/tmp; mkfifo %s/passwd",
		 tree, host, tree, host, tree, tree, host, tree, host, tree, host, tree, host);
	assert_int_equal(system(cmd), 0);
	tb_sandbox_spec_t s = spec();
	s.image_tree = tree;
	s.writable_mb = 8;
	const char *argv[] = { "/bin/sh", "-c", "grep -c ':x:1000:' /etc/passwd; id -u", NULL };
	tb_sandbox_exit_t e = run(s, argv, out, sizeof(out));
	if (e.end != TB_SANDBOX_EXITED || e.code != 0 || strcmp(out, "1\n1000\n") != 0)
		fail_msg("the hostile image's sandbox (end %d code %d): %s", e.end, e.code, out);
	/* the host side holds only the FIFO it had */
	snprintf(cmd, sizeof(cmd), "test \"$(ls -A %s)\" = passwd", host);
	if (system(cmd) != 0)
		fail_msg("init wrote into %s", host);
}

static void test_sandbox__runs_processes_and_reports_exit_codes(void **state)
{
	const char *argv[] = { "/bin/sh", "-c", "echo \"$(id -u):$(hostname):$(pwd)\"; exit 7",
			       NULL };
	char out[256];

	(void)state;
	tb_sandbox_exit_t e = run(spec(), argv, out, sizeof(out));
	assert_int_equal(e.end, TB_SANDBOX_EXITED);
	assert_int_equal(e.code, 7);
	assert_string_equal(out, "1000:task-test:/workspace\n");
}

static void test_sandbox__missing_program_is_a_clear_error(void **state)
{
	const char *argv[] = { "/no/such/agent", NULL };
	const char *env[] = { NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	tb_sandbox_spec_t s = spec();
	tb_sandbox_t *sb;
	tb_error_t err;
	int id;

	(void)state;
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), 0);
	assert_int_equal(tb_sandbox_spawn(sb, &id, &ex, &err), TB_ENOTFOUND);
	assert_non_null(strstr(err.msg, "/no/such/agent"));
	assert_non_null(strstr(err.msg, "No such file"));
	/* a working directory that is not there (an image's WorkingDir) */
	const char *ok[] = { "/bin/true", NULL };
	ex.argv = ok;
	ex.cwd = "/no/such/dir";
	assert_int_equal(tb_sandbox_spawn(sb, &id, &ex, &err), TB_ENOTFOUND);
	if (!strstr(err.msg, "working directory /no/such/dir"))
		fail_msg("a missing working directory said: %s", err.msg);
	/* The sandbox is still usable afterwards: judges run after agents. */
	ex.cwd = NULL;
	tb_sandbox_exit_t e;
	assert_int_equal(tb_sandbox_spawn(sb, &id, &ex, &err), 0);
	assert_int_equal(tb_sandbox_wait(sb, id, 10000, &e, &err), 0);
	assert_int_equal(e.code, 0);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
}

/* Init is taskbox-sandbox-init, executed at once by the clone, not a
 * copy of the worker (whose page tables each sandbox would copy). */
static void test_sandbox__init_is_its_own_small_program(void **state)
{
	tb_sandbox_spec_t s = spec();
	char path[64], exe[4096];
	tb_sandbox_t *sb;
	tb_error_t err;
	ssize_t n;

	(void)state;
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), 0);
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)tb_sandbox_init_pid(sb));
	n = readlink(path, exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	assert_non_null(strstr(exe, "/taskbox-sandbox-init"));
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)tb_sandbox_init_pid(sb));
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	n = (ssize_t)fread(exe, 1, sizeof(exe) - 1, f);
	fclose(f);
	exe[n > 0 ? n : 0] = '\0';
	/* argv[1] names the sandbox, for an operator's ps */
	assert_string_equal(exe + strlen(exe) + 1, s.name);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
}

static void test_sandbox__prepared_runs_nothing_until_assigned(void **state)
{
	const char *argv[] = { "/bin/sh", "-c", "ls -a / | tr '\\n' ' '; ls /recipe", NULL };
	const char *env[] = { "PATH=/usr/bin:/bin", NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	tb_sandbox_spec_t s = spec();
	tb_sandbox_exit_t e;
	tb_sandbox_t *sb;
	tb_error_t err;
	char out[1024];
	int id, fds[2];

	(void)state;
	assert_int_equal(tb_sandbox_prepare(&sb, F.policy, &s, &err), 0);
	assert_int_equal(tb_sandbox_spawn(sb, &id, &ex, &err), TB_EINVAL);
	assert_non_null(strstr(err.msg, "not assigned"));
	assert_int_equal(tb_sandbox_assign(sb, &s, &err), 0);
	assert_int_equal(tb_sandbox_assign(sb, &s, &err), TB_EINVAL);
	assert_int_equal(pipe(fds), 0);
	ex.stdout_fd = fds[1];
	assert_int_equal(tb_sandbox_spawn(sb, &id, &ex, &err), 0);
	close(fds[1]);
	assert_int_equal(tb_sandbox_wait(sb, id, 10000, &e, &err), 0);
	ssize_t n = read(fds[0], out, sizeof(out) - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	/* The host root the preparation used is gone; the recipe is there. */
	assert_null(strstr(out, ".host"));
	assert_non_null(strstr(out, "sandbox_probe"));
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
}

static void test_sandbox__refuses_dangerous_binds(void **state)
{
	char *bad[] = { "/", "/proc", "/sys/fs", "relative", "/usr/../etc", "/dev" };
	tb_sandbox_spec_t s = spec();
	tb_sandbox_t *sb;
	tb_error_t err;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_strlist_t one = { 1, &bad[i] };
		s.ro_binds = &one;
		assert_int_equal(tb_sandbox_prepare(&sb, F.policy, &s, &err), TB_EINVAL);
		assert_non_null(strstr(err.msg, "ro_binds"));
	}
}

static void test_sandbox__judges_are_out_of_the_agents_reach(void **state)
{
	const char *judge_argv[] = { "/bin/sh", "-c", "id -u; exec sleep 30", NULL };
	const char *agent_argv[] = { "/bin/sh", "-c",
				     "setsid sleep 60 & kill -9 -1; echo still-here", NULL };
	const char *env[] = { "PATH=/usr/bin:/bin", NULL };
	tb_sandbox_exec_t judge = { judge_argv, env, NULL, -1, -1, -1, -1, TB_SANDBOX_JUDGE_ID };
	tb_sandbox_exec_t agent = { agent_argv, env, NULL, -1, -1, -1, -1, 0 };
	tb_sandbox_spec_t s = spec();
	tb_sandbox_exit_t e;
	tb_sandbox_t *sb;
	tb_error_t err;
	char out[64];
	int jid, aid, fds[2];

	(void)state;
	assert_int_equal(pipe(fds), 0);
	judge.stdout_fd = fds[1];
	assert_int_equal(tb_sandbox_create(&sb, F.policy, &s, &err), 0);
	assert_int_equal(tb_sandbox_spawn(sb, &jid, &judge, &err), 0);
	close(fds[1]);
	/* The agent kills everything it may: not the judge (another uid). */
	assert_int_equal(tb_sandbox_spawn(sb, &aid, &agent, &err), 0);
	assert_int_equal(tb_sandbox_wait(sb, aid, 10000, &e, &err), 0);
	assert_int_equal(tb_sandbox_wait(sb, jid, 300, &e, &err), TB_ETIMEOUT);
	ssize_t n = read(fds[0], out, sizeof(out) - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	assert_string_equal(out, "1001\n");
	/* Between phases the worker ends whatever is left, judge included. */
	assert_int_equal(tb_sandbox_kill_all(sb, &err), 0);
	assert_int_equal(tb_sandbox_wait(sb, jid, 10000, &e, &err), 0);
	assert_int_equal(e.end, TB_SANDBOX_SIGNALED);
	assert_int_equal(e.signal, SIGKILL);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
}

static void test_sandbox__cannot_read_a_host_canary(void **state)
{
	(void)state;
	probe("read", canary);
	probe("read", "/etc/shadow");
	probe("read", "/.host/etc/passwd");
}

static void test_sandbox__cannot_write_into_the_recipe_or_root(void **state)
{
	(void)state;
	probe("write", "/recipe/planted");
	probe("write", "/usr/bin/planted");
	probe("write", "/etc/planted");
}

static void test_sandbox__sees_no_host_processes(void **state)
{
	(void)state;
	probe("procs", "");
}

static void test_sandbox__cannot_mount_ptrace_or_make_user_namespaces(void **state)
{
	(void)state;
	probe("mount", "");
	probe("ptrace", "");
	probe("userns", "");
	probe("syscalls", "");
}

/* Socket families the network namespace does not isolate (vsock above
 * all) and those a task has no business with are refused by the policy. */
static void test_sandbox__only_namespaced_socket_families(void **state)
{
	(void)state;
	probe("vsock", "");
	probe("families", "");
}

static void test_sandbox__runs_unprivileged_under_seccomp(void **state)
{
	(void)state;
	probe("identity", "");
}

static void test_sandbox__cannot_escape_its_cgroup(void **state)
{
	(void)state;
	probe("cgroup", "");
}

static void test_sandbox__cannot_reach_a_server_on_the_host_loopback(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char port[16];

	(void)state;
	assert_true(srv >= 0);
	assert_int_equal(bind(srv, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(srv, 4), 0);
	assert_int_equal(getsockname(srv, (struct sockaddr *)&a, &len), 0);
	snprintf(port, sizeof(port), "%d", ntohs(a.sin_port));
	probe("connect", port);
	close(srv);
}

static void test_limits__fork_bomb_stops_at_the_pids_limit(void **state)
{
	const char *argv[] = { "/recipe/sandbox_probe", "forkbomb", NULL };
	char out[512], why[128];

	(void)state;
	tb_sandbox_exit_t e = run(spec(), argv, out, sizeof(out));
	assert_int_equal(e.end, TB_SANDBOX_PIDS_LIMIT);
	printf("fork bomb: %s (%s)\n", tb_sandbox_end_describe(&e, why, sizeof(why)), out);
}

static void test_limits__memory_bomb_ends_as_oom(void **state)
{
	const char *argv[] = { "/recipe/sandbox_probe", "membomb", NULL };
	char out[512], why[128];

	(void)state;
	tb_sandbox_exit_t e = run(spec(), argv, out, sizeof(out));
	assert_int_equal(e.end, TB_SANDBOX_OOM);
	printf("memory bomb: %s\n", tb_sandbox_end_describe(&e, why, sizeof(why)));
}

static void test_limits__disk_filler_gets_enospc_in_workspace(void **state)
{
	(void)state;
	probe("diskfill", "/workspace");
	probe("diskfill", "/tmp");
	probe("diskfill", "/outputs");
}

/*
 * Every escape the probes try, and every limit, with an image's tree as
 * the root (the agent's writable layer over it included): each is
 * stopped as on host binds. The image has a root-owned /usr/bin and
 * /etc/shadow, and a directory the agent owns, where a disk filler meets
 * the writable layer's size. The probe is a static program.
 */
static void test_sandbox__escapes_are_stopped_in_an_image_root(void **state)
{
	char tree[200], cmd[4096];
	if (system("file -L /bin/busybox | grep -q static") != 0 ||
	    system("file -L " TB_PROBE " | grep -q static") != 0)
		skip();
	snprintf(tree, sizeof(tree), "%s/probe-tree", F.root);
	snprintf(cmd, sizeof(cmd),
		 "set -e; rm -rf %s; mkdir -p %s/bin %s/usr/bin %s/etc %s/opt/mine; "
		 "cp /bin/busybox %s/bin/; ln -s busybox %s/bin/sh; "
		 "echo 'root:secret:1:0:99999:7:::' > %s/etc/shadow; chmod 0600 %s/etc/shadow; "
		 "chown 1000:1000 %s/opt/mine",
		 tree, tree, tree, tree, tree, tree, tree, tree, tree, tree);
	assert_int_equal(system(cmd), 0);
	probe_image = tree;
	test_sandbox__cannot_read_a_host_canary(state);
	test_sandbox__cannot_write_into_the_recipe_or_root(state);
	probe("write", "/bin/busybox");
	test_sandbox__sees_no_host_processes(state);
	test_sandbox__cannot_mount_ptrace_or_make_user_namespaces(state);
	test_sandbox__only_namespaced_socket_families(state);
	test_sandbox__runs_unprivileged_under_seccomp(state);
	test_sandbox__cannot_escape_its_cgroup(state);
	test_sandbox__cannot_reach_a_server_on_the_host_loopback(state);
	test_limits__fork_bomb_stops_at_the_pids_limit(state);
	test_limits__memory_bomb_ends_as_oom(state);
	test_limits__disk_filler_gets_enospc_in_workspace(state);
	probe("diskfill", "/opt/mine"); /* the writable layer's size */
	probe_image = NULL;
}

static int no_probe_image(void **state)
{
	(void)state;
	probe_image = NULL;
	return 0;
}

static void test_limits__runaway_is_killed_at_the_deadline(void **state)
{
	const char *argv[] = { "/recipe/sandbox_probe", "spin", NULL };
	tb_sandbox_spec_t s = spec();
	char out[64], why[128];

	(void)state;
	s.wall_ms = 300;
	tb_sandbox_exit_t e = run(s, argv, out, sizeof(out));
	assert_int_equal(e.end, TB_SANDBOX_DEADLINE);
	printf("runaway: %s\n", tb_sandbox_end_describe(&e, why, sizeof(why)));
}

static int count_entries(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			n++;
	closedir(d);
	return n;
}

static int count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	int n = 0, c;

	if (!f)
		return -1;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static int count_children(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", getpid(), getpid());
	FILE *f = fopen(path, "r");
	int n = 0, c, in = 0;
	if (!f)
		return -1;
	while ((c = fgetc(f)) != EOF) {
		if (c != ' ' && !in)
			n++;
		in = c != ' ';
	}
	fclose(f);
	return n;
}

/* The cgroups whose names start with @p prefix under our group, in
 * every hierarchy (v1 and v2). */
static int count_cgroups(const char *prefix)
{
	const char *hier[] = { "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu",
			       "/sys/fs/cgroup/unified", "/sys/fs/cgroup" };
	char cg[1024]; /* a hierarchy, our group (up to 511), the test's */
	int n = 0;

	for (size_t h = 0; h < sizeof(hier) / sizeof(hier[0]); h++) {
		char own[512] = "";
		FILE *f = fopen("/proc/self/cgroup", "r");
		char line[512];
		while (f && fgets(line, sizeof(line), f)) {
			const char *name = strrchr(hier[h], '/') + 1;
			char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
			if (c2 && ((strstr(c1, name) && c2 > strstr(c1, name)) ||
				   (!strcmp(name, "unified") && c2 == c1 + 1))) {
				snprintf(own, sizeof(own), "%s", c2 + 1);
				own[strcspn(own, "\n")] = '\0';
			}
		}
		if (f)
			fclose(f);
		snprintf(cg, sizeof(cg), "%s%s/%s", hier[h], strcmp(own, "/") ? own : "", group);
		n += count_entries(cg, prefix);
	}
	return n;
}

static void test_teardown__a_thousand_sandboxes_leave_nothing(void **state)
{
	const char *argv[] = { "/bin/true", NULL };
	const char *env[] = { NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	int mounts = count_lines("/proc/self/mountinfo");
	tb_error_t err;

	(void)state;
	for (int i = 0; i < 1000; i++) {
		tb_sandbox_spec_t s = spec();
		tb_sandbox_exit_t e;
		tb_sandbox_t *sb;
		int id;
		if (tb_sandbox_create(&sb, F.policy, &s, &err) != 0)
			fail_msg("sandbox %d: %s", i, err.msg);
		if (tb_sandbox_spawn(sb, &id, &ex, &err) != 0 ||
		    tb_sandbox_wait(sb, id, 10000, &e, &err) != 0)
			fail_msg("sandbox %d: %s", i, err.msg);
		assert_int_equal(e.code, 0);
		if (tb_sandbox_destroy(sb, &err) != 0)
			fail_msg("sandbox %d: %s", i, err.msg);
	}
	assert_int_equal(count_entries(F.work, group), 0);
	assert_int_equal(count_children(), 0);
	assert_int_equal(count_lines("/proc/self/mountinfo"), mounts);
	/* No sandbox cgroup is left under our group in any hierarchy. */
	assert_int_equal(count_cgroups("s"), 0);
}

/* A "worker" that builds a sandbox (@p frozen: and freezes it, as an
 * idle session's) and dies without tearing down. */
static void dead_worker_leaves_a_sandbox(int frozen)
{
	tb_sandbox_spec_t s = spec();
	tb_sandbox_t *sb;
	tb_error_t err;
	int status;

	pid_t w = fork();
	if (w == 0) {
		if (tb_sandbox_create(&sb, F.policy, &s, &err) != 0 ||
		    (frozen && tb_sandbox_freeze(sb, 1, &err) != 0))
			_exit(1);
		_exit(0);
	}
	assert_int_equal(waitpid(w, &status, 0), w);
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_sweep__removes_what_a_dead_worker_left(void **state)
{
	tb_error_t err;

	(void)state;
	dead_worker_leaves_a_sandbox(0);
	int removed = tb_sandbox_sweep(F.work, group, &err);
	assert_int_equal(removed, 1); /* once, whatever the number of hierarchies */
	assert_int_equal(tb_sandbox_sweep(F.work, group, &err), 0);
	assert_int_equal(count_entries(F.work, group), 0);
}

/* A dead worker's idle session is left frozen: the sweep thaws it in
 * every hierarchy before it kills, or (cgroup v1, the freezer a
 * hierarchy of its own) the frozen processes cannot die while the other
 * hierarchies wait for them. */
static void test_sweep__removes_a_frozen_sandbox(void **state)
{
	tb_error_t err = { 0 };

	(void)state;
	dead_worker_leaves_a_sandbox(1);
	int removed = tb_sandbox_sweep(F.work, group, &err);
	if (removed != 1)
		fail_msg("swept %d of 1 frozen sandbox: %s", removed, err.msg);
	assert_int_equal(count_entries(F.work, group), 0);
}

/* The pids of every child of every thread of this process. */
static int all_children(pid_t *out, int cap)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d))) {
		char path[300];
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/children", de->d_name);
		FILE *f = fopen(path, "r");
		long pid;
		while (f && n < cap && fscanf(f, "%ld", &pid) == 1)
			out[n++] = (pid_t)pid;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

/* Waits up to 10 s for @p n live sandboxes: their inits are the only
 * children of this process's threads. */
static int await_sandboxes(int n)
{
	pid_t kids[64];

	for (int i = 0; i < 1000 && all_children(kids, 64) != n; i++)
		usleep(10000);
	return all_children(kids, 64);
}

/* Takes a sandbox with a @p workspace_mb workspace from @p pool and
 * destroys it. @return whether it was built ahead */
static int take_and_drop(tb_sandbox_pool_t *pool, uint64_t workspace_mb)
{
	tb_sandbox_spec_t s = spec();
	tb_sandbox_t *sb;
	tb_error_t err;
	int prepared;

	s.workspace_mb = workspace_mb;
	if (tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err) != 0)
		fail_msg("pool: %s", err.msg);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	return prepared;
}

/* A tree with busybox-static whose /marker says @p what, at @p tree. */
static void marker_tree(const char *tree, const char *what)
{
	char cmd[2048]; /* six times the tree (up to 199 bytes), and the rest */
	snprintf(cmd, sizeof(cmd),
		 "set -e; rm -rf %s; mkdir -p %s/bin; cp /bin/busybox %s/bin/; "
		 "ln -s busybox %s/bin/sh; echo %s > %s/marker",
		 tree, tree, tree, tree, what, tree);
	assert_int_equal(system(cmd), 0);
}

/* Whether someone holds @p path's flock (as the image cache's eviction
 * asks: exclusive, without waiting). */
static int held(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	int busy = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	return busy;
}

/*
 * The pool keys prepared sandboxes by image: the next task on the same
 * image takes one built ahead on it, a task on another image gets one
 * built on the spot; the image a prepared sandbox stands on stays held
 * (its cache lock) after the task that asked let go of it, and is let go
 * of when that sandbox is replaced.
 */
static void test_pool__prepared_sandboxes_are_kept_per_image(void **state)
{
	const char *look[] = { "/bin/sh", "-c", "cat /marker", NULL };
	char a[200], b[200], lock[220], out[256];
	tb_sandbox_pool_t *pool;
	tb_sandbox_t *sb;
	tb_error_t err;
	int prepared;
	(void)state;
	if (system("file -L /bin/busybox | grep -q static") != 0)
		skip();
	snprintf(a, sizeof(a), "%s/pool-image-a", F.root);
	snprintf(b, sizeof(b), "%s/pool-image-b", F.root);
	snprintf(lock, sizeof(lock), "%s/pool-image-a.lock", F.root);
	marker_tree(a, "image-a");
	marker_tree(b, "image-b");
	int hold = open(lock, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(hold >= 0);
	assert_int_equal(flock(hold, LOCK_SH), 0);
	assert_int_equal(tb_sandbox_pool_new(&pool, F.policy, F.work, group, 2, &err), 0);

	const char *trees[] = { a, a, b };
	const int want_prepared[] = { 0, 1, 0 };
	for (int i = 0; i < 3; i++) {
		tb_sandbox_spec_t s = spec();
		s.image_tree = trees[i];
		s.writable_mb = 4;
		s.image_hold = i == 0 ? hold : 0;
		if (tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err) != 0)
			fail_msg("pool, task %d: %s", i, err.msg);
		if (i == 0) { /* the task lets go; the slot's next sandbox holds it */
			close(hold);
			assert_true(held(lock));
		}
		assert_int_equal(prepared, want_prepared[i]);
		tb_sandbox_exit_t e = run_in(sb, look, out, sizeof(out));
		assert_int_equal(e.code, 0);
		assert_string_equal(out, i < 2 ? "image-a\n" : "image-b\n");
		assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
		if (i < 2)
			assert_int_equal(await_sandboxes(1), 1);
	}
	/* the slot moved on to image b: nothing holds a any more */
	assert_false(held(lock));
	tb_sandbox_pool_free(pool);
	assert_int_equal(count_entries(F.work, group), 0);
}

static void test_pool__the_next_task_takes_a_sandbox_built_ahead(void **state)
{
	const char *mark[] = { "/bin/sh", "-c", "echo left > /workspace/mark; hostname", NULL };
	const char *look[] = { "/bin/sh", "-c", "ls -A /workspace; hostname; ls /recipe", NULL };
	tb_sandbox_pool_t *pool;
	tb_sandbox_t *sb;
	tb_error_t err;
	char out[1024];
	int prepared;

	(void)state;
	assert_int_equal(tb_sandbox_pool_new(&pool, F.policy, F.work, group, 2, &err), 0);
	tb_sandbox_spec_t s = spec();
	/* The slot's first task: nothing was built for it yet. */
	if (tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err) != 0)
		fail_msg("pool: %s", err.msg);
	assert_int_equal(prepared, 0);
	assert_int_equal(run_in(sb, mark, out, sizeof(out)).code, 0);
	assert_string_equal(out, "task-test\n");
	/* Its next sandbox is built while it runs. */
	assert_int_equal(await_sandboxes(2), 2);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);

	s = spec();
	s.hostname = "second";
	if (tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err) != 0)
		fail_msg("pool: %s", err.msg);
	assert_int_equal(prepared, 1);
	/* A fresh workspace, the task's hostname and recipe. */
	tb_sandbox_exit_t e = run_in(sb, look, out, sizeof(out));
	assert_int_equal(e.code, 0);
	assert_string_equal(out, "second\nsandbox_probe\n");
	/* Escapes stay stopped in a sandbox built ahead. */
	const char *probe_argv[] = { "/recipe/sandbox_probe", "procs", NULL };
	e = run_in(sb, probe_argv, out, sizeof(out));
	if (e.code != 0)
		fail_msg("probe in a prepared sandbox: %s", out);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);

	/* Another shape (a bigger workspace): built on the spot, and the
	 * slot's next one is built to it. */
	assert_int_equal(await_sandboxes(1), 1);
	assert_int_equal(take_and_drop(pool, 16), 0);
	assert_int_equal(await_sandboxes(1), 1);
	assert_int_equal(take_and_drop(pool, 16), 1);

	/* Freed: the sandbox built ahead goes too. */
	assert_int_equal(await_sandboxes(1), 1);
	tb_sandbox_pool_free(pool);
	assert_int_equal(count_entries(F.work, group), 0);
	pid_t kids[16];
	assert_int_equal(all_children(kids, 16), 0);
}

/* A worker that stops drops the sandboxes built ahead at once, cgroups
 * and all, while a task still holds the one it took (its drain may end
 * at the timeout, the pool still in use). */
static void test_pool__a_stopping_worker_drops_what_was_built_ahead(void **state)
{
	tb_sandbox_pool_t *pool;
	tb_sandbox_t *sb;
	tb_error_t err;
	int prepared;

	(void)state;
	assert_int_equal(tb_sandbox_pool_new(&pool, F.policy, F.work, group, 2, &err), 0);
	tb_sandbox_spec_t s = spec();
	if (tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err) != 0)
		fail_msg("pool: %s", err.msg);
	assert_int_equal(await_sandboxes(2), 2); /* the task's, and the next one */
	assert_true(count_cgroups("pool") > 0);
	tb_sandbox_pool_drop_spares(pool);
	assert_int_equal(count_cgroups("pool"), 0);
	assert_int_equal(await_sandboxes(1), 1); /* the task's, still there */
	/* no more built ahead: the next task builds its own */
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	if (tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err) != 0)
		fail_msg("pool: %s", err.msg);
	assert_int_equal(prepared, 0);
	usleep(200000);
	assert_int_equal(count_cgroups("pool"), 0);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	tb_sandbox_pool_free(pool);
	assert_int_equal(count_entries(F.work, group), 0);
}

/* A session's sandbox (next = 0) gets no successor while it lives: the
 * slot's next task builds its own, and asks for one again. */
static void test_pool__a_session_gets_no_successor(void **state)
{
	tb_sandbox_pool_t *pool;
	tb_sandbox_t *sb;
	tb_error_t err;
	int prepared;
	pid_t kids[16];

	(void)state;
	assert_int_equal(tb_sandbox_pool_new(&pool, F.policy, F.work, group, 2, &err), 0);
	tb_sandbox_spec_t s = spec();
	assert_int_equal(tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err), 0);
	assert_int_equal(await_sandboxes(2), 2);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	/* the session takes the one built ahead, and nothing is built after it */
	s = spec();
	assert_int_equal(tb_sandbox_pool_create(pool, &s, 0, &sb, &prepared, &err), 0);
	assert_int_equal(prepared, 1);
	usleep(500 * 1000); /* a build takes tens of milliseconds */
	assert_int_equal(all_children(kids, 16), 1);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	/* the task after it: built on the spot, its successor built again */
	s = spec();
	assert_int_equal(tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err), 0);
	assert_int_equal(prepared, 0);
	assert_int_equal(await_sandboxes(2), 2);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	tb_sandbox_pool_free(pool);
	assert_int_equal(count_entries(F.work, group), 0);
	assert_int_equal(all_children(kids, 16), 0);
}

static void test_pool__a_prepared_sandbox_that_died_is_replaced(void **state)
{
	const char *argv[] = { "/bin/true", NULL };
	tb_sandbox_pool_t *pool;
	tb_sandbox_t *sb;
	tb_error_t err;
	char out[256];
	int prepared;
	pid_t kids[16];

	(void)state;
	assert_int_equal(tb_sandbox_pool_new(&pool, F.policy, F.work, group, 2, &err), 0);
	tb_sandbox_spec_t s = spec();
	assert_int_equal(tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err), 0);
	assert_int_equal(await_sandboxes(2), 2);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	/* The one built ahead is the only child left: its init dies. */
	assert_int_equal(all_children(kids, 16), 1);
	assert_int_equal(kill(kids[0], SIGKILL), 0);
	s = spec();
	if (tb_sandbox_pool_create(pool, &s, 1, &sb, &prepared, &err) != 0)
		fail_msg("pool: %s", err.msg);
	assert_int_equal(prepared, 0);
	assert_int_equal(run_in(sb, argv, out, sizeof(out)).code, 0);
	assert_int_equal(tb_sandbox_destroy(sb, &err), 0);
	tb_sandbox_pool_free(pool);
	assert_int_equal(count_entries(F.work, group), 0);
	assert_int_equal(all_children(kids, 16), 0);
}

/*
 * Inputs read on demand (worker/lazy): a file of the lazy inputs' mount is
 * bound over its place under /inputs, among the eager ones; the agent
 * reads it whole, checked block by block against the dir store, and
 * cannot write it.
 */
static void test_sandbox__lazy_inputs_are_read_in_place(void **state)
{
	const char *look[] = { "/bin/sh", "-c",
			       "stat -c %s /inputs/data/big.bin; sha256sum < /inputs/data/big.bin; "
			       "cat /inputs/small.txt; (echo x > /inputs/data/big.bin) 2>/dev/null "
			       "|| echo refused",
			       NULL };
	char dir[256], path[1200], want[512], out[512], sha[65];
	const size_t size = 3 * TB_BLOCK_SIZE + 7;
	tb_store_t *store;
	tb_blocks_t blocks;
	tb_lazy_fs_t *fs;
	tb_error_t err;
	int mfd;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/lazy-store", F.root);
	assert_int_equal(tb_store_dir_open(&store, dir, &err), 0);
	snprintf(path, sizeof(path), "%s/lazy-content", F.root);
	FILE *f = fopen(path, "we");
	assert_non_null(f);
	for (size_t i = 0; i < size; i++)
		fputc((int)((i * 7919u) ^ (i >> 11)) & 0xff, f);
	fclose(f);
	assert_int_equal(tb_store_put_file(store, "uploads/big", path, NULL, &err), 0);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_int_equal(tb_blocks_of_fd(fd, "big", &blocks, sha, &err), 0);
	close(fd);
	/* the inputs directory: an eager file, and the lazy one's place */
	snprintf(dir, sizeof(dir), "%s/lazy-inputs", F.root);
	snprintf(path, sizeof(path),
		 "mkdir -p %s/data && echo eager > %s/small.txt && "
		 ": > %s/data/big.bin && chmod -R a+rX %s",
		 dir, dir, dir, dir);
	assert_int_equal(system(path), 0);
	tb_lazy_file_t files[] = { { "0", "uploads/big", &blocks, NULL } };
	tb_lazy_fs_conf_t conf = { .store = store, .files = files, .nfiles = 1 };
	if (tb_lazy_fs_start(&fs, &conf, &mfd, &err) != 0)
		fail_msg("lazy: %s", err.msg);
	char *paths_v[] = { (char *)"data/big.bin" };
	tb_strlist_t paths = { 1, paths_v };
	tb_sandbox_spec_t s = spec();
	s.inputs_dir = dir;
	s.lazy_mount = mfd;
	s.lazy_paths = &paths;
	tb_sandbox_exit_t e = run(s, look, out, sizeof(out));
	snprintf(want, sizeof(want), "%zu\n%s  -\neager\nrefused\n", size, sha);
	assert_int_equal(e.code, 0);
	assert_string_equal(out, want);
	assert_int_equal(tb_lazy_fs_fetched(fs, 0), size); /* read once, whole */
	close(mfd);
	tb_lazy_fs_stop(fs);
	tb_blocks_free(&blocks);
	tb_store_close(store);
}

/* Whether process @p pid (a /proc name) is in a cgroup whose path holds
 * @p cg. */
static int in_group(const char *pid, const char *cg)
{
	char path[300], line[1024];
	int in = 0;

	snprintf(path, sizeof(path), "/proc/%s/cgroup", pid);
	FILE *f = fopen(path, "re");
	while (f && !in && fgets(line, sizeof(line), f))
		in = strstr(line, cg) != NULL;
	if (f)
		fclose(f);
	return in;
}

/* How many processes of the sandboxes in cgroups named with @p cg hold
 * a lazy inputs' mount in their mount tables. Only theirs: other tests
 * running at the same time mount lazy inputs too (ctest -j). */
static int lazy_mounts_seen(const char *cg)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d))) {
		char path[300], line[1024];
		if (de->d_name[0] < '0' || de->d_name[0] > '9' || !in_group(de->d_name, cg))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/mountinfo", de->d_name);
		FILE *f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f))
			if (strstr(line, " taskbox-inputs ")) {
				n++;
				break;
			}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

/* A worker killed outright while its sandbox reads a lazy input: the
 * mount lived only in the sandbox's namespace, and goes with it; nothing
 * is left mounted anywhere. (After the test above: its store and inputs.) */
static void test_sandbox__a_killed_worker_leaves_no_lazy_mount(void **state)
{
	char store[256], inputs[256], line[32], group_of[48];
	int out[2], status;
	pid_t pid;

	(void)state;
	snprintf(store, sizeof(store), "%s/lazy-store", F.root);
	snprintf(inputs, sizeof(inputs), "%s/lazy-inputs", F.root);
	char *argv[] = { "/proc/self/exe", "--hold-a-lazy-sandbox", F.work, store, inputs, NULL };
	posix_spawn_file_actions_t fa;
	assert_int_equal(pipe(out), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addclose(&fa, out[0]);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(out[1]);
	ssize_t n = read(out[0], line, sizeof(line) - 1);
	close(out[0]);
	line[n > 0 ? n : 0] = '\0';
	assert_string_equal(line, "ready\n");
	snprintf(group_of, sizeof(group_of), "tbholdlazy%d", (int)pid);
	assert_true(lazy_mounts_seen(group_of) > 0); /* the check sees one while it lives */
	usleep(200 * 1000);                          /* its reader reading */
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	int left = 1;
	for (int i = 0; i < 100 && (left = lazy_mounts_seen(group_of)) > 0; i++)
		usleep(50 * 1000);
	assert_int_equal(left, 0);
	tb_error_t err;
	assert_true(tb_sandbox_sweep(F.work, group_of, &err) >= 0);
}

/* --hold-a-lazy-sandbox WORK_ROOT STORE INPUTS: the worker of the test
 * above, reading the lazy input uploads/big of the directory store STORE
 * at INPUTS/data/big.bin in a loop until killed. */
static int hold_a_lazy_sandbox(const char *root, const char *store_dir, const char *inputs)
{
	const char *argv[] = { "/bin/sh", "-c",
			       "while :; do cat /inputs/data/big.bin > /dev/null; done", NULL };
	const char *env[] = { "PATH=/usr/bin:/bin", NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	char path[600], name[48];
	tb_store_t *store;
	tb_blocks_t blocks;
	tb_lazy_fs_t *fs;
	tb_sandbox_t *sb;
	tb_error_t err;
	int id, mfd;

	snprintf(F.work, sizeof(F.work), "%s", root);
	snprintf(path, sizeof(path), "%s/uploads/big", store_dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || tb_blocks_of_fd(fd, "big", &blocks, NULL, &err) != 0 ||
	    tb_store_dir_open(&store, store_dir, &err) != 0) {
		fprintf(stderr, "hold lazy: %s\n", fd < 0 ? strerror(errno) : err.msg);
		return 1;
	}
	close(fd);
	tb_lazy_file_t files[] = { { "0", "uploads/big", &blocks, "big.bin" } };
	tb_lazy_fs_conf_t conf = { .store = store, .files = files, .nfiles = 1 };
	char *paths_v[] = { (char *)"data/big.bin" };
	tb_strlist_t paths = { 1, paths_v };
	snprintf(name, sizeof(name), "tbholdlazy%d", (int)getpid());
	tb_sandbox_spec_t s = spec();
	s.recipe_dir = NULL;
	s.name = "held-lazy";
	s.group = name;
	s.inputs_dir = inputs;
	s.lazy_paths = &paths;
	if (tb_lazy_fs_start(&fs, &conf, &mfd, &err) != 0 ||
	    (s.lazy_mount = mfd, tb_seccomp_compile(&F.policy, &err)) != 0 ||
	    tb_sandbox_create(&sb, F.policy, &s, &err) != 0 ||
	    tb_sandbox_spawn(sb, &id, &ex, &err) != 0) {
		fprintf(stderr, "hold lazy: %s\n", err.msg);
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause(); /* until killed */
}

/* The first host id of @p sb's range, from its init's uid map. */
static unsigned host_base(const tb_sandbox_t *sb)
{
	char path[64];
	unsigned inside = 1, base = 0, count = 0;

	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)tb_sandbox_init_pid(sb));
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%u %u %u", &inside, &base, &count), 3);
	fclose(f);
	assert_int_equal(inside, 0);
	assert_int_equal(count, TB_SANDBOX_ID_RANGE);
	return base;
}

/* Another worker on this host, as far as ids go: this program again
 * (--hold-a-sandbox), holding a sandbox with a process in it until its
 * input closes. @return its pid; its range's base into @p base. */
static pid_t another_worker(int *input, unsigned *base)
{
	int in[2], out[2];
	char line[32];
	pid_t pid;
	posix_spawn_file_actions_t fa;
	char *argv[] = { "/proc/self/exe", "--hold-a-sandbox", F.work, NULL };

	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addclose(&fa, in[1]);
	posix_spawn_file_actions_addclose(&fa, out[0]);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	ssize_t n = read(out[0], line, sizeof(line) - 1);
	close(out[0]);
	line[n > 0 ? n : 0] = '\0';
	if (sscanf(line, "%u", base) != 1)
		fail_msg("the other worker said '%s'", line);
	*input = in[1];
	return pid;
}

/* Whether the registry's lock of the range at @p base is free now. */
static int range_is_free(unsigned base)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%u", TB_SANDBOX_ID_REGISTRY,
		 (base - TB_SANDBOX_UID_FIRST) / TB_SANDBOX_ID_RANGE);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	int free_now = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return free_now;
}

/* Two workers on one host (and this process) never share a range of host
 * ids, and a worker that dies gives its ranges back with no clean-up. */
static void test_sandbox__two_workers_on_one_host_share_no_ids(void **state)
{
	const char *argv[] = { "/bin/sleep", "30", NULL };
	const char *env[] = { NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	tb_sandbox_spec_t s = spec();
	tb_sandbox_t *mine, *mine2;
	tb_error_t err;
	unsigned a, b;
	int in_a, in_b, id, status;

	(void)state;
	pid_t pa = another_worker(&in_a, &a);
	pid_t pb = another_worker(&in_b, &b);
	assert_int_equal(tb_sandbox_create(&mine, F.policy, &s, &err), 0);
	s = spec();
	assert_int_equal(tb_sandbox_create(&mine2, F.policy, &s, &err), 0);
	assert_int_equal(tb_sandbox_spawn(mine, &id, &ex, &err), 0);
	unsigned bases[4] = { a, b, host_base(mine), host_base(mine2) };
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			if (bases[i] == bases[j])
				fail_msg("two live sandboxes map onto host ids %u", bases[i]);
	for (int i = 0; i < 4; i++)
		assert_false(range_is_free(bases[i]));
	/* A worker killed outright: its range is free again. */
	char its_group[32];
	snprintf(its_group, sizeof(its_group), "tbhold%d", (int)pa);
	assert_int_equal(kill(pa, SIGKILL), 0);
	assert_int_equal(waitpid(pa, &status, 0), pa);
	close(in_a);
	assert_true(range_is_free(a));
	assert_int_equal(tb_sandbox_sweep(F.work, its_group, &err), 1);
	assert_false(range_is_free(b));
	/* One that ends its sandbox first, and ours when destroyed. */
	close(in_b);
	assert_int_equal(waitpid(pb, &status, 0), pb);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(range_is_free(b));
	assert_int_equal(tb_sandbox_destroy(mine, &err), 0);
	assert_int_equal(tb_sandbox_destroy(mine2, &err), 0);
	assert_true(range_is_free(bases[2]));
}

/* --hold-a-sandbox WORK_ROOT: the other worker of the test above. */
static int hold_a_sandbox(const char *root)
{
	const char *argv[] = { "/bin/sleep", "30", NULL };
	const char *env[] = { NULL };
	tb_sandbox_exec_t ex = { argv, env, NULL, -1, -1, -1, -1, 0 };
	tb_sandbox_t *sb;
	tb_error_t err;
	char c, name[32];
	int id;

	snprintf(F.work, sizeof(F.work), "%s", root);
	snprintf(name, sizeof(name), "tbhold%d", (int)getpid());
	tb_sandbox_spec_t s = spec();
	s.recipe_dir = NULL;
	s.name = "held";
	s.group = name; /* its own: the test sweeps what it leaves when killed */
	if (tb_seccomp_compile(&F.policy, &err) != 0 ||
	    tb_sandbox_create(&sb, F.policy, &s, &err) != 0 ||
	    tb_sandbox_spawn(sb, &id, &ex, &err) != 0) {
		fprintf(stderr, "hold: %s\n", err.msg);
		return 1;
	}
	printf("%u\n", host_base(sb));
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	int rc = tb_sandbox_destroy(sb, &err);
	tb_seccomp_free(F.policy);
	return rc == 0 ? 0 : 1;
}

static int setup(void **state)
{
	tb_error_t err;
	char describe[128], cmd[512];

	(void)state;
	if (tb_fixture_setup(&F, "sandbox", group, 0) < 0)
		return -1;
	snprintf(recipe, sizeof(recipe), "%s/recipe", F.root);
	snprintf(canary, sizeof(canary), "%s/canary", F.root);
	mkdir(recipe, 0755);
	snprintf(cmd, sizeof(cmd), "cp %s %s/ && echo secret > %s", TB_PROBE, recipe, canary);
	if (system(cmd) != 0)
		return -1;
	if (tb_cgroup_describe(describe, sizeof(describe), &err) == 0)
		printf("cgroups: %s; seccomp: %u instructions\n", describe,
		       tb_seccomp_size(F.policy));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tb_fixture_teardown(&F);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox__runs_processes_and_reports_exit_codes),
		cmocka_unit_test(test_sandbox__an_image_tree_is_the_root),
		cmocka_unit_test(test_sandbox__an_image_cannot_lead_init_out),
		cmocka_unit_test(test_sandbox__judges_see_the_image_without_the_agents_layer),
		cmocka_unit_test(test_sandbox__an_image_served_through_fuse_is_the_root),
		cmocka_unit_test(test_sandbox__a_root_that_cannot_be_served_fails_the_sandbox),
		cmocka_unit_test_teardown(test_sandbox__escapes_are_stopped_in_an_image_root,
					  no_probe_image),
		cmocka_unit_test(test_sandbox__missing_program_is_a_clear_error),
		cmocka_unit_test(test_sandbox__init_is_its_own_small_program),
		cmocka_unit_test(test_sandbox__prepared_runs_nothing_until_assigned),
		cmocka_unit_test(test_sandbox__refuses_dangerous_binds),
		cmocka_unit_test(test_sandbox__judges_are_out_of_the_agents_reach),
		cmocka_unit_test(test_sandbox__cannot_read_a_host_canary),
		cmocka_unit_test(test_sandbox__cannot_write_into_the_recipe_or_root),
		cmocka_unit_test(test_sandbox__sees_no_host_processes),
		cmocka_unit_test(test_sandbox__cannot_mount_ptrace_or_make_user_namespaces),
		cmocka_unit_test(test_sandbox__runs_unprivileged_under_seccomp),
		cmocka_unit_test(test_sandbox__only_namespaced_socket_families),
		cmocka_unit_test(test_sandbox__two_workers_on_one_host_share_no_ids),
		cmocka_unit_test(test_sandbox__cannot_escape_its_cgroup),
		cmocka_unit_test(test_sandbox__cannot_reach_a_server_on_the_host_loopback),
		cmocka_unit_test(test_limits__fork_bomb_stops_at_the_pids_limit),
		cmocka_unit_test(test_limits__memory_bomb_ends_as_oom),
		cmocka_unit_test(test_limits__disk_filler_gets_enospc_in_workspace),
		cmocka_unit_test(test_limits__runaway_is_killed_at_the_deadline),
		cmocka_unit_test(test_sweep__removes_what_a_dead_worker_left),
		cmocka_unit_test(test_sweep__removes_a_frozen_sandbox),
		cmocka_unit_test(test_pool__the_next_task_takes_a_sandbox_built_ahead),
		cmocka_unit_test(test_pool__prepared_sandboxes_are_kept_per_image),
		cmocka_unit_test(test_pool__a_prepared_sandbox_that_died_is_replaced),
		cmocka_unit_test(test_pool__a_session_gets_no_successor),
		cmocka_unit_test(test_pool__a_stopping_worker_drops_what_was_built_ahead),
		cmocka_unit_test(test_sandbox__lazy_inputs_are_read_in_place),
		cmocka_unit_test(test_sandbox__a_killed_worker_leaves_no_lazy_mount),
		cmocka_unit_test(test_teardown__a_thousand_sandboxes_leave_nothing),
	};
	if (geteuid() != 0) {
		printf("SKIP: sandboxes need root (the worker runs as root)\n");
		return 77;
	}
	pid_t p = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, 0,
				 NULL, NULL, 0);
	if (p == 0)
		_exit(0);
	if (p < 0) {
		printf("SKIP: this kernel refuses new user/pid/mount namespaces: %s\n",
		       strerror(errno));
		return 77;
	}
	waitpid(p, NULL, 0);
	/* The init program is looked up (and opened) once, here while fd 3
	 * is still free: the descriptor must not stay at 3, where the clone
	 * puts the control socket before it executes init. Every test below
	 * fails if it does. */
	const char *init;
	tb_error_t err;
	if (fcntl(3, F_GETFD) < 0 && tb_sandbox_find_init(&init, &err) < 0) {
		printf("%s\n", err.msg);
		return 1;
	}
	if (argc == 3 && !strcmp(argv[1], "--hold-a-sandbox"))
		return hold_a_sandbox(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "--hold-a-lazy-sandbox"))
		return hold_a_lazy_sandbox(argv[2], argv[3], argv[4]);
	return cmocka_run_group_tests(tests, setup, teardown);
}
