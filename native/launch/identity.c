#include "launch.h"

// ---- identity -----------------------------------------------------------------------------------
// A sandbox created with -I has host ids of its own (issue 12): its processes live in a user
// namespace mapping ids 0-65535 to HOST_ID_BASE.. (root inside is not host root, `user` is not
// host 1000, so per-uid kernel limits and /proc/<pid> access are the sandbox's alone). The init
// makes it once its mounts are done, with HOST_ID_BASE as its effective uid: the kernel charges a
// namespace's per-user counts (inotify instances among them) at the host's level to the
// namespace's owner, so one owned by root would pool every sandbox's with root's. Its other
// namespaces stay owned by the host's, so root inside holds no capability over the mounts, the
// network or the pid namespace: all mounts are made beforehand, here, as host root.
// Files keep ids 0/1000 on disk (templates and snapshots move between sandboxes unchanged): every
// overlay layer (and /usr of host-usr templates) is an idmapped mount through a second namespace,
// whose map adds on-disk 65536 <-> host 0: the daemon's files API creates files as host root (and
// then chowns them to the sandbox's ids), which an idmapped layer without host 0 refuses
// (EOVERFLOW). No process ever runs in that second namespace.
long id_base = -1; // create: -I
int idmap_ns = -1;

int write_file_at(int dfd, const char *path, const char *s) {
  int fd = openat(dfd, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int ok = write(fd, s, strlen(s)) == (ssize_t)strlen(s);
  int e = errno;
  close(fd);
  errno = e;
  return ok ? 0 : -1;
}

// `proc`: the host's /proc, held open by serve (which writes the maps of every create).
// -1 with errno and the file that failed in `failed` (the uid or gid map of that pid).
int write_id_maps(int proc, pid_t pid, const char *map, char *failed, size_t len) {
  static const char *files[] = {"uid_map", "gid_map"};
  for (int i = 0; i < 2; i++) {
    snprintf(failed, len, "%d/%s", (int)pid, files[i]);
    if (write_file_at(proc, failed, map) < 0) return -1;
  }
  return 0;
}

// The layers' namespace: a child born in it waits while its maps are written, then returns. It
// shares this process's memory (CLONE_VM, a stack of its own) instead of a copy: a fork's page
// table copy, copy-on-write faults and teardown cost ~1.9 ms of CPU (parent and child) per create
// on the benchmark VM (a PVM guest: page-table writes and TLB flushes trap), this ~0.1 ms
// (bench/userns-overlay.c --clone, load 12). Raw syscalls only in the child: it runs on this
// process's thread-local storage, errno included.
static int idmap_hold[2];
static int hold_idmap_ns(void *arg) {
  char b;
  (void)arg;
  syscall(SYS_close, idmap_hold[1]); // its copy of the write end: the parent's close (or death) ends the read
  return syscall(SYS_read, idmap_hold[0], &b, 1) < 0;
}

// Runs in serve (before the init's fork, whose pid namespace the holder must not enter): -1 with
// errno and what failed in `failed` instead of dying.
int make_idmap_ns(int proc, long base, char *failed, size_t len) {
  static char stack[16384] __attribute__((aligned(16)));
  snprintf(failed, len, "clone a user namespace");
  if (pipe2(idmap_hold, O_CLOEXEC) < 0) return -1;
  pid_t c = clone(hold_idmap_ns, stack + sizeof stack, CLONE_VM | CLONE_NEWUSER | SIGCHLD, NULL);
  if (c < 0) {
    int e = errno;
    close(idmap_hold[0]);
    close(idmap_hold[1]);
    errno = e;
    return -1;
  }
  close(idmap_hold[0]);
  char map[96];
  snprintf(map, sizeof map, "0 %ld %d\n%d 0 1\n", base, ID_RANGE, ID_RANGE);
  int fd = write_id_maps(proc, c, map, failed, len);
  if (fd == 0) {
    snprintf(failed, len, "%d/ns/user", (int)c);
    fd = openat(proc, failed, O_RDONLY | O_CLOEXEC);
  }
  int e = errno;
  // The holder runs on `stack`: it must be gone before the next create's clone reuses it.
  close(idmap_hold[1]);
  while (waitpid(c, NULL, 0) < 0 && errno == EINTR) {}
  errno = e;
  return fd;
}

// A detached copy of the mount tree at `path` seen through the layers' id map, with `attrs` set
// (AT_RECURSIVE in `recursive`: the submounts too).
int idmapped_tree(const char *path, unsigned recursive, uint64_t attrs) {
  int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | recursive);
  if (fd < 0) die("open_tree %s", path);
  struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP | attrs, .userns_fd = (uint64_t)idmap_ns };
  if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | recursive, &a, sizeof a) < 0) die("idmapped mount of %s", path);
  return fd;
}

// idmapped_tree of a layer (or of upper and work's parent), attached at the overlay's mountpoint
// `m`, under the overlay mounted there next: the overlay takes its own private copy of each layer,
// so the trees are only held until they go with the old root's unmount after pivot_root, all in
// one RCU grace period. Closed detached, each tree cost one (0.16-0.6 ms wall, 3.4 ms per create
// for the host template's two at load 12, more for a template of many layers).
int idmapped_layer(const char *path, const char *m) {
  int fd = idmapped_tree(path, 0, 0);
  if (syscall(SYS_move_mount, fd, "", AT_FDCWD, m, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("mount %s on %s", path, m);
  return fd;
}

// The init's last step as host root: into its own user namespace, root there. The parent writes
// the maps between the two pipe messages.
void enter_own_userns(int ready, int go) {
  if (setresuid(-1, (uid_t)id_base, -1) < 0) die("owner of the user namespace");
  if (unshare(CLONE_NEWUSER) < 0) die("unshare user namespace");
  char b;
  if (write(ready, "\1", 1) != 1 || read(go, &b, 1) != 1) die("user namespace maps");
  gid_t none[1] = {0};
  if (setresgid(0, 0, 0) < 0 || setgroups(1, none) < 0 || setresuid(0, 0, 0) < 0) die("become root of the user namespace");
}
