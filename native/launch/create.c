#include "launch.h"

// ---- create: a sandbox's namespaces, cgroups and init (see main.c for the options) ----------
int cmd_create(int argc, char **argv) {
  const char *id = NULL, *lower = NULL, *lower_base = NULL, *upper = NULL, *work = NULL, *merged = NULL, *netns = NULL;
  const char *cgroups[MAX_CGROUPS];
  int ncg = 0, bind_usr = 0, tmp_mib = 64, opt;
  uint64_t disk_limit = 0;
  while ((opt = getopt(argc, argv, "i:l:L:u:w:m:n:c:t:q:UI:v:")) != -1) {
    switch (opt) {
      case 'v':
        if (add_volume(optarg) < 0) { fprintf(stderr, "cube-launch: -v HOSTDIR:/PATH, at most %d\n", MAX_VOLUMES); return 2; }
        break;
      case 'q': disk_limit = strtoull(optarg, NULL, 10); break;
      case 'I': id_base = strtol(optarg, NULL, 10); break;
      case 'i': id = optarg; break;
      case 'l': lower = optarg; break;
      case 'L': lower_base = optarg; break;
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
  if (!id || !lower || !upper || !work || !merged || optind != argc || tmp_mib <= 0 || (id_base != -1 && (id_base <= 0 || id_base > (long)UINT32_MAX - 2 * ID_RANGE))) {
    fprintf(stderr, "cube-launch: create needs -i -l -u -w -m, a host id base above 0 and no command\n");
    return 2;
  }
  if (disk_limit > 0) {
    int fd = open(upper, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || limit_fd(fd, disk_limit) < 0) die("limit the writable layer %s", upper);
    close(fd);
  }
  // If the daemon dies before the sandbox exists, nothing is left half-made (the init, once
  // forked, does not inherit this: it lives on for cleanup() or re-adoption to find).
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  join_cgroups(cgroups, ncg);
  int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;
  // Before the new pid namespace: its first child would be its init, and its exit end it.
  int proc = id_base >= 0 ? open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
  if (id_base >= 0 && proc < 0) die("open /proc");
  if (id_base >= 0) idmap_ns = make_idmap_ns(proc, id_base);
  if (netns) {
    // Under `serve`, absolute paths resolve in the host's mount tree, where the pool's nsfs
    // bindings live (the helper's own namespace has none of them).
    int fd = host_root >= 0 && netns[0] == '/' ? openat(host_root, netns + 1, O_RDONLY | O_CLOEXEC) : open(netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open %s", netns);
    if (setns(fd, CLONE_NEWNET) < 0) die("join netns %s", netns);
    close(fd);
  } else {
    flags |= CLONE_NEWNET;
  }
  if (unshare(flags) < 0) die("unshare");
  if (!netns) set_loopback_up();
  // Root in the sandbox's user namespace holds no capability in this network namespace (owned by
  // the host's): ports below 1024 open to every id here instead, as they do to root in any
  // container. Written on every create, as pooled namespaces pass from sandbox to sandbox.
  write_file_at(AT_FDCWD, "/proc/sys/net/ipv4/ip_unprivileged_port_start", id_base >= 0 ? "0" : "1024");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make mounts private");
  int pipefd[2], go[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(pipefd[0]);
    close(go[1]);
    sandbox_init(id, lower, lower_base, upper, work, merged, bind_usr, tmp_mib, pipefd[1], go[0]);
  }
  close(pipefd[1]);
  close(go[0]);
  char buf[1024];
  size_t got = 0;
  if (id_base >= 0) {
    // The init is in its user namespace: its maps, then on.
    ssize_t r;
    while ((r = read(pipefd[0], buf, 1)) < 0 && errno == EINTR) {}
    if (r == 1 && buf[0] == '\1') { // never the first byte of a failure report
      char map[64];
      snprintf(map, sizeof map, "0 %ld %d\n", id_base, ID_RANGE);
      write_id_maps(proc, pid, map);
      if (write(go[1], "g", 1) != 1) die("user namespace maps");
    } else if (r == 1) {
      got = 1; // a failure report: read on
    }
  }
  close(go[1]);
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
