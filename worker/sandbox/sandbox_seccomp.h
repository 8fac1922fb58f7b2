/*
 * sandbox_seccomp.h: the system-call policy of every sandboxed process,
 * compiled once per worker with libseccomp and loaded last before exec.
 *
 * Policy: allow by default, and deny with EPERM what a task has no
 * business doing: changing mounts or the root, making or entering
 * namespaces, inspecting or injecting into other processes, loading kernel
 * code or BPF, kernel keyrings, userfaultfd, file handles, the clock, the
 * machine (reboot, swap, modules), io_uring. clone3 answers ENOSYS so libc
 * falls back to clone, whose flags can be inspected. Syscalls of other
 * architectures (x32, i386 via int 0x80) kill the process. The full list,
 * with the reason for each, is `deny[]` in sandbox_seccomp.c.
 *
 * This file owns the policy and its compiled BPF. The worker hands the
 * BPF to each sandbox's init (taskbox-sandbox-init), which loads it last
 * in every process it starts, before exec.
 */
#ifndef TB_SANDBOX_SECCOMP_H
#define TB_SANDBOX_SECCOMP_H

#include "tb/error.h"

#include <stdint.h>

typedef struct tb_seccomp tb_seccomp_t;

/**
 * Compiles the policy to BPF. @param[out] out released with
 * tb_seccomp_free(). @return 0, TB_EIO (libseccomp failed), TB_ENOMEM
 */
int tb_seccomp_compile(tb_seccomp_t **out, tb_error_t *err);

/**
 * The compiled filter: @p count struct sock_filter instructions, owned by
 * @p p.
 */
const void *tb_seccomp_bpf(const tb_seccomp_t *p, uint32_t *count);

/** Number of BPF instructions, for logs and tests. */
unsigned tb_seccomp_size(const tb_seccomp_t *p);

void tb_seccomp_free(tb_seccomp_t *p);

#endif
