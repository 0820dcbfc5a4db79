#include "launch.h"
#include <linux/openat2.h>

// ---- notify: statfs and fstatfs answered with the sandbox's disk size ------------------------
// statfs of the sandbox's root (overlayfs: its writable layer's filesystem) or of a volume (a
// btrfs subvolume) reports the whole store, a quota group's limit being invisible to statfs. The
// policy marks both calls SECCOMP_RET_USER_NOTIF; the listener of each exec'd command's filter
// (every process of a sandbox descends from one: the init starts nothing) comes back to `serve`
// over NOTIFY_FD and is answered in its poll loop: the object the call names is resolved as the
// caller sees it, the helper runs the real statfs on it, and when it is on the sandbox's writable
// layer or on a volume with a limit, total and free become the limit and what is left of it
// (never more than the store has free). Anything else, and any object the helper cannot resolve exactly
// like the kernel would (a relative path leaving the working directory, a magic link), goes on
// unchanged (SECCOMP_USER_NOTIF_FLAG_CONTINUE): the kernel answers it as before.
// The caller's memory is read and written through /proc/PID/mem opened before the notification
// is checked still pending (SECCOMP_IOCTL_NOTIF_ID_VALID), so a reused pid is never touched.
// If the helper is gone (its listeners closed), the kernel answers these calls ENOSYS: a sandbox
// never waits on it.
int notify_fd = -1;

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

// A filesystem seen by a listener's processes with a limit to report: its quota group's sysfs
// files. The root's (the writable layer, named by the exec request's -Q: the overlay does not
// tell its layers, they were mounted by fd), and each volume's, learned at the first call on
// it by its statfs id (btrfs makes f_fsid per subvolume).
struct quota_fs { fsid_t fsid; int excl, max; };
// The root's files are opened at its first call (`upper` until then): a command that never calls
// statfs costs the helper one fd, its listener.
struct listener { int fd; char *upper; struct quota_fs root; int n; struct quota_fs fs[MAX_VOLUMES]; };
static struct listener *listeners;
static int nlisteners, listeners_cap;

static void send_fd(int sock, int fd) {
  char c[CMSG_SPACE(sizeof fd)];
  memset(c, 0, sizeof c);
  struct iovec io = { "l", 1 };
  struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = c, .msg_controllen = sizeof c };
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof fd);
  memcpy(CMSG_DATA(h), &fd, sizeof fd);
  if (sendmsg(sock, &m, MSG_NOSIGNAL) != 1) die("hand the seccomp listener to the helper");
}

// In the process that installed the filter: the listener goes to the helper, and no process of
// the sandbox keeps it (one that did could answer its own calls, and would hold the filter's
// notifications open after the helper's end).
void send_listener(int listener) {
  if (listener < 0) return;
  send_fd(notify_fd, listener);
  close(listener);
  close(notify_fd);
  notify_fd = -1;
}

static int open_qgroup(int fd, struct quota_fs *q);

// serve: a listener from a job's socket, kept until every process under its filter is gone;
// `upper`: the sandbox's writable layer (NULL: unknown, its statfs goes unchanged). 0: nothing
// came yet; 1: the socket has served (a listener taken, or none will come).
int take_listener(int sock, const char *upper) {
  char c[CMSG_SPACE(sizeof(int))], b;
  struct iovec io = { &b, 1 };
  struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = c, .msg_controllen = sizeof c };
  ssize_t r = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  struct cmsghdr *h = r == 1 ? CMSG_FIRSTHDR(&m) : NULL;
  if (!h || h->cmsg_type != SCM_RIGHTS || h->cmsg_len != CMSG_LEN(sizeof(int))) return 1;
  int fd;
  memcpy(&fd, CMSG_DATA(h), sizeof fd);
  if (nlisteners == listeners_cap) {
    int cap = listeners_cap ? 2 * listeners_cap : 64;
    struct listener *l = realloc(listeners, (size_t)cap * sizeof *l);
    if (!l) die("out of memory");
    listeners = l;
    listeners_cap = cap;
  }
  struct listener *l = &listeners[nlisteners++];
  *l = (struct listener){ .fd = fd, .upper = upper ? strdup(upper) : NULL, .root = { .excl = -1, .max = -1 } };
  return 1;
}

int listener_count(void) { return nlisteners; }

int listener_pollfds(struct pollfd *p) {
  for (int i = 0; i < nlisteners; i++) p[i] = (struct pollfd){ .fd = listeners[i].fd, .events = POLLIN };
  return nlisteners;
}

static void drop_listener(int i) {
  struct listener *l = &listeners[i];
  for (int k = 0; k < l->n; k++) close(l->fs[k].excl), close(l->fs[k].max);
  if (l->root.max >= 0) close(l->root.excl), close(l->root.max);
  free(l->upper);
  close(l->fd);
  listeners[i] = listeners[--nlisteners];
}

// ---- the quota group of a subvolume ---------------------------------------------------------

// The sysfs files of the quota group of the subvolume holding `fd` (an fd that is not O_PATH).
static int open_qgroup(int fd, struct quota_fs *q) {
  struct btrfs_ioctl_fs_info_args fi;
  struct btrfs_ioctl_ino_lookup_args a;
  memset(&fi, 0, sizeof fi);
  memset(&a, 0, sizeof a);
  a.objectid = 256;
  if (ioctl(fd, BTRFS_IOC_FS_INFO, &fi) < 0 || ioctl(fd, BTRFS_IOC_INO_LOOKUP, &a) < 0) return -1;
  char p[160];
  int n = snprintf(p, sizeof p, "/sys/fs/btrfs/");
  for (int i = 0; i < 16; i++) n += snprintf(p + n, sizeof p - (size_t)n, "%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", fi.fsid[i]);
  snprintf(p + n, sizeof p - (size_t)n, "/qgroups/0_%llu/exclusive", (unsigned long long)a.treeid);
  q->excl = open(p, O_RDONLY | O_CLOEXEC);
  snprintf(p + n, sizeof p - (size_t)n, "/qgroups/0_%llu/max_exclusive", (unsigned long long)a.treeid);
  q->max = open(p, O_RDONLY | O_CLOEXEC);
  if (q->excl >= 0 && q->max >= 0) return 0;
  if (q->excl >= 0) close(q->excl);
  if (q->max >= 0) close(q->max);
  return -1;
}

// A sysfs number ("none" for no limit: 0).
static uint64_t read_number(int fd) {
  char b[32];
  ssize_t r = pread(fd, b, sizeof b - 1, 0);
  if (r <= 0) return 0;
  b[r] = '\0';
  return strtoull(b, NULL, 10);
}

// The limit to report for the object `obj` (its statfs in `sf`): its quota group's files; NULL
// for one without a limit to report. The only overlay a sandbox has is its root (it cannot mount),
// and the only btrfs mounts its volumes.
static struct quota_fs *quota_of(struct listener *l, int obj, const struct statfs *sf) {
  if (sf->f_type == OVERLAYFS_SUPER_MAGIC && l->upper) {
    int up = open(l->upper, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (up >= 0 && open_qgroup(up, &l->root) < 0) l->root.excl = l->root.max = -1;
    if (up >= 0) close(up);
    free(l->upper);
    l->upper = NULL; // tried once
  }
  if (sf->f_type == OVERLAYFS_SUPER_MAGIC) return l->root.max >= 0 ? &l->root : NULL;
  if (sf->f_type != BTRFS_SUPER_MAGIC) return NULL;
  for (int k = 0; k < l->n; k++)
    if (memcmp(&l->fs[k].fsid, &sf->f_fsid, sizeof sf->f_fsid) == 0) return &l->fs[k];
  if (l->n == MAX_VOLUMES) return NULL;
  // A volume: the object reopened for the ioctls (O_PATH refuses them), never blocking (a fifo)
  // and never a device (volumes are nodev).
  char p[64];
  snprintf(p, sizeof p, "/proc/self/fd/%d", obj);
  int fd = open(p, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct quota_fs *q = &l->fs[l->n];
  int ok = open_qgroup(fd, q) == 0;
  close(fd);
  if (!ok) return NULL;
  q->fsid = sf->f_fsid;
  l->n++;
  return q;
}

// ---- one call ---------------------------------------------------------------------------------

// The reply to one call: 1 with the statfs written into the caller, -errno, or 0: continue.
static int answer_call(struct listener *l, const struct seccomp_notif *req) {
  char p[64], path[PATH_MAX];
  int mem = -1, at = -1, obj = -1, done = 0;
  snprintf(p, sizeof p, "/proc/%d/mem", req->pid);
  mem = open(p, O_RDWR | O_CLOEXEC);
  if (mem < 0) return 0;
  // fstatfs: the caller's fd through a pidfd. statfs: the path it names, absolute inside the
  // caller's root as the kernel resolves it, relative only beneath its working directory (".."
  // above it, or an absolute symlink, would need the root too: the kernel answers those).
  if (req->data.nr == __NR_fstatfs) {
    at = (int)syscall(SYS_pidfd_open, req->pid, PIDFD_THREAD);
  } else {
    ssize_t r = pread(mem, path, sizeof path, (off_t)req->data.args[0]);
    if (r <= 0 || !memchr(path, '\0', (size_t)r) || !path[0]) goto out;
    snprintf(p, sizeof p, "/proc/%d/%s", req->pid, path[0] == '/' ? "root" : "cwd");
    at = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
  }
  // Still the caller, blocked in this call: the fds above are its own, and so what was read.
  if (at < 0 || ioctl(l->fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) < 0) goto out;
  if (req->data.nr == __NR_fstatfs) {
    obj = (int)syscall(SYS_pidfd_getfd, at, (int)req->data.args[0], 0);
  } else {
    struct open_how how = { .flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_MAGICLINKS };
    how.resolve |= path[0] == '/' ? RESOLVE_IN_ROOT : RESOLVE_BENEATH;
    obj = (int)syscall(SYS_openat2, at, path, &how, sizeof how);
  }
  struct statfs sf;
  if (obj < 0 || fstatfs(obj, &sf) < 0) goto out;
  struct quota_fs *q = quota_of(l, obj, &sf);
  uint64_t max = q ? read_number(q->max) : 0, used = q ? read_number(q->excl) : 0;
  if (!max || !sf.f_bsize) goto out;
  uint64_t bs = (uint64_t)sf.f_bsize, blocks = max / bs, used_blocks = (used + bs - 1) / bs;
  uint64_t left = used_blocks < blocks ? blocks - used_blocks : 0;
  sf.f_blocks = blocks;
  sf.f_bfree = left < sf.f_bfree ? left : sf.f_bfree;
  sf.f_bavail = left < sf.f_bavail ? left : sf.f_bavail;
  // An unmapped buffer gets EFAULT, as from the kernel (a read-only one of the caller's own is
  // written: /proc/PID/mem writes as a debugger does).
  done = pwrite(mem, &sf, sizeof sf, (off_t)req->data.args[1]) == (ssize_t)sizeof sf ? 1 : -EFAULT;
out:
  close(mem);
  if (at >= 0) close(at);
  if (obj >= 0) close(obj);
  return done;
}

// serve's poll loop, `p` as listener_pollfds filled it: one call per listener a round, so a storm
// of calls in one sandbox waits its turn behind every other listener and request.
// (n of them: listeners taken since come after and wait for the next round).
void answer_listeners(const struct pollfd *p, int n) {
  for (int i = n - 1; i >= 0; i--) {
    struct listener *l = &listeners[i];
    if (p[i].revents & POLLIN) {
      struct seccomp_notif req;
      memset(&req, 0, sizeof req);
      // ENOENT: the caller was killed (or interrupted) between the poll and here.
      if (ioctl(l->fd, SECCOMP_IOCTL_NOTIF_RECV, &req) == 0) {
        int done = answer_call(l, &req);
        struct seccomp_notif_resp resp = { .id = req.id };
        if (done == 1) resp.val = 0;
        else if (done < 0) resp.error = done;
        else resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        ioctl(l->fd, SECCOMP_IOCTL_NOTIF_SEND, &resp); // ENOENT: the caller is gone
      }
    } else if (p[i].revents & (POLLHUP | POLLERR | POLLNVAL)) {
      drop_listener(i); // no process is left under its filter
    }
  }
}
