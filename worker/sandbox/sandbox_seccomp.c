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
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
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

#ifndef AF_MCTP /* glibc before 2.35 */
#define AF_MCTP 45
#endif

/*
 * Socket families. A task may use AF_UNIX (its own files and the network
 * namespace's abstract names), AF_INET and AF_INET6 (the network
 * namespace: loopback and the proxy, nothing else), and AF_NETLINK for
 * NETLINK_ROUTE alone (the namespace's own interfaces and addresses, which
 * getaddrinfo() and `ip` read). Every other family is refused with EPERM
 * in socket() and socketpair(), each for the reason given; a family
 * number past the table (a newer kernel's) is refused too. Refusing also
 * keeps socket() from loading the family's kernel module on demand.
 */
static const struct {
	int family;
	const char *why;
} denied_families[] = {
	/* not isolated by the network namespace: a way out */
	{ AF_VSOCK, "vsock: host and hypervisor sockets, not network-namespaced" },
	{ AF_ALG, "kernel crypto API: not network, not namespaced, a kernel attack surface" },
	{ AF_BLUETOOTH, "Bluetooth: the host's radios" },
	{ AF_IEEE802154, "IEEE 802.15.4: the host's radios" },
	{ AF_NFC, "NFC: the host's devices" },
	{ AF_CAIF, "CAIF: modem devices of the host" },
	{ AF_PHONET, "Phonet: modem devices of the host" },
	{ AF_QIPCRTR, "Qualcomm IPC router: the host's devices" },
	{ AF_IUCV, "IUCV: s390 hypervisor communication" },
	{ AF_ISDN, "ISDN: the host's devices" },
	/* namespaced, but raw access to interfaces or routing state a task
	 * has no business with (and mostly needs capabilities it lacks) */
	{ AF_PACKET, "raw packets" },
	{ AF_XDP, "raw packets to user space" },
	{ AF_KEY, "IPsec keys" },
	{ AF_BRIDGE, "bridging" },
	{ AF_MPLS, "MPLS routing" },
	{ AF_SECURITY, "not a socket family: reserved" },
	{ AF_UNSPEC, "no family" },
	{ AF_IB, "InfiniBand addresses" },
	{ AF_KCM, "kernel connection multiplexor: a kernel attack surface" },
	{ AF_SMC, "shared memory communications over RDMA" },
	{ AF_RDS, "reliable datagram sockets: a history of kernel bugs" },
	{ AF_TIPC, "cluster IPC: a history of kernel bugs" },
	{ AF_RXRPC, "AFS RPC" },
	{ AF_CAN, "CAN bus" },
	{ AF_MCTP, "management component transport" },
	/* legacy protocols nothing in a task speaks */
	{ AF_AX25, "amateur radio" },
	{ AF_NETROM, "amateur radio" },
	{ AF_ROSE, "amateur radio" },
	{ AF_IPX, "legacy network protocol" },
	{ AF_APPLETALK, "legacy network protocol" },
	{ AF_X25, "legacy network protocol" },
	{ AF_DECnet, "legacy network protocol" },
	{ AF_NETBEUI, "legacy network protocol" },
	{ AF_ATMPVC, "ATM" },
	{ AF_ATMSVC, "ATM" },
	{ AF_ASH, "legacy network protocol" },
	{ AF_ECONET, "legacy network protocol" },
	{ AF_SNA, "legacy network protocol" },
	{ AF_IRDA, "infrared" },
	{ AF_PPPOX, "PPP over Ethernet and tunnels" },
	{ AF_WANPIPE, "WAN cards" },
	{ AF_LLC, "raw 802.2 LLC" },
};

/* clone() flags that make namespaces. */
static const unsigned long ns_flags[] = {
	CLONE_NEWNS,   CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
	CLONE_NEWPID,  CLONE_NEWNET, CLONE_NEWCGROUP,
#ifdef CLONE_NEWTIME
	CLONE_NEWTIME,
#endif
};

/* The socket families rules (see denied_families). */
static int deny_families(scmp_filter_ctx ctx, tb_error_t *err)
{
	static const int calls[] = { SCMP_SYS(socket), SCMP_SYS(socketpair) };
	int rc;

	for (size_t c = 0; c < sizeof(calls) / sizeof(calls[0]); c++) {
		for (size_t i = 0; i < sizeof(denied_families) / sizeof(denied_families[0]); i++) {
			rc = seccomp_rule_add(
			    ctx, SCMP_ACT_ERRNO(EPERM), calls[c], 1,
			    SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)denied_families[i].family));
			if (rc < 0)
				return tb_error_errno(err, TB_EIO, -rc, "seccomp: deny %s",
						      denied_families[i].why);
		}
		/* the table stops at AF_MCTP: whatever a later kernel adds */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), calls[c], 1,
				      SCMP_A0(SCMP_CMP_GT, (scmp_datum_t)AF_MCTP));
		if (rc < 0)
			return tb_error_errno(err, TB_EIO, -rc, "seccomp: deny new families");
		/* netlink: the route protocol of the namespace only */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), calls[c], 2,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)AF_NETLINK),
				      SCMP_A2(SCMP_CMP_NE, (scmp_datum_t)NETLINK_ROUTE));
		if (rc < 0)
			return tb_error_errno(err, TB_EIO, -rc, "seccomp: netlink protocols");
	}
	return 0;
}

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
	if ((rc = deny_families(ctx, err)) < 0)
		return rc;
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
