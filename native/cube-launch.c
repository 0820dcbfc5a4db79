// cube-launch: the one native helper of the `ns` runtime driver.
//
//   cube-launch create -i ID -l LOWER -u UPPER -w WORK -m MERGED [-U] [-t TMPFS_MIB] [-n NETNS] [-c CGROUP_PROCS]...
//     Builds a sandbox and prints the host pid of its init ("cube-init"), then exits: no supervisor
//     process stays behind. The init is pid 1 of a new pid namespace, never execs and only reaps.
//   cube-launch exec -p INIT_PID [-u UID] [-g GID] [-d CWD] [-c CGROUP_PROCS]... -- ARGV...
//     Runs ARGV inside the sandbox of INIT_PID with the environment this helper was started with,
//     waits for it and ends the way it ended (same exit code, or the same signal).
//     SIGTERM/SIGINT/SIGHUP/SIGQUIT go to the command's process group; SIGUSR1 means "SIGKILL the
//     whole process group" (a SIGKILL cannot be forwarded); if the helper dies the command is killed.
//     Exit 125: the helper itself failed (message on stderr); 126/127: the command could not run.
//
// Linked statically: the helper runs as host root before it enters the sandbox, with an environment
// the sandbox user chose, so the dynamic loader must never read LD_PRELOAD and friends.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CGROUPS 8
#define EXIT_HELPER 125

static int report_fd = -1; // create: the ready pipe, where the sandbox init reports failures
static int main_argc;      // the whole command line, overwritten by the sandbox init
static char **main_argv;

static void die(const char *fmt, ...) {
  char msg[1024];
  int err = errno;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
  snprintf(msg + n, sizeof msg - n, ": %s\n", strerror(err));
  if (report_fd >= 0) {
    if (write(report_fd, msg, strlen(msg)) < 0) {}
  } else {
    fprintf(stderr, "cube-launch: %s", msg);
  }
  _exit(EXIT_HELPER);
}

static void join_cgroups(const char **procs, int n) {
  for (int i = 0; i < n; i++) {
    int fd = open(procs[i], O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) die("join cgroup %s", procs[i]);
    close(fd);
  }
}

static void set_loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) die("get lo flags");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) die("set lo up");
  close(s);
}

// Capabilities a sandbox root keeps (Docker's default set without CAP_MKNOD). Everything else
// (SYS_ADMIN, NET_ADMIN, SYS_MODULE, DAC_READ_SEARCH, SYS_PTRACE, ...) is dropped from the bounding
// set, so no process started in the sandbox can ever gain it.
static const int kept_caps[] = {
  CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_NET_RAW, CAP_SETGID, CAP_SETUID,
  CAP_SETFCAP, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_KILL, CAP_AUDIT_WRITE,
};

static int cap_kept(int cap) {
  for (size_t i = 0; i < sizeof kept_caps / sizeof kept_caps[0]; i++)
    if (kept_caps[i] == cap) return 1;
  return 0;
}

static void drop_bounding_caps(void) {
  for (int cap = 0; cap < 64; cap++) {
    if (cap_kept(cap)) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL) break; // past the kernel's last capability
      die("drop capability %d", cap);
    }
  }
}

// Limits a root command to the kept capabilities right away (the bounding set only acts at
// execve) and empties the inheritable set, so nothing reaches ambient or file-cap programs.
static void limit_own_caps(void) {
  struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  for (size_t i = 0; i < sizeof kept_caps / sizeof kept_caps[0]; i++) {
    int c = kept_caps[i];
    data[c / 32].effective |= 1u << (c % 32);
    data[c / 32].permitted |= 1u << (c % 32);
  }
  if (syscall(SYS_capset, &hdr, data) < 0) die("capset");
}

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

static void build_dev(const char *m) {
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
  mount_at("tmpfs", m, "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m");
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

static void sandbox_init(const char *id, const char *lower, const char *upper,
                         const char *work, const char *m, int bind_usr, int tmp_mib, int ready) {
  report_fd = ready;
  if (setsid() < 0) die("setsid"); // pid-ns init must lead its own session
  char opts[8192], p[4096];
  int n = snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
  if (n < 0 || (size_t)n >= sizeof opts) { errno = ENAMETOOLONG; die("overlay options"); }
  if (mount("overlay", m, "overlay", 0, opts) < 0) die("mount overlay on %s", m);
  if (bind_usr) {
    mkdir_at(m, "usr", 0755);
    mount_at("/usr", m, "usr", NULL, MS_BIND | MS_REC, NULL);
    mount_at(NULL, m, "usr", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
  }
  mkdir_at(m, "proc", 0555);
  mount_at("proc", m, "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  static const char *proc_ro[] = {"sys", "sysrq-trigger", "bus", "fs", "irq"};
  static const char *proc_masked[] = {"kcore", "keys", "timer_list", "sched_debug"};
  for (size_t i = 0; i < sizeof proc_ro / sizeof proc_ro[0]; i++) {
    snprintf(p, sizeof p, "%s/proc/%s", m, proc_ro[i]);
    readonly_bind(p);
  }
  for (size_t i = 0; i < sizeof proc_masked / sizeof proc_masked[0]; i++) {
    snprintf(p, sizeof p, "%s/proc/%s", m, proc_masked[i]);
    mask(p);
  }
  mkdir_at(m, "dev", 0755);
  build_dev(m);
  mkdir_at(m, "tmp", 01777);
  snprintf(opts, sizeof opts, "mode=1777,size=%dm", tmp_mib);
  mount_at("tmpfs", m, "tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts);
  if (sethostname(id, strlen(id)) < 0) die("sethostname");
  if (chdir(m) < 0) die("chdir %s", m);
  mkdir_at(".", ".oldroot", 0700);
  if (syscall(SYS_pivot_root, ".", ".oldroot") < 0) die("pivot_root");
  if (chdir("/") < 0) die("chdir /");
  if (umount2("/.oldroot", MNT_DETACH) < 0) die("umount old root");
  if (rmdir("/.oldroot") < 0) die("rmdir old root");
  drop_bounding_caps();
  int null = open("/dev/null", O_RDWR);
  if (null < 0) die("open /dev/null");
  if (dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) die("dup2");
  if (null > 2) close(null);
  for (int fd = 3; fd < 1024; fd++) if (fd != ready) close(fd);
  rename_self();
  if (write(ready, "ok", 2) != 2) _exit(EXIT_HELPER);
  close(ready);
  report_fd = -1;
  init_loop();
}

static int cmd_create(int argc, char **argv) {
  const char *id = NULL, *lower = NULL, *upper = NULL, *work = NULL, *merged = NULL, *netns = NULL;
  const char *cgroups[MAX_CGROUPS];
  int ncg = 0, bind_usr = 0, tmp_mib = 64, opt;
  while ((opt = getopt(argc, argv, "i:l:u:w:m:n:c:t:U")) != -1) {
    switch (opt) {
      case 'i': id = optarg; break;
      case 'l': lower = optarg; break;
      case 'u': upper = optarg; break;
      case 'w': work = optarg; break;
      case 'm': merged = optarg; break;
      case 'n': netns = optarg; break;
      case 't': tmp_mib = atoi(optarg); break;
      case 'U': bind_usr = 1; break;
      case 'c':
        if (ncg == MAX_CGROUPS) { fprintf(stderr, "cube-launch: too many cgroups\n"); return 2; }
        cgroups[ncg++] = optarg;
        break;
      default: return 2;
    }
  }
  if (!id || !lower || !upper || !work || !merged || optind != argc || tmp_mib <= 0) {
    fprintf(stderr, "cube-launch: create needs -i -l -u -w -m and no command\n");
    return 2;
  }
  // If the daemon dies before the sandbox exists, nothing is left half-made (the init, once
  // forked, does not inherit this: it lives on for cleanup() or re-adoption to find).
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  join_cgroups(cgroups, ncg);
  int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;
  if (netns) {
    int fd = open(netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open %s", netns);
    if (setns(fd, CLONE_NEWNET) < 0) die("join netns %s", netns);
    close(fd);
  } else {
    flags |= CLONE_NEWNET;
  }
  if (unshare(flags) < 0) die("unshare");
  if (!netns) set_loopback_up();
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make mounts private");
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(pipefd[0]);
    sandbox_init(id, lower, upper, work, merged, bind_usr, tmp_mib, pipefd[1]);
  }
  close(pipefd[1]);
  char buf[1024];
  size_t got = 0;
  for (;;) {
    ssize_t r = read(pipefd[0], buf + got, sizeof buf - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
    if (got == sizeof buf - 1) break;
  }
  buf[got] = 0;
  if (got == 2 && memcmp(buf, "ok", 2) == 0) {
    printf("%d\n", pid);
    return fflush(stdout) == 0 ? 0 : EXIT_HELPER;
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  fprintf(stderr, "cube-launch: sandbox init failed: %s", got ? buf : "no report\n");
  return EXIT_HELPER;
}

static volatile pid_t command_pid = 0;

static void forward(int sig) {
  if (command_pid > 0) kill(-command_pid, sig == SIGUSR1 ? SIGKILL : sig);
}

static int open_ns(int pid, const char *name) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/ns/%s", pid, name);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open %s", p);
  return fd;
}

static void expect_init(int pid) {
  char p[64], comm[32] = {0};
  snprintf(p, sizeof p, "/proc/%d/comm", pid);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("sandbox init %d", pid);
  ssize_t n = read(fd, comm, sizeof comm - 1);
  close(fd);
  if (n < 0 || strcmp(comm, "cube-init\n") != 0) { errno = ESRCH; die("pid %d is not a sandbox init", pid); }
}

static int cmd_exec(int argc, char **argv) {
  const char *cgroups[MAX_CGROUPS], *cwd = NULL;
  int ncg = 0, pid = 0, opt;
  uid_t uid = 0;
  gid_t gid = 0;
  while ((opt = getopt(argc, argv, "+p:u:g:d:c:")) != -1) {
    switch (opt) {
      case 'p': pid = atoi(optarg); break;
      case 'u': uid = (uid_t)atoi(optarg); break;
      case 'g': gid = (gid_t)atoi(optarg); break;
      case 'd': cwd = optarg; break;
      case 'c':
        if (ncg == MAX_CGROUPS) { fprintf(stderr, "cube-launch: too many cgroups\n"); return 2; }
        cgroups[ncg++] = optarg;
        break;
      default: return 2;
    }
  }
  if (pid <= 0 || optind >= argc) {
    fprintf(stderr, "cube-launch: exec needs -p PID -- ARGV\n");
    return 2;
  }
  char **cmd = &argv[optind];
  // Open everything first, then check the pid is still a sandbox init: the fds pin that process's
  // namespaces even if the pid were reused afterwards.
  static const char *names[] = {"ipc", "uts", "net", "cgroup", "pid", "mnt"};
  int fds[6];
  for (int i = 0; i < 6; i++) fds[i] = open_ns(pid, names[i]);
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/root", pid);
  int root = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) die("open %s", p);
  expect_init(pid);
  join_cgroups(cgroups, ncg);
  for (int i = 0; i < 6; i++) {
    if (setns(fds[i], 0) < 0) die("join %s namespace", names[i]);
    close(fds[i]);
  }
  if (fchdir(root) < 0 || chroot(".") < 0 || chdir("/") < 0) die("enter sandbox root");
  close(root);

  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) die("pdeathsig");
    // The helper sits outside the sandbox's pid namespace, so it shows as ppid 0; anything else
    // means it already died and the sandbox init adopted us.
    if (getppid() != 0) _exit(EXIT_HELPER);
    setpgid(0, 0);
    drop_bounding_caps();
    if (uid == 0) {
      gid_t groups[1] = {0};
      if (setgroups(1, groups) < 0) die("setgroups");
      limit_own_caps();
    } else {
      gid_t groups[1] = {gid};
      if (setgroups(1, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0) die("switch to uid %d", (int)uid);
      if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
    }
    if (cwd && chdir(cwd) < 0) die("chdir %s", cwd);
    execvpe(cmd[0], cmd, environ);
    int code = errno == ENOENT ? 127 : 126;
    fprintf(stderr, "cube-launch: %s: %s\n", cmd[0], strerror(errno));
    _exit(code);
  }
  command_pid = child;
  setpgid(child, child); // also here, so forwarding never races the child's own setpgid
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward;
  sa.sa_flags = SA_RESTART;
  static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1};
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) sigaction(forwarded[i], &sa, NULL);
  sigprocmask(SIG_SETMASK, &old, NULL);
  int st;
  while (waitpid(child, &st, 0) < 0) {
    if (errno != EINTR) die("wait");
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  // Die of the same signal so the caller sees it as such; never dump a core of the helper.
  int sig = WTERMSIG(st);
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigprocmask(SIG_UNBLOCK, &one, NULL);
  raise(sig);
  return 128 + sig;
}

int main(int argc, char **argv) {
  main_argc = argc;
  main_argv = argv;
  if (argc >= 2 && strcmp(argv[1], "create") == 0) return cmd_create(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "exec") == 0) return cmd_exec(argc - 1, argv + 1);
  fprintf(stderr, "usage: cube-launch create|exec ...\n");
  return 2;
}
