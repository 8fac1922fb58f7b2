/*
 * sandbox_proto.h: the messages between the worker (sandbox.c) and a
 * sandbox's init process (the taskbox-sandbox-init program,
 * sandbox_init.c), over a SOCK_SEQPACKET pair: one datagram per message,
 * file descriptors for a new process riding along as SCM_RIGHTS. Both
 * ends are built from one source tree at one version, so the layout is
 * simply the struct.
 */
#ifndef TB_SANDBOX_PROTO_H
#define TB_SANDBOX_PROTO_H

#include "sandbox_ids.h"

#include <stdint.h>

#define TB_SBP_DATA_MAX (60u * 1024) /* argv + envp + cwd */
#define TB_SBP_MAX_ARGS 256
#define TB_SBP_MAX_ENVS 512
#define TB_SBP_MAX_PROCS 64
#define TB_SBP_MAX_BINDS 1024
/* SETUP's layout; init refuses another (a worker and an init of two
 * different builds). */
#define TB_SBP_VERSION 4

enum tb_sbp_op {
	/* worker -> init */
	TB_SBP_EXEC = 1,   /* start a process; fds attached per fd_mask */
	TB_SBP_KILL = 2,   /* signal a process group */
	TB_SBP_ASSIGN = 3, /* data = hostname \0 recipe \0 inputs \0, then
			    * argc paths \0 under /inputs: with argc > 0,
			    * the lazy inputs' mount rides as SCM_RIGHTS, and
			    * its file "i" is bound at path i */
	TB_SBP_SETUP = 4,  /* the first message: data = tb_sbp_setup_t, then
			    * the BPF, then root \0 and each ro_bind \0; with
			    * TB_SBP_F_IMAGE, the image's tree as SCM_RIGHTS */
	TB_SBP_CLEAR = 5,  /* kill and reap every process; sig > 0: then the
			    * judge's view for that uid (tb_sandbox_judge_view) */
	/* init -> worker */
	TB_SBP_READY = 10,    /* the sandbox is built */
	TB_SBP_STARTED = 11,  /* execve succeeded: pid */
	TB_SBP_FAILED = 12,   /* a build step or an exec failed: err, msg */
	TB_SBP_EXITED = 13,   /* a process ended: wait status */
	TB_SBP_ASSIGNED = 14, /* the task's parts are in, the host root gone */
	TB_SBP_CLEARED = 15,  /* CLEAR done: no process left but init */
};

/* Bits of fd_mask: which of stdin, stdout, stderr, fd 3 were attached, in
 * that order. */
enum { TB_SBP_FD_IN = 1, TB_SBP_FD_OUT = 2, TB_SBP_FD_ERR = 4, TB_SBP_FD_EXTRA = 8 };

typedef struct tb_sbp_req {
	uint32_t op;
	int32_t id;
	int32_t sig;   /* KILL: the signal; EXEC: the uid to run as; CLEAR:
			* the judge's uid, or 0 */
	uint32_t argc; /* EXEC: data = cwd \0 argv[0] \0 ... envp[0] \0 ... */
	uint32_t envc;
	uint32_t fd_mask;
	uint32_t len;
	char data[TB_SBP_DATA_MAX];
} tb_sbp_req_t;

typedef struct tb_sbp_resp {
	uint32_t op;
	int32_t id;
	int32_t pid;    /* STARTED: pid inside the sandbox */
	int32_t status; /* EXITED: wait status */
	int32_t err;    /* FAILED: errno */
	char msg[256];  /* FAILED: the step, e.g. "mount /proc" */
} tb_sbp_resp_t;

/* The init's side of the control socket: the worker's child puts it here
 * before it executes the init program. */
#define TB_SBP_INIT_FD 3

/* What init needs to build the sandbox, the SETUP message's head. The
 * worker sends it once it has written init's uid/gid maps and moved it
 * into the cgroup; until then init waits. The seccomp filter follows as
 * bpf_len struct sock_filter instructions, compiled once by the worker. */
/* The root is an image's tree: a detached mount of it (idmapped where
 * the kernel can) rides along with SETUP as SCM_RIGHTS; no ro_binds. */
#define TB_SBP_F_IMAGE 1u

typedef struct tb_sbp_setup {
	uint32_t version;      /* TB_SBP_VERSION */
	uint32_t flags;        /* TB_SBP_F_* */
	uint64_t workspace_mb; /* /workspace and /tmp tmpfs size */
	uint64_t outputs_mb;   /* /outputs tmpfs size */
	uint64_t max_file_mb;  /* RLIMIT_FSIZE of every process */
	uint64_t nofile;       /* RLIMIT_NOFILE, capped at the worker's hard limit */
	uint64_t writable_mb;  /* TB_SBP_F_IMAGE: the agent's layer over the image */
	uint32_t bpf_len;      /* instructions */
	uint32_t nbinds;       /* strings after root, at most TB_SBP_MAX_BINDS */
} tb_sbp_setup_t;

#endif
