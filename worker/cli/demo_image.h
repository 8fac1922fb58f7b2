/*
 * demo_image.h: the demo's pinned environment: an OCI image layout the
 * demo writes itself (one layer: taskbox-demo-agent as /bin/demo, and
 * /etc/image-name), so that a newcomer sees a task run in an image with
 * no registry and nothing to download.
 */
#ifndef TB_DEMO_IMAGE_H
#define TB_DEMO_IMAGE_H

#include "tb/error.h"

/**
 * Where taskbox-demo-agent is: next to the running program, or in the
 * installed libexec/taskbox. @return 0 and the path; TB_ENOTFOUND.
 */
int tb_demo_agent_path(char *out, size_t len, tb_error_t *err);

/**
 * Writes an OCI image layout at @p dir (made) whose one layer holds
 * @p program as /bin/demo; the manifest's digest into @p digest.
 * @return 0; TB_EIO naming what could not be written.
 */
int tb_demo_image(const char *dir, const char *program, char digest[72], tb_error_t *err);

#endif
