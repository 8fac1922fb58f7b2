/*
 * sandbox_ids.h: the host's registry of sandbox id ranges. Every sandbox
 * maps its 65536 user and group ids onto a range of host ids that no other
 * live sandbox on the host holds, whichever process made it: two workers
 * on one host (two pods on a node, two systemd instances), a worker and
 * `taskbox demo`, or the tests. A range is held by an flock() on its file
 * in TB_SANDBOX_ID_REGISTRY, taken without waiting and released when the
 * sandbox is gone, or by the kernel when its process dies: a dead worker's
 * ranges are free again with no clean-up. Workers in containers share the
 * registry through the host's /run/taskbox (deploy/k8s mounts it).
 *
 * Range k is host ids TB_SANDBOX_UID_FIRST + k * TB_SANDBOX_ID_RANGE on;
 * none is host root. This module does not write uid maps (sandbox.c does).
 * It also holds the ids inside a sandbox (the agent's, the judges'), which
 * the worker and the init program share; libc only, like init.
 */
#ifndef TB_SANDBOX_IDS_H
#define TB_SANDBOX_IDS_H

#include "tb/error.h"

#define TB_SANDBOX_AGENT_ID 1000
#define TB_SANDBOX_JUDGE_ID 1001 /* the first judge's; the n-th runs as 1000 + n */
#define TB_SANDBOX_MAX_JUDGES 32 /* uids TB_SANDBOX_JUDGE_ID + 0..31 */
#define TB_SANDBOX_ID_RANGE 65536u
#define TB_SANDBOX_UID_FIRST 200000u /* range 0's first host id */

#define TB_SANDBOX_ID_REGISTRY "/run/taskbox/id-ranges"
#define TB_SANDBOX_ID_RANGES 4096u /* ranges a host can hand out */

typedef struct tb_idrange {
	int lock;      /* the open, flock()ed file; -1 when none is held */
	unsigned base; /* the range's first host id */
} tb_idrange_t;

/**
 * Claims a range no live sandbox on this host holds.
 * @param[out] out released with tb_idrange_release()
 * @return 0; TB_ERETRY when every range is held; TB_EIO when the registry
 *         cannot be made or opened (naming the path and errno's text)
 */
int tb_idrange_claim(tb_idrange_t *out, tb_error_t *err);

/** Frees the range: call it once nothing runs under its ids. Safe on a
 * range never claimed (lock -1). */
void tb_idrange_release(tb_idrange_t *r);

#endif
