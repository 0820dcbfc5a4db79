// cube-launch's internal header: what its files (one per concern, one binary) share.
// main.c describes the commands; each file opens with what it does.
#ifndef CUBE_LAUNCH_H
#define CUBE_LAUNCH_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <limits.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>

#define MAX_CGROUPS 8
// overlayfs' own limit on lower layers (OVL_MAX_STACK).
#define MAX_LAYERS 500
#define EXIT_HELPER 125

// serve: the host's root, mount namespace and mount table, saved before the helper leaves them
// (fds 3, 4 and 5; children close everything above HOST_MNT_FD).
#define HOST_ROOT_FD 3
#define HOST_MNT_FD 4
#define HOST_MOUNTS_FD 5
// identity.c: ids 0-65535 inside a sandbox with its own user namespace (create -I).
#define ID_RANGE 65536

// common.c: state and steps every command shares.
extern int host_root;
extern int report_fd;
extern int main_argc;
extern char **main_argv;
extern int keep_net_raw;
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void join_cgroups(const char *const *procs, int n);
void set_loopback_up(void);
void drop_bounding_caps(void);
void limit_own_caps(int keep);
void write_all(int fd, const void *p, size_t n);

// seccomp.c: the sandbox's syscall filter.
int install_seccomp(int listen);

// notify.c: statfs and fstatfs of sandboxes answered by `serve` with their disk size and use.
// serve's exec children get a socket at NOTIFY_FD (notify_fd; -1 elsewhere) that takes the
// listener of the filter they install back to the helper.
#define NOTIFY_FD 5
extern int notify_fd;
void send_listener(int listener);
int take_listener(int sock, const char *upper);
int listener_count(void);
int listener_pollfds(struct pollfd *p);
void answer_listeners(const struct pollfd *p, int n);

// init.c: the sandbox's pid 1, from mounts to reaping.
void raise_oom_score(void);
void sandbox_init(const char *id, const char *lower, const char *lower_base, const char *upper,
                  const char *work, const char *m, int bind_usr, int tmp_mib, int ready, int go);

// identity.c: the sandbox's own host ids (user namespaces, idmapped layers).
extern long id_base;
extern int idmap_ns;
int write_file_at(int dfd, const char *path, const char *s);
int write_id_maps(int proc, pid_t pid, const char *map, char *failed, size_t len);
int make_idmap_ns(int proc, long base, char *failed, size_t len);
int idmapped_tree(const char *path, unsigned recursive, uint64_t attrs);
int idmapped_layer(const char *path, const char *m);
void enter_own_userns(int ready, int go);

// volumes.c: create -v HOSTDIR:PATH, volumes mounted into the sandbox by its init.
#define MAX_VOLUMES 16
int add_volume(char *arg);
void clear_volumes(void);
void mount_volumes(const char *m);

// create.c: a create request (options in main.c) and the fork of its init, both run by serve.
struct create_req {
  const char *id, *lower, *lower_base, *upper, *work, *merged, *netns;
  const char *cgroups[MAX_CGROUPS];
  int ncg, bind_usr, tmp_mib;
  uint64_t disk_limit;
  long id_base;
};
int parse_create(int argc, char **argv, struct create_req *c, char *err, size_t len);
pid_t start_init(const struct create_req *c, int proc, int own_pidns, const sigset_t *mask, int *report, int *go, char *failed, size_t len);

// exec.c, serve.c: the commands.
extern int exec_on_tty;
int cmd_exec(int argc, char **argv);
int cmd_serve(void);

// watch.c, files.c: what `exec -W`, `-X` and `-A` run in the sandbox instead of a command.
int watch_dir(const char *dir, int recursive);
int file_metadata(char **args);
int check_access(char **args);

// store.c: the btrfs sandbox store.
int limit_fd(int fd, uint64_t bytes);
int store_cmd(int argc, char **argv, FILE *out, FILE *err);

#endif
