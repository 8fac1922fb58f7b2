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
 * This file holds its life (SETUP, the loop, the dispatch of requests)
 * and its state; the file system, the ids, the processes and the judges'
 * view have a file each (init_int.h).
 */
#include "init_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* From SETUP, never changed afterwards. */
tb_sbp_setup_t S;
struct sock_fprog policy;
const char *new_root; /* host directory the root is built on */
const char *binds[TB_SBP_MAX_BINDS];
int image_fd = -1;           /* the image's tree, a detached mount (TB_SBP_F_IMAGE) */
const char *image_root_path; /* where its overlay is, while the root is built */
int assigned;                /* no process may start before assign() */
char hostname[65];           /* from ASSIGN */
unsigned task_binds;         /* from ASSIGN: 1 /recipe, 2 /inputs */

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
