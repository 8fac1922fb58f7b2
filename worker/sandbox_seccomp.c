/*
 * sandbox_seccomp.c: the deny list and its compilation.
 *
 * libseccomp 2.5 can only export BPF to a file descriptor, so the program
 * goes through a memfd into memory once; each sandbox's init gets the
 * bytes and installs them with prctl() in every process it starts.
 */
#include "sandbox_seccomp.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct tb_seccomp {
	struct sock_fprog prog;
};

/* Denied with EPERM, each for the reason given. Names the kernel or
 * libseccomp does not know on this architecture are skipped. */
static const char *const deny[] = {
	/* the file system view: the sandbox's mounts are fixed at build */
	"mount",
	"umount",
	"umount2",
	"pivot_root",
	"chroot",
	"mount_setattr",
	"move_mount",
	"open_tree",
	"fsopen",
	"fsconfig",
	"fsmount",
	"fspick",
	/* namespaces: no new ones, no entering others' */
	"unshare",
	"setns",
	/* other processes' memory and control */
	"ptrace",
	"process_vm_readv",
	"process_vm_writev",
	"kcmp",
	"pidfd_getfd",
	"process_madvise",
	/* kernel code, BPF and tracing */
	"kexec_load",
	"kexec_file_load",
	"init_module",
	"finit_module",
	"delete_module",
	"create_module",
	"bpf",
	"perf_event_open",
	"lookup_dcookie",
	"fanotify_init",
	/* kernel keyrings are not namespaced */
	"keyctl",
	"add_key",
	"request_key",
	/* userfaultfd widens kernel race windows; file handles bypass paths */
	"userfaultfd",
	"open_by_handle_at",
	"name_to_handle_at",
	/* the machine and the clock */
	"reboot",
	"swapon",
	"swapoff",
	"syslog",
	"acct",
	"settimeofday",
	"clock_settime",
	"clock_adjtime",
	"adjtimex",
	"stime",
	"quotactl",
	"quotactl_fd",
	"nfsservctl",
	"vhangup",
	"iopl",
	"ioperm",
	"uselib",
	"ustat",
	"sysfs",
	"_sysctl",
	"personality",
	"sethostname",
	"setdomainname",
	/* io_uring runs syscalls this filter never sees */
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
};

/* clone() flags that make namespaces. */
static const unsigned long ns_flags[] = {
	CLONE_NEWNS,   CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
	CLONE_NEWPID,  CLONE_NEWNET, CLONE_NEWCGROUP,
#ifdef CLONE_NEWTIME
	CLONE_NEWTIME,
#endif
};

static int build(scmp_filter_ctx ctx, tb_error_t *err)
{
	int rc;

	for (size_t i = 0; i < sizeof(deny) / sizeof(deny[0]); i++) {
		int nr = seccomp_syscall_resolve_name(deny[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;
		if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
			return tb_error_errno(err, TB_EIO, -rc, "seccomp: deny %s", deny[i]);
	}
	for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
		if (rc < 0)
			return tb_error_errno(err, TB_EIO, -rc, "seccomp: clone flags");
	}
	/* clone3 passes its flags in memory, out of BPF's reach: pretend it
	 * does not exist, and libc uses clone. */
	int nr = seccomp_syscall_resolve_name("clone3");
	if (nr != __NR_SCMP_ERROR &&
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0)) < 0)
		return tb_error_errno(err, TB_EIO, -rc, "seccomp: clone3");
	/* TIOCSTI pushes input into a terminal shared with the worker. */
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
			      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0x5412 /* TIOCSTI */));
	if (rc < 0)
		return tb_error_errno(err, TB_EIO, -rc, "seccomp: ioctl");
	return 0;
}

int tb_seccomp_compile(tb_seccomp_t **out, tb_error_t *err)
{
	scmp_filter_ctx ctx;
	tb_seccomp_t *p = NULL;
	int fd = -1, rc;
	off_t size;

	*out = NULL;
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return tb_error_set(err, TB_ENOMEM, "seccomp: init failed");
	/* Other architectures' syscall numbers would dodge the rules. */
	/* A binary tree of syscall numbers instead of a linear scan: every
	 * system call of every task runs this filter. */
	if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0 ||
	    (rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0 ||
	    (rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0) {
		rc = tb_error_errno(err, TB_EIO, -rc, "seccomp: attributes");
		goto cleanup;
	}
	if ((rc = build(ctx, err)) < 0)
		goto cleanup;
	fd = memfd_create("taskbox-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "seccomp: memfd");
		goto cleanup;
	}
	if ((rc = seccomp_export_bpf(ctx, fd)) < 0) {
		rc = tb_error_errno(err, TB_EIO, -rc, "seccomp: export");
		goto cleanup;
	}
	if ((size = lseek(fd, 0, SEEK_END)) < 0) {
		rc = tb_error_errno(err, TB_EIO, errno, "seccomp: size of the exported filter");
		goto cleanup;
	}
	p = calloc(1, sizeof(*p));
	if (!p || size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
	    !(p->prog.filter = malloc((size_t)size))) {
		rc = tb_error_set(err, TB_ENOMEM, "seccomp: cannot hold %lld bytes of BPF",
				  (long long)size);
		goto cleanup;
	}
	if (pread(fd, p->prog.filter, (size_t)size, 0) != size) {
		rc = tb_error_errno(err, TB_EIO, errno, "seccomp: read back");
		goto cleanup;
	}
	p->prog.len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
	*out = p;
	p = NULL;
	rc = 0;
cleanup:
	if (fd >= 0)
		close(fd);
	tb_seccomp_free(p);
	seccomp_release(ctx);
	return rc;
}

const void *tb_seccomp_bpf(const tb_seccomp_t *p, uint32_t *count)
{
	*count = p->prog.len;
	return p->prog.filter;
}

unsigned tb_seccomp_size(const tb_seccomp_t *p)
{
	return p->prog.len;
}

void tb_seccomp_free(tb_seccomp_t *p)
{
	if (!p)
		return;
	free(p->prog.filter);
	free(p);
}
