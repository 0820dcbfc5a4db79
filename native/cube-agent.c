/*
 * cube-agent: the guest agent of the microvm runtime. It runs as the guest's pid 1 (exec'd by the
 * initramfs /init once the root filesystem is mounted at its argument), chroots into that root and
 * serves the host over one virtio-serial port (named "cube.agent"; on the host a unix socket of
 * QEMU's `-chardev socket`). Everything multiplexes over that one byte stream:
 *
 *   frame = u32le payload length | u8 type | u32le channel | payload
 *
 * The host picks a fresh channel per request (an exec, a file operation); replies carry it back.
 * Payloads are NUL-separated strings (argv, env, paths, stat records) or raw bytes (stdio, file
 * data). The types and payload layouts are mirrored in src/runtime/microvm/protocol.ts.
 *
 * It is the only process in the guest that the host talks to, so it is also init: it reaps every
 * orphan (SIGCHLD through a signalfd in the same poll loop as the port and the exec pipes).
 * The VM is the isolation boundary, so the agent runs as guest root and confines nothing itself.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>

enum {
  /* host -> guest */
  T_EXEC = 1, T_STDIN = 2, T_STDIN_EOF = 3, T_SIGNAL = 4, T_RESIZE = 5,
  T_STAT = 10, T_LIST = 11, T_READ = 12, T_WRITE_OPEN = 13, T_WRITE_DATA = 14, T_WRITE_END = 15,
  T_MKDIR = 16, T_RENAME = 17, T_REMOVE = 18,
  T_SETUP = 20, T_PING = 21, T_MOUNT = 22,
  /* guest -> host */
  T_STDOUT = 64, T_STDERR = 65, T_EXIT = 66, T_STARTED = 67,
  T_ERROR = 70, T_OK = 71, T_DATA = 72, T_END = 73,
  T_PONG = 80,
};

#define MAX_PROCS 256
#define MAX_WRITES 64
#define MAX_FRAME (1u << 20)
/* The largest frame the host takes from us (MAX_GUEST_FRAME in protocol.ts): a longer one
   breaks the protocol and the host kills the VM, so a listing past it is refused instead. */
#define MAX_REPLY (16u << 20)
#define CHUNK 65536
/* How long an exited command's output may still drain (background children can hold the pipes). */
#define DRAIN_MS 200

extern char **environ;

struct proc {
  uint32_t chan;
  pid_t pid;
  int out, err, in; /* -1 when closed; with a pty, out == in == the master and err == -1 */
  int pty;
  int exited;
  int status;
  long long exited_at;
};

struct wfile {
  uint32_t chan;
  int fd;
  char *path;
};

static int port = -1;
static struct proc procs[MAX_PROCS];
static struct wfile wfiles[MAX_WRITES];

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd pf = {fd, POLLOUT, 0};
        poll(&pf, 1, 100);
        continue;
      }
      return; /* host gone: the frame is lost with it */
    }
    p += w;
    n -= (size_t)w;
  }
}

static void send_frame(uint8_t type, uint32_t chan, const void *data, uint32_t len) {
  unsigned char h[9];
  h[0] = len & 0xff; h[1] = (len >> 8) & 0xff; h[2] = (len >> 16) & 0xff; h[3] = len >> 24;
  h[4] = type;
  h[5] = chan & 0xff; h[6] = (chan >> 8) & 0xff; h[7] = (chan >> 16) & 0xff; h[8] = chan >> 24;
  /* One buffer, one write: frames of concurrent channels never interleave. */
  char *buf = malloc(9 + (size_t)len);
  if (!buf) return;
  memcpy(buf, h, 9);
  if (len) memcpy(buf + 9, data, len);
  write_all(port, buf, 9 + (size_t)len);
  free(buf);
}

static void send_error(uint32_t chan, int err, const char *what) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "%d", err) + 1;
  n += snprintf(buf + n, sizeof buf - (size_t)n, "%s: %s", what, strerror(err));
  send_frame(T_ERROR, chan, buf, (uint32_t)n);
}

/* NUL-separated fields of a payload; returns how many (at most max). */
static int split(char *p, uint32_t len, char **out, int max) {
  int n = 0;
  uint32_t i = 0;
  while (i < len && n < max) {
    out[n++] = p + i;
    while (i < len && p[i]) i++;
    i++;
  }
  return n;
}

/* --- stat records: type, size, mode, uid, gid, mtime ms, path, symlink target (NUL-terminated each) --- */

struct buf {
  char *p;
  size_t len, cap;
};

static void buf_add(struct buf *b, const char *s, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + n) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) return;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static int stat_record(struct buf *b, const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) return -1;
  char num[160];
  char type = S_ISREG(st.st_mode) ? 'f' : S_ISDIR(st.st_mode) ? 'd' : S_ISLNK(st.st_mode) ? 'l' : 'o';
  int n = snprintf(num, sizeof num, "%c%c%lld%c%u%c%u%c%u%c%lld", type, 0, (long long)st.st_size, 0, st.st_mode & 07777, 0,
                   st.st_uid, 0, st.st_gid, 0, (long long)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000);
  buf_add(b, num, (size_t)n + 1);
  buf_add(b, path, strlen(path) + 1);
  char target[4096] = "";
  if (S_ISLNK(st.st_mode)) {
    ssize_t t = readlink(path, target, sizeof target - 1);
    target[t > 0 ? t : 0] = 0;
  }
  buf_add(b, target, strlen(target) + 1);
  return 0;
}

static void list_dir(struct buf *b, const char *dir, int depth) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
    if (stat_record(b, path) < 0) continue;
    struct stat st;
    if (depth > 1 && lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) list_dir(b, path, depth - 1);
  }
  closedir(d);
}

/* mkdir -p of the parents of `path` (or of path itself when `self`), new ones owned by uid:gid. */
static int mkdirs(const char *path, int self, uid_t uid, gid_t gid) {
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  size_t n = strlen(p);
  if (!self) {
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) return 0;
    *slash = 0;
    n = strlen(p);
  }
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    char c = p[i];
    p[i] = 0;
    if (mkdir(p, 0755) == 0) {
      if (lchown(p, uid, gid) < 0) return -1;
    } else if (errno != EEXIST) {
      return -1;
    }
    p[i] = c;
  }
  return 0;
}

/* rm -r: what may go goes; a failure below is the one reported (not the ENOTEMPTY it leaves). */
static int remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) return -1;
  if (!S_ISDIR(st.st_mode)) return unlink(path);
  DIR *d = opendir(path);
  if (!d) return -1;
  struct dirent *e;
  int below = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char child[4096];
    snprintf(child, sizeof child, "%s/%s", path, e->d_name);
    if (remove_tree(child) < 0 && errno != ENOENT && !below) below = errno;
  }
  closedir(d);
  if (rmdir(path) == 0) return 0;
  if (below) errno = below;
  return -1;
}

/* A file request made for a user (the files API): its last field is "as=UID:GID", taken off here.
   The request then runs with that fsuid and fsgid (no supplementary groups, as the user's
   commands run: do_exec), so the guest kernel decides as for the user's own process: modes,
   owners, ACLs, sticky directories. While the fsuid is not 0 the agent's filesystem capabilities
   are off (the kernel drops them with it and gives them back with fsuid 0). 1: taken, 0: none. */
static int take_identity(char **f, int *n, uid_t *uid, gid_t *gid) {
  if (*n < 2 || strncmp(f[*n - 1], "as=", 3) != 0) return 0;
  unsigned u, g;
  if (sscanf(f[*n - 1] + 3, "%u:%u", &u, &g) != 2) return -1;
  *uid = u;
  *gid = g;
  (*n)--;
  return 1;
}

static int become(uid_t uid, gid_t gid) {
  setfsgid(gid);
  setfsuid(uid);
  /* Each returns the previous id; asking again with -1 (invalid, no change) tells the current. */
  if ((uid_t)setfsuid((uid_t)-1) != uid || (gid_t)setfsgid((gid_t)-1) != gid) {
    setfsuid(0);
    setfsgid(0);
    errno = EPERM;
    return -1;
  }
  return 0;
}

/* --- exec --- */

static struct proc *proc_of(uint32_t chan) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (procs[i].pid > 0 && procs[i].chan == chan) return &procs[i];
  return NULL;
}

static void do_exec(uint32_t chan, char *payload, uint32_t len) {
  char *f[4096];
  int n = split(payload, len, f, 4095);
  /* uid, gid, cwd, flags, cols, rows, argc, argv..., env... */
  if (n < 8) return send_error(chan, EINVAL, "exec request");
  int argc = atoi(f[6]);
  if (argc < 1 || 7 + argc > n) return send_error(chan, EINVAL, "exec argv");
  struct proc *slot = NULL;
  for (int i = 0; i < MAX_PROCS && !slot; i++)
    if (procs[i].pid == 0) slot = &procs[i];
  if (!slot) return send_error(chan, EAGAIN, "too many processes");
  uid_t uid = (uid_t)atoi(f[0]);
  gid_t gid = (gid_t)atoi(f[1]);
  int want_stdin = strchr(f[3], 's') != NULL;
  int want_pty = strchr(f[3], 'p') != NULL;
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  char **envp = calloc((size_t)(n - 7 - argc) + 1, sizeof *envp);
  for (int i = 0; i < argc; i++) argv[i] = f[7 + i];
  for (int i = 7 + argc, j = 0; i < n; i++) envp[j++] = f[i];

  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, master = -1;
  char *slave_name = NULL;
  if (want_pty) {
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || !(slave_name = ptsname(master))) {
      send_error(chan, errno, "pty");
      if (master >= 0) close(master);
      free(argv);
      free(envp);
      return;
    }
    struct winsize ws = {.ws_row = (unsigned short)atoi(f[5]), .ws_col = (unsigned short)atoi(f[4])};
    ioctl(master, TIOCSWINSZ, &ws);
  } else if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || (want_stdin && pipe2(in, O_CLOEXEC) < 0)) {
    send_error(chan, errno, "pipe");
    free(argv);
    free(envp);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    if (want_pty) {
      int s = open(slave_name, O_RDWR);
      if (s < 0) _exit(127);
      ioctl(s, TIOCSCTTY, 0);
      dup2(s, 0);
      dup2(s, 1);
      dup2(s, 2);
      if (s > 2) close(s);
    } else {
      int devnull = open("/dev/null", O_RDONLY);
      dup2(want_stdin ? in[0] : devnull, 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
    }
    if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0) {
      dprintf(2, "cube-agent: cannot become %u:%u: %s\n", uid, gid, strerror(errno));
      _exit(127);
    }
    if (chdir(f[2]) < 0) {
      dprintf(2, "cube-agent: cwd %s: %s\n", f[2], strerror(errno));
      _exit(127);
    }
    environ = envp;
    execvp(argv[0], argv);
    dprintf(2, "cube-agent: %s: %s\n", argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  free(argv);
  free(envp);
  if (pid < 0) {
    send_error(chan, errno, "fork");
    if (want_pty) close(master);
    else {
      close(out[0]); close(out[1]); close(err[0]); close(err[1]);
      if (in[0] >= 0) { close(in[0]); close(in[1]); }
    }
    return;
  }
  memset(slot, 0, sizeof *slot);
  slot->chan = chan;
  slot->pid = pid;
  slot->pty = want_pty;
  if (want_pty) {
    slot->out = slot->in = master;
    slot->err = -1;
  } else {
    close(out[1]);
    close(err[1]);
    slot->out = out[0];
    slot->err = err[0];
    slot->in = -1;
    if (want_stdin) {
      close(in[0]);
      slot->in = in[1];
    }
  }
  char pidbuf[24];
  int pn = snprintf(pidbuf, sizeof pidbuf, "%d", pid);
  send_frame(T_STARTED, chan, pidbuf, (uint32_t)pn);
}

static void finish(struct proc *p) {
  char buf[48];
  int code = WIFEXITED(p->status) ? WEXITSTATUS(p->status) : 128 + WTERMSIG(p->status);
  int sig = WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0;
  int n = snprintf(buf, sizeof buf, "%d", code) + 1;
  n += snprintf(buf + n, sizeof buf - (size_t)n, "%d", sig);
  if (p->out >= 0) close(p->out);
  if (p->err >= 0) close(p->err);
  if (p->in >= 0 && p->in != p->out) close(p->in);
  send_frame(T_EXIT, p->chan, buf, (uint32_t)n);
  memset(p, 0, sizeof *p);
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (int i = 0; i < MAX_PROCS; i++) {
      if (procs[i].pid == pid && !procs[i].exited) {
        procs[i].exited = 1;
        procs[i].status = status;
        procs[i].exited_at = now_ms();
      }
    }
  }
}

/* Sends what a pipe holds; closes it at EOF. */
static void pump(struct proc *p, int *fd, uint8_t type) {
  char buf[CHUNK];
  ssize_t r = read(*fd, buf, sizeof buf);
  if (r > 0) {
    send_frame(type, p->chan, buf, (uint32_t)r);
    return;
  }
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
  /* EOF (or EIO on a pty master once the last slave holder exited) */
  close(*fd);
  if (p->in == *fd) p->in = -1;
  *fd = -1;
}

/* --- files --- */

static struct wfile *wfile_of(uint32_t chan) {
  for (int i = 0; i < MAX_WRITES; i++)
    if (wfiles[i].path && wfiles[i].chan == chan) return &wfiles[i];
  return NULL;
}

static void reply_stat(uint32_t chan, const char *path) {
  struct buf b = {0};
  if (stat_record(&b, path) < 0) send_error(chan, errno, path);
  else send_frame(T_OK, chan, b.p, (uint32_t)b.len);
  free(b.p);
}

static void file_op(uint8_t type, uint32_t chan, char *payload, uint32_t len, char **f, int n, int as);

static void do_file(uint8_t type, uint32_t chan, char *payload, uint32_t len) {
  char *f[5];
  int n = split(payload, len, f, 5);
  int as = 0;
  if (type != T_WRITE_DATA && type != T_WRITE_END) { /* those carry file data, not fields */
    uid_t uid = 0;
    gid_t gid = 0;
    as = take_identity(f, &n, &uid, &gid);
    if (as < 0) return send_error(chan, EINVAL, "file request identity");
    if (as && become(uid, gid) < 0) return send_error(chan, errno, "file request identity");
  }
  file_op(type, chan, payload, len, f, n, as);
  if (as) become(0, 0);
}

static void file_op(uint8_t type, uint32_t chan, char *payload, uint32_t len, char **f, int n, int as) {
  if (type != T_WRITE_DATA && type != T_WRITE_END && n < 1) return send_error(chan, EINVAL, "file request");
  switch (type) {
  case T_STAT:
    return reply_stat(chan, f[0]);
  case T_LIST: {
    struct stat st;
    if (stat(f[0], &st) < 0) return send_error(chan, errno, f[0]);
    if (!S_ISDIR(st.st_mode)) return send_error(chan, ENOTDIR, f[0]);
    DIR *top = opendir(f[0]); /* list_dir passes over a directory it cannot read; the one asked for is an error */
    if (!top) return send_error(chan, errno, f[0]);
    closedir(top);
    struct buf b = {0};
    list_dir(&b, f[0], n > 1 ? atoi(f[1]) : 1);
    if (b.len > MAX_REPLY) send_error(chan, E2BIG, "listing over 16 MiB (list fewer levels)");
    else send_frame(T_OK, chan, b.p, (uint32_t)b.len);
    free(b.p);
    return;
  }
  case T_READ: {
    int fd = open(f[0], O_RDONLY | O_CLOEXEC);
    if (fd < 0) return send_error(chan, errno, f[0]);
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      close(fd);
      return send_error(chan, EISDIR, f[0]);
    }
    char buf[CHUNK];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0) send_frame(T_DATA, chan, buf, (uint32_t)r);
    if (r < 0) send_error(chan, errno, f[0]);
    else send_frame(T_END, chan, NULL, 0);
    close(fd);
    return;
  }
  case T_WRITE_OPEN: {
    uid_t uid = n > 1 ? (uid_t)atoi(f[1]) : 0;
    gid_t gid = n > 2 ? (gid_t)atoi(f[2]) : 0;
    struct wfile *w = NULL;
    for (int i = 0; i < MAX_WRITES && !w; i++)
      if (!wfiles[i].path) w = &wfiles[i];
    if (!w) return send_error(chan, EAGAIN, "too many writes");
    /* As the user, what it makes is its own already, and a file it may write keeps its owner. */
    if (as) uid = (uid_t)-1, gid = (gid_t)-1;
    if (mkdirs(f[0], 0, uid, gid) < 0) return send_error(chan, errno, f[0]);
    int fd = open(f[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return send_error(chan, errno, f[0]);
    if (!as && fchown(fd, uid, gid) < 0) {
      close(fd);
      return send_error(chan, errno, f[0]);
    }
    w->chan = chan;
    w->fd = fd;
    w->path = strdup(f[0]);
    return;
  }
  case T_WRITE_DATA:
  case T_WRITE_END: {
    struct wfile *w = wfile_of(chan);
    if (!w) return;
    if (type == T_WRITE_DATA) {
      if (w->fd >= 0) {
        const char *p = payload;
        uint32_t left = len;
        while (left > 0) {
          ssize_t r = write(w->fd, p, left);
          if (r < 0 && errno == EINTR) continue;
          if (r < 0) { /* reported at the end */
            int e = errno;
            close(w->fd);
            w->fd = -1 - e;
            break;
          }
          p += r;
          left -= (uint32_t)r;
        }
      }
      return;
    }
    if (w->fd >= 0) {
      if (close(w->fd) < 0) send_error(chan, errno, w->path);
      else reply_stat(chan, w->path);
    } else {
      send_error(chan, -1 - w->fd, w->path);
    }
    free(w->path);
    memset(w, 0, sizeof *w);
    return;
  }
  case T_MKDIR: {
    struct stat st;
    if (lstat(f[0], &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return send_error(chan, EEXIST, f[0]);
      return send_frame(T_OK, chan, "0", 2);
    }
    if (as) n = 1; /* made as the user: its own */
    if (mkdirs(f[0], 1, n > 1 ? (uid_t)atoi(f[1]) : (uid_t)-1, n > 2 ? (gid_t)atoi(f[2]) : (gid_t)-1) < 0) return send_error(chan, errno, f[0]);
    return send_frame(T_OK, chan, "1", 2);
  }
  case T_RENAME:
    if (n < 2) return send_error(chan, EINVAL, "rename needs two paths");
    if (rename(f[0], f[1]) < 0) return send_error(chan, errno, f[0]);
    return reply_stat(chan, f[1]);
  case T_REMOVE:
    if (remove_tree(f[0]) < 0 && errno != ENOENT) return send_error(chan, errno, f[0]);
    return send_frame(T_OK, chan, NULL, 0);
  }
}

/* hostname=..., time=<unix ms>, hosts=<contents of /etc/hosts>: the identity a restored clone takes over from its snapshot. */
static void do_setup(uint32_t chan, char *payload, uint32_t len) {
  char *f[32];
  int n = split(payload, len, f, 32);
  for (int i = 0; i < n; i++) {
    if (!strncmp(f[i], "hostname=", 9)) {
      if (sethostname(f[i] + 9, strlen(f[i] + 9)) < 0) return send_error(chan, errno, "sethostname");
    } else if (!strncmp(f[i], "time=", 5)) {
      long long ms = atoll(f[i] + 5);
      struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
      if (clock_settime(CLOCK_REALTIME, &ts) < 0) return send_error(chan, errno, "clock_settime");
    } else if (!strncmp(f[i], "hosts=", 6)) {
      int fd = open("/etc/hosts", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return send_error(chan, errno, "/etc/hosts");
      write_all(fd, f[i] + 6, strlen(f[i] + 6));
      close(fd);
    }
  }
  send_frame(T_OK, chan, NULL, 0);
}

/* The modules of virtio-fs (lib/modules/volumes of the initramfs, in dependency order), opened
   before the chroot and loaded on the first mount: a guest without volumes never loads them. */
static const char *volume_modules[] = {"/lib/modules/volumes/fuse.ko", "/lib/modules/volumes/virtiofs.ko"};
#define NVOLUME_MODULES (sizeof volume_modules / sizeof volume_modules[0])
static int volume_module_fds[NVOLUME_MODULES];

static void open_volume_modules(void) {
  for (size_t i = 0; i < NVOLUME_MODULES; i++) volume_module_fds[i] = open(volume_modules[i], O_RDONLY | O_CLOEXEC);
}

/* tag, path: the host's virtio-fs device `tag` mounted at `path` (made where missing), nosuid and
   nodev as an ns sandbox's volumes. The guest is the isolation boundary: its own symlinks may
   lead the mount point anywhere inside it. A mount point that cannot be made is reported with
   its path (the caller's error, as for ns), anything else with what failed. */
static void do_mount(uint32_t chan, char *payload, uint32_t len) {
  char *f[2];
  if (split(payload, len, f, 2) != 2 || f[1][0] != '/') return send_error(chan, EINVAL, "mount");
  for (size_t i = 0; i < NVOLUME_MODULES; i++) {
    if (volume_module_fds[i] < 0) return send_error(chan, ENOENT, volume_modules[i]);
    if (syscall(SYS_finit_module, volume_module_fds[i], "", 0) < 0 && errno != EEXIST) return send_error(chan, errno, volume_modules[i]);
  }
  char path[4096];
  snprintf(path, sizeof path, "%s", f[1]);
  for (char *s = path + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char save = *s;
    *s = '\0';
    if (mkdir(path, 0755) < 0 && errno != EEXIST) return send_error(chan, errno, f[1]);
    *s = save;
    if (!save) break;
  }
  if (mount(f[0], path, "virtiofs", MS_NOSUID | MS_NODEV, NULL) < 0) return send_error(chan, errno, "mount virtiofs");
  /* The mount returns before the host's virtiofsd answered FUSE_INIT; a statfs waits for it, so a
     server that failed is a failed request (the host's timeout) rather than a hung volume later. */
  struct statfs st;
  if (statfs(path, &st) < 0) return send_error(chan, errno, "statfs virtiofs");
  send_frame(T_OK, chan, NULL, 0);
}

static void handle(uint8_t type, uint32_t chan, char *payload, uint32_t len) {
  struct proc *p;
  switch (type) {
  case T_PING:
    /* "caps": what this agent does beyond the first protocol (older agents echo it back). */
    if (len == 5 && !memcmp(payload, "caps\0", 5)) return send_frame(T_PONG, chan, "caps\0ids\0", 9);
    return send_frame(T_PONG, chan, payload, len);
  case T_SETUP:
    return do_setup(chan, payload, len);
  case T_MOUNT:
    return do_mount(chan, payload, len);
  case T_EXEC:
    return do_exec(chan, payload, len);
  case T_STDIN:
    if ((p = proc_of(chan)) && p->in >= 0) write_all(p->in, payload, len);
    return;
  case T_STDIN_EOF:
    if ((p = proc_of(chan)) && p->in >= 0) {
      if (p->pty) write_all(p->in, "\x04", 1);
      else {
        close(p->in);
        p->in = -1;
      }
    }
    return;
  case T_SIGNAL:
    if ((p = proc_of(chan)) && !p->exited) {
      payload[len ? len - 1 : 0] = 0;
      kill(-p->pid, atoi(payload));
    }
    return;
  case T_RESIZE:
    if ((p = proc_of(chan)) && p->pty) {
      char *f[2];
      if (split(payload, len, f, 2) == 2) {
        struct winsize ws = {.ws_row = (unsigned short)atoi(f[1]), .ws_col = (unsigned short)atoi(f[0])};
        ioctl(p->out, TIOCSWINSZ, &ws);
      }
    }
    return;
  default:
    return do_file(type, chan, payload, len);
  }
}

/* The host end went away (cubed restarted): what it asked for can no longer be answered. */
static void host_gone(void) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (procs[i].pid > 0 && !procs[i].exited) kill(-procs[i].pid, SIGKILL);
  for (int i = 0; i < MAX_WRITES; i++) {
    if (!wfiles[i].path) continue;
    if (wfiles[i].fd >= 0) close(wfiles[i].fd);
    free(wfiles[i].path);
    memset(&wfiles[i], 0, sizeof wfiles[i]);
  }
}

static int open_port(void) {
  DIR *d = opendir("/sys/class/virtio-ports");
  if (!d) return -1;
  struct dirent *e;
  int fd = -1;
  while (fd < 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[300], name[64] = "";
    snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
    int nf = open(path, O_RDONLY);
    if (nf < 0) continue;
    ssize_t r = read(nf, name, sizeof name - 1);
    close(nf);
    if (r <= 0 || strncmp(name, "cube.agent", 10)) continue;
    snprintf(path, sizeof path, "/dev/%s", e->d_name);
    fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  }
  closedir(d);
  return fd;
}

int main(int argc, char **argv) {
  for (int i = 0; i < 200 && (port = open_port()) < 0; i++) usleep(10000);
  if (port < 0) {
    fprintf(stderr, "cube-agent: no virtio port named cube.agent\n");
    return 1;
  }
  open_volume_modules();
  if (argc > 1 && (chroot(argv[1]) < 0 || chdir("/") < 0)) {
    fprintf(stderr, "cube-agent: chroot %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGPIPE);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  fprintf(stderr, "cube-agent: ready\n");

  static char in[MAX_FRAME + 9];
  size_t have = 0;
  int connected = 1;
  struct pollfd pfd[2 + 2 * MAX_PROCS];
  struct proc *owner[2 + 2 * MAX_PROCS];
  int *which[2 + 2 * MAX_PROCS];
  for (;;) {
    int n = 0;
    pfd[n++] = (struct pollfd){sfd, POLLIN, 0};
    pfd[n++] = (struct pollfd){connected ? port : -1, POLLIN, 0};
    int draining = 0;
    for (int i = 0; i < MAX_PROCS; i++) {
      struct proc *p = &procs[i];
      if (!p->pid) continue;
      if (p->exited) draining = 1;
      if (p->out >= 0) { owner[n] = p; which[n] = &p->out; pfd[n++] = (struct pollfd){p->out, POLLIN, 0}; }
      if (p->err >= 0) { owner[n] = p; which[n] = &p->err; pfd[n++] = (struct pollfd){p->err, POLLIN, 0}; }
    }
    int r = poll(pfd, (nfds_t)n, draining || !connected ? 50 : -1);
    if (r < 0 && errno != EINTR) return 1;
    if (pfd[0].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {}
      reap();
    }
    if (!connected) {
      /* a reconnect shows as readable data; a still-absent host as POLLHUP */
      struct pollfd pp = {port, POLLIN, 0};
      if (poll(&pp, 1, 0) == 1 && !(pp.revents & POLLHUP)) connected = 1;
    } else if (pfd[1].revents & POLLIN) {
      ssize_t got = read(port, in + have, sizeof in - have);
      if (got > 0) have += (size_t)got;
      while (have >= 9) {
        uint32_t len = (uint32_t)(unsigned char)in[0] | (uint32_t)(unsigned char)in[1] << 8 | (uint32_t)(unsigned char)in[2] << 16 |
                       (uint32_t)(unsigned char)in[3] << 24;
        if (len > MAX_FRAME) { have = 0; break; } /* out of sync: drop and resynchronise on the next request */
        if (have < 9 + (size_t)len) break;
        uint8_t type = (uint8_t)in[4];
        uint32_t chan = (uint32_t)(unsigned char)in[5] | (uint32_t)(unsigned char)in[6] << 8 | (uint32_t)(unsigned char)in[7] << 16 |
                        (uint32_t)(unsigned char)in[8] << 24;
        char save = in[9 + len < sizeof in ? 9 + len : sizeof in - 1];
        in[9 + len < sizeof in ? 9 + len : sizeof in - 1] = 0; /* payload strings are always terminated */
        handle(type, chan, in + 9, len);
        in[9 + len < sizeof in ? 9 + len : sizeof in - 1] = save;
        memmove(in, in + 9 + len, have - 9 - len);
        have -= 9 + len;
      }
    } else if (pfd[1].revents & POLLHUP) {
      connected = 0;
      have = 0;
      host_gone();
    }
    for (int i = 2; i < n; i++)
      if (pfd[i].revents) pump(owner[i], which[i], which[i] == &owner[i]->err ? T_STDERR : T_STDOUT);
    long long t = now_ms();
    for (int i = 0; i < MAX_PROCS; i++) {
      struct proc *p = &procs[i];
      if (p->pid && p->exited && ((p->out < 0 && p->err < 0) || t - p->exited_at >= DRAIN_MS)) finish(p);
    }
  }
}
