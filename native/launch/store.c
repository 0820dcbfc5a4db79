#include "launch.h"

// ---- store: btrfs subvolumes and quota groups (src/storage/btrfs-store.ts) -------------------
//   store subvol PATH LIMIT_BYTES           a subvolume with an exclusive limit (0: none); prints its id
//   store snapshot SRC PATH LIMIT_BYTES     a writable snapshot of subvolume SRC, limited; prints its id
//   store keep SRC PATH                     a read-only snapshot of subvolume SRC (a kept sandbox snapshot); prints its id
//   store limit PATH LIMIT_BYTES            sets the exclusive limit of subvolume PATH (a ready clone taken by a create)
//   store delete PATH                       deletes the subvolume (gone already: fine); exit 3: not one
//   store ids PATH...                       subvolume id per path, 0 when not a subvolume
//   store quota PATH                        enables quota groups (simple quotas where the kernel has them)
//   store fsid PATH                         the filesystem's uuid (its directory in /sys/fs/btrfs)
// The exclusive limit counts data and metadata the subvolume alone holds, so both a writer and a
// file flood stop at it (EDQUOT); a referenced limit would also count what a snapshot shares.
// Run on serve's store thread (serve.c), not in a forked child: a fork and exit of the helper cost
// about 0.7 ms of CPU on these PVM guests and a create-delete cycle made two of them. So nothing
// here exits or leaves an fd open: each request ends with its exit code, its output and its error
// written to the streams it is given.

#ifndef BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA 4
#endif
#define EXIT_NOT_SUBVOL 3

// Writes "cube-launch: WHAT: strerror(errno)" to err and returns the helper's failure code.
__attribute__((format(printf, 2, 3))) static int fail(FILE *err, const char *fmt, ...) {
  int e = errno;
  va_list ap;
  va_start(ap, fmt);
  fputs("cube-launch: ", err);
  vfprintf(err, fmt, ap);
  va_end(ap);
  fprintf(err, ": %s\n", strerror(e));
  return EXIT_HELPER;
}

static void close_keep_errno(int fd) {
  int e = errno;
  if (fd >= 0) close(fd);
  errno = e;
}

// The parent directory of PATH, opened (-1 and errno on failure); its last component in `name`.
static int open_parent(const char *path, char name[BTRFS_PATH_NAME_MAX + 1]) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  size_t n = slash == path ? 1 : (size_t)(slash ? slash - path : 0);
  if (!slash || !slash[1] || strlen(slash + 1) > BTRFS_PATH_NAME_MAX || n >= sizeof dir) {
    errno = EINVAL;
    return -1;
  }
  memcpy(dir, path, n);
  dir[n] = '\0';
  strcpy(name, slash + 1);
  return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

// A subvolume's root directory is inode 256 of a btrfs tree.
static int is_subvol(int fd) {
  struct stat st;
  struct statfs sf;
  return fstat(fd, &st) == 0 && fstatfs(fd, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC && st.st_ino == 256;
}

static uint64_t subvol_id(int fd) {
  struct btrfs_ioctl_ino_lookup_args a;
  memset(&a, 0, sizeof a);
  a.objectid = 256;
  return ioctl(fd, BTRFS_IOC_INO_LOOKUP, &a) < 0 ? 0 : a.treeid;
}

// The exclusive limit of the subvolume that holds fd (qgroupid 0 means that one).
int limit_fd(int fd, uint64_t bytes) {
  struct btrfs_ioctl_qgroup_limit_args l;
  memset(&l, 0, sizeof l);
  l.lim.flags = BTRFS_QGROUP_LIMIT_MAX_EXCL;
  l.lim.max_excl = bytes;
  return ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &l);
}

static int destroy_at(int dfd, const char *name) {
  struct btrfs_ioctl_vol_args a;
  memset(&a, 0, sizeof a);
  strcpy(a.name, name);
  return ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &a);
}

static int store_subvol(const char *path, const char *src, uint64_t limit, int readonly, FILE *out, FILE *err) {
  char name[BTRFS_PATH_NAME_MAX + 1];
  int dfd = open_parent(path, name);
  if (dfd < 0) return fail(err, "open the parent of %s", path);
  int made;
  if (src) {
    struct btrfs_ioctl_vol_args_v2 a;
    memset(&a, 0, sizeof a);
    int sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sfd < 0) {
      close_keep_errno(dfd);
      return fail(err, "open %s", src);
    }
    a.fd = sfd;
    if (readonly) a.flags = BTRFS_SUBVOL_RDONLY;
    strcpy(a.name, name);
    made = ioctl(dfd, BTRFS_IOC_SNAP_CREATE_V2, &a);
    close_keep_errno(sfd);
    if (made < 0) {
      close_keep_errno(dfd);
      return fail(err, "snapshot %s to %s", src, path);
    }
  } else {
    struct btrfs_ioctl_vol_args a;
    memset(&a, 0, sizeof a);
    strcpy(a.name, name);
    if (ioctl(dfd, BTRFS_IOC_SUBVOL_CREATE, &a) < 0) {
      close_keep_errno(dfd);
      return fail(err, "create subvolume %s", path);
    }
  }
  // Undone when it cannot be opened or limited: no half-made subvolume stays.
  const char *what = "open";
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 && limit > 0 && limit_fd(fd, limit) < 0) what = "limit";
  else if (fd >= 0) what = NULL;
  if (what) {
    int e = errno;
    close_keep_errno(fd);
    if (destroy_at(dfd, name) < 0) {}
    close(dfd);
    errno = e;
    return fail(err, "%s %s", what, path);
  }
  fprintf(out, "%llu\n", (unsigned long long)subvol_id(fd));
  close(fd);
  close(dfd);
  return 0;
}

static int store_limit(const char *path, uint64_t limit, FILE *err) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(err, "open %s", path);
  int code = 0;
  if (!is_subvol(fd)) {
    fprintf(err, "cube-launch: %s is not a subvolume\n", path);
    code = EXIT_NOT_SUBVOL;
  } else if (limit_fd(fd, limit) < 0) {
    code = fail(err, "limit %s", path);
  }
  close(fd);
  return code;
}

static int store_delete(const char *path, FILE *err) {
  char name[BTRFS_PATH_NAME_MAX + 1];
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return 0;
  int subvol = fd >= 0 && is_subvol(fd);
  if (fd >= 0) close(fd);
  if (!subvol) {
    fprintf(err, "cube-launch: %s is not a subvolume\n", path);
    return EXIT_NOT_SUBVOL;
  }
  int dfd = open_parent(path, name);
  if (dfd < 0) return fail(err, "open the parent of %s", path);
  int r = destroy_at(dfd, name);
  close_keep_errno(dfd);
  return r < 0 && errno != ENOENT ? fail(err, "delete subvolume %s", path) : 0;
}

static int store_quota(const char *path, FILE *err) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(err, "open %s", path);
  struct btrfs_ioctl_quota_ctl_args q;
  memset(&q, 0, sizeof q);
  q.cmd = BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA;
  int r = ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q);
  if (r < 0) {
    q.cmd = BTRFS_QUOTA_CTL_ENABLE;
    r = ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q);
  }
  close_keep_errno(fd);
  return r < 0 ? fail(err, "enable quota on %s", path) : 0;
}

static int store_fsid(const char *path, FILE *out, FILE *err) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(err, "open %s", path);
  struct btrfs_ioctl_fs_info_args a;
  memset(&a, 0, sizeof a);
  int r = ioctl(fd, BTRFS_IOC_FS_INFO, &a);
  close_keep_errno(fd);
  if (r < 0) return fail(err, "filesystem info of %s", path);
  const unsigned char *u = a.fsid;
  for (int i = 0; i < 16; i++) fprintf(out, "%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
  fprintf(out, "\n");
  return 0;
}

int store_cmd(int argc, char **argv, FILE *out, FILE *err) {
  const char *c = argv[0];
  if (strcmp(c, "fsid") == 0 && argc == 2) return store_fsid(argv[1], out, err);
  if (strcmp(c, "subvol") == 0 && argc == 3) return store_subvol(argv[1], NULL, strtoull(argv[2], NULL, 10), 0, out, err);
  if (strcmp(c, "snapshot") == 0 && argc == 4) return store_subvol(argv[2], argv[1], strtoull(argv[3], NULL, 10), 0, out, err);
  if (strcmp(c, "keep") == 0 && argc == 3) return store_subvol(argv[2], argv[1], 0, 1, out, err);
  if (strcmp(c, "limit") == 0 && argc == 3) return store_limit(argv[1], strtoull(argv[2], NULL, 10), err);
  if (strcmp(c, "delete") == 0 && argc == 2) return store_delete(argv[1], err);
  if (strcmp(c, "quota") == 0 && argc == 2) return store_quota(argv[1], err);
  if (strcmp(c, "ids") == 0) {
    for (int i = 1; i < argc; i++) {
      int fd = open(argv[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      fprintf(out, "%llu\n", (unsigned long long)(fd >= 0 && is_subvol(fd) ? subvol_id(fd) : 0));
      if (fd >= 0) close(fd);
    }
    return 0;
  }
  fprintf(err, "cube-launch: bad store request %s\n", c);
  return 2;
}
