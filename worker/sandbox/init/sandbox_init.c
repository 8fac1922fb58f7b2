/*
 * sandbox_init.c: taskbox-sandbox-init, a sandbox's init process, from
 * execve() to exit.
 *
 * The worker clones a child straight into the new namespaces, sharing its
 * memory until it executes this small program (CLONE_VM | CLONE_VFORK):
 * no copy of the worker's page tables is made, nor taken down later, and
 * no worker lock is held while it runs. The control socket arrives as fd
 * 3 (TB_SBP_INIT_FD); what else the worker had open without close-on-exec
 * is closed first thing.
 * The first message, SETUP, comes once the worker has written the uid/gid
 * maps and moved this process into the sandbox's cgroup: the tmpfs sizes,
 * the rlimits, the read-only binds and the seccomp filter the worker
 * compiled. Then init owns, in order: becoming root of the new user
 * namespace, the cgroup namespace, loopback, the new root file system,
 * and the loop that starts processes, reaps every child (it is pid 1) and
 * reports exits. The host name, recipe and inputs come with ASSIGN. It
 * exits when the worker's end of the control socket closes, or with the
 * worker's thread that made it (parent-death signal); the kernel then
 * kills everything left in the pid namespace.
 *
 * It links nothing but libc, and uses system calls, stack buffers and
 * static storage only: its children borrow its memory until they exec.
 */
#include "sandbox_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* For code that runs on a borrowed stack between clone and execve, where
 * ASan's shadow would be left poisoned (written once, so tools that read
 * C, such as pmccabe, see a plain name). */
#define NO_ASAN __attribute__((no_sanitize("address")))
#define PATH_LEN 4096
#define HOST_DIR "/.host"
#define LAYERS_DIR "/.layers" /* an image root's scaffold: image_root() */
#define LAZY_DIR "/.lazy"     /* the lazy inputs' mount, while assign() binds them */

/* From SETUP, never changed afterwards. */
static tb_sbp_setup_t S;
static struct sock_fprog policy;
static const char *new_root; /* host directory the root is built on */
static const char *binds[TB_SBP_MAX_BINDS];
static int image_fd = -1;           /* the image's tree, a detached mount (TB_SBP_F_IMAGE) */
static const char *image_root_path; /* where its overlay is, while the root is built */
static int assigned;                /* no process may start before assign() */
static char hostname[65];           /* from ASSIGN */
static unsigned task_binds;         /* from ASSIGN: 1 /recipe, 2 /inputs */

/* ------------------------------------------------------------ helpers */

/* Appends @p s to @p buf (NUL-terminated, capacity @p cap). */
static void cat(char *buf, size_t cap, const char *s)
{
	size_t n = strnlen(buf, cap - 1), m = strnlen(s, cap - 1 - n);
	memcpy(buf + n, s, m);
	buf[n + m] = '\0';
}

static void join(char *out, size_t cap, const char *a, const char *b)
{
	out[0] = '\0';
	cat(out, cap, a);
	cat(out, cap, b);
}

static void utoa(char *out, size_t cap, unsigned long long v)
{
	char tmp[24];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v && n < 23);
	size_t i = 0;
	while (n > 0 && i + 1 < cap)
		out[i++] = tmp[--n];
	out[i] = '\0';
}

static void send_resp(uint32_t op, int32_t id, int32_t pid, int32_t status, int32_t err,
		      const char *msg)
{
	tb_sbp_resp_t r;

	memset(&r, 0, sizeof(r));
	r.op = op, r.id = id, r.pid = pid, r.status = status, r.err = err;
	if (msg)
		cat(r.msg, sizeof(r.msg), msg);
	/* A full socket means the worker stopped reading; nothing to do. */
	(void)send(TB_SBP_INIT_FD, &r, sizeof(r), MSG_NOSIGNAL);
}

/* Reports a build step that failed and exits: the worker reads the step
 * and errno and turns them into the error message. */
static _Noreturn void fail(const char *step, const char *what, int errnum)
{
	char msg[256] = "";
	cat(msg, sizeof(msg), step);
	if (what) {
		cat(msg, sizeof(msg), " ");
		cat(msg, sizeof(msg), what);
	}
	send_resp(TB_SBP_FAILED, 0, 0, 0, errnum, msg);
	_exit(1);
}

static int raw_setresuid(uid_t r, uid_t e, uid_t s)
{
	return (int)syscall(SYS_setresuid, r, e, s);
}

static int raw_setresgid(gid_t r, gid_t e, gid_t s)
{
	return (int)syscall(SYS_setresgid, r, e, s);
}

static int raw_setgroups(size_t n, const gid_t *list)
{
	return (int)syscall(SYS_setgroups, n, list);
}

/* mkdir -p for an absolute path, each component 0755. */
static int mkdir_p(const char *path)
{
	char buf[PATH_LEN];
	size_t n = strnlen(path, sizeof(buf) - 1);

	memcpy(buf, path, n);
	buf[n] = '\0';
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] == '/' || buf[i] == '\0') {
			char c = buf[i];
			buf[i] = '\0';
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				return -1;
			buf[i] = c;
		}
	}
	return 0;
}

static int write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	size_t len = strlen(text);

	if (fd < 0)
		return -1;
	if (write(fd, text, len) != (ssize_t)len) {
		int e = errno;
		close(fd);
		errno = e ? e : EIO;
		return -1;
	}
	return close(fd);
}

/* Closes descriptors @p lo to @p hi; one at a time (up to the open-file
 * limit) where close_range() is missing (Linux before 5.9). */
static void close_fds(unsigned lo, unsigned hi)
{
	struct rlimit rl;
	unsigned max = 1u << 20;

	if (lo > hi || syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < max)
		max = (unsigned)rl.rlim_cur;
	for (unsigned fd = lo; fd <= hi && fd < max; fd++)
		close((int)fd);
}

/* ----------------------------------------------------- the file system */

/* Mounts a tmpfs of @p mb MiB at @p path, mode @p mode, owned by @p owner
 * (uid and gid inside; 0 is the sandbox's root). @return 0 or -1. */
static int tmpfs_at(const char *path, uint64_t mb, const char *mode, unsigned owner)
{
	char opts[128] = "mode=", num[24];

	cat(opts, sizeof(opts), mode);
	cat(opts, sizeof(opts), ",size=");
	utoa(num, sizeof(num), mb);
	cat(opts, sizeof(opts), num);
	cat(opts, sizeof(opts), "m");
	if (owner) {
		utoa(num, sizeof(num), owner);
		cat(opts, sizeof(opts), ",uid=");
		cat(opts, sizeof(opts), num);
		cat(opts, sizeof(opts), ",gid=");
		cat(opts, sizeof(opts), num);
	}
	return mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts);
}

static void mount_tmpfs(const char *root, const char *at, uint64_t mb, const char *mode,
			unsigned owner)
{
	char path[PATH_LEN];

	join(path, sizeof(path), root, at);
	if (mkdir_p(path) < 0)
		fail("mkdir", at, errno);
	if (tmpfs_at(path, mb, mode, owner) < 0)
		fail("mount tmpfs", at, errno);
}

#ifndef ST_NOSYMFOLLOW
#define ST_NOSYMFOLLOW 0x2000 /* statfs(2) since Linux 5.10; not in older glibc */
#endif

/* Makes the mount at @p path and everything below it read-only, nosuid
 * and nodev, and, with @p nosymfollow, a mount no path resolution follows
 * a symbolic link on. mount_setattr (Linux 5.12) does it recursively in
 * one call; older kernels get the top mount remounted, keeping the flags
 * the original mount has locked (a user namespace may add flags, never
 * drop them). A kernel that silently ignores MS_NOSYMFOLLOW (before 5.10)
 * is caught by reading the flags back: EOPNOTSUPP, never a view that
 * follows links it was meant not to. */
static int make_readonly(const char *path, int nosymfollow)
{
	struct statvfs st;
#ifdef SYS_mount_setattr
	struct mount_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	if (nosymfollow)
		attr.attr_set |= MOUNT_ATTR_NOSYMFOLLOW;
	if (syscall(SYS_mount_setattr, -1, path, AT_RECURSIVE, &attr, sizeof(attr)) == 0)
		return 0;
	if (errno != ENOSYS)
		return -1;
#endif
	unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
	if (statvfs(path, &st) < 0)
		return -1;
	if (st.f_flag & ST_NOEXEC)
		flags |= MS_NOEXEC;
	if (st.f_flag & ST_NOATIME)
		flags |= MS_NOATIME;
	if (st.f_flag & ST_NODIRATIME)
		flags |= MS_NODIRATIME;
	if (st.f_flag & ST_RELATIME)
		flags |= MS_RELATIME;
	if (nosymfollow || (st.f_flag & ST_NOSYMFOLLOW))
		flags |= MS_NOSYMFOLLOW;
	if (mount(NULL, path, NULL, flags, NULL) < 0)
		return -1;
	if (nosymfollow && (statvfs(path, &st) < 0 || !(st.f_flag & ST_NOSYMFOLLOW))) {
		errno = EOPNOTSUPP;
		return -1;
	}
	return 0;
}

/* Binds @p src read-only at @p dst under @p root. A symbolic link is
 * recreated as a link (Debian's /bin -> usr/bin), not followed. A missing
 * source is skipped unless @p required: runtimes list paths that only
 * some machines have. */
static void bind_ro(const char *root, const char *src, const char *dst, int required)
{
	char path[PATH_LEN], target[PATH_LEN];
	struct stat st;
	ssize_t n;

	if (lstat(src, &st) < 0) {
		if (errno == ENOENT && !required)
			return;
		fail("stat", src, errno);
	}
	join(path, sizeof(path), root, dst);
	if (S_ISLNK(st.st_mode)) {
		n = readlink(src, target, sizeof(target) - 1);
		if (n < 0)
			fail("readlink", src, errno);
		target[n] = '\0';
		char parent[PATH_LEN];
		join(parent, sizeof(parent), path, "");
		char *slash = strrchr(parent, '/');
		if (slash) /* "/a/b" -> "/a", "/a" -> "/" */
			slash[slash == parent] = '\0';
		if (mkdir_p(parent) < 0 || (symlink(target, path) < 0 && errno != EEXIST))
			fail("symlink", dst, errno);
		return;
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdir_p(path) < 0)
			fail("mkdir", dst, errno);
	} else {
		char parent[PATH_LEN];
		join(parent, sizeof(parent), path, "");
		char *slash = strrchr(parent, '/');
		if (slash) /* "/a/b" -> "/a", "/a" -> "/" */
			slash[slash == parent] = '\0';
		if (mkdir_p(parent) < 0)
			fail("mkdir", dst, errno);
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
		if (fd < 0)
			fail("create", dst, errno);
		close(fd);
	}
	if (mount(src, path, NULL, MS_BIND | MS_REC, NULL) < 0)
		fail("bind", src, errno);
	if (make_readonly(path, 0) < 0)
		fail("read-only", dst, errno);
}

static void build_dev(const char *root)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
	static const char *const links[][2] = {
		{ "/proc/self/fd", "fd" },
		{ "/proc/self/fd/0", "stdin" },
		{ "/proc/self/fd/1", "stdout" },
		{ "/proc/self/fd/2", "stderr" },
	};
	char dev[PATH_LEN], path[PATH_LEN], src[64];

	mount_tmpfs(root, "/dev", 1, "0755", 0);
	join(dev, sizeof(dev), root, "/dev/");
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
		join(path, sizeof(path), dev, nodes[i]);
		join(src, sizeof(src), "/dev/", nodes[i]);
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
		if (fd < 0)
			fail("create /dev/", nodes[i], errno);
		close(fd);
		/* Binds of the host's device nodes: a user namespace cannot
		 * mknod, and its own mounts are nodev. */
		if (mount(src, path, NULL, MS_BIND, NULL) < 0 && strcmp(nodes[i], "tty") != 0)
			fail("bind", src, errno);
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		join(path, sizeof(path), dev, links[i][1]);
		if (symlink(links[i][0], path) < 0)
			fail("symlink /dev/", links[i][1], errno);
	}
	mount_tmpfs(root, "/dev/shm", 16, "1777", 0);
}

/* Appends "<name><n>:x:<id>:" (and @p rest) for each judge's uid to @p buf:
 * judge1 is TB_SANDBOX_JUDGE_ID, judge2 the next, and so on. */
static void judge_entries(char *buf, size_t cap, const char *rest)
{
	char num[24];

	for (unsigned i = 0; i < TB_SANDBOX_MAX_JUDGES; i++) {
		cat(buf, cap, "judge");
		utoa(num, sizeof(num), i + 1);
		cat(buf, cap, num);
		cat(buf, cap, ":x:");
		utoa(num, sizeof(num), TB_SANDBOX_JUDGE_ID + i);
		cat(buf, cap, num);
		cat(buf, cap, rest[0] ? ":" : ":\n");
		if (rest[0]) {
			cat(buf, cap, num);
			cat(buf, cap, rest);
		}
	}
}

static void image_etc(const char *root, const char *passwd, const char *group);

/* /etc: the sandbox's own passwd, group, nsswitch.conf and resolv.conf in
 * the tmpfs @p root; for an image root (@p root NULL), image_etc(). */
static void build_etc(const char *root)
{
	static char passwd[4096], group[2048];
	char path[PATH_LEN];

	cat(passwd, sizeof(passwd),
	    "root:x:0:0:root:/root:/bin/sh\n"
	    "agent:x:1000:1000:agent:/workspace:/bin/sh\n");
	judge_entries(passwd, sizeof(passwd), ":judge:/home:/bin/sh\n");
	cat(passwd, sizeof(passwd), "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
	cat(group, sizeof(group), "root:x:0:\nagent:x:1000:\n");
	judge_entries(group, sizeof(group), "");
	cat(group, sizeof(group), "nogroup:x:65534:\n");
	if (!root) {
		image_etc(image_root_path, passwd, group);
		return;
	}
	join(path, sizeof(path), root, "/etc");
	if (mkdir_p(path) < 0)
		fail("mkdir", "/etc", errno);
	const struct {
		const char *name, *text;
	} files[] = {
		{ "/etc/passwd", passwd },
		{ "/etc/group", group },
		{ "/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n" },
		{ "/etc/resolv.conf", "" },
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		join(path, sizeof(path), root, files[i].name);
		if (write_file(path, files[i].text, 0644) < 0)
			fail("write", files[i].name, errno);
	}
}

/* Whether the /etc/passwd or /etc/group text @p text has an entry whose
 * id (its third field) is @p id's digits. */
static int has_id(const char *text, const char *id, size_t idlen)
{
	for (const char *line = text; *line;) {
		const char *f = line;
		for (int colons = 0; *f && *f != '\n' && colons < 2; f++)
			colons += *f == ':';
		if (!strncmp(f, id, idlen) && f[idlen] == ':')
			return 1;
		line += strcspn(line, "\n");
		line += *line == '\n';
	}
	return 0;
}

/*
 * The places init builds on in an image's root, made real directories
 * first: the image is untrusted, and until the pivot init works on host
 * paths, so an image's `/etc -> /tmp` (or a relative `../../x`) would
 * lead init's writes onto the host. Whatever the image put at those names
 * (a link, a file, a FIFO) is removed from the overlay; a directory stays.
 */
static void image_places(const char *root)
{
	static const char *const places[] = { "/etc", "/dev",  "/proc", "/workspace", "/outputs",
					      "/tmp", "/root", "/home", "/recipe",    "/inputs" };
	char path[PATH_LEN];
	struct stat st;

	for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++) {
		join(path, sizeof(path), root, places[i]);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
			continue;
		if ((unlink(path) < 0 && errno != ENOENT) || mkdir(path, 0755) < 0)
			fail("make a directory of", places[i], errno);
	}
	/* where the host's root goes until assignment: nothing of the image's */
	join(path, sizeof(path), root, HOST_DIR);
	if (unlink(path) < 0 && errno != ENOENT && rmdir(path) < 0)
		fail("remove the image's", HOST_DIR, errno);
	/* where the layers stay (image_root()): an empty directory of init's */
	join(path, sizeof(path), root, LAYERS_DIR);
	if ((unlink(path) < 0 && errno != ENOENT && rmdir(path) < 0) || mkdir(path, 0) < 0)
		fail("make a directory of", LAYERS_DIR, errno);
}

/* An image's own /etc/passwd or /etc/group (@p name), kept, with the
 * lines of @p ours whose ids it lacks added (the agent's, the judges'). */
static void merge_ids(const char *root, const char *name, const char *ours)
{
	static char text[65536];
	char path[PATH_LEN];
	ssize_t n = 0;

	join(path, sizeof(path), root, name);
	/* a regular file only: a FIFO must not hang init, a link is not read */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		n = read(fd, text, sizeof(text) - 4096 * 2);
	if (fd >= 0)
		close(fd);
	text[n > 0 ? n : 0] = '\0';
	if (n > 0 && text[n - 1] != '\n')
		cat(text, sizeof(text), "\n");
	for (const char *line = ours; *line;) {
		size_t len = strcspn(line, "\n");
		const char *id = line;
		for (int colons = 0; id < line + len && colons < 2; id++)
			colons += *id == ':';
		size_t idlen = strcspn(id, ":");
		if (!has_id(text, id, idlen) && strlen(text) + len + 2 < sizeof(text)) {
			size_t at = strlen(text);
			memcpy(text + at, line, len);
			text[at + len] = '\n';
			text[at + len + 1] = '\0';
		}
		line += len + (line[len] == '\n');
	}
	if ((unlink(path) < 0 && errno != ENOENT && rmdir(path) < 0) || /* ours from now on */
	    write_file(path, text, 0644) < 0)
		fail("write", name, errno);
}

/* The /etc of an image root: the image's passwd and group with the
 * sandbox's ids added, and the files the sandbox owns (no DNS: the proxy
 * is the way out; hosts and hostname are written at assignment). */
static void image_etc(const char *root, const char *passwd, const char *group)
{
	static const char *const ours[] = { "/etc/resolv.conf", "/etc/hosts", "/etc/hostname" };
	char path[PATH_LEN];

	join(path, sizeof(path), root, "/etc");
	if (mkdir_p(path) < 0)
		fail("mkdir", "/etc", errno);
	merge_ids(root, "/etc/passwd", passwd);
	merge_ids(root, "/etc/group", group);
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
		join(path, sizeof(path), root, ours[i]);
		if ((unlink(path) < 0 && errno != ENOENT && rmdir(path) < 0) ||
		    write_file(path, "", 0644) < 0)
			fail("write", ours[i], errno);
	}
}

/* Mounts an overlay at @p at: @p lowers (colon-separated, top first)
 * under @p upper/upper, with @p upper/work; user xattrs, as a user
 * namespace must. */
static void overlay_at(const char *at, const char *lowers, const char *upper, const char *what)
{
	char opts[4 * PATH_LEN] = "lowerdir=";

	cat(opts, sizeof(opts), lowers);
	cat(opts, sizeof(opts), ",upperdir=");
	cat(opts, sizeof(opts), upper);
	cat(opts, sizeof(opts), "/upper,workdir=");
	cat(opts, sizeof(opts), upper);
	cat(opts, sizeof(opts), "/work,userxattr");
	if (mount("overlay", at, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
		fail("mount the overlay of", what, errno);
}

/* Makes @p dir/upper and @p dir/work. */
static void upper_dirs(const char *dir, const char *what)
{
	char path[PATH_LEN];

	join(path, sizeof(path), dir, "/upper");
	if (mkdir(path, 0755) < 0)
		fail("mkdir", what, errno);
	join(path, sizeof(path), dir, "/work");
	if (mkdir(path, 0755) < 0)
		fail("mkdir", what, errno);
}

/*
 * The root of an image, in three layers on a scaffold tmpfs at
 * @p host_dir:
 *
 *   lower  the image's tree: the detached mount the worker sent,
 *          idmapped so its files keep their owners as the sandbox sees
 *          them; never written;
 *   base   init's layer: the places it mounts on and its /etc files,
 *          made through a staging overlay that is gone before anything
 *          runs;
 *   rw     the agent's writable layer, a tmpfs of writable_mb (charged
 *          to the sandbox's memory), where whatever the image's owners
 *          and modes let the agent change lands (pip install into an
 *          image's venv).
 *
 * The root is the overlay of rw over base over lower. The judges get
 * base over lower again, without the agent's layer (judge_root()), so
 * the scaffold stays in the sandbox's mounts, at LAYERS_DIR (mode 0700,
 * init's: no task process can enter it; an overlay's layers must be
 * mounts of its mounter's namespace). @return the overlay's path in
 * @p root.
 */
static void image_root(const char *host_dir, char *root, size_t cap)
{
	char lower[PATH_LEN], base[PATH_LEN], stage[PATH_LEN], rw[PATH_LEN], path[PATH_LEN];
	char lowers[2 * PATH_LEN + 1];

	if (mount("tmpfs", host_dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=4m") < 0)
		fail("mount scaffold tmpfs", host_dir, errno);
	join(lower, sizeof(lower), host_dir, "/lower");
	join(base, sizeof(base), host_dir, "/base");
	join(stage, sizeof(stage), host_dir, "/stage");
	join(rw, sizeof(rw), host_dir, "/rw");
	join(root, cap, host_dir, "/root");
	if (mkdir(lower, 0755) < 0 || mkdir(base, 0755) < 0 || mkdir(stage, 0755) < 0 ||
	    mkdir(rw, 0755) < 0 || mkdir(root, 0755) < 0)
		fail("mkdir", "the image's scaffold", errno);
	if (syscall(SYS_move_mount, image_fd, "", AT_FDCWD, lower, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		fail("mount the image's tree", NULL, errno);
	close(image_fd);
	image_fd = -1;
	upper_dirs(base, "init's layer");
	overlay_at(stage, lower, base, "init's layer");
	image_places(stage);
	image_root_path = stage;
	build_etc(NULL);
	if (umount2(stage, 0) < 0)
		fail("unmount", "init's layer", errno);
	if (tmpfs_at(rw, S.writable_mb, "0755", 0) < 0)
		fail("mount the image's writable layer", NULL, errno);
	upper_dirs(rw, "the writable layer");
	join(path, sizeof(path), base, "/upper");
	join(lowers, sizeof(lowers), path, ":");
	cat(lowers, sizeof(lowers), lower);
	overlay_at(root, lowers, rw, "the image's root");
}

static void build_root(void)
{
	static char image[PATH_LEN];
	const char *root = new_root;
	char path[PATH_LEN];

	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail("make / private", NULL, errno);
	if (S.flags & TB_SBP_F_IMAGE) {
		image_root(new_root, image, sizeof(image));
		root = image;
	} else {
		if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") < 0)
			fail("mount root tmpfs", root, errno);
		build_etc(root);
	}
	build_dev(root);
	join(path, sizeof(path), root, "/proc");
	if (mkdir_p(path) < 0 ||
	    mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		fail("mount", "/proc", errno);
	mount_tmpfs(root, "/workspace", S.workspace_mb, "0755", TB_SANDBOX_AGENT_ID);
	mount_tmpfs(root, "/outputs", S.outputs_mb, "0755", TB_SANDBOX_AGENT_ID);
	mount_tmpfs(root, "/tmp", S.workspace_mb, "1777", 0);
	/* /home is where each judge gets an empty home of its own (see
	 * judge_view()); until then an empty directory of the read-only root. */
	static const char *const dirs[] = { "/root", "/home" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		join(path, sizeof(path), root, dirs[i]);
		if (mkdir_p(path) < 0)
			fail("mkdir", dirs[i], errno);
	}
	/* The host's root stays reachable at /.host (mode 0000) until the
	 * sandbox is assigned its task, which binds the task's recipe and
	 * inputs from it and then detaches it; no sandboxed process runs
	 * before that (see assign()). */
	join(path, sizeof(path), root, HOST_DIR);
	if (mkdir(path, 0) < 0)
		fail("mkdir", HOST_DIR, errno);
	if (chdir(root) < 0)
		fail("chdir", root, errno);
	if (syscall(SYS_pivot_root, ".", "." HOST_DIR) < 0)
		fail("pivot_root", NULL, errno);
	if (chdir("/") < 0)
		fail("chdir", "/", errno);
	if (S.flags & TB_SBP_F_IMAGE) {
		join(path, sizeof(path), HOST_DIR, new_root);
		if (mount(path, LAYERS_DIR, NULL, MS_MOVE, NULL) < 0)
			fail("move the image's layers to", LAYERS_DIR, errno);
	}
	/* The runtime's binds, from the host's root as it is, now that the
	 * new root no longer covers work_root there (a bind above or below
	 * work_root sees the host's files, not this tmpfs). */
	for (uint32_t i = 0; i < S.nbinds; i++) {
		join(path, sizeof(path), HOST_DIR, binds[i]);
		bind_ro("", path, binds[i], 0);
	}
}

/* /etc/hosts and /etc/hostname under @p root ("" for /), for hostname. */
static int write_hosts(const char *root)
{
	char hosts[512] = "127.0.0.1 localhost ", path[PATH_LEN];

	cat(hosts, sizeof(hosts), hostname);
	cat(hosts, sizeof(hosts), "\n::1 localhost\n");
	join(path, sizeof(path), root, "/etc/hosts");
	if (write_file(path, hosts, 0644) < 0)
		return -1;
	join(path, sizeof(path), root, "/etc/hostname");
	return write_file(path, hostname, 0644);
}

/* Whether @p p is relative with no "." or ".." segment, nor an empty one. */
static int relative_path(const char *p)
{
	for (const char *seg = p;; seg++) {
		const char *slash = strchr(seg, '/');
		size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
		if (n == 0 || (n == 1 && seg[0] == '.') ||
		    (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return 0;
		if (!slash)
			return 1;
		seg = slash;
	}
}

/* Binds file "i" of the lazy inputs' mount @p fd over /inputs/<path i>
 * for each of the @p n paths at @p paths (each \0-ended; files the worker
 * made there), read-only, then lets the mount itself go: the binds keep
 * it. */
static void lazy_inputs(const char *paths, const char *end, uint32_t n, int fd)
{
	char src[PATH_LEN], dst[PATH_LEN], num[24];

	if (mkdir(LAZY_DIR, 0) < 0 ||
	    syscall(SYS_move_mount, fd, "", AT_FDCWD, LAZY_DIR, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		fail("mount", "the lazy inputs", errno);
	close(fd);
	for (uint32_t i = 0; i < n; i++) {
		size_t len = paths < end ? strnlen(paths, (size_t)(end - paths)) : 0;
		if (!len || paths + len >= end || !relative_path(paths))
			fail("assign", "a bad lazy input path", EINVAL);
		join(dst, sizeof(dst), "/inputs/", paths);
		utoa(num, sizeof(num), i);
		join(src, sizeof(src), LAZY_DIR "/", num);
		if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
			fail("bind the lazy input", paths, errno);
		if (make_readonly(dst, 0) < 0)
			fail("read-only", paths, errno);
		paths += len + 1;
	}
	if (umount2(LAZY_DIR, MNT_DETACH) < 0 || rmdir(LAZY_DIR) < 0)
		fail("let go of", LAZY_DIR, errno);
}

/* The task-specific part of a prepared sandbox: host name, the recipe and
 * inputs bound read-only from the host, then the host's root detached for
 * good and the root file system made read-only (an image's stays writable
 * where the image lets the agent write: image_root()). Paths arrive
 * canonical. */
static void assign(const tb_sbp_req_t *req, int lazy_fd)
{
	static char data[TB_SBP_DATA_MAX];
	const char *field[3] = { "", "", "" }; /* hostname, recipe, inputs */
	char src[PATH_LEN];
	size_t pos = 0;

	if (req->len == 0 || req->data[req->len - 1] != '\0')
		fail("assign", "malformed request", EINVAL);
	memcpy(data, req->data, req->len);
	for (int i = 0; i < 3 && pos < req->len; i++) {
		field[i] = data + pos;
		pos += strnlen(data + pos, req->len - pos) + 1;
	}
	if (!field[0][0] || strlen(field[0]) >= sizeof(hostname) ||
	    sethostname(field[0], strlen(field[0])) < 0)
		fail("sethostname", field[0], errno ? errno : EINVAL);
	memcpy(hostname, field[0], strlen(field[0]) + 1);
	if (write_hosts("") < 0)
		fail("write", "/etc/hosts", errno);
	if (field[1][0]) {
		join(src, sizeof(src), HOST_DIR, field[1]);
		bind_ro("", src, "/recipe", 1);
		task_binds |= 1;
	}
	if (field[2][0]) {
		join(src, sizeof(src), HOST_DIR, field[2]);
		bind_ro("", src, "/inputs", 1);
		task_binds |= 2;
	}
	if ((req->argc > 0) != (lazy_fd >= 0) || (req->argc && !field[2][0]))
		fail("assign", "lazy inputs without their mount, or no /inputs", EINVAL);
	if (req->argc)
		lazy_inputs(data + pos, data + req->len, req->argc, lazy_fd);
	/* Answer first, then finish: init handles one message at a time, so
	 * the worker's next request (the first EXEC) is only read after the
	 * host root is gone and / is read-only, while the answer's trip
	 * overlaps with the unmounting. A failure below ends init, and the
	 * worker sees the sandbox die. */
	assigned = 1;
	send_resp(TB_SBP_ASSIGNED, req->id, 0, 0, 0, NULL);
	if (umount2(HOST_DIR, MNT_DETACH) < 0)
		fail("detach the host root", NULL, errno);
	if (rmdir(HOST_DIR) < 0)
		fail("rmdir", HOST_DIR, errno);
	if (!(S.flags & TB_SBP_F_IMAGE) &&
	    mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		fail("read-only root", NULL, errno);
}

static void loopback_up(void)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		fail("socket", "for lo", errno);
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		fail("get flags of", "lo", errno);
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		fail("bring up", "lo", errno);
	close(fd);
}

/* ------------------------------------------------------ the processes */

static struct {
	int32_t id;
	pid_t pid;
} procs[TB_SBP_MAX_PROCS];

static int fd_or_null(int fd)
{
	return fd >= 0 ? fd : open("/dev/null", O_RDWR | O_CLOEXEC);
}

/* In the new process (exec_child()): no capabilities, not even in the
 * sandbox's user namespace, then @p uid and gid, alone. @return 0 or -1. */
static NO_ASAN int become(unsigned uid)
{
	gid_t id = uid;

	/* Empty the bounding set, then leave uid 0; the kernel clears the rest. */
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	/* Init's inheritable and ambient sets are full (they carried its
	 * capabilities through its own exec): nothing of them may reach a
	 * task's process, nor a file's inheritable capabilities. */
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct caps[2];
	if (syscall(SYS_capget, &hdr, caps) < 0)
		return -1;
	caps[0].inheritable = caps[1].inheritable = 0;
	if (syscall(SYS_capset, &hdr, caps) < 0)
		return -1;
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (raw_setgroups(1, &id) < 0 || raw_setresgid(id, id, id) < 0 ||
	    raw_setresuid(id, id, id) < 0)
		return -1;
	return 0;
}

/* In the new process, between clone and execve: only syscalls. */
static NO_ASAN _Noreturn void exec_child(char *const *argv, char *const *envp, const char *cwd,
					 const int fds[4], int errpipe, unsigned uid)
{
	int e[2] = { 0, 0 }; /* errno, and 1 when it was the working directory */
	struct rlimit nofile = { S.nofile, S.nofile };
	struct rlimit fsize = { S.max_file_mb << 20, S.max_file_mb << 20 };
	struct rlimit core = { 0, 0 };
	sigset_t none;

	/* A clean signal state: init blocks SIGCHLD for its signalfd, and a
	 * blocked mask survives execve. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* The OOM killer picks the task's processes first, never init. */
	int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (adj >= 0) {
		if (write(adj, "1000", 4) < 0) {
			/* not fatal: init's score is lowered too, where allowed */
		}
		close(adj);
	}
	/* Its own session and process group: a kill reaches all it spawns. */
	setsid();
	int in = fd_or_null(fds[0]), out = fd_or_null(fds[1]), er = fd_or_null(fds[2]);
	if (in < 0 || out < 0 || er < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(er, 2) < 0)
		goto failed;
	/* Received fds are >= 3 (init's 0-2 are /dev/null); dup2 onto itself
	 * would keep close-on-exec, so clear it by hand then. */
	if (fds[3] >= 0 && (fds[3] == 3 ? fcntl(3, F_SETFD, 0) : dup2(fds[3], 3)) < 0)
		goto failed;
	/* Keep only 0-3 and the exec-error pipe (close-on-exec). */
	if (dup3(errpipe, 64, O_CLOEXEC) < 0)
		goto failed;
	errpipe = 64;
	close_fds(fds[3] >= 0 ? 4 : 3, 63);
	close_fds(65, ~0u);
	if (chdir(cwd) < 0) {
		e[1] = 1;
		goto failed;
	}
	if (setrlimit(RLIMIT_NOFILE, &nofile) < 0 || setrlimit(RLIMIT_FSIZE, &fsize) < 0 ||
	    setrlimit(RLIMIT_CORE, &core) < 0)
		goto failed;
	if (become(uid) < 0)
		goto failed;
	/* Last: after it, the calls above would be refused. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &policy, 0, 0) < 0)
		goto failed;
	execve(argv[0], argv, envp);
failed:
	e[0] = errno;
	if (write(errpipe, e, sizeof(e)) < 0)
		_exit(126);
	_exit(127);
}

struct child_args {
	char *const *argv, *const *envp;
	const char *cwd;
	const int *fds;
	int errpipe_w, errpipe_r;
	unsigned uid;
};

static char child_stack[64 * 1024] __attribute__((aligned(64)));

/* Runs on child_stack in init's memory: ASan's stack redzones would be
 * left poisoned in the shared shadow when execve replaces the child. */
static NO_ASAN int child_main(void *p)
{
	const struct child_args *a = p;

	close(a->errpipe_r);
	exec_child(a->argv, a->envp, a->cwd, a->fds, a->errpipe_w, a->uid);
}

/* EXEC's strings, split into @p data: the worker wrote exactly argc +
 * envc + 1, the last one NUL-terminated within len. @return NULL, or why
 * the request is refused. */
static const char *split_exec(const tb_sbp_req_t *req, char *data, char **argv, char **envp,
			      const char **cwd)
{
	size_t pos;

	if (req->len == 0 || req->data[req->len - 1] != '\0')
		return "malformed request";
	memcpy(data, req->data, req->len);
	*cwd = data;
	pos = strnlen(data, req->len) + 1;
	for (uint32_t i = 0; i < req->argc + req->envc; i++) {
		if (pos >= req->len)
			return "truncated request";
		if (i < req->argc)
			argv[i] = data + pos;
		else
			envp[i - req->argc] = data + pos;
		pos += strnlen(data + pos, req->len - pos) + 1;
	}
	argv[req->argc] = NULL;
	envp[req->envc] = NULL;
	return NULL;
}

static void handle_exec(const tb_sbp_req_t *req, int *fds)
{
	static char *argv[TB_SBP_MAX_ARGS + 1], *envp[TB_SBP_MAX_ENVS + 1];
	static char data[TB_SBP_DATA_MAX];
	int all[4] = { -1, -1, -1, -1 }, slot = -1, errpipe[2], e[2] = { 0, 0 };
	const char *cwd, *bad;
	size_t k = 0;
	pid_t pid;

	for (int i = 0; i < 4; i++)
		if (req->fd_mask & (1u << i))
			all[i] = fds[k++];
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (procs[i].pid == 0) {
			slot = i;
			break;
		}
	if (slot < 0 || req->argc == 0 || req->argc > TB_SBP_MAX_ARGS ||
	    req->envc > TB_SBP_MAX_ENVS || req->len > TB_SBP_DATA_MAX) {
		send_resp(TB_SBP_FAILED, req->id, 0, 0, slot < 0 ? EAGAIN : EINVAL,
			  slot < 0 ? "too many processes" : "bad request");
		goto out;
	}
	if ((bad = split_exec(req, data, argv, envp, &cwd))) {
		send_resp(TB_SBP_FAILED, req->id, 0, 0, EINVAL, bad);
		goto out;
	}
	if (pipe2(errpipe, O_CLOEXEC) < 0) {
		send_resp(TB_SBP_FAILED, req->id, 0, 0, errno, "pipe");
		goto out;
	}
	/* vfork-style: the child borrows init's memory until execve, so no
	 * page tables are copied, and init sleeps until then; the child gets
	 * a stack of its own. */
	unsigned uid = req->sig > 0 && req->sig < 65534 ? (unsigned)req->sig : TB_SANDBOX_AGENT_ID;
	struct child_args ca = { argv, envp, cwd, all, errpipe[1], errpipe[0], uid };
	pid = clone(child_main, child_stack + sizeof(child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD,
		    &ca);
	close(errpipe[1]);
	if (pid < 0) {
		send_resp(TB_SBP_FAILED, req->id, 0, 0, errno, "fork");
		close(errpipe[0]);
		goto out;
	}
	/* Reads 0 bytes when execve closed the pipe, the errno otherwise. */
	while (read(errpipe[0], e, sizeof(e)) < 0 && errno == EINTR)
		;
	close(errpipe[0]);
	if (e[0]) {
		/* The child exits 127; it is reaped without a report. */
		char msg[256] = "working directory ";
		cat(msg, sizeof(msg), cwd);
		send_resp(TB_SBP_FAILED, req->id, 0, 0, e[0], e[1] ? msg : argv[0]);
	} else {
		procs[slot].id = req->id;
		procs[slot].pid = pid;
		send_resp(TB_SBP_STARTED, req->id, pid, 0, 0, NULL);
	}
out:
	for (size_t i = 0; i < k; i++)
		close(fds[i]);
}

static void handle_kill(const tb_sbp_req_t *req)
{
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (procs[i].pid && procs[i].id == req->id) {
			kill(-procs[i].pid, req->sig);
			kill(procs[i].pid, req->sig);
		}
}

/* A child reaped: its end is reported if the worker started it. */
static void reaped(pid_t pid, int status)
{
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (procs[i].pid == pid) {
			send_resp(TB_SBP_EXITED, procs[i].id, pid, status, 0, NULL);
			procs[i].pid = 0;
		}
}

/* Reaps every child that ended; reports the ones the worker started. */
static void reap(void)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		reaped(pid, status);
}

/* Replaces whatever is mounted at @p path with an empty tmpfs. What was
 * there is detached (no process is left to hold it open) and freed. */
static int fresh_tmpfs(const char *path, uint64_t mb, const char *mode, unsigned owner)
{
	/* Bounded: the sandbox's processes cannot mount, so there are at
	 * most the one init made and the last judge's. */
	for (int i = 0; i < 8 && umount2(path, MNT_DETACH) == 0; i++)
		;
	return tmpfs_at(path, mb, mode, owner);
}

/*
 * The judges' root for an image: init's layer over the image's tree, as
 * built, without the agent's writable layer, so nothing the agent wrote
 * over the image (a planted python in the image's venv) runs in a judge;
 * read-only. Built on a tmpfs over /tmp (its own writable layer, for
 * /etc/hosts), the mounts the judges use moved in (/proc, /dev,
 * /workspace, /outputs, /recipe, /inputs), then pivoted into and the
 * agent's root detached, and the scaffold with it. @return 0, or -1 with errno and @p step set.
 */
static int judge_root(const char **step)
{
	static const char *const moved[] = { "/proc",    "/dev",    "/workspace",
					     "/outputs", "/recipe", "/inputs" };
	char path[PATH_LEN];

	*step = "the judges' root: its tmpfs";
	for (int i = 0; i < 8 && umount2("/tmp", MNT_DETACH) == 0; i++)
		;
	if (tmpfs_at("/tmp", 4, "0700", 0) < 0 || mkdir("/tmp/root", 0755) < 0 ||
	    mkdir("/tmp/layer", 0755) < 0 || mkdir("/tmp/layer/upper", 0755) < 0 ||
	    mkdir("/tmp/layer/work", 0755) < 0)
		return -1;
	*step = "the judges' root: its overlay";
	if (mount("overlay", "/tmp/root", "overlay", MS_NOSUID | MS_NODEV,
		  "lowerdir=" LAYERS_DIR "/base/upper:" LAYERS_DIR
		  "/lower,upperdir=/tmp/layer/upper,workdir=/tmp/layer/work,userxattr") < 0)
		return -1;
	*step = "the judges' root: /etc/hosts";
	if (write_hosts("/tmp/root") < 0)
		return -1;
	for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++) {
		if ((i == 4 && !(task_binds & 1)) || (i == 5 && !(task_binds & 2)))
			continue;
		join(path, sizeof(path), "/tmp/root", moved[i]);
		*step = moved[i];
		if (mount(moved[i], path, NULL, MS_MOVE, NULL) < 0)
			return -1;
	}
	*step = "the judges' root: pivot";
	if (chdir("/tmp/root") < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return -1;
	*step = "the judges' root: read-only";
	return mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
}

static int judge_view(unsigned uid, const char **step)
{
	static int sealed; /* the agent's two tmpfs are read-only for good */
	static const char *const agents[] = { "/workspace", "/outputs" };

	for (size_t i = 0; !sealed && i < sizeof(agents) / sizeof(agents[0]); i++)
		if (make_readonly(agents[i], 1) < 0) {
			*step = agents[i];
			return -1;
		}
	if (!sealed && (S.flags & TB_SBP_F_IMAGE) && judge_root(step) < 0)
		return -1;
	sealed = 1;
	if (unshare(CLONE_NEWIPC) < 0) {
		*step = "IPC namespace";
		return -1;
	}
	if (fresh_tmpfs("/tmp", S.workspace_mb, "1777", 0) < 0) {
		*step = "/tmp";
		return -1;
	}
	if (fresh_tmpfs("/dev/shm", 16, "1777", 0) < 0) {
		*step = "/dev/shm";
		return -1;
	}
	if (fresh_tmpfs("/home", S.workspace_mb, "0700", uid) < 0) {
		*step = "/home";
		return -1;
	}
	return 0;
}

/*
 * Kills every process but init and waits until none is left: every
 * process of the namespace descends from init and an orphan comes back to
 * it, so when waitpid() finds no child, the namespace holds init alone.
 * kill(-1) is one walk of the process list under the lock fork() needs,
 * and a process with SIGKILL pending cannot fork: nothing is born behind
 * it. Then, for a judge (req->sig > 0, its uid), judge_view().
 */
static void handle_clear(const tb_sbp_req_t *req)
{
	const char *step = NULL;
	int status, e = 0;
	pid_t pid;

	kill(-1, SIGKILL);
	while ((pid = waitpid(-1, &status, __WALL)) > 0 || (pid < 0 && errno == EINTR))
		if (pid > 0)
			reaped(pid, status);
	if (req->sig > 0) {
		if (!assigned) {
			step = "judge's view: sandbox not assigned";
			e = EPERM;
		} else if (judge_view((unsigned)req->sig, &step) < 0) {
			e = errno;
		}
	}
	if (e) {
		char msg[128] = "judge's view: ";
		cat(msg, sizeof(msg), step);
		send_resp(TB_SBP_FAILED, req->id, 0, 0, e, assigned ? msg : step);
		return;
	}
	send_resp(TB_SBP_CLEARED, req->id, 0, 0, 0, NULL);
}

/* One request from the worker, with the @p nfds descriptors that came
 * with it (each taken: passed on or closed). */
static void dispatch(tb_sbp_req_t *req, int short_msg, int *fds, int nfds)
{
	if (!short_msg && req->op == TB_SBP_EXEC && assigned &&
	    __builtin_popcount(req->fd_mask & 15) == nfds) {
		handle_exec(req, fds); /* takes the fds */
		return;
	}
	if (!short_msg && req->op == TB_SBP_ASSIGN && !assigned && nfds <= 1) {
		assign(req, nfds ? fds[0] : -1); /* takes the lazy inputs' mount */
		return;
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (short_msg)
		send_resp(TB_SBP_FAILED, req->id, 0, 0, EINVAL, "malformed request");
	else if (req->op == TB_SBP_EXEC)
		send_resp(TB_SBP_FAILED, req->id, 0, 0, assigned ? EINVAL : EPERM,
			  assigned ? "descriptors do not match the request"
				   : "sandbox not assigned");
	else if (req->op == TB_SBP_KILL)
		handle_kill(req);
	else if (req->op == TB_SBP_CLEAR)
		handle_clear(req);
}

static _Noreturn void serve(void)
{
	static tb_sbp_req_t req;
	sigset_t chld;
	int sfd;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		fail("signalfd", NULL, errno);
	send_resp(TB_SBP_READY, 0, 0, 0, 0, NULL);
	for (;;) {
		struct pollfd p[2] = { { TB_SBP_INIT_FD, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(2);
		}
		if (p[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) > 0)
				;
			reap();
		}
		if (!p[0].revents)
			continue;
		union {
			char buf[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { &req, sizeof(req) };
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = ctl.buf,
				     .msg_controllen = sizeof(ctl.buf) };
		ssize_t n = recvmsg(TB_SBP_INIT_FD, &mh, MSG_CMSG_CLOEXEC);
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			_exit(0); /* the worker closed its end: tear down */
		if (n < 0)
			continue; /* interrupted: nothing was received */
		int short_msg = n < (ssize_t)offsetof(tb_sbp_req_t, data) ||
				req.len > TB_SBP_DATA_MAX ||
				(size_t)n != offsetof(tb_sbp_req_t, data) + req.len;
		int fds[4], nfds = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				if (nfds > 4)
					nfds = 4;
				memcpy(fds, CMSG_DATA(c), (size_t)nfds * sizeof(int));
			}
		dispatch(&req, short_msg, fds, nfds);
	}
}

/* The SETUP message into @p req, and the image's tree (image_fd) when
 * one rides along. EOF means the worker gave up (or died) before. */
static ssize_t recv_setup(tb_sbp_req_t *req)
{
	ssize_t n;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { req, sizeof(*req) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	do
		n = recvmsg(TB_SBP_INIT_FD, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		_exit(1);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&image_fd, CMSG_DATA(cm), sizeof(int));
	return n;
}

/* Waits for SETUP and takes it apart. */
static void read_setup(void)
{
	static tb_sbp_req_t req;
	static struct sock_filter bpf[BPF_MAXINSNS];
	ssize_t n = recv_setup(&req);
	size_t pos, end;

	if (n < (ssize_t)offsetof(tb_sbp_req_t, data) || req.op != TB_SBP_SETUP ||
	    req.len > TB_SBP_DATA_MAX || (size_t)n != offsetof(tb_sbp_req_t, data) + req.len ||
	    req.len < sizeof(S) + 1 || req.data[req.len - 1] != '\0')
		fail("setup", "malformed request", EINVAL);
	memcpy(&S, req.data, sizeof(S));
	if (S.version != TB_SBP_VERSION)
		fail("setup",
		     "from a worker of another build: install taskbox and "
		     "taskbox-sandbox-init together",
		     EPROTO);
	pos = sizeof(S);
	end = pos + (size_t)S.bpf_len * sizeof(struct sock_filter);
	if (S.bpf_len == 0 || S.bpf_len > BPF_MAXINSNS || end >= req.len ||
	    S.nbinds > TB_SBP_MAX_BINDS)
		fail("setup", "malformed request", EINVAL);
	memcpy(bpf, req.data + pos, end - pos);
	policy.len = (unsigned short)S.bpf_len;
	policy.filter = bpf;
	pos = end;
	new_root = req.data + pos;
	for (uint32_t i = 0; i <= S.nbinds; i++) {
		if (pos >= req.len)
			fail("setup", "truncated request", EINVAL);
		if (i > 0)
			binds[i - 1] = req.data + pos;
		pos += strnlen(req.data + pos, req.len - pos) + 1;
	}
	if (new_root[0] != '/')
		fail("setup", "root is not absolute", EINVAL);
	if (!(S.flags & TB_SBP_F_IMAGE) != (image_fd < 0) || (image_fd >= 0 && S.nbinds))
		fail("setup", "an image root without its tree, or with binds", EINVAL);
	for (uint32_t i = 0; i < S.nbinds; i++)
		if (binds[i][0] != '/')
			fail("setup", "a bind is not absolute", EINVAL);
}

/* Inherited: 0-2 from the worker, fd 3, and whatever the worker's
 * libraries opened without close-on-exec: closed here. 0-2 become
 * /dev/null. */
static void null_stdio(void)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
		_exit(1);
	if (null > TB_SBP_INIT_FD)
		close(null);
	close_fds(TB_SBP_INIT_FD + 1, ~0u);
}

int main(void)
{
	sigset_t none;

	/* Die with the worker's thread that made us. The child set this
	 * before exec, which keeps it; set again where it is relied on. If
	 * the worker died before, its end of the socket hung up: read_setup()
	 * sees EOF. */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (fcntl(TB_SBP_INIT_FD, F_SETFD, FD_CLOEXEC) < 0)
		_exit(1);
	null_stdio();
	/* A blocked mask and ignored signals survive execve: start clean. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	read_setup();
	/* Our capabilities in the new user namespace came through exec as
	 * ambient ones (see start_init() in sandbox.c); the ones our
	 * processes could inherit are cleared in exec_child(). The worker
	 * has written our uid/gid maps: become root of the user
	 * namespace (host uid_base), with no supplementary groups. */
	if (raw_setgroups(0, NULL) < 0 || raw_setresgid(0, 0, 0) < 0 || raw_setresuid(0, 0, 0) < 0)
		fail("become root of the user namespace", NULL, errno);
	/* Changing uid cleared the parent-death signal: set it again, then
	 * make sure the worker did not die in between (its end of the
	 * control socket would have hung up). */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	struct pollfd hup = { TB_SBP_INIT_FD, 0, 0 };
	if (poll(&hup, 1, 0) > 0 && (hup.revents & (POLLHUP | POLLERR)))
		_exit(1);
	/* Files this init creates get the modes it asks for, whatever the
	 * worker's umask. */
	umask(022);
	/* Now inside the sandbox's cgroup: make it this namespace's root, so
	 * /proc/self/cgroup shows "/" and no path leads outside. */
	if (unshare(CLONE_NEWCGROUP) < 0)
		fail("unshare", "cgroup namespace", errno);
	loopback_up();
	build_root();
	serve();
}
