/*
 * cgroup_paths.h: where this process's own cgroup is, as a directory, in
 * one hierarchy: the cgroup named in /proc/self/cgroup, found under the
 * mount of that hierarchy that shows it (/proc/self/mountinfo).
 *
 * /proc/self/cgroup names a cgroup from the root of the process's cgroup
 * namespace; a mount of cgroupfs shows the hierarchy from its own root
 * (mountinfo's fourth field). Outside a container both are "/". In a
 * container sharing the host's cgroup namespace (podman's default on
 * cgroup v1) the process is in "/libpod_parent/libpod-<id>" and the
 * container's /sys/fs/cgroup/memory shows exactly that cgroup as its
 * root: joining the two paths names a directory that does not exist.
 *
 * Pure text in, path out: this file reads no file, so the cases are
 * unit-tested with the texts each kind of machine gives.
 */
#ifndef TB_CGROUP_PATHS_H
#define TB_CGROUP_PATHS_H

#include "tb/error.h"

#include <stddef.h>

/**
 * Finds the directory of this process's cgroup in one hierarchy.
 * @param[out] out the directory (mount point + own path below the
 *             mount's root, without a trailing '/')
 * @param self_cgroup the text of /proc/self/cgroup
 * @param mountinfo the text of /proc/self/mountinfo
 * @param ctl a v1 controller ("memory", "pids", ...), or NULL for the v2
 *        (unified) hierarchy
 * @return 0; TB_ENOTFOUND when no such hierarchy is mounted or the process
 *         is in none; TB_EIO when every mount of it shows only cgroups
 *         that do not hold this process (message names both paths);
 *         TB_ETOOBIG when the path does not fit in @p len
 */
int tb_cgroup_paths_find(char *out, size_t len, const char *self_cgroup, const char *mountinfo,
			 const char *ctl, tb_error_t *err);

#endif
