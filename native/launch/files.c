#include "launch.h"

// ---- metadata: envd's file metadata, user.e2b.* xattrs (src/runtime/ns/metadata.ts) ----------------
//   get PATH...             prints "INDEX\0KEY\0VALUE\0" per attribute (KEY without the prefix);
//                           a path that cannot be read prints nothing
//   set PATH [KEY VALUE]... replaces the file's user.e2b.* attributes with these; exit 1 and a message
// Runs like watch_dir: in the sandbox, as the user, so the file's permissions decide.
#define META_PREFIX "user.e2b."

int file_metadata(char **args) {
  char names[65536], value[65536];
  if (!args[0] || !args[1]) { fprintf(stderr, "cube-launch: metadata get|set PATH...\n"); return 2; }
  if (strcmp(args[0], "get") == 0) {
    for (int i = 1; args[i]; i++) {
      ssize_t n = llistxattr(args[i], names, sizeof names);
      for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1) {
        const char *name = names + off;
        if (strncmp(name, META_PREFIX, strlen(META_PREFIX)) != 0) continue;
        ssize_t v = lgetxattr(args[i], name, value, sizeof value);
        if (v < 0) continue;
        char idx[16];
        int k = snprintf(idx, sizeof idx, "%d", i - 1);
        write_all(1, idx, (size_t)k + 1);
        write_all(1, name + strlen(META_PREFIX), strlen(name + strlen(META_PREFIX)) + 1);
        write_all(1, value, (size_t)v);
        write_all(1, "", 1);
      }
    }
    return 0;
  }
  if (strcmp(args[0], "set") != 0) { fprintf(stderr, "cube-launch: metadata get|set PATH...\n"); return 2; }
  const char *path = args[1];
  ssize_t n = llistxattr(path, names, sizeof names);
  if (n < 0) { fprintf(stderr, "cube-launch: metadata of %s: %s\n", path, strerror(errno)); return 1; }
  for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1) {
    if (strncmp(names + off, META_PREFIX, strlen(META_PREFIX)) == 0 && lremovexattr(path, names + off) < 0) {
      fprintf(stderr, "cube-launch: metadata of %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  for (int i = 2; args[i] && args[i + 1]; i += 2) {
    char name[512];
    if (snprintf(name, sizeof name, META_PREFIX "%s", args[i]) >= (int)sizeof name || lsetxattr(path, name, args[i + 1], strlen(args[i + 1]), 0) < 0) {
      fprintf(stderr, "cube-launch: metadata %s of %s: %s\n", args[i], path, strerror(errno));
      return 1;
    }
  }
  return 0;
}

// ---- access: the files API as a user (src/runtime/ns/files.ts) -----------------------------------
//   MODE PATH [MODE PATH]...   MODE: R_OK 4 | W_OK 2 | X_OK 1 (0: exists and reachable), plus
//     8  UNLINK: PATH (not followed) may be removed from, or renamed out of, its directory: that
//        directory writable and searchable, and where it is sticky (/tmp) the user owns PATH or it
//     16 TREE: PATH, when a directory, may be emptied: every directory below it (itself included)
//        readable, writable and searchable, the sticky rule for each entry (what rm -r needs)
//     32 SOFT: a refusal of this pair is printed on stdout ("INDEX\n", the pair's place from 0)
//        and the checks go on
// The daemon reads and writes a sandbox's files as host root through /proc/<init>/root; before it
// acts for a user it asks here, in the sandbox and as that user, so every directory on the way and
// the file's own mode, owner and ACLs decide as they would for the user's own process (before,
// a write as `user` replaced a root-owned 0600 file and created files in /root, a read showed it).
// The real ids are the user's (setuid above), so faccessat without AT_EACCESS checks them; the
// sticky rule is the kernel's (may_delete): no capability is left to the user to pass it otherwise.
// Exit 1 and "PATH: reason" at the first refusal that is not SOFT.
#define CHECK_UNLINK 8
#define CHECK_TREE 16
#define CHECK_SOFT 32

// The sticky directory rule: in a directory with S_ISVTX only the owner of an entry or of the
// directory may remove or rename the entry.
static int sticky_allows(const struct stat *dir, const struct stat *entry) {
  if (!(dir->st_mode & S_ISVTX) || entry->st_uid == getuid() || dir->st_uid == getuid()) return 1;
  errno = EPERM;
  return 0;
}

static int may_unlink(const char *path) {
  char parent[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash || strlen(path) >= sizeof parent) { errno = EINVAL; return -1; }
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  memcpy(parent, path, n);
  parent[n] = '\0';
  struct stat dir, entry;
  if (faccessat(AT_FDCWD, parent, W_OK | X_OK, 0) < 0 || stat(parent, &dir) < 0 || lstat(path, &entry) < 0) return -1;
  return sticky_allows(&dir, &entry) ? 0 : -1;
}

// The directories of the tree walk by level, for each entry's sticky rule (nftw gives no parent).
static struct stat *tree_dirs;
static int tree_depth;
static int tree_errno;
static char tree_path[PATH_MAX];

static int tree_entry(const char *fpath, const struct stat *st, int flag, struct FTW *ftw) {
  if (flag == FTW_DNR || flag == FTW_NS) {
    tree_errno = flag == FTW_DNR ? EACCES : errno;
  } else if (ftw->level > 0 && !sticky_allows(&tree_dirs[ftw->level - 1], st)) {
    tree_errno = errno;
  } else if (flag == FTW_D && faccessat(AT_FDCWD, fpath + ftw->base, R_OK | W_OK | X_OK, 0) < 0) {
    tree_errno = errno;
  } else {
    if (flag == FTW_D) {
      if (ftw->level >= tree_depth) {
        int more = tree_depth ? tree_depth * 2 : 64;
        struct stat *grown = realloc(tree_dirs, (size_t)more * sizeof *grown);
        if (!grown) { tree_errno = ENOMEM; goto refused; }
        tree_dirs = grown;
        tree_depth = more;
      }
      tree_dirs[ftw->level] = *st;
    }
    return 0;
  }
refused:
  snprintf(tree_path, sizeof tree_path, "%s", fpath);
  return 1;
}

// Whether the whole tree at PATH may be removed by the user (a file or link: nothing below it).
static int may_empty(const char *path) {
  tree_errno = 0;
  // FTW_CHDIR: names are looked up relative to their directory, so a deep tree is no long path.
  int r = nftw(path, tree_entry, 16, FTW_PHYS | FTW_CHDIR);
  if (r < 0) return -1;
  if (r > 0) {
    errno = tree_errno;
    return -1;
  }
  return 0;
}

int check_access(char **args) {
  for (int i = 0; args[i] && args[i + 1]; i += 2) {
    int mode = atoi(args[i]);
    const char *path = args[i + 1];
    tree_path[0] = '\0';
    int bits = mode & (R_OK | W_OK | X_OK);
    // Not followed for UNLINK and TREE alone: a dangling link may be removed.
    int refused = ((bits || !(mode & (CHECK_UNLINK | CHECK_TREE))) && faccessat(AT_FDCWD, path, bits, 0) < 0)
      || ((mode & CHECK_UNLINK) && may_unlink(path) < 0)
      || ((mode & CHECK_TREE) && may_empty(path) < 0);
    if (!refused) continue;
    if (mode & CHECK_SOFT) {
      printf("%d\n", i / 2);
      continue;
    }
    fprintf(stderr, "cube-launch: %s: %s\n", tree_path[0] ? tree_path : path, strerror(errno));
    fflush(stdout); // the caller _exits
    return 1;
  }
  fflush(stdout);
  return 0;
}
