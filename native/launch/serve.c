#include "launch.h"

// ---- serve -------------------------------------------------------------------------------

struct job {
  pid_t pid;
  uint32_t id;
  int out, err; // -1 once at EOF
  char *obuf, *ebuf;
  size_t olen, ocap, elen, ecap;
  int status, reaped;
  // Streamed exec jobs (op 3) only: output leaves as it comes; `in` is the command's stdin (a pipe,
  // or the pty master) fed from `ibuf`, closed once drained when `in_eof` is set; `pty`: `out` is
  // the pty master (and takes the resizes); exit_sent: the EXIT frame went out. paced (-w): the
  // bytes of stdout (ocredit) and stderr (ecredit) it may still send, granted by CREDIT ops.
  int stream, pty, in, in_eof, exit_sent, paced;
  long ocredit, ecredit;
  char *ibuf;
  size_t ilen, icap;
  // Exec jobs: the socket the listener of the command's filter comes back on (-1 once taken, and
  // for other jobs), and the sandbox's writable layer (-Q: its quota group is what statfs reports).
  int notify;
  char *upper;
  // Create jobs (op 0): `pid` is the sandbox init, `out` its report pipe (create.c). go: the pipe
  // that lets it on once its id maps are written (-I; -1 once done, and without -I); id_base: -I.
  int create, go;
  long id_base;
};

#define MAX_JOBS 1024
enum { OP_CREATE, OP_RUN, OP_HOLDERS, OP_EXEC, OP_INPUT, OP_CLOSE_STDIN, OP_SIGNAL, OP_RESIZE, OP_DETACH, OP_STORE, OP_CREDIT };
#define ANSWER_DATA -2
#define ANSWER_CLOSED -3
static struct job jobs[MAX_JOBS];
static int njobs = 0;

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n) {
  if (*len + n > *cap) {
    size_t c = *cap ? *cap : 4096;
    while (c < *len + n) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) die("out of memory");
    *buf = b;
    *cap = c;
  }
  memcpy(*buf + *len, data, n);
  *len += n;
}

static void answer(uint32_t id, int32_t status, const char *out, size_t olen, const char *err, size_t elen) {
  uint32_t hdr[4] = {(uint32_t)(12 + olen + elen), id, (uint32_t)status, (uint32_t)olen};
  write_all(1, hdr, sizeof hdr);
  if (olen) write_all(1, out, olen);
  if (elen) write_all(1, err, elen);
}

// The slim namespace: every nsfs binding (one per pooled netns) detached.
static void leave_host_mounts(void) {
  if (unshare(CLONE_NEWNS) < 0) die("unshare mount namespace");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make mounts private");
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) die("open mountinfo");
  char line[4096], mp[4096];
  while (fgets(line, sizeof line, f)) {
    char *sep = strstr(line, " - ");
    if (!sep || strncmp(sep + 3, "nsfs ", 5) != 0) continue;
    if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1) umount2(mp, MNT_DETACH);
  }
  fclose(f);
}

// The slim namespace is a copy: a mount the host makes later (a template on a new filesystem)
// would stay invisible to new sandboxes. The host's mount table (HOST_MOUNTS_FD, opened in the
// host namespace) polls POLLPRI on every change; netns churn of the pool changes it all the time,
// so the copy is only remade when the mounts other than nsfs differ (FNV-1a over those lines).
// The table is read before a create only after a change: 0.5 ms with 1000 mounts.
static uint64_t host_mounts_hash = 0;
static int host_mounts_dirty = 0;

static uint64_t hash_host_mounts(void) {
  FILE *f = fdopen(dup(HOST_MOUNTS_FD), "re");
  if (!f) die("read host mounts");
  rewind(f);
  uint64_t h = 1469598103934665603ULL;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    // /proc/mounts: "device mountpoint type options 0 0"
    char type[64];
    if (sscanf(line, "%*s %*s %63s", type) == 1 && strcmp(type, "nsfs") == 0) continue;
    for (const char *c = line; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  }
  fclose(f);
  return h;
}

static void enter_slim_namespace(void) {
  host_mounts_hash = hash_host_mounts();
  host_mounts_dirty = 0;
  leave_host_mounts();
}

// Before a create, and REFRESH_MS after the host's mount table changed: remake the slim namespace
// if the host's mounts changed since it was made. Not only before a create: the copy holds every
// filesystem the host had then, so one the host unmounts since stays pinned here (a loop-backed
// store of another cubed on the host kept its loop device attached after that daemon's graceful
// stop, until this helper's next create). The delay bounds the hashing under the pool's netns
// churn to a few table reads a second (0.5 ms each with 1000 mounts).
#define REFRESH_MS 200
static long long refresh_at = 0; // CLOCK_MONOTONIC ms; 0: none due

static long long monotonic_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void refresh_slim_namespace(void) {
  refresh_at = 0;
  if (!host_mounts_dirty) return;
  host_mounts_dirty = 0;
  if (hash_host_mounts() == host_mounts_hash) return;
  if (setns(HOST_MNT_FD, CLONE_NEWNS) < 0) die("join host mount namespace");
  enter_slim_namespace();
}

// Prints the pids whose network namespace is the one bound at `path` (host tree), one a line.
static int netns_holders(const char *path) {
  struct stat want, st;
  int fd = path[0] == '/' ? openat(host_root, path + 1, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0 || fstat(fd, &want) < 0) die("open %s", path);
  close(fd);
  DIR *proc = opendir("/proc");
  if (!proc) die("open /proc");
  struct dirent *e;
  char p[64];
  pid_t self = getpid();
  while ((e = readdir(proc))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == self) continue;
    snprintf(p, sizeof p, "/proc/%ld/ns/net", pid);
    if (stat(p, &st) == 0 && st.st_ino == want.st_ino && st.st_dev == want.st_dev) printf("%ld\n", pid);
  }
  closedir(proc);
  return fflush(stdout) == 0 ? 0 : EXIT_HELPER;
}

// Exec jobs: a socket pair for the listener of the command's filter (notify.c); in the child, its
// end at NOTIFY_FD, which the child's close_range then spares.
static void notify_pair(int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0) die("socketpair");
  if (fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0) die("nonblocking socket");
}

static void keep_notify_end(int fd) {
  if (dup2(fd, NOTIFY_FD) < 0 || fcntl(NOTIFY_FD, F_SETFD, FD_CLOEXEC) < 0) _exit(EXIT_HELPER);
  notify_fd = NOTIFY_FD;
}

static void take_job_listener(struct job *j) {
  if (j->notify < 0) return;
  if (take_listener(j->notify, j->upper)) {
    close(j->notify);
    j->notify = -1;
  }
}

// ---- serve: the store thread ------------------------------------------------------------
// Store requests (op 9: btrfs ioctls, store.c) run one at a time on a thread of this process that
// lives in the host's mount namespace, instead of a forked child each: a fork and exit of the
// helper cost about 0.7 ms of CPU on these PVM guests (page-table copy, copy-on-write faults with
// TLB shootdowns, teardown) and a create-delete cycle made two of them. A thread, not inline here:
// an ioctl waits for btrfs (a transaction under write load) and this loop carries every sandbox's
// output. Answers come back through the wake pipe; a request's wait status is its exit code.
struct store_req {
  uint32_t id;
  int argc;
  char **argv; // into `strings`
  char *strings;
  int status;
  char *out, *err;
  size_t olen, elen;
  struct store_req *next;
};

static pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t store_cv = PTHREAD_COND_INITIALIZER;
static struct store_req *store_todo, **store_todo_tail = &store_todo, *store_done;
static int store_wake[2] = {-1, -1}, store_pending = 0;

static void *store_thread(void *ready) {
  // Its own fs context, so it may enter another mount namespace than the serve loop's.
  int entered = unshare(CLONE_FS) == 0 && setns(HOST_MNT_FD, CLONE_NEWNS) == 0 ? 0 : errno;
  if (write(*(int *)ready, "r", 1) != 1) {}
  for (;;) {
    pthread_mutex_lock(&store_mu);
    while (!store_todo) pthread_cond_wait(&store_cv, &store_mu);
    struct store_req *r = store_todo;
    store_todo = r->next;
    if (!store_todo) store_todo_tail = &store_todo;
    pthread_mutex_unlock(&store_mu);
    FILE *out = open_memstream(&r->out, &r->olen), *err = open_memstream(&r->err, &r->elen);
    if (!out || !err) die("out of memory");
    int code;
    if (entered) {
      errno = entered;
      fprintf(err, "cube-launch: join host mount namespace: %s\n", strerror(errno));
      code = EXIT_HELPER;
    } else {
      code = store_cmd(r->argc, r->argv, out, err);
    }
    if (fclose(out) != 0 || fclose(err) != 0) die("out of memory");
    r->status = (code & 0xff) << 8; // as waitpid reports an exit
    pthread_mutex_lock(&store_mu);
    r->next = store_done;
    store_done = r;
    pthread_mutex_unlock(&store_mu);
    if (write(store_wake[1], "d", 1) < 0 && errno != EAGAIN) die("wake serve");
  }
  return NULL;
}

static void start_store_thread(void) {
  int ready[2];
  if (pipe2(store_wake, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(ready, O_CLOEXEC) < 0) die("pipe");
  pthread_t t;
  int e = pthread_create(&t, NULL, store_thread, &ready[1]);
  if (e) {
    errno = e;
    die("start the store thread");
  }
  // Before the loop: refresh_slim_namespace's setns needs the thread's fs context unshared.
  char c;
  while (read(ready[0], &c, 1) < 0 && errno == EINTR) {}
  close(ready[0]);
  close(ready[1]);
}

static void queue_store(uint32_t id, int argc, char **argv) {
  size_t len = 0;
  for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
  struct store_req *r = calloc(1, sizeof *r);
  char **args = calloc((size_t)argc + 1, sizeof *args);
  char *strings = malloc(len);
  if (!r || !args || !strings) die("out of memory");
  char *p = strings;
  for (int i = 0; i < argc; i++) {
    size_t n = strlen(argv[i]) + 1;
    memcpy(p, argv[i], n);
    args[i] = p;
    p += n;
  }
  r->id = id;
  r->argc = argc;
  r->argv = args;
  r->strings = strings;
  store_pending++;
  pthread_mutex_lock(&store_mu);
  *store_todo_tail = r;
  store_todo_tail = &r->next;
  pthread_cond_signal(&store_cv);
  pthread_mutex_unlock(&store_mu);
}

static void answer_stores(void) {
  char drain[64];
  while (read(store_wake[0], drain, sizeof drain) > 0) {}
  pthread_mutex_lock(&store_mu);
  struct store_req *r = store_done;
  store_done = NULL;
  pthread_mutex_unlock(&store_mu);
  while (r) {
    struct store_req *next = r->next;
    answer(r->id, r->status, r->out, r->olen, r->err, r->elen);
    store_pending--;
    free(r->out);
    free(r->err);
    free(r->argv);
    free(r->strings);
    free(r);
    r = next;
  }
}

static void start_job(uint32_t id, uint32_t op, char **argv, const char *in, size_t inlen, const sigset_t *oldmask) {
  if (njobs == MAX_JOBS) { answer(id, -1, NULL, 0, "too many jobs", 13); return; }
  int po[2], pe[2];
  if (pipe2(po, O_CLOEXEC) < 0) die("pipe");
  if (pipe2(pe, O_CLOEXEC) < 0) die("pipe");
  int infd = -1;
  if (inlen > 0) {
    infd = memfd_create("stdin", MFD_CLOEXEC);
    if (infd < 0) die("memfd");
    write_all(infd, in, inlen);
    lseek(infd, 0, SEEK_SET);
  }
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (dup2(infd >= 0 ? infd : null, 0) < 0 || dup2(po[1], 1) < 0 || dup2(pe[1], 2) < 0) _exit(EXIT_HELPER);
    syscall(SYS_close_range, HOST_MNT_FD + 1, ~0U, 0);
    if (op == 2) exit(netns_holders(argv[0]));
    if (setns(HOST_MNT_FD, CLONE_NEWNS) < 0) die("join host mount namespace");
    execvp(argv[0], argv);
    fprintf(stderr, "cube-launch: %s: %s\n", argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  close(po[1]);
  close(pe[1]);
  if (infd >= 0) close(infd);
  struct job *j = &jobs[njobs++];
  memset(j, 0, sizeof *j);
  j->pid = pid;
  j->id = id;
  j->out = po[0];
  j->err = pe[0];
  j->notify = -1;
}

// ---- serve: creates ----------------------------------------------------------------------
// Op 0 forks the sandbox's init from here (create.c), and follows it through its report pipe:
// with -I, a first byte 1 asks for its user namespace's maps, written from here (host root,
// outside its namespaces), then "ok" once it is set up, or a failure's message; either way the
// pipe's EOF ends the job. Answer: the init's pid on stdout, or exit EXIT_HELPER and the message.
static int host_proc = -1, own_pidns = -1; // the host's /proc (maps), this helper's pid namespace

static void start_create_job(uint32_t id, int argc, char **argv, const sigset_t *oldmask) {
  if (njobs == MAX_JOBS) { answer(id, -1, NULL, 0, "too many jobs", 13); return; }
  struct create_req c;
  char msg[600], failed[512];
  if (parse_create(argc, argv, &c, msg, sizeof msg) < 0) { answer(id, 2 << 8, NULL, 0, msg, strlen(msg)); return; }
  int report, go;
  pid_t pid = start_init(&c, host_proc, own_pidns, oldmask, &report, &go, failed, sizeof failed);
  if (pid < 0) {
    int n = snprintf(msg, sizeof msg, "cube-launch: %s: %s\n", failed, strerror(errno));
    answer(id, EXIT_HELPER << 8, NULL, 0, msg, (size_t)n);
    return;
  }
  struct job *j = &jobs[njobs++];
  memset(j, 0, sizeof *j);
  j->pid = pid;
  j->id = id;
  j->out = report;
  j->err = -1;
  j->notify = -1;
  j->create = 1;
  j->go = go;
  j->id_base = c.id_base;
}

// After a read of a create job's report: its maps, once it asks.
static void create_maps(struct job *j) {
  if (j->go < 0 || j->olen == 0) return;
  if (j->obuf[0] == '\1') { // never the first byte of a failure report
    memmove(j->obuf, j->obuf + 1, --j->olen);
    char map[64], failed[64];
    snprintf(map, sizeof map, "0 %ld %d\n", j->id_base, ID_RANGE);
    int ok = write_id_maps(host_proc, j->pid, map, failed, sizeof failed) == 0;
    if (ok && write(j->go, "g", 1) != 1) {
      int e = errno;
      snprintf(failed, sizeof failed, "let the init on");
      errno = e;
      ok = 0;
    }
    if (!ok) {
      char m[160];
      int n = snprintf(m, sizeof m, "user namespace maps: %s: %s\n", failed, strerror(errno));
      append(&j->ebuf, &j->elen, &j->ecap, m, (size_t)n);
      kill(j->pid, SIGKILL);
    }
  }
  close(j->go); // a failure report came instead: the init has exited
  j->go = -1;
}

static void finish_create_job(struct job *j) {
  if (j->go >= 0) close(j->go);
  if (j->olen == 2 && memcmp(j->obuf, "ok", 2) == 0 && j->elen == 0) {
    char pid[16];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)j->pid);
    answer(j->id, 0, pid, (size_t)n, NULL, 0);
    return;
  }
  kill(j->pid, SIGKILL); // reaped by the loop, like any child
  const char *why = j->elen ? j->ebuf : j->olen ? j->obuf : "no report\n";
  size_t wlen = j->elen ? j->elen : j->olen ? j->olen : strlen(why);
  char m[2048];
  int n = snprintf(m, sizeof m, "cube-launch: sandbox init failed: %.*s", (int)wlen, why);
  answer(j->id, EXIT_HELPER << 8, NULL, 0, m, n < (int)sizeof m ? (size_t)n : sizeof m - 1);
}

static int job_done(struct job *j) { return j->create ? j->out < 0 : j->reaped && j->out < 0 && j->err < 0; }

// The fd to poll for a job's output: none while a paced stream has no credit left (its pipe
// fills, the command blocks; EOF is seen once credit comes back or the client detaches).
static int job_poll_fd(const struct job *j, int fd) {
  if (fd < 0 || !j->paced) return fd;
  return (fd == j->out ? j->ocredit : j->ecredit) > 0 ? fd : -1;
}

static void read_job_fd(struct job *j, int *fd, char **buf, size_t *len, size_t *cap) {
  char tmp[65536];
  long *credit = fd == &j->out ? &j->ocredit : &j->ecredit;
  size_t want = j->paced && *credit < (long)sizeof tmp ? (size_t)*credit : sizeof tmp;
  if (want == 0) return;
  ssize_t r = read(*fd, tmp, want);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (r <= 0) {
    close(*fd);
    *fd = -1;
    return;
  }
  if (j->stream) {
    if (j->paced) *credit -= r;
    if (fd == &j->out) answer(j->id, ANSWER_DATA, tmp, (size_t)r, NULL, 0);
    else answer(j->id, ANSWER_DATA, NULL, 0, tmp, (size_t)r);
    return;
  }
  append(buf, len, cap, tmp, (size_t)r);
}

// ---- serve: streamed exec jobs -------------------------------------------------------------
// Op 3 runs `cube-launch exec` (cmd_exec) in a forked child of the helper, so a command costs the
// daemon one frame instead of a fork of itself. Request argv:
//   [-e K=V]... [-i] [-t COLSxROWS] [-w BYTES] exec EXEC_OPTIONS... -- ARGV...
// -e: the command's environment; -i: stdin is a pipe fed by input ops (else /dev/null); -t: a pty
// of the sandbox's own devpts, opened here, is the command's stdin/stdout/stderr and controlling
// terminal (output comes back as stdout). Answers for the job's id, in this order: DATA frames
// (ANSWER_DATA: stdout bytes, stderr bytes) as output comes, one EXIT frame (the wait status of
// the exec child, which ends the way the command ended) when it is reaped, DATA again while
// something in the sandbox still holds the output open, and CLOSED (ANSWER_CLOSED) when the output
// has ended or the client detached; the id is free after it. A refused request gets -1 as before.
// Control ops name a job by its id, answer nothing and are ignored for unknown ids: 4 input
// (stdin bytes), 5 close stdin, 6 signal (argv[0] = number; SIGKILL kills the command's whole
// process group), 7 resize (argv = cols rows), 8 detach (stop reading its output), 10 credit.
// Flow control, per stream: with -w BYTES before `exec`, the job sends at most BYTES of stdout and
// BYTES of stderr ahead of what the client took; CREDIT (argv = 1 for stdout or 2 for stderr, and a
// byte count) gives that much back. A stream out of credit is not read: its pipe fills and the
// command blocks on it, every other job going on (they all share this process's stdout, so the
// client could not stop reading one of them without stopping all). Without -w: no limit.
// If this helper dies, each exec child gets SIGUSR1 (its "kill the whole group") from the kernel.

static struct job *stream_job(uint32_t id) {
  for (int i = 0; i < njobs; i++) if (jobs[i].stream && jobs[i].id == id) return &jobs[i];
  return NULL;
}

static void close_job_input(struct job *j) {
  if (j->in >= 0) close(j->in);
  j->in = -1;
  j->ilen = 0;
}

static void flush_job_input(struct job *j) {
  while (j->in >= 0 && j->ilen > 0) {
    ssize_t w = write(j->in, j->ibuf, j->ilen);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return;
    if (w < 0) { close_job_input(j); return; } // the command closed its stdin: drop the rest
    memmove(j->ibuf, j->ibuf + w, j->ilen - (size_t)w);
    j->ilen -= (size_t)w;
  }
  if (j->in_eof) close_job_input(j);
}

// A pty of the sandbox's devpts instance (through the init's root: its /dev and /dev/pts are mount
// points the sandbox cannot replace), owned by the command's user, at the given size.
static int open_sandbox_pty(int pid, unsigned cols, unsigned rows, uid_t uid, gid_t gid, int *slave) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/root/dev/pts/ptmx", pid);
  int m = open(p, O_RDWR | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
  if (m < 0) return -1;
  struct stat st;
  int unlock = 0;
  struct winsize ws = {(unsigned short)rows, (unsigned short)cols, 0, 0};
  struct termios t;
  if (fstat(m, &st) < 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 5 || minor(st.st_rdev) != 2) { errno = EPERM; goto fail; }
  if (ioctl(m, TIOCSPTLCK, &unlock) < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0) goto fail;
  *slave = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*slave < 0) goto fail;
  if (fchown(*slave, uid, gid) < 0 || tcgetattr(*slave, &t) < 0) { close(*slave); goto fail; }
  t.c_iflag |= IUTF8; // the sessions run in C.UTF-8: erase a whole character, not a byte
  if (tcsetattr(*slave, TCSANOW, &t) < 0) { close(*slave); goto fail; }
  return m;
fail:;
  int err = errno;
  close(m);
  errno = err;
  return -1;
}

static void start_exec_job(uint32_t id, int argc, char **argv, const sigset_t *oldmask) {
  char *env[1025];
  int nenv = 0, i = 0, want_stdin = 0, pty = 0;
  unsigned cols = 0, rows = 0;
  long window = 0;
  for (; i < argc && strcmp(argv[i], "exec") != 0; i++) {
    if (strcmp(argv[i], "-e") == 0 && i + 1 < argc && nenv < 1024) env[nenv++] = argv[++i];
    else if (strcmp(argv[i], "-i") == 0) want_stdin = 1;
    else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc && sscanf(argv[++i], "%ux%u", &cols, &rows) == 2 && cols && rows && cols < 65536 && rows < 65536) pty = 1;
    else if (strcmp(argv[i], "-w") == 0 && i + 1 < argc && atol(argv[i + 1]) > 0 && atol(argv[i + 1]) <= (1L << 30)) window = atol(argv[++i]);
    else { answer(id, -1, NULL, 0, "bad exec request", 16); return; }
  }
  env[nenv] = NULL;
  int pid = 0;
  uid_t uid = 0, host_base = 0;
  gid_t gid = 0;
  const char *upper = NULL;
  for (int k = i + 1; k + 1 < argc && strcmp(argv[k], "--") != 0; k++) {
    if (strcmp(argv[k], "-p") == 0) pid = atoi(argv[++k]);
    else if (strcmp(argv[k], "-u") == 0) uid = (uid_t)atoi(argv[++k]);
    else if (strcmp(argv[k], "-g") == 0) gid = (gid_t)atoi(argv[++k]);
    else if (strcmp(argv[k], "-I") == 0) host_base = (uid_t)strtoul(argv[++k], NULL, 10);
    else if (strcmp(argv[k], "-Q") == 0) upper = argv[++k];
  }
  if (i == argc || pid <= 0) { answer(id, -1, NULL, 0, "bad exec request", 16); return; }
  if (njobs == MAX_JOBS) { answer(id, -1, NULL, 0, "too many jobs", 13); return; }
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1}, master = -1, slave = -1;
  if (pty) {
    // The terminal is chowned from here, by host ids.
    master = open_sandbox_pty(pid, cols, rows, host_base + uid, host_base + gid, &slave);
    if (master < 0) {
      char msg[160];
      int n = snprintf(msg, sizeof msg, "open a pty in the sandbox of %d: %s", pid, strerror(errno));
      answer(id, -1, NULL, 0, msg, (size_t)n);
      return;
    }
  } else {
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) die("pipe");
    if (want_stdin && pipe2(pi, O_CLOEXEC) < 0) die("pipe");
  }
  int sv[2];
  notify_pair(sv);
  pid_t serve_pid = getpid();
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    prctl(PR_SET_PDEATHSIG, SIGUSR1, 0, 0, 0);
    if (getppid() != serve_pid) _exit(EXIT_HELPER);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int in = pty ? slave : pi[0] >= 0 ? pi[0] : null, out = pty ? slave : po[1], err = pty ? slave : pe[1];
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(EXIT_HELPER);
    keep_notify_end(sv[1]);
    syscall(SYS_close_range, 3, NOTIFY_FD - 1, 0);
    syscall(SYS_close_range, NOTIFY_FD + 1, ~0U, 0);
    environ = env;
    exec_on_tty = pty;
    optind = 1;
    exit(cmd_exec(argc - i, argv + i));
  }
  close(sv[1]);
  struct job *j = &jobs[njobs++];
  memset(j, 0, sizeof *j);
  j->pid = child;
  j->id = id;
  j->stream = 1;
  j->notify = sv[0];
  j->upper = upper ? strdup(upper) : NULL;
  j->pty = pty;
  j->paced = window > 0;
  j->ocredit = j->ecredit = window;
  if (pty) {
    close(slave);
    j->out = master;
    j->err = -1;
    j->in = fcntl(master, F_DUPFD_CLOEXEC, 0);
    if (j->in < 0) die("dup");
  } else {
    close(po[1]);
    close(pe[1]);
    if (pi[0] >= 0) close(pi[0]);
    j->out = po[0];
    j->err = pe[0];
    j->in = pi[1];
  }
  if (j->in >= 0 && fcntl(j->in, F_SETFL, O_NONBLOCK) < 0) die("nonblocking stdin");
}

static void control_job(uint32_t id, uint32_t op, int argc, char **argv, const char *data, size_t len) {
  struct job *j = stream_job(id);
  if (!j) return;
  switch (op) {
    case OP_INPUT:
      if (j->in < 0 || j->in_eof) return;
      append(&j->ibuf, &j->ilen, &j->icap, data, len);
      flush_job_input(j);
      return;
    case OP_CLOSE_STDIN:
      j->in_eof = 1;
      flush_job_input(j);
      return;
    case OP_SIGNAL: {
      int sig = argc == 1 ? atoi(argv[0]) : 0;
      if (sig > 0 && sig < 65 && !j->reaped) kill(j->pid, sig == SIGKILL ? SIGUSR1 : sig);
      return;
    }
    case OP_RESIZE: {
      if (argc != 2 || !j->pty || j->out < 0) return;
      struct winsize ws = {(unsigned short)atoi(argv[1]), (unsigned short)atoi(argv[0]), 0, 0};
      if (ws.ws_row && ws.ws_col) ioctl(j->out, TIOCSWINSZ, &ws); // the kernel sends SIGWINCH to the foreground group
      return;
    }
    case OP_CREDIT: {
      long n = argc == 2 ? atol(argv[1]) : 0;
      long *credit = argc == 2 && strcmp(argv[0], "1") == 0 ? &j->ocredit : argc == 2 && strcmp(argv[0], "2") == 0 ? &j->ecredit : NULL;
      if (credit && n > 0 && n <= (1L << 30) && *credit <= (1L << 30)) *credit += n;
      return;
    }
    case OP_DETACH:
      if (j->out >= 0) close(j->out);
      if (j->err >= 0) close(j->err);
      j->out = j->err = -1;
      close_job_input(j);
      return;
  }
}

// Output ended (or detached) and the exec child reaped: the last frame, and the job's fds go.
static void finish_stream_job(struct job *j) {
  if (!j->exit_sent) answer(j->id, j->status, NULL, 0, NULL, 0);
  answer(j->id, ANSWER_CLOSED, NULL, 0, NULL, 0);
  close_job_input(j);
  free(j->ibuf);
}

int cmd_serve(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // Opened above the fixed numbers first, so moving them there never clobbers one another.
  int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), mnt = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  int mounts = open("/proc/self/mounts", O_RDONLY | O_CLOEXEC);
  if (root < 0 || mnt < 0 || mounts < 0) die("open host root");
  int r2 = fcntl(root, F_DUPFD_CLOEXEC, 16), m2 = fcntl(mnt, F_DUPFD_CLOEXEC, 16), t2 = fcntl(mounts, F_DUPFD_CLOEXEC, 16);
  if (r2 < 0 || m2 < 0 || t2 < 0) die("dup");
  close(root);
  close(mnt);
  close(mounts);
  if (dup3(r2, HOST_ROOT_FD, O_CLOEXEC) < 0 || dup3(m2, HOST_MNT_FD, O_CLOEXEC) < 0 || dup3(t2, HOST_MOUNTS_FD, O_CLOEXEC) < 0) die("dup");
  close(r2);
  close(m2);
  close(t2);
  host_root = HOST_ROOT_FD;
  host_proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  own_pidns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
  if (host_proc < 0 || own_pidns < 0) die("open /proc");
  enter_slim_namespace();
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  signal(SIGPIPE, SIG_IGN);
  char *req = NULL;
  size_t rlen = 0, rcap = 0;
  int in_open = 1;
  struct pollfd *pfd = NULL;
  size_t pfd_cap = 0;
  start_store_thread();
  while (in_open || njobs > 0 || store_pending > 0) {
    size_t want = 4 + 4 * (size_t)njobs + (size_t)listener_count();
    if (want > pfd_cap) {
      pfd_cap = 2 * want;
      pfd = realloc(pfd, pfd_cap * sizeof *pfd);
      if (!pfd) die("out of memory");
    }
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = in_open ? 0 : -1, .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = HOST_MOUNTS_FD, .events = POLLPRI};
    pfd[n++] = (struct pollfd){.fd = store_wake[0], .events = POLLIN};
    for (int i = 0; i < njobs; i++) {
      pfd[n++] = (struct pollfd){.fd = job_poll_fd(&jobs[i], jobs[i].out), .events = POLLIN};
      pfd[n++] = (struct pollfd){.fd = job_poll_fd(&jobs[i], jobs[i].err), .events = POLLIN};
      pfd[n++] = (struct pollfd){.fd = jobs[i].stream && jobs[i].ilen > 0 ? jobs[i].in : -1, .events = POLLOUT};
      pfd[n++] = (struct pollfd){.fd = jobs[i].notify, .events = POLLIN};
    }
    int first_listener = n, polled_listeners = listener_pollfds(pfd + n);
    n += polled_listeners;
    int wait = -1;
    if (refresh_at) {
      long long left = refresh_at - monotonic_ms();
      wait = left > 0 ? (int)left : 0;
    }
    if (poll(pfd, (nfds_t)n, wait) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    answer_listeners(pfd + first_listener, polled_listeners);
    for (int i = 0; i < njobs; i++) {
      if (pfd[4 + 4 * i].revents) read_job_fd(&jobs[i], &jobs[i].out, &jobs[i].obuf, &jobs[i].olen, &jobs[i].ocap);
      if (jobs[i].create) create_maps(&jobs[i]);
      if (pfd[5 + 4 * i].revents) read_job_fd(&jobs[i], &jobs[i].err, &jobs[i].ebuf, &jobs[i].elen, &jobs[i].ecap);
      if (pfd[6 + 4 * i].revents) flush_job_input(&jobs[i]);
      if (pfd[7 + 4 * i].revents) take_job_listener(&jobs[i]);
    }
    if (pfd[3].revents) answer_stores();
    if (pfd[2].revents) {
      host_mounts_dirty = 1;
      if (!refresh_at) refresh_at = monotonic_ms() + REFRESH_MS;
    }
    if (refresh_at && monotonic_ms() >= refresh_at) refresh_slim_namespace();
    if (pfd[0].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
      int st;
      pid_t p;
      while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int i = 0; i < njobs; i++) {
          if (jobs[i].pid != p) continue;
          jobs[i].status = st;
          jobs[i].reaped = 1;
          if (jobs[i].stream) {
            answer(jobs[i].id, st, NULL, 0, NULL, 0); // EXIT: the output may still be draining
            jobs[i].exit_sent = 1;
          }
        }
      }
    }
    for (int i = 0; i < njobs;) {
      struct job *j = &jobs[i];
      if (!job_done(j)) { i++; continue; }
      if (j->stream) finish_stream_job(j);
      else if (j->create) finish_create_job(j);
      else answer(j->id, j->status, j->obuf, j->olen, j->ebuf, j->elen);
      take_job_listener(j); // sent before the command started (or never: the exec failed before)
      if (j->notify >= 0) close(j->notify);
      free(j->upper);
      free(j->obuf);
      free(j->ebuf);
      jobs[i] = jobs[--njobs];
    }
    if (pfd[1].revents) {
      char tmp[65536];
      ssize_t r = read(0, tmp, sizeof tmp);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) { in_open = 0; continue; }
      append(&req, &rlen, &rcap, tmp, (size_t)r);
      for (;;) {
        uint32_t hdr[5];
        if (rlen < 4) break;
        memcpy(hdr, req, 4);
        size_t total = 4 + (size_t)hdr[0];
        if (rlen < total) break;
        if (hdr[0] < 16) die("bad request frame");
        memcpy(hdr, req, sizeof hdr);
        uint32_t id = hdr[1], op = hdr[2], argc = hdr[3], inlen = hdr[4];
        char *p = req + sizeof hdr, *end = req + total - inlen;
        char *argv[2048]; // an exec carries its environment as -e pairs
        uint32_t k = 0;
        for (; k < argc && k < 2047 && p < end; k++) {
          argv[k] = p;
          p += strnlen(p, (size_t)(end - p)) + 1;
        }
        argv[k] = NULL;
        if ((op >= OP_INPUT && op <= OP_DETACH) || op == OP_CREDIT) {
          if (k == argc && p == end) control_job(id, op, (int)argc, argv, end, inlen);
        } else if (k != argc || k == 0 || p != end || op > OP_STORE) answer(id, -1, NULL, 0, "bad request", 11);
        else if (op == OP_EXEC) start_exec_job(id, (int)argc, argv, &old);
        else if (op == OP_STORE) queue_store(id, (int)argc, argv);
        else if (op == OP_CREATE) {
          refresh_slim_namespace();
          start_create_job(id, (int)argc, argv, &old);
        } else start_job(id, op, argv, end, inlen, &old);
        memmove(req, req + total, rlen - total);
        rlen -= total;
      }
    }
  }
  return 0;
}
