/*
 * sandbox_probe.c: runs inside a sandbox and tries one way out. Exit code
 * 0 means the attempt was stopped (and says how), 1 means it got through,
 * 2 means the probe could not run. Some probes instead exhaust a limit and
 * are expected to be stopped by the sandbox from outside (OOM, deadline).
 * Test code: built without sanitizers, copied into the test's recipe
 * directory, run as /recipe/sandbox_probe.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <linux/netlink.h>
#include <linux/vm_sockets.h>
#include <unistd.h>

static int blocked(const char *what, int e)
{
	printf("blocked: %s: %s\n", what, strerror(e));
	return 0;
}

static int escaped(const char *what)
{
	printf("ESCAPED: %s\n", what);
	return 1;
}

static int probe_read(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return blocked("read", errno);
	return escaped(path);
}

static int probe_write(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	if (fd < 0)
		return blocked("write", errno);
	return escaped(path);
}

static int probe_mount(void)
{
	/* On a fresh directory of its own, so that running the probe outside
	 * a sandbox by mistake covers nothing that matters. */
	char dir[] = "/tmp/probe-mount-XXXXXX";
	if (!mkdtemp(dir))
		return 2;
	if (mount("none", dir, "tmpfs", 0, NULL) < 0) {
		int e = errno;
		rmdir(dir);
		return blocked("mount", e);
	}
	umount2(dir, MNT_DETACH);
	rmdir(dir);
	return escaped("mounted a tmpfs");
}

static int probe_ptrace(void)
{
	pid_t child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	int rc = ptrace(PTRACE_ATTACH, child, NULL, NULL);
	int e = errno;
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	if (rc < 0)
		return blocked("ptrace attach", e);
	return escaped("ptrace attach");
}

static int probe_userns(void)
{
	if (unshare(CLONE_NEWUSER) == 0)
		return escaped("unshare(CLONE_NEWUSER)");
	int e = errno;
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0);
	if (pid == 0)
		_exit(0);
	if (pid > 0) {
		waitpid((pid_t)pid, NULL, 0);
		return escaped("clone(CLONE_NEWUSER)");
	}
	return blocked("new user namespace", e);
}

static int probe_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return blocked("socket", errno);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return blocked("connect to the host's loopback", errno);
	return escaped("connected to the host's loopback server");
}

/* Only sandbox processes are visible: few pids, and pid 1 is our init. */
static int probe_procs(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	if (!d)
		return 2;
	while ((de = readdir(d)))
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9')
			n++;
	closedir(d);
	printf("%d processes visible\n", n);
	return n <= 4 ? blocked("host processes", ESRCH) : escaped("sees many processes");
}

static int probe_cgroup(void)
{
	char line[256];
	FILE *f = fopen("/proc/self/cgroup", "r");
	int outside = 0;

	if (!f)
		return 2;
	while (fgets(line, sizeof(line), f)) {
		char *path = strrchr(line, ':');
		if (path && strcmp(path, ":/\n") != 0)
			outside = 1, printf("cgroup line: %s", line);
	}
	fclose(f);
	if (outside)
		return escaped("a cgroup path outside the namespace root");
	if (mkdir("/sys/fs/cgroup/escape", 0755) == 0)
		return escaped("made a cgroup");
	return blocked("cgroup", errno);
}

static int probe_identity(void)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	int ok = 1;

	if (!f)
		return 2;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "CapEff:", 7) || !strncmp(line, "CapPrm:", 7) ||
		    !strncmp(line, "CapBnd:", 7) || !strncmp(line, "CapInh:", 7) ||
		    !strncmp(line, "CapAmb:", 7))
			ok &= strstr(line, "0000000000000000") != NULL;
		if (!strncmp(line, "NoNewPrivs:", 11))
			ok &= strstr(line, "1") != NULL;
		if (!strncmp(line, "Seccomp:", 8))
			ok &= strstr(line, "2") != NULL;
		if (!strncmp(line, "Uid:", 4) || !strncmp(line, "CapEff:", 7) ||
		    !strncmp(line, "Seccomp:", 8))
			fputs(line, stdout);
	}
	fclose(f);
	ok &= getuid() == 1000 && geteuid() == 1000;
	if (setuid(0) == 0)
		return escaped("setuid(0)");
	return ok ? blocked("privileges", EPERM) : escaped("has capabilities or root");
}

static int probe_forkbomb(void)
{
	for (int i = 0; i < 100000; i++) {
		pid_t p = fork();
		if (p == 0) {
			pause();
			_exit(0);
		}
		if (p < 0) {
			/* Like a real bomb's shell: the refused fork is a failure. */
			blocked("fork", errno);
			return 3;
		}
	}
	return escaped("forked 100000 processes");
}

static int probe_membomb(void)
{
	for (size_t total = 0; total < ((size_t)64 << 30); total += 1 << 20) {
		char *p = malloc(1 << 20);
		if (!p)
			return blocked("malloc", ENOMEM);
		memset(p, 1, 1 << 20);
	}
	return escaped("allocated 64 GiB");
}

static int probe_diskfill(const char *dir)
{
	char path[256], buf[65536];
	memset(buf, 'x', sizeof(buf));
	snprintf(path, sizeof(path), "%s/fill", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return 2;
	for (long i = 0; i < 1L << 20; i++)
		if (write(fd, buf, sizeof(buf)) < 0)
			return errno == ENOSPC || errno == EFBIG ? blocked("disk", errno) : 2;
	return escaped("wrote 64 GiB");
}

static int probe_syscalls(void)
{
	struct {
		const char *name;
		long nr;
	} calls[] = {
		{ "bpf", SYS_bpf },
		{ "perf_event_open", SYS_perf_event_open },
		{ "keyctl", SYS_keyctl },
		{ "userfaultfd", SYS_userfaultfd },
		{ "kexec_load", SYS_kexec_load },
		{ "init_module", SYS_init_module },
		{ "setns", SYS_setns },
		{ "pivot_root", SYS_pivot_root },
		{ "open_by_handle_at", SYS_open_by_handle_at },
		{ "process_vm_readv", SYS_process_vm_readv },
	};
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		errno = 0;
		long r = syscall(calls[i].nr, 0, 0, 0, 0, 0, 0);
		if (r >= 0 || errno != EPERM) {
			printf("%s returned %ld errno %d\n", calls[i].name, r, errno);
			return escaped(calls[i].name);
		}
	}
	return blocked("denied syscalls", EPERM);
}

/* Every socket family but AF_UNIX, AF_INET, AF_INET6 and netlink's route
 * protocol is refused by the policy (EPERM), not just missing from this
 * kernel (EAFNOSUPPORT): the probe holds on any machine. */
static int probe_families(void)
{
	int sv[2];

	for (int fam = 0; fam < 64; fam++) {
		if (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6 || fam == AF_NETLINK)
			continue;
		errno = 0;
		int fd = socket(fam, SOCK_DGRAM, 0);
		if (fd >= 0 || errno != EPERM) {
			printf("socket(%d) gave %d, errno %d\n", fam, fd, errno);
			return escaped("a socket family the policy does not refuse");
		}
		errno = 0;
		if (socketpair(fam, SOCK_STREAM, 0, sv) == 0 || errno != EPERM) {
			printf("socketpair(%d): errno %d\n", fam, errno);
			return escaped("a socketpair family the policy does not refuse");
		}
	}
	for (int proto = 1; proto < 32; proto++) {
		errno = 0;
		int fd = socket(AF_NETLINK, SOCK_RAW, proto);
		if (fd >= 0 || errno != EPERM) {
			printf("netlink protocol %d gave %d, errno %d\n", proto, fd, errno);
			return escaped("a netlink protocol other than route");
		}
	}
	int route = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE),
	    tcp = socket(AF_INET6, SOCK_STREAM, 0);
	if (route < 0 || tcp < 0) {
		printf("route %d tcp %d: %s\n", route, tcp, strerror(errno));
		return 2; /* what tasks need is gone */
	}
	return blocked("socket families", EPERM);
}

/* A vsock socket bound on any CID: the way to the hypervisor and the
 * host's vsock services, which no network namespace isolates. */
static int probe_vsock(void)
{
	struct sockaddr_vm a = { .svm_family = AF_VSOCK,
				 .svm_cid = VMADDR_CID_ANY,
				 .svm_port = 5000 };
	int fd = socket(AF_VSOCK, SOCK_STREAM, 0);
	if (fd < 0)
		return blocked("vsock socket", errno);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return blocked("vsock bind", errno);
	return escaped("bound a vsock port");
}

int main(int argc, char **argv)
{
	const char *p = argc > 1 ? argv[1] : "";
	const char *arg = argc > 2 ? argv[2] : "";

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!strcmp(p, "read"))
		return probe_read(arg);
	if (!strcmp(p, "write"))
		return probe_write(arg);
	if (!strcmp(p, "mount"))
		return probe_mount();
	if (!strcmp(p, "ptrace"))
		return probe_ptrace();
	if (!strcmp(p, "userns"))
		return probe_userns();
	if (!strcmp(p, "connect"))
		return probe_connect((int)strtol(arg, NULL, 10));
	if (!strcmp(p, "procs"))
		return probe_procs();
	if (!strcmp(p, "cgroup"))
		return probe_cgroup();
	if (!strcmp(p, "identity"))
		return probe_identity();
	if (!strcmp(p, "forkbomb"))
		return probe_forkbomb();
	if (!strcmp(p, "membomb"))
		return probe_membomb();
	if (!strcmp(p, "diskfill"))
		return probe_diskfill(arg);
	if (!strcmp(p, "syscalls"))
		return probe_syscalls();
	if (!strcmp(p, "families"))
		return probe_families();
	if (!strcmp(p, "vsock"))
		return probe_vsock();
	if (!strcmp(p, "spin"))
		for (;;)
			;
	fprintf(stderr, "unknown probe '%s'\n", p);
	return 2;
}
