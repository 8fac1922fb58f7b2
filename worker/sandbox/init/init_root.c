/*
 * init_root.c: the sandbox's file system, as SETUP and ASSIGN describe it:
 * the tmpfs root (or an image's overlay root, its places made safe first),
 * the read-only binds of the host, /dev, the recipe and the inputs (those
 * read on demand bound from their FUSE mount), /etc/hosts, and loopback.
 * Everything here runs before the pivot on host paths under new_root, so
 * each step fails the build rather than go on half-done.
 */
#include "init_int.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef __GLIBC__ /* glibc's sys/mount.h has the mount API's; musl's not */
#include <linux/mount.h>
#endif

/* Mounts a tmpfs of @p mb MiB at @p path, mode @p mode, owned by @p owner
 * (uid and gid inside; 0 is the sandbox's root). @return 0 or -1. */
int tmpfs_at(const char *path, uint64_t mb, const char *mode, unsigned owner)
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
int make_readonly(const char *path, int nosymfollow)
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

void build_root(void)
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
int write_hosts(const char *root)
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
void assign(const tb_sbp_req_t *req, int lazy_fd)
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

void loopback_up(void)
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
