// Probe for issue 12 item 1 (docs/security.md, Identity): can a sandbox live in a user namespace
// (ids 0-65535 -> host 1000000-1065535) on an overlay whose lower and upper layers are idmapped
// mounts, so on-disk ids stay 0/1000 while its processes are host 1000000 and 1001000? And what does
// it add to a create? Root only, scratch dirs under /tmp/harden-userns/t (see run below):
//   cc -O2 -o /tmp/userns-overlay bench/userns-overlay.c && /tmp/userns-overlay 200
// Each round: a child unshares its user namespace, the parent writes its maps and makes two
// idmapped mounts (lower, upper+work), the child becomes root in it and mounts the overlay
// (userxattr: trusted.* xattrs are refused in a user namespace). The last round also writes as
// root and as uid 1000 inside and lists the host view of the upper layer.
//   /tmp/userns-overlay --clone 300
// times instead the launcher's per-create namespace for idmapped layers (cube-launch.c
// make_idmap_ns: a child born in it holds it while its maps are written and its fd opened), born
// of a fork-like clone vs a CLONE_VM clone: wall time and CPU (this process and its children).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>
#define D "/tmp/cube-userns-probe"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void die(const char *m) { perror(m); exit(1); }
static void wr(const char *p, const char *s) { int fd = open(p, O_WRONLY); if (fd < 0 || write(fd, s, strlen(s)) < 0) die(p); close(fd); }
static void idmap(const char *src, const char *dst, int userns) {
  int fd = syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0) die("open_tree");
  struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (unsigned long long)userns };
  if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &a, sizeof a) < 0) die("mount_setattr idmap");
  if (syscall(SYS_move_mount, fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("move_mount");
  close(fd);
}
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double p50(double *v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }
static double cpu_ms(void) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  struct timeval t[] = {self.ru_utime, self.ru_stime, kids.ru_utime, kids.ru_stime};
  double ms = 0;
  for (int i = 0; i < 4; i++) ms += t[i].tv_sec * 1e3 + t[i].tv_usec / 1e3;
  return ms;
}
static int hold[2];
static int hold_ns(void *arg) { char b; (void)arg; syscall(SYS_close, hold[1]); return syscall(SYS_read, hold[0], &b, 1) < 0; }
static void layers_ns(int vm) {
  static char stack[16384] __attribute__((aligned(16)));
  if (pipe2(hold, O_CLOEXEC) < 0) die("pipe");
  pid_t c = vm ? clone(hold_ns, stack + sizeof stack, CLONE_VM | CLONE_NEWUSER | SIGCHLD, NULL) : (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (c < 0) die("clone");
  if (c == 0) _exit(hold_ns(NULL));
  close(hold[0]);
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/uid_map", c); wr(p, "0 1000000 65536\n65536 0 1\n");
  snprintf(p, sizeof p, "/proc/%d/gid_map", c); wr(p, "0 1000000 65536\n65536 0 1\n");
  snprintf(p, sizeof p, "/proc/%d/ns/user", c);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open userns");
  close(hold[1]);
  waitpid(c, NULL, 0);
  close(fd);
}
static void compare_clones(int rounds) {
  for (int vm = 0; vm < 2; vm++) {
    double t0 = now(), c0 = cpu_ms();
    for (int r = 0; r < rounds; r++) layers_ns(vm);
    fprintf(stderr, "%s: %.3f ms wall, %.3f ms CPU per namespace (mean of %d)\n", vm ? "CLONE_VM child" : "forked child  ", (now() - t0) / rounds, (cpu_ms() - c0) / rounds, rounds);
  }
}
int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--clone") == 0) {
    compare_clones(atoi(argv[2]) > 0 ? atoi(argv[2]) : 1);
    return 0;
  }
  int rounds = argc > 1 ? atoi(argv[1]) : 2;
  if (rounds < 2) rounds = 2;
  static const char *dirs[] = {D, D "/lower", D "/lower/etc", D "/ub", D "/ub/upper", D "/ub/work", D "/il", D "/iu", D "/merged"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) if (mkdir(dirs[i], 0755) < 0 && errno != EEXIST) die(dirs[i]);
  double *totals = calloc(rounds, sizeof(double)), *maps = calloc(rounds, sizeof(double)), *idm = calloc(rounds, sizeof(double));
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    int go[2], done[2];
    if (pipe(go) < 0 || pipe(done) < 0) die("pipe");
    pid_t c = fork();
    if (c == 0) {
      if (unshare(CLONE_NEWUSER) < 0) die("unshare user");
      if (write(done[1], "u", 1) != 1) die("w");
      char b;
      if (read(go[0], &b, 1) != 1) die("r");
      if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0) die("become root in userns");
      if (unshare(CLONE_NEWNS) < 0) die("unshare ns");
      if (mount("overlay", D "/merged", "overlay", MS_NOSUID | MS_NODEV, "lowerdir=" D "/il,upperdir=" D "/iu/upper,workdir=" D "/iu/work,userxattr") < 0) die("mount overlay in userns");
      if (r == rounds - 1) {
        if (setuid(0) < 0) die("setuid");
        execl("/bin/sh", "sh", "-c", "id; ls -ln " D "/merged; touch " D "/merged/byroot; mkdir -p " D "/merged/home/user; chown 1000:1000 " D "/merged/home/user; setpriv --reuid=1000 --regid=1000 --clear-groups touch " D "/merged/home/user/byuser && echo wrote; ls -ln " D "/merged " D "/merged/home/user; cat /proc/self/uid_map", (char *)0);
        die("exec");
      }
      _exit(0);
    }
    char b;
    if (read(done[0], &b, 1) != 1) die("r");
    char p[64], m[64];
    snprintf(m, sizeof m, "0 1000000 65536");
    snprintf(p, sizeof p, "/proc/%d/uid_map", c); wr(p, m);
    snprintf(p, sizeof p, "/proc/%d/gid_map", c); wr(p, m);
    snprintf(p, sizeof p, "/proc/%d/ns/user", c);
    int uns = open(p, O_RDONLY | O_CLOEXEC);
    if (uns < 0) die("open userns");
    double t1 = now();
    idmap(D "/lower", D "/il", uns);
    idmap(D "/ub", D "/iu", uns);
    double t2 = now();
    if (write(go[1], "g", 1) != 1) die("w");
    int st;
    waitpid(c, &st, 0);
    double t3 = now();
    if (r < rounds - 1) totals[r] = t3 - t0, maps[r] = t1 - t0, idm[r] = t2 - t1;
    umount2(D "/il", MNT_DETACH);
    umount2(D "/iu", MNT_DETACH);
    close(uns);
  }
  fprintf(stderr, "p50 over %d rounds: user namespace + maps %.3f ms, two idmapped mounts %.3f ms, whole round (with the overlay mount and the child's exit) %.3f ms\n", rounds - 1, p50(maps, rounds - 1), p50(idm, rounds - 1), p50(totals, rounds - 1));
  execl("/bin/sh", "sh", "-c", "echo host view of the upper layer:; ls -lnR " D "/ub/upper; rm -rf " D, (char *)0);
  return 0;
}
