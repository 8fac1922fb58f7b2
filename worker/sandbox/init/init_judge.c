/*
 * init_judge.c: the judges' view (CLEAR): /tmp emptied, and for an image
 * root a read-only root of init's layer over the image without the
 * agent's writable layer, so nothing the agent wrote runs in a judge;
 * then the judge's own /tmp and home.
 */
#include "init_int.h"

#include <errno.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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
int judge_root(const char **step)
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

int judge_view(unsigned uid, const char **step)
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
void handle_clear(const tb_sbp_req_t *req)
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
