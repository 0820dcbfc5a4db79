#include "launch.h"
#include <linux/openat2.h>

// ---- volumes -------------------------------------------------------------------------------------
// create -v HOSTDIR:PATH (repeatable): a volume (a subvolume of the store, src/storage/volumes.ts)
// mounted at PATH inside the sandbox, nosuid and nodev, after the overlay and before /proc, /dev
// and /tmp. Under -I it is an idmapped mount like the layers, so its files keep ids 0/1000 on
// disk and every sandbox that mounts it sees them as its own root and user. The mount point is
// looked up and made below the sandbox's root with RESOLVE_IN_ROOT, one component at a time: a
// template's symlink (`/data -> /etc`) resolves inside the sandbox, never to the host's tree.
static const char *vol_src[MAX_VOLUMES], *vol_dst[MAX_VOLUMES];
static int nvol;

int add_volume(char *arg) {
  char *colon = strchr(arg, ':');
  if (!colon || nvol == MAX_VOLUMES || colon[1] != '/') return -1;
  *colon = '\0';
  vol_src[nvol] = arg;
  vol_dst[nvol++] = colon + 1;
  return 0;
}

void clear_volumes(void) { nvol = 0; }

static int open_in_root(int root, const char *rel) {
  struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
  return (int)syscall(SYS_openat2, root, rel[0] ? rel : ".", &how, sizeof how);
}

// The directory PATH below the root `m`, made (0755, host root's) where missing; an O_PATH fd.
static int volume_mountpoint(const char *m, const char *path) {
  int root = open(m, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) die("open %s", m);
  char rel[4096];
  snprintf(rel, sizeof rel, "%s", path[0] == '/' ? path + 1 : path);
  size_t n = strlen(rel);
  for (size_t i = 0; i <= n; i++) {
    if (rel[i] != '/' && rel[i] != '\0') continue;
    char save = rel[i];
    rel[i] = '\0';
    int fd = open_in_root(root, rel);
    if (fd < 0 && errno == ENOENT) {
      char *slash = strrchr(rel, '/');
      int parent;
      if (slash) {
        *slash = '\0';
        parent = open_in_root(root, rel);
        *slash = '/';
      } else {
        parent = dup(root);
      }
      if (parent < 0) die("volume mount point %s: parent", path);
      if (mkdirat(parent, slash ? slash + 1 : rel, 0755) < 0 && errno != EEXIST) die("volume mount point %s: mkdir", path);
      close(parent);
      fd = open_in_root(root, rel);
    }
    if (fd < 0) die("volume mount point %s", path);
    rel[i] = save;
    if (save == '\0') {
      close(root);
      return fd;
    }
    close(fd);
  }
  close(root);
  errno = EINVAL;
  die("volume mount point %s", path);
  return -1;
}

void mount_volumes(const char *m) {
  for (int i = 0; i < nvol; i++) {
    int tree;
    if (id_base >= 0) {
      tree = idmapped_tree(vol_src[i], 0, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    } else {
      tree = (int)syscall(SYS_open_tree, AT_FDCWD, vol_src[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
      if (tree < 0) die("open_tree %s", vol_src[i]);
      struct mount_attr a = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
      if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &a, sizeof a) < 0) die("volume %s: nosuid, nodev", vol_src[i]);
    }
    int at = volume_mountpoint(m, vol_dst[i]);
    if (syscall(SYS_move_mount, tree, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) die("mount volume %s on %s", vol_src[i], vol_dst[i]);
    close(at);
    close(tree);
  }
}
