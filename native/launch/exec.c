#include "launch.h"

// ---- exec: a command in a sandbox's namespaces, root, filter and ids (see main.c) -----------
static volatile pid_t command_pid = 0;
// serve's exec jobs with a terminal: the command leads its own session with stdin (the pty slave
// the helper opened inside the sandbox) as its controlling terminal, instead of only a new group.
int exec_on_tty = 0;

static void lead_terminal_session(void) {
  if (setsid() < 0) die("setsid");
  if (ioctl(0, TIOCSCTTY, 0) < 0) die("set controlling terminal");
}

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

int cmd_exec(int argc, char **argv) {
  const char *cgroups[MAX_CGROUPS], *cwd = NULL;
  int ncg = 0, pid = 0, opt, watch = 0, recursive = 0, metadata = 0, access_check = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  rlim_t nofile = 0;
  while ((opt = getopt(argc, argv, "+p:u:g:d:c:RN:WrXAI:Q:")) != -1) {
    switch (opt) {
      case 'I': break; // read by serve: the pty's owner in host ids (the namespace itself is the init's)
      case 'Q': break; // read by serve: the sandbox's writable layer, whose limit its statfs reports
      case 'R': keep_net_raw = 1; break;
      case 'N': nofile = (rlim_t)strtoull(optarg, NULL, 10); break;
      case 'W': watch = 1; break;
      case 'r': recursive = 1; break;
      case 'X': metadata = 1; break;
      case 'A': access_check = 1; break;
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
  // Non-dumpable before entering: until the command's execve (which resets it), processes of the
  // sandbox may not open this helper's /proc/PID/exe (the host binary) or its memory (as runc does).
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) die("dumpable");
  // Open everything first, then check the pid is still a sandbox init: the fds pin that process's
  // namespaces even if the pid were reused afterwards.
  static const char *names[] = {"ipc", "uts", "net", "cgroup", "pid", "mnt"};
  int fds[6];
  for (int i = 0; i < 6; i++) fds[i] = open_ns(pid, names[i]);
  // The init's user namespace when it has its own: joined whatever the caller passed, so a
  // command can never run inside with host ids.
  int userns = open_ns(pid, "user");
  struct stat theirs, ours;
  if (fstat(userns, &theirs) < 0 || stat("/proc/self/ns/user", &ours) < 0) die("user namespaces");
  if (theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev) {
    close(userns);
    userns = -1;
  }
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
    if (exec_on_tty) lead_terminal_session();
    else setpgid(0, 0);
    raise_oom_score();
    // -N: the sandbox's open-file limit (soft = hard, at most the helper's own hard limit), which
    // no process inside can raise again (src/runtime/ns/host-limits.ts sizes it against fs.file-max).
    if (nofile) {
      struct rlimit rl = { nofile, nofile };
      if (setrlimit(RLIMIT_NOFILE, &rl) < 0) die("RLIMIT_NOFILE %llu", (unsigned long long)nofile);
    }
    // The user namespace last: once in it, this process holds no capability over the others.
    // Its ids are the sandbox's from then on, and it is root there (full capabilities, cut below).
    if (userns >= 0) {
      if (setns(userns, CLONE_NEWUSER) < 0) die("join the sandbox's user namespace");
      if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) die("become root of the user namespace");
    }
    drop_bounding_caps();
    send_listener(install_seccomp(notify_fd >= 0));
    if (uid == 0) {
      gid_t groups[1] = {0};
      if (setgroups(1, groups) < 0) die("setgroups");
      limit_own_caps(1);
    } else {
      gid_t groups[1] = {gid};
      if (setgroups(1, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0) die("switch to uid %d", (int)uid);
      if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
    }
    if (cwd && chdir(cwd) < 0) die("chdir %s", cwd);
    if (watch) _exit(watch_dir(cmd[0], recursive));
    if (metadata) _exit(file_metadata(cmd));
    if (access_check) _exit(check_access(cmd));
    execvpe(cmd[0], cmd, environ);
    int code = errno == ENOENT ? 127 : 126;
    fprintf(stderr, "cube-launch: %s: %s\n", cmd[0], strerror(errno));
    _exit(code);
  }
  command_pid = child;
  if (!exec_on_tty) setpgid(child, child); // also here, so forwarding never races the child's own setpgid (setsid would fail after it)
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
