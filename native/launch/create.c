#include "launch.h"

// ---- create: a sandbox's namespaces, cgroups and init, started by serve (op 0) -------------
// serve forks the init itself: it is the first process of a new pid namespace (pid 1 there), so
// serve enters that namespace for its children (unshare(CLONE_NEWPID)), forks, and steps back
// (setns) before anything else forks. The init then makes the rest of its namespaces and joins
// its cgroups on its own, as host root, before its mounts (init.c). A create used to cost a forked
// child of serve (the "create job") that made the namespaces and forked the init: a fork and exit
// of the helper is about 0.7 ms of CPU on these PVM guests, with the copy-on-write faults it
// leaves in serve's loop (docs/benchmarks.md, session 17).
// What the fork itself allocates (the init's page tables, kernel stack) is charged to serve's
// memory cgroup, not the sandbox's: the init joins its cgroups after the fork (cgroup v1 has no
// CLONE_INTO_CGROUP); everything it touches afterwards is the sandbox's.

int parse_create(int argc, char **argv, struct create_req *c, char *err, size_t len) {
  memset(c, 0, sizeof *c);
  c->tmp_mib = 64;
  c->id_base = -1;
  clear_volumes();
  optind = 0; // serve parses one request after another: a full re-initialisation of getopt
  opterr = 0;
  int opt;
  while ((opt = getopt(argc, argv, "i:l:L:u:w:m:n:c:t:q:UI:v:")) != -1) {
    switch (opt) {
      case 'v':
        if (add_volume(optarg) < 0) { snprintf(err, len, "cube-launch: -v HOSTDIR:/PATH, at most %d\n", MAX_VOLUMES); return -1; }
        break;
      case 'q': c->disk_limit = strtoull(optarg, NULL, 10); break;
      case 'I': c->id_base = strtol(optarg, NULL, 10); break;
      case 'i': c->id = optarg; break;
      case 'l': c->lower = optarg; break;
      case 'L': c->lower_base = optarg; break;
      case 'u': c->upper = optarg; break;
      case 'w': c->work = optarg; break;
      case 'm': c->merged = optarg; break;
      case 'n': c->netns = optarg; break;
      case 't': c->tmp_mib = atoi(optarg); break;
      case 'U': c->bind_usr = 1; break;
      case 'c':
        if (c->ncg == MAX_CGROUPS) { snprintf(err, len, "cube-launch: too many cgroups\n"); return -1; }
        c->cgroups[c->ncg++] = optarg;
        break;
      default: snprintf(err, len, "cube-launch: create: unknown option or missing value: -%c\n", optopt); return -1;
    }
  }
  if (!c->id || !c->lower || !c->upper || !c->work || !c->merged || optind != argc || c->tmp_mib <= 0 ||
      (c->id_base != -1 && (c->id_base <= 0 || c->id_base > (long)UINT32_MAX - 2 * ID_RANGE))) {
    snprintf(err, len, "cube-launch: create needs -i -l -u -w -m, a host id base above 0 and no command\n");
    return -1;
  }
  return 0;
}

// Everything but 0-2 and the fds in `keep` closed: the init must not hold serve's pipes (another
// job's stdin would never see EOF while it lives), and it holds nothing of them once set up.
static void close_all_but(int *keep, int n) {
  for (int i = 1; i < n; i++) // insertion sort: n is 4 at most
    for (int k = i; k > 0 && keep[k - 1] > keep[k]; k--) { int t = keep[k]; keep[k] = keep[k - 1]; keep[k - 1] = t; }
  int from = 3;
  for (int i = 0; i < n; i++) {
    if (keep[i] < from) continue;
    if (keep[i] > from) syscall(SYS_close_range, from, keep[i] - 1, 0);
    from = keep[i] + 1;
  }
  syscall(SYS_close_range, from, ~0U, 0);
}

// The forked init, pid 1 of its pid namespace, before its mounts: its other namespaces and
// cgroups. Failures go to `ready` (die() with report_fd), where serve reads them.
static void __attribute__((noreturn)) init_child(const struct create_req *c, const sigset_t *mask, int ready, int go, int idmap) {
  report_fd = ready;
  sigprocmask(SIG_SETMASK, mask, NULL);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) die("stdio to /dev/null");
  int keep[] = {HOST_ROOT_FD, ready, go, idmap};
  close_all_but(keep, idmap >= 0 ? 4 : go >= 0 ? 3 : 2);
  id_base = c->id_base;
  idmap_ns = idmap;
  if (c->disk_limit > 0) {
    int fd = open(c->upper, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || limit_fd(fd, c->disk_limit) < 0) die("limit the writable layer %s", c->upper);
    close(fd);
  }
  join_cgroups(c->cgroups, c->ncg);
  int flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP; // the cgroup namespace: rooted at the cgroups just joined
  if (c->netns) {
    // Absolute paths resolve in the host's mount tree, where the pool's nsfs bindings live
    // (serve's own namespace has none of them).
    int fd = c->netns[0] == '/' ? openat(HOST_ROOT_FD, c->netns + 1, O_RDONLY | O_CLOEXEC) : open(c->netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open %s", c->netns);
    if (setns(fd, CLONE_NEWNET) < 0) die("join netns %s", c->netns);
    close(fd);
  } else {
    flags |= CLONE_NEWNET;
  }
  if (unshare(flags) < 0) die("unshare");
  if (!c->netns) set_loopback_up();
  // Root in the sandbox's user namespace holds no capability in this network namespace (owned by
  // the host's): ports below 1024 open to every id here instead, as they do to root in any
  // container. Written on every create, as pooled namespaces pass from sandbox to sandbox.
  if (write_file_at(AT_FDCWD, "/proc/sys/net/ipv4/ip_unprivileged_port_start", id_base >= 0 ? "0" : "1024") < 0) die("write ip_unprivileged_port_start");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make mounts private");
  sandbox_init(c->id, c->lower, c->lower_base, c->upper, c->work, c->merged, c->bind_usr, c->tmp_mib, ready, go);
  _exit(EXIT_HELPER); // sandbox_init never returns
}

// serve's side: the init forked, its report pipe's read end in *report and, with -I, the pipe
// that lets it on once its id maps are written in *go (else -1). -1 with errno and what failed in
// `failed`; nothing is left behind then.
pid_t start_init(const struct create_req *c, int proc, int own_pidns, const sigset_t *mask, int *report, int *go, char *failed, size_t len) {
  int idmap = -1, r[2] = {-1, -1}, g[2] = {-1, -1}, e;
  pid_t pid;
  // Before the new pid namespace: the holder's clone would be its first process, and its exit end it.
  if (c->id_base >= 0 && (idmap = make_idmap_ns(proc, c->id_base, failed, len)) < 0) return -1;
  snprintf(failed, len, "pipe");
  if (pipe2(r, O_CLOEXEC) < 0 || (c->id_base >= 0 && pipe2(g, O_CLOEXEC) < 0)) goto fail;
  snprintf(failed, len, "new pid namespace");
  if (unshare(CLONE_NEWPID) < 0) goto fail;
  pid = fork();
  e = errno;
  // Back in our own pid namespace before anything else forks: exec jobs must not start in this
  // sandbox's. Failing that, serve cannot go on safely.
  if (pid != 0 && setns(own_pidns, CLONE_NEWPID) < 0) die("back to the helper's pid namespace");
  if (pid == 0) {
    close(r[0]);
    if (g[1] >= 0) close(g[1]);
    init_child(c, mask, r[1], g[0], idmap);
  }
  errno = e;
  snprintf(failed, len, "fork the sandbox init");
  if (pid < 0) goto fail;
  close(r[1]);
  if (g[0] >= 0) close(g[0]);
  if (idmap >= 0) close(idmap);
  *report = r[0];
  *go = g[1];
  return pid;
fail:
  e = errno;
  int fds[] = {idmap, r[0], r[1], g[0], g[1]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) if (fds[i] >= 0) close(fds[i]);
  errno = e;
  return -1;
}
