/*
 * sandbox.c: the worker's side of a sandbox: finding the init program,
 * the cgroup, the clone into new namespaces, the uid/gid maps, the control
 * socket to the init process, deadlines, exit reasons, and teardown. The
 * init process's side is sandbox_init.c (taskbox-sandbox-init); the
 * protocol between them sandbox_proto.h.
 */
#include "sandbox.h"

#include "tb/health.h"

#include "sandbox_cgroup.h"
#include "sandbox_ids.h"
#include "sandbox_proto.h"
#include "tb/clock.h"
#include "tb/fsutil.h"
#include "tb/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NAMESPACES                                                                                 \
	(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC)
#define READY_TIMEOUT_MS 10000
/* init_child() runs on the clone's own stack while the worker's shadow
 * memory is shared: no ASan instrumentation there. */
#define NO_ASAN __attribute__((no_sanitize("address")))
#define INIT_NAME "taskbox-sandbox-init"
#define INIT_STACK (64 * 1024)
#define TEARDOWN_TIMEOUT_MS 5000

typedef struct proc {
	int id;
	int live;
	int exited;
	int status;
	int deadline;             /* running when the deadline passed: killed by it */
	tb_cgroup_stats_t before; /* counters when it started */
} proc_t;

struct tb_sandbox {
	pid_t init;
	int ctl;
	int assigned;      /* tb_sandbox_assign() done: processes may start */
	int dead;          /* init is gone (a crash, the OOM killer, teardown) */
	int frozen;        /* tb_sandbox_freeze(): thawed before any kill */
	uint64_t deadline; /* CLOCK_MONOTONIC ms; 0 = none */
	int next_id;
	tb_idrange_t ids; /* the host ids it maps, its own on this host */
	tb_cgroup_t *cg;
	int hold; /* a duplicate of spec.image_hold, or -1 */
	proc_t procs[TB_SBP_MAX_PROCS];
	char name[256];      /* for logs */
	char root[PATH_MAX]; /* work_root, canonical: init mounts its root over it */
};

const char *tb_sandbox_end_describe(const tb_sandbox_exit_t *e, char *buf, size_t len)
{
	switch (e->end) {
	case TB_SANDBOX_EXITED:
		snprintf(buf, len, "exited with code %d", e->code);
		break;
	case TB_SANDBOX_SIGNALED:
		snprintf(buf, len, "killed by signal %d (%s)", e->signal, strsignal(e->signal));
		break;
	case TB_SANDBOX_OOM:
		snprintf(buf, len, "killed by the OOM killer at the memory limit");
		break;
	case TB_SANDBOX_PIDS_LIMIT:
		snprintf(buf, len, "hit the process limit (a fork was refused)%s",
			 e->signal ? ", then killed by a signal" : "");
		break;
	case TB_SANDBOX_DEADLINE:
		snprintf(buf, len, "killed at the wall-clock deadline");
		break;
	}
	return buf;
}

static int valid_name(const char *s)
{
	if (!s || !*s || strlen(s) > 200 || s[0] == '.')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return 0;
	return 1;
}

/* A bind source must be an absolute, normalised path that does not hand
 * over the host's root or its kernel interfaces. */
static int valid_bind(const char *p)
{
	static const char *const refused[] = { "/proc", "/sys", "/dev", "/run", NULL };
	char why[64];

	if (!p || p[0] != '/' || p[1] == '\0' || strlen(p) > 1024 ||
	    tb_check_relpath(p + 1, why, sizeof(why)) != 0)
		return 0;
	for (int i = 0; refused[i]; i++) {
		size_t n = strlen(refused[i]);
		if (!strncmp(p, refused[i], n) && (p[n] == '\0' || p[n] == '/'))
			return 0;
	}
	return 1;
}

static int write_proc(pid_t pid, const char *file, const char *text, tb_error_t *err)
{
	char path[64];
	int fd, e;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
		return tb_error_errno(err, TB_EIO, errno, "sandbox: open %s", path);
	n = write(fd, text, strlen(text));
	e = errno;
	close(fd);
	if (n < 0)
		return tb_error_errno(err, TB_EIO, e, "sandbox: write %s", path);
	return 0;
}

/* Reads one response; @return 1, 0 on EOF, -1 on error. */
static int recv_resp(tb_sandbox_t *sb, tb_sbp_resp_t *r)
{
	ssize_t n;

	do
		n = recv(sb->ctl, r, sizeof(*r), 0);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return 0;
	if (n != (ssize_t)sizeof(*r))
		return -1;
	return 1;
}

static proc_t *find(tb_sandbox_t *sb, int id)
{
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (sb->procs[i].live && sb->procs[i].id == id)
			return &sb->procs[i];
	return NULL;
}

static void note_exit(tb_sandbox_t *sb, const tb_sbp_resp_t *r)
{
	proc_t *p = find(sb, r->id);
	if (p) {
		p->exited = 1;
		p->status = r->status;
	}
}

/* Waits for a response, up to @p timeout_ms (-1 forever). Exits of other
 * processes seen on the way are recorded. @return 1, 0 on timeout, -1 if
 * init is gone. */
static int await(tb_sandbox_t *sb, tb_sbp_resp_t *r, int timeout_ms)
{
	struct pollfd p = { sb->ctl, POLLIN, 0 };
	int n;

	do
		n = poll(&p, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return 0;
	if (n < 0 || recv_resp(sb, r) <= 0) {
		sb->dead = 1;
		return -1;
	}
	return 1;
}

static void thaw(tb_sandbox_t *sb)
{
	tb_error_t err;

	if (sb->frozen && sb->cg && tb_cgroup_freeze(sb->cg, 0, &err) < 0)
		tb_log(TB_LOG_WARN, NULL, "sandbox %s: %s", sb->name, err.msg);
	sb->frozen = 0;
}

int tb_sandbox_freeze(tb_sandbox_t *sb, int frozen, tb_error_t *err)
{
	int rc;

	if (sb->dead)
		return tb_error_set(err, TB_EIO, "sandbox: gone");
	if ((rc = tb_cgroup_freeze(sb->cg, frozen, err)) < 0)
		return rc;
	sb->frozen = frozen;
	return 0;
}

static void kill_init(tb_sandbox_t *sb)
{
	int status;

	if (sb->init <= 0)
		return;
	thaw(sb); /* a frozen process cannot die */
	/* init is pid 1 of its namespace: when it dies, the kernel kills
	 * every other process in the namespace. */
	kill(sb->init, SIGKILL);
	while (waitpid(sb->init, &status, 0) < 0 && errno == EINTR)
		;
	sb->init = 0;
	sb->dead = 1;
}

/*
 * The wall-clock deadline: every process but init is killed, each marked
 * as ended by it, and the sandbox stays up, so that what the agent left in
 * /outputs can still be collected and the judges run (each under its own
 * timeout). Killing init would take the sandbox's file systems along, and
 * the attempt would have nothing to record. The deadline is spent: a
 * spawn that found it passed is refused, what starts later runs without
 * one. If init cannot be told, it is killed.
 */
static void hit_deadline(tb_sandbox_t *sb)
{
	tb_error_t ignored;
	tb_sbp_resp_t r;

	/* Exits already reported count as exits, not as the deadline's. */
	while (await(sb, &r, 0) == 1)
		if (r.op == TB_SBP_EXITED)
			note_exit(sb, &r);
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (sb->procs[i].live && !sb->procs[i].exited)
			sb->procs[i].deadline = 1;
	sb->deadline = 0;
	if (tb_sandbox_kill_all(sb, &ignored) < 0)
		kill_init(sb);
}

/* ------------------------------------------------- the init program */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_fd = -1; /* O_PATH: what every sandbox executes */
static char init_path[PATH_MAX];
static char init_tried[2048]; /* where it was looked for, when not found */

/* Why the program at @p path (open as @p fd) may not run as every
 * sandbox's pid 1, or NULL: it must be a regular executable file owned by
 * root or the worker's user, which no one else can write, in directories
 * others cannot write (sticky ones, like /tmp, aside). */
static const char *untrusted(const char *path, int fd, char *why, size_t len)
{
	char real[PATH_MAX];
	struct stat st;

	if (fstat(fd, &st) < 0)
		return strerror(errno);
	if (!S_ISREG(st.st_mode) || !(st.st_mode & 0111))
		return "not an executable file";
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(why, len, "owned by uid %u", (unsigned)st.st_uid);
		return why;
	}
	if (st.st_mode & 022)
		return "writable by group or others";
	if (!realpath(path, real))
		return strerror(errno);
	for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
		*slash = '\0';
		const char *dir = real[0] ? real : "/";
		if (stat(dir, &st) < 0)
			return strerror(errno);
		if ((st.st_mode & 002) && !(st.st_mode & S_ISVTX)) {
			snprintf(why, len, "in %.200s, which others can write", dir);
			return why;
		}
		if (!real[0])
			break;
	}
	return NULL;
}

static int try_init(const char *path)
{
	size_t n = strlen(init_tried);
	const char *why = NULL;
	char buf[256];
	int fd;

	if (strlen(path) >= sizeof(init_path))
		why = "path too long";
	else if ((fd = open(path, O_PATH | O_CLOEXEC)) < 0)
		why = strerror(errno);
	else if ((why = untrusted(path, fd, buf, sizeof(buf))))
		close(fd);
	else if (fd <= TB_SBP_INIT_FD) {
		/* Above the control socket's place in the child, which would
		 * replace it just before the exec. */
		int high = fcntl(fd, F_DUPFD_CLOEXEC, TB_SBP_INIT_FD + 1);
		close(fd);
		if ((fd = high) < 0)
			why = strerror(errno);
	}
	if (!why) {
		memcpy(init_path, path, strlen(path) + 1);
		init_fd = fd;
		return 1;
	}
	snprintf(init_tried + n, sizeof(init_tried) - n, "%s%s (%s)", n ? ", " : "", path, why);
	return 0;
}

/* Looked up once; the file is kept open, so a sandbox always executes
 * what was checked here, even if an upgrade replaces it on disk. */
static void find_init_once(void)
{
	const char *env = getenv("TASKBOX_SANDBOX_INIT");
	char self[PATH_MAX], near[PATH_MAX + sizeof(INIT_NAME) + 32];
	ssize_t n;

	if (env && *env) {
		try_init(env); /* named explicitly: nothing else */
		return;
	}
	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		self[n] = '\0';
		const char *dir = dirname(self);
		snprintf(near, sizeof(near), "%s/%s", dir, INIT_NAME);
		if (try_init(near))
			return;
		/* an installed tree, wherever its prefix: bin/ and libexec/taskbox/ */
		snprintf(near, sizeof(near), "%s/../libexec/taskbox/%s", dir, INIT_NAME);
		if (try_init(near))
			return;
	}
#ifdef TB_SANDBOX_INIT_BUILT /* builds with tests: their programs live elsewhere */
	if (try_init(TB_SANDBOX_INIT_BUILT))
		return;
#endif
	try_init(TB_SANDBOX_INIT_INSTALLED);
}

int tb_sandbox_find_init(const char **path, tb_error_t *err)
{
	pthread_once(&init_once, find_init_once);
	if (init_fd < 0)
		return tb_error_set(err, TB_ENOTFOUND,
				    "sandbox: cannot run " INIT_NAME ", tried %s; set "
				    "TASKBOX_SANDBOX_INIT to where it is installed",
				    init_tried);
	*path = init_path;
	return 0;
}

/* Whether the root is an image's (a tree, or a file system of the
 * caller's), not the host binds. */
static int has_image(const tb_sandbox_spec_t *spec)
{
	return spec->image_tree || spec->image_root;
}

/* The setup init waits for: sizes, rlimits, the seccomp filter, the host
 * directory to build on and the read-only binds (sandbox_proto.h). */
static int pack_setup(tb_sbp_req_t **out, const tb_seccomp_t *policy, const tb_sandbox_spec_t *spec,
		      const char *root, tb_error_t *err)
{
	tb_sbp_setup_t setup = {
		.workspace_mb = spec->workspace_mb,
		.outputs_mb = spec->outputs_mb,
		.max_file_mb = spec->max_file_mb,
		.nofile = spec->max_open_files,
		.writable_mb = spec->writable_mb,
		.version = TB_SBP_VERSION,
		.flags = has_image(spec) ? TB_SBP_F_IMAGE : 0,
		.nbinds = spec->ro_binds && !has_image(spec) ? (uint32_t)spec->ro_binds->n : 0,
	};
	size_t bpf_size, pos;
	struct rlimit hard;
	const void *bpf = tb_seccomp_bpf(policy, &setup.bpf_len);
	tb_sbp_req_t *req;

	if (spec->ro_binds && spec->ro_binds->n > TB_SBP_MAX_BINDS)
		return tb_error_set(err, TB_EINVAL, "sandbox: over %u ro_binds", TB_SBP_MAX_BINDS);
	/* A user namespace cannot raise a hard limit above its creator's. */
	if (getrlimit(RLIMIT_NOFILE, &hard) == 0 && hard.rlim_max != RLIM_INFINITY &&
	    setup.nofile > hard.rlim_max)
		setup.nofile = hard.rlim_max;
	bpf_size = (size_t)setup.bpf_len * sizeof(struct sock_filter);
	if (!(req = calloc(1, sizeof(*req))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	req->op = TB_SBP_SETUP;
	memcpy(req->data, &setup, sizeof(setup));
	memcpy(req->data + sizeof(setup), bpf, bpf_size);
	pos = sizeof(setup) + bpf_size;
	for (uint32_t i = 0; i <= setup.nbinds; i++) {
		const char *str = i == 0 ? root : spec->ro_binds->items[i - 1];
		size_t n = strlen(str) + 1;
		if (pos + n > sizeof(req->data)) {
			free(req);
			return tb_error_set(err, TB_ETOOBIG,
					    "sandbox: the ro_binds list is over %u KiB",
					    TB_SBP_DATA_MAX / 1024);
		}
		memcpy(req->data + pos, str, n);
		pos += n;
	}
	req->len = (uint32_t)pos;
	*out = req;
	return 0;
}

struct init_child {
	int exe; /* O_PATH descriptor of the init program */
	char *const *argv;
	int ctl;
	int err;          /* set by the child if it could not exec */
	const char *step; /* ... at this step */
};

/* The child, in the new namespaces, on its own small stack in the
 * worker's memory, while the worker thread that made it waits
 * (CLONE_VFORK). Only system calls; all signals blocked.
 *
 * An exec by a process whose uid has no mapping in its user namespace
 * yet (the worker writes the maps only after this exec) would drop the
 * capabilities the namespace gave it. Raised to ambient, they survive
 * the exec: init needs them to become root of the namespace and to
 * mount. Init clears the ambient set in every process it starts. */
static NO_ASAN int init_child(void *p)
{
	static char *const no_env[] = { NULL };
	struct init_child *c = p;
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct caps[2];

	c->step = "set the parent-death signal";
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		goto failed;
	c->step = "keep capabilities across exec";
	if (syscall(SYS_capget, &hdr, caps) < 0)
		goto failed;
	caps[0].inheritable = caps[0].permitted;
	caps[1].inheritable = caps[1].permitted;
	if (syscall(SYS_capset, &hdr, caps) < 0)
		goto failed;
	for (int cap = 0; cap < 64; cap++)
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0 && errno != EINVAL)
			goto failed;
	c->step = "pass the control socket";
	if ((c->ctl == TB_SBP_INIT_FD ? fcntl(c->ctl, F_SETFD, 0) : dup2(c->ctl, TB_SBP_INIT_FD)) <
	    0)
		goto failed;
	c->step = "execute";
	syscall(SYS_execveat, c->exe, "", c->argv, no_env, AT_EMPTY_PATH);
failed:
	c->err = errno ? errno : EINVAL;
	_exit(127);
}

/* Starts the sandbox's init: a child cloned into the new namespaces that
 * executes taskbox-sandbox-init at once. With CLONE_VM | CLONE_VFORK no
 * page table of the worker is copied (a fork of a worker with many
 * threads and mappings holds its mmap lock while it copies, and every
 * fault in the worker then sleeps), and the worker does not fault
 * copy-on-write afterwards. @p ctl becomes init's fd 3. */
static int start_init(pid_t *out, int ctl, const char *name, tb_error_t *err)
{
	char *argv[] = { INIT_NAME, (char *)name, NULL };
	struct init_child c = { -1, argv, ctl, 0, "clone" };
	const char *path;
	sigset_t all, old;
	size_t guard = (size_t)sysconf(_SC_PAGESIZE);
	char *stack;
	pid_t pid;
	int rc, e;

	if ((rc = tb_sandbox_find_init(&path, err)) < 0)
		return rc;
	c.exe = init_fd;
	/* Its own stack, with a guard page below: an overflow faults
	 * instead of writing over the worker's memory. */
	stack = mmap(NULL, guard + INIT_STACK, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return tb_error_errno(err, TB_ENOMEM, errno, "sandbox: a stack for the clone");
	if (mprotect(stack, guard, PROT_NONE) < 0) {
		rc = tb_error_errno(err, TB_ENOMEM, errno, "sandbox: the stack's guard page");
		munmap(stack, guard + INIT_STACK);
		return rc;
	}
	/* No worker signal handler may run on the child's stack. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = clone(init_child, stack + guard + INIT_STACK,
		    NAMESPACES | CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	munmap(stack, guard + INIT_STACK);
	if (pid < 0)
		return tb_error_errno(err, TB_EIO, e, "sandbox: clone into new namespaces");
	if (c.err) {
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		return tb_error_errno(err, TB_EIO, c.err, "sandbox: %s: %s", path, c.step);
	}
	*out = pid;
	return 0;
}

/* The image's tree as a detached mount for init, read-only, nosuid,
 * nodev, and idmapped to the sandbox's user namespace so that a file the
 * image gave uid 1000 is uid 1000 inside. A kernel or file system that
 * cannot idmap (before Linux 5.12, or an overlay below 5.19) gets the
 * tree as it is: its files then show as nobody inside, and are still
 * read as their modes allow. @return the mount's fd, or < 0. */
static int image_mount(const tb_sandbox_t *sb, const char *tree, tb_error_t *err)
{
	static atomic_int warned;
	char ns[64];
	int fd = (int)syscall(SYS_open_tree, AT_FDCWD, tree,
			      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (fd < 0)
		return tb_error_errno(err, TB_EIO, errno, "sandbox: the image's tree %.200s", tree);
	snprintf(ns, sizeof(ns), "/proc/%d/ns/user", (int)sb->init);
	int userns = open(ns, O_RDONLY | O_CLOEXEC);
	struct mount_attr attr = {
		.attr_set =
		    MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
		.userns_fd = (uint64_t)userns,
	};
	int rc = userns < 0 ? -1
			    : (int)syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE,
					   &attr, sizeof(attr));
	int e = errno;
	if (userns >= 0)
		close(userns);
	if (rc < 0) {
		attr.attr_set &= ~(uint64_t)MOUNT_ATTR_IDMAP;
		if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
			    sizeof(attr)) < 0) {
			close(fd);
			return tb_error_errno(err, TB_EIO, errno,
					      "sandbox: the image's tree read-only");
		}
		if (!atomic_exchange(&warned, 1))
			tb_warn(NULL,
				"images are mounted without an id mapping here (%s): their "
				"files show as nobody inside the sandbox",
				strerror(e));
	}
	return fd;
}

/* The root from the caller's file system (spec image_root), its ids
 * shown in this sandbox's range already. @return the mount's fd, or < 0
 * (TB_EIO unless the caller's error says otherwise). */
static int image_served(const tb_sandbox_t *sb, int (*root)(void *, uint32_t, tb_error_t *),
			void *arg, tb_error_t *err)
{
	int fd = root(arg, sb->ids.base, err);
	if (fd >= 0)
		return fd;
	tb_error_prefix(err, "sandbox: the image's root");
	return err->code < 0 ? err->code : TB_EIO;
}

/* Sends @p len bytes of @p req, with @p fd (>= 0) as SCM_RIGHTS. */
static int send_with_fd(int sock, const void *req, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)req, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* What tb_sandbox_prepare() refuses before it builds anything. */
static int check_spec(const tb_sandbox_spec_t *spec, tb_error_t *err)
{
	if (!valid_name(spec->name) || !valid_name(spec->group))
		return tb_error_set(err, TB_EINVAL, "sandbox: name or group is not valid");
	if (!spec->workspace_mb || !spec->outputs_mb || !spec->max_open_files || !spec->max_file_mb)
		return tb_error_set(
		    err, TB_EINVAL,
		    "sandbox: tmpfs sizes and rlimits must be set (0 means unlimited)");
	if (spec->image_tree && spec->image_tree[0] != '/')
		return tb_error_set(err, TB_EINVAL, "sandbox: the image's tree is not absolute");
	if (spec->image_tree && spec->image_root)
		return tb_error_set(err, TB_EINVAL,
				    "sandbox: an image's tree or its root, not both");
	if (has_image(spec) && !spec->writable_mb)
		return tb_error_set(err, TB_EINVAL,
				    "sandbox: an image's writable layer must have a size");
	for (size_t i = 0; !has_image(spec) && spec->ro_binds && i < spec->ro_binds->n; i++)
		if (!valid_bind(spec->ro_binds->items[i]))
			return tb_error_set(
			    err, TB_EINVAL,
			    "sandbox: ro_binds entry '%.100s' is not an absolute, "
			    "normalised path, or exposes /, /proc, /sys, /dev or /run",
			    spec->ro_binds->items[i]);
	return 0;
}

/* A sandbox's handle, before anything is built: its name, its canonical
 * work_root (made if missing), its hold on the image. @return 0, or the
 * error with nothing left (*@p out NULL). */
static int sandbox_new(tb_sandbox_t **out, const tb_sandbox_spec_t *spec, tb_error_t *err)
{
	tb_sandbox_t *sb;
	int rc = 0;

	if (!(*out = sb = calloc(1, sizeof(*sb))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	sb->ctl = -1;
	sb->hold = -1;
	sb->ids.lock = -1;
	sb->next_id = 1;
	snprintf(sb->name, sizeof(sb->name), "%s-%s", spec->group, spec->name);
	/* No directory of its own on the host: init mounts the tmpfs it
	 * builds the root on over work_root, in its own mount namespace,
	 * and pivots into it. (A directory per sandbox cost a mkdir, a chown
	 * and a removal on the host's file system each time.) */
	if (mkdir(spec->work_root, 0711) < 0 && errno != EEXIST)
		rc = tb_error_errno(err, TB_EIO, errno, "sandbox: mkdir %s", spec->work_root);
	else if (!realpath(spec->work_root, sb->root))
		rc = tb_error_errno(err, TB_EIO, errno, "sandbox: work_root %s", spec->work_root);
	else if (!strcmp(sb->root, "/"))
		rc = tb_error_set(err, TB_EINVAL, "sandbox: work_root may not be /");
	else if (spec->image_tree && spec->image_hold > 0 &&
		 (sb->hold = fcntl(spec->image_hold, F_DUPFD_CLOEXEC, 3)) < 0)
		rc = tb_error_errno(err, TB_EIO, errno, "sandbox: hold the image");
	if (rc < 0) {
		free(sb);
		*out = NULL;
	}
	return rc;
}

int tb_sandbox_prepare(tb_sandbox_t **out, const tb_seccomp_t *policy,
		       const tb_sandbox_spec_t *spec, tb_error_t *err)
{
	tb_cgroup_limits_t lim = {
		.memory_bytes = spec->memory_mb << 20,
		.pids = spec->pids,
		.cpu_millis = spec->cpu_millis,
	};
	int ctl[2] = { -1, -1 }, rc, tree = -1, served = 0;
	char map[64], cgname[256];
	tb_sbp_req_t *req = NULL;
	tb_sbp_resp_t r;
	tb_sandbox_t *sb;

	*out = NULL;
	if ((rc = check_spec(spec, err)) < 0)
		return rc;
	if ((rc = sandbox_new(&sb, spec, err)) < 0)
		return rc;
	if ((rc = tb_idrange_claim(&sb->ids, err)) < 0)
		goto fail;
	snprintf(cgname, sizeof(cgname), "%s", spec->name);
	if ((rc = tb_cgroup_create(&sb->cg, spec->group, cgname, &lim, err)) < 0)
		goto fail;
	if ((rc = pack_setup(&req, policy, spec, sb->root, err)) < 0)
		goto fail;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "sandbox: socketpair");
		goto fail;
	}
	if ((rc = start_init(&sb->init, ctl[1], spec->name, err)) < 0)
		goto fail;
	close(ctl[1]);
	ctl[1] = -1;
	sb->ctl = ctl[0];
	ctl[0] = -1;

	/* Sandbox root is host uid_base; nothing inside maps to host root. */
	snprintf(map, sizeof(map), "0 %u %u\n", sb->ids.base, TB_SANDBOX_ID_RANGE);
	if ((rc = write_proc(sb->init, "uid_map", map, err)) < 0 ||
	    (rc = write_proc(sb->init, "gid_map", map, err)) < 0 ||
	    (rc = tb_cgroup_attach(sb->cg, sb->init, err)) < 0)
		goto fail;
	/* The OOM killer should take the task's processes (they raise their
	 * own score), never init, whose death ends the whole sandbox. Lowering
	 * needs CAP_SYS_RESOURCE, which containers may lack: best effort. */
	write_proc(sb->init, "oom_score_adj", "-1000", NULL);
	if (spec->image_tree && (rc = tree = image_mount(sb, spec->image_tree, err)) < 0)
		goto fail;
	/* the caller's file system failing (an image too big, a tree its
	 * rules refuse) says nothing of the host either */
	if (spec->image_root && (rc = tree = served = image_served(sb, spec->image_root,
								   spec->image_root_arg, err)) < 0)
		goto fail;
	if (send_with_fd(sb->ctl, req, offsetof(tb_sbp_req_t, data) + req->len, tree) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "sandbox: send the setup to init");
		goto fail;
	}
	if (tree >= 0)
		close(tree);
	tree = -1;
	free(req);
	req = NULL;

	switch (await(sb, &r, READY_TIMEOUT_MS)) {
	case 1:
		if (r.op == TB_SBP_READY)
			break;
		rc = r.op == TB_SBP_FAILED
			 ? tb_error_errno(err, TB_EIO, r.err, "sandbox: %s", r.msg)
			 : tb_error_set(err, TB_EIO, "sandbox: unexpected message %u", r.op);
		goto fail;
	case 0:
		rc = tb_error_set(err, TB_ETIMEOUT, "sandbox: not ready after %d ms",
				  READY_TIMEOUT_MS);
		goto fail;
	default:
		rc = tb_error_set(err, TB_EIO, "sandbox: init died while building");
		goto fail;
	}
	*out = sb;
	tb_health_dep(TB_DEP_SANDBOX, 1, "a sandbox was built");
	return 0;
fail:
	if (rc != TB_EINVAL && served >= 0) /* a spec's own fault says nothing of the host */
		tb_health_dep(TB_DEP_SANDBOX, 0, err->msg);
	for (int i = 0; i < 2; i++)
		if (ctl[i] >= 0)
			close(ctl[i]);
	if (tree >= 0)
		close(tree);
	free(req);
	tb_sandbox_destroy(sb, NULL);
	return rc;
}

/* ASSIGN's data into @p req: the host name, the recipe's and the inputs'
 * canonical paths, then each lazy input's path (argc of them). */
static int assign_req(tb_sbp_req_t *req, const tb_sandbox_spec_t *spec, const char *recipe,
		      const char *inputs, tb_error_t *err)
{
	size_t nlazy = spec->lazy_mount > 0 && spec->lazy_paths ? spec->lazy_paths->n : 0;
	size_t pos = 0;

	req->op = TB_SBP_ASSIGN;
	for (size_t i = 0; i < 3 + nlazy; i++) {
		const char *f = i == 0   ? spec->hostname
				: i == 1 ? recipe
				: i == 2 ? inputs
					 : spec->lazy_paths->items[i - 3];
		size_t n = strlen(f) + 1;
		if (pos + n > TB_SBP_DATA_MAX)
			return tb_error_set(err, TB_EINVAL, "sandbox: too many lazy inputs' paths");
		memcpy(req->data + pos, f, n);
		pos += n;
	}
	req->len = (uint32_t)pos;
	req->argc = (uint32_t)nlazy;
	return 0;
}

int tb_sandbox_assign(tb_sandbox_t *sb, const tb_sandbox_spec_t *spec, tb_error_t *err)
{
	tb_cgroup_limits_t lim = {
		.memory_bytes = spec->memory_mb << 20,
		.pids = spec->pids,
		.cpu_millis = spec->cpu_millis,
	};
	char recipe[PATH_MAX] = "", inputs[PATH_MAX] = "";
	tb_sbp_req_t *req;
	tb_sbp_resp_t r;
	int rc;

	if (sb->assigned || sb->dead)
		return tb_error_set(err, TB_EINVAL, "sandbox: %s",
				    sb->dead ? "gone" : "already assigned to a task");
	if (!spec->hostname || !spec->hostname[0] || strlen(spec->hostname) > 63 ||
	    strchr(spec->hostname, '/') || strchr(spec->hostname, '\n'))
		return tb_error_set(err, TB_EINVAL, "sandbox: hostname is not valid");
	/* Canonical paths: init resolves them under the host root it still
	 * holds, and a symlink there would point into nothing once detached. */
	if (spec->recipe_dir && !realpath(spec->recipe_dir, recipe))
		return tb_error_errno(err, TB_EINVAL, errno, "sandbox: recipe %s",
				      spec->recipe_dir);
	if (spec->inputs_dir && !realpath(spec->inputs_dir, inputs))
		return tb_error_errno(err, TB_EINVAL, errno, "sandbox: inputs %s",
				      spec->inputs_dir);
	if ((rc = tb_cgroup_limit(sb->cg, &lim, err)) < 0) {
		tb_error_prefix(err, "sandbox: limits");
		return rc;
	}
	if (!(req = calloc(1, sizeof(*req))))
		return tb_error_set(err, TB_ENOMEM, "out of memory");
	req->id = sb->next_id++;
	if ((rc = assign_req(req, spec, recipe, inputs, err)) < 0)
		goto out;
	if (send_with_fd(sb->ctl, req, offsetof(tb_sbp_req_t, data) + req->len,
			 req->argc ? spec->lazy_mount : -1) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "sandbox: send to init");
		goto out;
	}
	switch (await(sb, &r, READY_TIMEOUT_MS)) {
	case 1:
		if (r.op == TB_SBP_ASSIGNED) {
			rc = 0;
			break;
		}
		rc = r.op == TB_SBP_FAILED
			 ? tb_error_errno(err, TB_EIO, r.err, "sandbox: %s", r.msg)
			 : tb_error_set(err, TB_EIO, "sandbox: unexpected message");
		goto out;
	case 0:
		rc = tb_error_set(err, TB_ETIMEOUT, "sandbox: assign not answered");
		goto out;
	default:
		rc = tb_error_set(err, TB_EIO, "sandbox: init died while assigning");
		goto out;
	}
	sb->assigned = 1;
	if (spec->wall_ms)
		sb->deadline = tb_mono_ms() + spec->wall_ms;
out:
	free(req);
	return rc;
}

int tb_sandbox_create(tb_sandbox_t **out, const tb_seccomp_t *policy, const tb_sandbox_spec_t *spec,
		      tb_error_t *err)
{
	int rc;

	if ((rc = tb_sandbox_prepare(out, policy, spec, err)) < 0)
		return rc;
	if ((rc = tb_sandbox_assign(*out, spec, err)) < 0) {
		tb_sandbox_destroy(*out, NULL);
		*out = NULL;
	}
	return rc;
}

static int pack_strings(tb_sbp_req_t *req, const char *cwd, const char *const *argv,
			const char *const *envp, tb_error_t *err)
{
	size_t pos = 0;
	const char *const *lists[2] = { argv, envp };

	memset(req, 0, offsetof(tb_sbp_req_t, data));
#define PUT(s)                                                                                     \
	do {                                                                                       \
		size_t n_ = strlen(s) + 1;                                                         \
		if (pos + n_ > sizeof(req->data))                                                  \
			return tb_error_set(err, TB_ETOOBIG,                                       \
					    "sandbox: arguments and environment over %zu bytes",   \
					    sizeof(req->data));                                    \
		memcpy(req->data + pos, s, n_);                                                    \
		pos += n_;                                                                         \
	} while (0)
	PUT(cwd);
	for (int l = 0; l < 2; l++) {
		uint32_t count = 0;
		for (const char *const *p = lists[l]; p && *p; p++, count++) {
			if (count >= (l ? TB_SBP_MAX_ENVS : TB_SBP_MAX_ARGS))
				return tb_error_set(err, TB_ETOOBIG, "sandbox: too many %s",
						    l ? "environment variables" : "arguments");
			PUT(*p);
		}
		if (l)
			req->envc = count;
		else
			req->argc = count;
	}
#undef PUT
	if (req->argc == 0)
		return tb_error_set(err, TB_EINVAL, "sandbox: empty argv");
	req->len = (uint32_t)pos;
	return 0;
}

int tb_sandbox_spawn(tb_sandbox_t *sb, int *out, const tb_sandbox_exec_t *ex, tb_error_t *err)
{
	static tb_sbp_req_t req; /* 60 KiB: not on the stack */
	static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;
	int src[4] = { ex->stdin_fd, ex->stdout_fd, ex->stderr_fd, ex->extra_fd };
	int fds[4], nfds = 0, slot = -1, rc;
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	tb_sbp_resp_t r;

	*out = 0;
	if (!sb->dead && sb->deadline && tb_mono_ms() >= sb->deadline) {
		hit_deadline(sb);
		return tb_error_set(err, TB_ETIMEOUT, "sandbox: deadline passed");
	}
	if (sb->dead)
		return tb_error_set(err, TB_EIO, "sandbox: gone");
	if (!sb->assigned)
		return tb_error_set(err, TB_EINVAL, "sandbox: not assigned to a task yet");
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (!sb->procs[i].live) {
			slot = i;
			break;
		}
	if (slot < 0)
		return tb_error_set(err, TB_ETOOBIG, "sandbox: too many processes");
	pthread_mutex_lock(&req_lock);
	if ((rc = pack_strings(&req, ex->cwd ? ex->cwd : "/workspace", ex->argv, ex->envp, err)) <
	    0)
		goto out;
	req.op = TB_SBP_EXEC;
	req.id = sb->next_id++;
	req.sig = ex->uid ? (int32_t)ex->uid : TB_SANDBOX_AGENT_ID; /* EXEC: the uid */
	for (int i = 0; i < 4; i++)
		if (src[i] >= 0) {
			req.fd_mask |= 1u << i;
			fds[nfds++] = src[i];
		}
	struct iovec iov = { &req, offsetof(tb_sbp_req_t, data) + req.len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	proc_t *p = &sb->procs[slot];
	memset(p, 0, sizeof(*p));
	tb_cgroup_stats(sb->cg, &p->before);
	if (sendmsg(sb->ctl, &mh, MSG_NOSIGNAL) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "sandbox: send to init");
		goto out;
	}
	for (;;) {
		int got = await(sb, &r, READY_TIMEOUT_MS);
		if (got <= 0) {
			rc = tb_error_set(err, got == 0 ? TB_ETIMEOUT : TB_EIO,
					  "sandbox: init %s while starting %s",
					  got == 0 ? "did not answer" : "died", ex->argv[0]);
			/* An exec that may still succeed later would be a process
			 * nobody tracks: end the sandbox instead. */
			kill_init(sb);
			goto out;
		}
		if (r.op == TB_SBP_EXITED) {
			note_exit(sb, &r);
			continue;
		}
		if (r.id != req.id)
			continue;
		if (r.op == TB_SBP_STARTED) {
			p->id = req.id;
			p->live = 1;
			*out = req.id;
			rc = 0;
		} else {
			rc = tb_error_errno(
			    err, r.err == ENOENT || r.err == EACCES ? TB_ENOTFOUND : TB_EIO, r.err,
			    "sandbox: exec %s", r.msg);
		}
		goto out;
	}
out:
	pthread_mutex_unlock(&req_lock);
	return rc;
}

static void classify(tb_sandbox_t *sb, proc_t *p, tb_sandbox_exit_t *out)
{
	tb_cgroup_stats_t now;

	memset(out, 0, sizeof(*out));
	if (WIFSIGNALED(p->status))
		out->signal = WTERMSIG(p->status);
	tb_cgroup_stats(sb->cg, &now);
	out->code = WIFEXITED(p->status) ? WEXITSTATUS(p->status) : -1;
	int failed = WIFSIGNALED(p->status) || out->code != 0;
	/* The counters are per sandbox: blame a limit only for an end that
	 * went wrong, so a judge's clean exit is not a concurrent bomb's. */
	if (now.oom_kills > p->before.oom_kills && out->signal == SIGKILL)
		out->end = TB_SANDBOX_OOM;
	else if (failed && now.pids_refused > p->before.pids_refused)
		out->end = TB_SANDBOX_PIDS_LIMIT;
	else if (WIFSIGNALED(p->status))
		out->end = TB_SANDBOX_SIGNALED;
	else
		out->end = TB_SANDBOX_EXITED;
}

int tb_sandbox_wait(tb_sandbox_t *sb, int id, int timeout_ms, tb_sandbox_exit_t *out,
		    tb_error_t *err)
{
	uint64_t until = timeout_ms < 0 ? 0 : tb_mono_ms() + (uint64_t)timeout_ms;
	proc_t *p = find(sb, id);
	tb_sbp_resp_t r;

	if (!p)
		return tb_error_set(err, TB_ENOTFOUND, "sandbox: no process %d", id);
	while (!p->exited || p->deadline) {
		if (p->deadline) {
			/* Killed at the deadline: its end comes from init
			 * shortly, and nothing is read before it (bounded). */
			for (uint64_t by = tb_mono_ms() + 2000; !p->exited && tb_mono_ms() < by;) {
				int got = await(sb, &r, 100);
				if (got == 1 && r.op == TB_SBP_EXITED)
					note_exit(sb, &r);
				else if (got < 0)
					break;
			}
			memset(out, 0, sizeof(*out));
			out->end = TB_SANDBOX_DEADLINE;
			out->signal = SIGKILL;
			p->live = 0;
			return 0;
		}
		if (sb->dead) {
			/* init itself was killed: by the OOM killer, if the
			 * counter moved (it should not be its victim, see
			 * oom_score_adj, but the kernel may have no choice). */
			tb_cgroup_stats_t now;
			tb_cgroup_stats(sb->cg, &now);
			if (now.oom_kills > p->before.oom_kills) {
				memset(out, 0, sizeof(*out));
				out->end = TB_SANDBOX_OOM;
				out->signal = SIGKILL;
				p->live = 0;
				return 0;
			}
			return tb_error_set(err, TB_EIO, "sandbox: init died");
		}
		uint64_t now = tb_mono_ms(), stop = until;
		if (sb->deadline && (!stop || sb->deadline < stop))
			stop = sb->deadline;
		uint64_t left = stop > now ? stop - now : 0;
		int wait_ms = stop ? (int)(left > 3600000 ? 3600000 : left) : -1;
		int got = await(sb, &r, wait_ms);
		if (got == 1 && r.op == TB_SBP_EXITED) {
			note_exit(sb, &r);
		} else if (got == 0) {
			if (sb->deadline && tb_mono_ms() >= sb->deadline) {
				hit_deadline(sb); /* p exited by then, or is marked */
			} else if (until && tb_mono_ms() >= until) {
				return tb_error_set(err, TB_ETIMEOUT,
						    "sandbox: process %d still running", id);
			}
		}
	}
	classify(sb, p, out);
	p->live = 0;
	return 0;
}

int tb_sandbox_kill(tb_sandbox_t *sb, int id, int sig, tb_error_t *err)
{
	tb_sbp_req_t req;

	if (!find(sb, id))
		return tb_error_set(err, TB_ENOTFOUND, "sandbox: no process %d", id);
	memset(&req, 0, offsetof(tb_sbp_req_t, data));
	req.op = TB_SBP_KILL;
	req.id = id;
	req.sig = sig;
	thaw(sb);
	if (send(sb->ctl, &req, offsetof(tb_sbp_req_t, data), MSG_NOSIGNAL) < 0)
		return tb_error_errno(err, TB_EIO, errno, "sandbox: send to init");
	return 0;
}

/* Sends CLEAR (@p uid > 0: with the judge's view) and waits for init to
 * say it is done; exits reported on the way are noted. A sandbox whose
 * init does not answer in time is ended: nothing may run in it unseen. */
static int clear(tb_sandbox_t *sb, unsigned uid, tb_error_t *err)
{
	uint64_t until = tb_mono_ms() + TEARDOWN_TIMEOUT_MS;
	tb_sbp_req_t req;
	tb_sbp_resp_t r;

	if (sb->dead)
		return uid ? tb_error_set(err, TB_EIO, "sandbox: gone") : 0;
	memset(&req, 0, offsetof(tb_sbp_req_t, data));
	req.op = TB_SBP_CLEAR;
	req.id = sb->next_id++;
	req.sig = (int32_t)uid;
	thaw(sb); /* a frozen process cannot die */
	if (send(sb->ctl, &req, offsetof(tb_sbp_req_t, data), MSG_NOSIGNAL) < 0) {
		int e = errno;
		kill_init(sb); /* ends every process all the same */
		return tb_error_errno(err, TB_EIO, e, "sandbox: send to init");
	}
	for (;;) {
		uint64_t now = tb_mono_ms();
		int got = now < until ? await(sb, &r, (int)(until - now)) : 0;
		if (got <= 0) {
			kill_init(sb);
			return tb_error_set(err, TB_EIO,
					    "sandbox: init %s while ending every process",
					    got == 0 ? "did not answer" : "died");
		}
		if (r.op == TB_SBP_EXITED)
			note_exit(sb, &r);
		else if (r.id == req.id && r.op == TB_SBP_CLEARED)
			return 0;
		else if (r.id == req.id)
			return tb_error_errno(err, TB_EIO, r.err, "sandbox: %s", r.msg);
	}
}

int tb_sandbox_kill_all(tb_sandbox_t *sb, tb_error_t *err)
{
	return clear(sb, 0, err);
}

int tb_sandbox_judge_view(tb_sandbox_t *sb, unsigned uid, tb_error_t *err)
{
	if (uid < TB_SANDBOX_JUDGE_ID || uid >= TB_SANDBOX_JUDGE_ID + TB_SANDBOX_MAX_JUDGES)
		return tb_error_set(err, TB_EINVAL, "sandbox: %u is not a judge's uid", uid);
	if (!sb->assigned)
		return tb_error_set(err, TB_EINVAL, "sandbox: not assigned to a task yet");
	return clear(sb, uid, err);
}

void tb_sandbox_disarm_deadline(tb_sandbox_t *sb)
{
	sb->deadline = 0;
}

int tb_sandbox_deadline_within(tb_sandbox_t *sb, uint64_t ms)
{
	uint64_t at = tb_mono_ms() + ms;
	if (sb->deadline && at >= sb->deadline)
		return 0;
	sb->deadline = at ? at : 1;
	return 1;
}

void tb_sandbox_usage(tb_sandbox_t *sb, tb_cgroup_stats_t *out)
{
	tb_cgroup_stats(sb->cg, out);
}

pid_t tb_sandbox_init_pid(const tb_sandbox_t *sb)
{
	return sb->init;
}

int tb_sandbox_destroy(tb_sandbox_t *sb, tb_error_t *err)
{
	int rc = 0;

	if (!sb)
		return 0;
	if (sb->ctl >= 0)
		close(sb->ctl); /* init sees EOF and exits ... */
	kill_init(sb);          /* ... or is killed, taking the namespace along */
	if (sb->cg && (rc = tb_cgroup_destroy(sb->cg, TEARDOWN_TIMEOUT_MS, err)) < 0)
		tb_error_prefix(err, "sandbox teardown");
	sb->cg = NULL;
	/* Its ids go back only when nothing can still run under them: a
	 * cgroup that would not empty keeps them held while this process
	 * lives (its descriptor is let go of, on purpose, not closed). */
	if (rc == 0)
		tb_idrange_release(&sb->ids);
	if (sb->hold >= 0) /* init is gone: nothing uses the image's tree */
		close(sb->hold);
	free(sb);
	return rc;
}

int tb_sandbox_sweep(const char *work_root, const char *group, tb_error_t *err)
{
	size_t glen = strlen(group);
	int removed, rc;
	struct dirent *de;
	DIR *d;

	if ((removed = tb_cgroup_sweep(group, err)) < 0)
		return removed;
	if (!(d = opendir(work_root)))
		return errno == ENOENT ? removed
				       : tb_error_errno(err, TB_EIO, errno, "sweep %s", work_root);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, group, glen) == 0 && de->d_name[glen] == '-')
			if ((rc = tb_remove_tree(dirfd(d), de->d_name)) < 0)
				tb_error_errno(err, TB_EIO, errno, "sweep %s/%s", work_root,
					       de->d_name);
	closedir(d);
	return removed;
}
