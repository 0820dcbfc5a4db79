#include "launch.h"

// ---- init: the sandbox's pid 1 (mounts, /dev, pivot_root, then reaping) --------------------
// When the host runs out of memory, its OOM killer takes sandbox processes first: +500 for every
// command (exec.c), while cubed runs at -900 (0 where the host withholds CAP_SYS_RESOURCE).
// Without that capability a process inside may not lower its score below the value set for it
// here (-100 is refused, measured), so never below the daemon's.
// The init stays lower than its commands: in the sandbox's own memory cgroup the killer weighs
// rss plus adj/1000 of the limit, so at equal scores a storm of small processes could take the
// init (under 1 MiB) and with it the whole sandbox. 250 below them is a quarter of the limit: the
// init goes only when no command is left, and still before host processes (0) on a host OOM,
// where its death frees the whole sandbox.
#define SANDBOX_OOM_SCORE_ADJ "500"
#define INIT_OOM_SCORE_ADJ "250"

static void set_oom_score(const char *adj) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, adj, strlen(adj)) < 0) die("oom_score_adj");
  close(fd);
}

void raise_oom_score(void) { set_oom_score(SANDBOX_OOM_SCORE_ADJ); }

static void mkdir_at(const char *root, const char *rel, mode_t mode) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  if (mkdir(p, mode) < 0 && errno != EEXIST) die("mkdir %s", p);
}

static void mount_at(const char *src, const char *root, const char *rel, const char *type,
                     unsigned long flags, const char *data) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  if (mount(src, p, type, flags, data) < 0) die("mount %s on %s", type ? type : src, p);
}

// Bind a path onto itself read-only (or skip it when the kernel does not have it).
static void readonly_bind(const char *p) {
  if (access(p, F_OK) < 0) return;
  if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0) die("bind %s", p);
  if (mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
    die("remount %s read-only", p);
}

// Hides a kernel interface that only leaks host state (kcore, keys, timer lists).
static void mask(const char *p) {
  if (access(p, F_OK) < 0) return;
  if (mount("/dev/null", p, NULL, MS_BIND, NULL) < 0) die("mask %s", p);
}

/*
 * The sandbox's own /proc/meminfo and /proc/loadavg (issue 29 item 8), read-only: memory at its
 * limit (`mem_mib`: total, free and available, what programs sizing themselves by MemTotal should
 * see; no swap, memory+swap being held at the same limit) and no load (zeros, so uptime and top
 * still parse it). Written once, no daemon: live figures would need a FUSE server (lxcfs) every
 * sandbox's reads depend on. The files live on a tmpfs of their own, mounted on <m>/tmp only while
 * they are made (the real /tmp comes after): a bind of a file from the data dir would show its
 * host path in the sandbox's mountinfo.
 */
static void own_proc_files(const char *m, int mem_mib) {
  char dir[4096], src[4160], dst[4160], text[512];
  mount_at("tmpfs", m, "tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=16k,nr_inodes=8");
  snprintf(dir, sizeof dir, "%s/tmp", m);
  unsigned long kib = (unsigned long)mem_mib * 1024;
  int n = snprintf(text, sizeof text, "%-16s%8lu kB\n%-16s%8lu kB\n%-16s%8lu kB\n", "MemTotal:", kib, "MemFree:", kib, "MemAvailable:", kib);
  static const char *zero[] = {"Buffers:", "Cached:", "SwapCached:", "SwapTotal:", "SwapFree:", "Shmem:"};
  for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%-16s%8d kB\n", zero[i], 0);
  const char *files[][2] = {{"meminfo", text}, {"loadavg", "0.00 0.00 0.00 1/1 1\n"}};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(src, sizeof src, "%s/%s", dir, files[i][0]);
    snprintf(dst, sizeof dst, "%s/proc/%s", m, files[i][0]);
    int fd = open(src, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0) die("create %s", src);
    write_all(fd, files[i][1], strlen(files[i][1]));
    close(fd);
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0) die("bind %s on %s", src, dst);
    if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) die("remount %s read-only", dst);
  }
  if (umount2(dir, MNT_DETACH) < 0) die("umount %s", dir);
}

static void build_dev(const char *m, long shm_owner) {
  mount_at("tmpfs", m, "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k,nr_inodes=64");
  static const struct { const char *name; unsigned maj, min; } devs[] = {
    {"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
  };
  char p[4096];
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
    snprintf(p, sizeof p, "%s/dev/%s", m, devs[i].name);
    if (mknod(p, S_IFCHR | 0666, makedev(devs[i].maj, devs[i].min)) < 0) die("mknod %s", p);
    if (chmod(p, 0666) < 0) die("chmod %s", p); // mknod honours the umask
  }
  static const struct { const char *name, *target; } links[] = {
    {"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
    {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
  };
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    snprintf(p, sizeof p, "%s/dev/%s", m, links[i].name);
    if (symlink(links[i].target, p) < 0) die("symlink %s", p);
  }
  mkdir_at(m, "dev/pts", 0755);
  mount_at("devpts", m, "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
  mkdir_at(m, "dev/shm", 01777);
  char shm[96];
  snprintf(shm, sizeof shm, "mode=1777,size=64m,uid=%ld,gid=%ld", shm_owner, shm_owner);
  mount_at("tmpfs", m, "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, shm);
}

// Replaces the command line the sandbox sees for its pid 1 (it would show host paths otherwise).
static void rename_self(void) {
  char *start = main_argv[0], *end = main_argv[main_argc - 1] + strlen(main_argv[main_argc - 1]);
  memset(start, 0, (size_t)(end - start));
  strncpy(start, "cube-init", (size_t)(end - start));
  prctl(PR_SET_NAME, "cube-init", 0, 0, 0);
}

// The sandbox's pid 1: signals from inside the pid namespace are ignored by the kernel unless
// handled, and a host SIGKILL (or cgroup.kill) ends it. It only reaps orphans.
static void init_loop(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  for (;;) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    sigwaitinfo(&set, NULL);
  }
}

void sandbox_init(const char *id, const char *lower, const char *lower_base, const char *upper,
                         const char *work, const char *m, int bind_usr, int tmp_mib, int ready, int go) {
  report_fd = ready;
  if (setsid() < 0) die("setsid"); // pid-ns init must lead its own session
  if (lower_base && chdir(lower_base) < 0) die("chdir %s", lower_base);
  char opts[8192], p[4096];
  // Every layer goes by an fd (/proc/self/fd/N): overlayfs shows its options as given in the
  // sandbox's /proc/self/mountinfo, where host paths would tell the data dir, the store layout and
  // other sandboxes' ids. The fds only live until the mount is made.
  int fds[MAX_LAYERS + 2], nfd = 0;
  char *lowers = strdup(lower);
  if (!lowers) die("overlay options");
  size_t len = strlen("lowerdir=");
  memcpy(opts, "lowerdir=", len + 1);
  for (char *save = NULL, *l = strtok_r(lowers, ":", &save); l; l = strtok_r(NULL, ":", &save)) {
    if (nfd == MAX_LAYERS) { errno = E2BIG; die("overlay lower layers"); }
    fds[nfd] = id_base >= 0 ? idmapped_layer(l, m) : open(l, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fds[nfd] < 0) die("mount overlay on %s: open layer %s", m, l);
    len += (size_t)snprintf(opts + len, sizeof opts - len, "%s/proc/self/fd/%d", nfd ? ":" : "", fds[nfd]);
    nfd++;
  }
  free(lowers);
  int n;
  if (id_base >= 0) {
    // Upper and work must be on one mount for overlayfs: one idmapped copy of their parent.
    const char *us = strrchr(upper, '/'), *ws = strrchr(work, '/');
    if (!us || !ws || us - upper != ws - work || strncmp(upper, work, (size_t)(us - upper)) != 0) {
      errno = EINVAL;
      die("upper %s and work %s must share their parent directory", upper, work);
    }
    char parent[4096];
    snprintf(parent, sizeof parent, "%.*s", (int)(us - upper), upper);
    int fd = fds[nfd++] = idmapped_layer(parent, m);
    n = snprintf(opts + len, sizeof opts - len, ",upperdir=/proc/self/fd/%d%s,workdir=/proc/self/fd/%d%s", fd, us, fd, ws);
  } else {
    int upper_fd = open(upper, O_PATH | O_DIRECTORY | O_CLOEXEC), work_fd = open(work, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (upper_fd < 0 || work_fd < 0) die("mount overlay on %s: open %s or %s", m, upper, work);
    fds[nfd++] = upper_fd;
    fds[nfd++] = work_fd;
    n = snprintf(opts + len, sizeof opts - len, ",upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d", upper_fd, work_fd);
  }
  if (n < 0 || (size_t)n >= sizeof opts - len) { errno = ENAMETOOLONG; die("overlay options"); }
  // nosuid, nodev: a setuid-root binary or file capability root makes inside never raises a
  // process, and a device node (should one get there) never opens a host device.
  if (mount("overlay", m, "overlay", MS_NOSUID | MS_NODEV, opts) < 0) die("mount overlay on %s", m);
  for (int i = 0; i < nfd; i++) close(fds[i]);
  if (bind_usr) {
    mkdir_at(m, "usr", 0755);
    if (id_base >= 0) {
      int fd = idmapped_tree("/usr", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
      snprintf(p, sizeof p, "%s/usr", m);
      if (syscall(SYS_move_mount, fd, "", AT_FDCWD, p, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("mount /usr on %s", p);
      close(fd);
    } else {
      mount_at("/usr", m, "usr", NULL, MS_BIND | MS_REC, NULL);
      mount_at(NULL, m, "usr", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
    }
  }
  mount_volumes(m);
  mkdir_at(m, "proc", 0555);
  mount_at("proc", m, "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  static const char *proc_ro[] = {"sys", "sysrq-trigger", "bus", "fs", "irq"};
  // Host data readable by root inside: kernel memory and allocator layout (kcore, kpage*,
  // slabinfo, pagetypeinfo, vmallocinfo: heap-spraying aids), the host's keys, timers, boot
  // command line and kernel config.
  static const char *proc_masked[] = {
    "kcore", "keys", "timer_list", "sched_debug", "slabinfo", "kpagecount", "kpageflags",
    "kpagecgroup", "pagetypeinfo", "vmallocinfo", "config.gz", "cmdline", "latency_stats", "timer_stats",
    // The host's devices, I/O and interrupt counts (issue 29 item 8): nothing of the sandbox's own.
    "diskstats", "interrupts", "swaps",
  };
  for (size_t i = 0; i < sizeof proc_ro / sizeof proc_ro[0]; i++) {
    snprintf(p, sizeof p, "%s/proc/%s", m, proc_ro[i]);
    readonly_bind(p);
  }
  for (size_t i = 0; i < sizeof proc_masked / sizeof proc_masked[0]; i++) {
    snprintf(p, sizeof p, "%s/proc/%s", m, proc_masked[i]);
    mask(p);
  }
  mkdir_at(m, "dev", 0755);
  // /tmp and /dev/shm belong to root inside (host root's would show as nobody there).
  long owner = id_base >= 0 ? id_base : 0;
  build_dev(m, owner);
  mkdir_at(m, "tmp", 01777);
  own_proc_files(m, tmp_mib);
  snprintf(opts, sizeof opts, "mode=1777,size=%dm,uid=%ld,gid=%ld", tmp_mib, owner, owner);
  mount_at("tmpfs", m, "tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts);
  if (sethostname(id, strlen(id)) < 0) die("sethostname");
  // pivot_root(".", "."): the old root stacks on the new one and its detach leaves the new, with
  // no directory for it made and removed in the writable layer (a mkdir and an rmdir on btrfs per
  // create: pivot_root(2), "new_root and put_old may be the same directory").
  if (chdir(m) < 0) die("chdir %s", m);
  if (syscall(SYS_pivot_root, ".", ".") < 0) die("pivot_root");
  if (umount2(".", MNT_DETACH) < 0) die("umount old root");
  if (chdir("/") < 0) die("chdir /");
  set_oom_score(INIT_OOM_SCORE_ADJ); // first: the id change below makes /proc/self host root's (not dumpable)
  if (id_base >= 0) enter_own_userns(ready, go);
  drop_bounding_caps();
  int null = open("/dev/null", O_RDWR);
  if (null < 0) die("open /dev/null");
  if (dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) die("dup2");
  if (null > 2) close(null);
  // Two close_range calls, not a close() per possible fd: 1000 syscalls cost milliseconds here.
  if (ready > 3) syscall(SYS_close_range, 3, ready - 1, 0);
  syscall(SYS_close_range, ready + 1, ~0U, 0);
  rename_self();
  // Setup done: from here the init only reaps, so it runs under the commands' filter with no
  // capabilities, and non-dumpable so that root inside cannot trace it (with equal, empty
  // capability sets it otherwise could). The filter goes first: installing one needs
  // CAP_SYS_ADMIN or no_new_privs.
  // Without a listener for the notified calls (statfs: allowed): the init makes none and starts
  // nothing, every process of the sandbox comes from an exec, whose filter has one (notify.c).
  install_seccomp(0);
  limit_own_caps(0);
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) die("dumpable");
  if (write(ready, "ok", 2) != 2) _exit(EXIT_HELPER);
  close(ready);
  report_fd = -1;
  init_loop();
}
