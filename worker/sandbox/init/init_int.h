/*
 * init_int.h: what the files of taskbox-sandbox-init share. One program,
 * linking only libc; nothing outside worker/sandbox/init/ includes this.
 * sandbox_init.c has the program's life and its state; the other files
 * one concern each: init_root.c the file system, init_etc.c the ids by
 * name, init_exec.c the processes, init_judge.c the judges' view,
 * init_util.c the helpers.
 */
#ifndef TB_SANDBOX_INIT_INT_H
#define TB_SANDBOX_INIT_INT_H

#include "sandbox_proto.h"

#include <linux/filter.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* For code that runs on a borrowed stack between clone and execve, where
 * ASan's shadow would be left poisoned (written once, so tools that read
 * C, such as pmccabe, see a plain name). */
#define NO_ASAN __attribute__((no_sanitize("address")))
#define PATH_LEN 4096
#define HOST_DIR "/.host"
#define LAYERS_DIR "/.layers" /* an image root's scaffold: image_root() */
#define LAZY_DIR "/.lazy"     /* the lazy inputs' mount, while assign() binds them */

/* sandbox_init.c: from SETUP, never changed afterwards */
extern tb_sbp_setup_t S;
extern struct sock_fprog policy;
extern const char *new_root; /* host directory the root is built on */
extern const char *binds[TB_SBP_MAX_BINDS];
extern int image_fd;                /* the image's tree, a detached mount (TB_SBP_F_IMAGE) */
extern const char *image_root_path; /* where its overlay is, while the root is built */
extern int assigned;                /* no process may start before assign() */
extern char hostname[65];           /* from ASSIGN */
extern unsigned task_binds;         /* from ASSIGN: 1 /recipe, 2 /inputs */

/* init_util.c */
void cat(char *buf, size_t cap, const char *s);
void close_fds(unsigned lo, unsigned hi);
_Noreturn void fail(const char *step, const char *what, int errnum);
void join(char *out, size_t cap, const char *a, const char *b);
int mkdir_p(const char *path);
int raw_setgroups(size_t n, const gid_t *list);
int raw_setresgid(gid_t r, gid_t e, gid_t s);
int raw_setresuid(uid_t r, uid_t e, uid_t s);
void send_resp(uint32_t op, int32_t id, int32_t pid, int32_t status, int32_t err, const char *msg);
void utoa(char *out, size_t cap, unsigned long long v);
int write_file(const char *path, const char *text, mode_t mode);

/* init_root.c */
void assign(const tb_sbp_req_t *req, int lazy_fd);
void build_root(void);
void loopback_up(void);
int make_readonly(const char *path, int nosymfollow);
int tmpfs_at(const char *path, uint64_t mb, const char *mode, unsigned owner);
int write_hosts(const char *root);

/* init_etc.c */
void build_etc(const char *root);

/* init_exec.c */
NO_ASAN int become(unsigned uid);
NO_ASAN _Noreturn void exec_child(char *const *argv, char *const *envp, const char *cwd,
				  const int fds[4], int errpipe, unsigned uid);
void handle_exec(const tb_sbp_req_t *req, int *fds);
void handle_kill(const tb_sbp_req_t *req);
void reap(void);
void reaped(pid_t pid, int status);

/* init_judge.c */
void handle_clear(const tb_sbp_req_t *req);
int judge_root(const char **step);
int judge_view(unsigned uid, const char **step);

#endif
