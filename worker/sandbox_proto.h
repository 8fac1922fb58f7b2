/*
 * sandbox_proto.h: the messages between the worker (sandbox.c) and a
 * sandbox's init process (sandbox_init.c), over a SOCK_SEQPACKET pair: one
 * datagram per message, file descriptors for a new process riding along as
 * SCM_RIGHTS. Both ends are built from the same binary, so the layout is
 * simply the struct.
 */
#ifndef TB_SANDBOX_PROTO_H
#define TB_SANDBOX_PROTO_H

#include "sandbox.h"
#include "sandbox_seccomp.h"

#include <stdint.h>

#define TB_SBP_DATA_MAX (60u * 1024) /* argv + envp + cwd */
#define TB_SBP_MAX_ARGS 256
#define TB_SBP_MAX_ENVS 512
#define TB_SBP_MAX_PROCS 64

enum tb_sbp_op {
	/* worker -> init */
	TB_SBP_EXEC = 1,   /* start a process; fds attached per fd_mask */
	TB_SBP_KILL = 2,   /* signal a process group */
	TB_SBP_ASSIGN = 3, /* data = hostname \0 recipe \0 inputs \0 */
	/* init -> worker */
	TB_SBP_READY = 10,    /* the sandbox is built */
	TB_SBP_STARTED = 11,  /* execve succeeded: pid */
	TB_SBP_FAILED = 12,   /* a build step or an exec failed: err, msg */
	TB_SBP_EXITED = 13,   /* a process ended: wait status */
	TB_SBP_ASSIGNED = 14, /* the task's parts are in, the host root gone */
};

/* Bits of fd_mask: which of stdin, stdout, stderr, fd 3 were attached, in
 * that order. */
enum { TB_SBP_FD_IN = 1, TB_SBP_FD_OUT = 2, TB_SBP_FD_ERR = 4, TB_SBP_FD_EXTRA = 8 };

typedef struct tb_sbp_req {
	uint32_t op;
	int32_t id;
	int32_t sig;   /* KILL: the signal; EXEC: the uid to run as */
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

/* What init needs, prepared by the worker before clone and read by the
 * child from its copy of the worker's memory. */
typedef struct tb_sandbox_init_args {
	const tb_sandbox_spec_t *spec;
	const tb_seccomp_t *policy;
	const char *root; /* host directory the new root is built on */
	int ctl_fd;       /* init's end of the control socket */
	int sync_fd;      /* read end: one byte once maps and cgroups are set */
	uint64_t nofile;  /* RLIMIT_NOFILE, capped at the worker's hard limit */
} tb_sandbox_init_args_t;

/* The init process: never returns. */
_Noreturn void tb_sandbox_init_main(const tb_sandbox_init_args_t *args);

#endif
