/*
 * init_exec.c: running a program in the sandbox (EXEC): the process cloned
 * on init's memory (CLONE_VM | CLONE_VFORK, no page tables copied), its
 * descriptors, rlimits, capabilities dropped, its uid and gid, the seccomp
 * filter, execve; KILL; and reaping, since init is pid 1 of the sandbox
 * (each exit the worker asked about is reported).
 */
#include "init_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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
NO_ASAN int become(unsigned uid)
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
NO_ASAN _Noreturn void exec_child(char *const *argv, char *const *envp, const char *cwd,
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

void handle_exec(const tb_sbp_req_t *req, int *fds)
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

void handle_kill(const tb_sbp_req_t *req)
{
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (procs[i].pid && procs[i].id == req->id) {
			kill(-procs[i].pid, req->sig);
			kill(procs[i].pid, req->sig);
		}
}

/* A child reaped: its end is reported if the worker started it. */
void reaped(pid_t pid, int status)
{
	for (int i = 0; i < TB_SBP_MAX_PROCS; i++)
		if (procs[i].pid == pid) {
			send_resp(TB_SBP_EXITED, procs[i].id, pid, status, 0, NULL);
			procs[i].pid = 0;
		}
}

/* Reaps every child that ended; reports the ones the worker started. */
void reap(void)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		reaped(pid, status);
}
