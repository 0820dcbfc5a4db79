#include "launch.h"

// ---- watch: inotify inside the sandbox for envd's WatchDir (src/runtime/ns/watch.ts) -------------
// Runs in the command child of `exec -W`: in the sandbox's namespaces and root, as the user, under
// the sandbox's seccomp filter. Prints records "T NAME \0" (no spaces: one type byte, then the name
// relative to DIR): S (the watches are set: changes from now on are reported, name empty), C created
// or moved in, W written, R removed, N renamed away, M attributes changed (chmod, chown, touch),
// O the kernel's queue overflowed (events were lost). Ends (exit 0) when DIR itself is removed or
// moved; exit 2 with a message when DIR cannot be watched. Fsnotify's mapping, as envd's is.
#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
#define WATCH_MAX_DEPTH 32

static int watch_fd = -1;
static char **watch_rel; // watch descriptor -> directory relative to the watched one ("" for itself)
static int watch_cap = 0;

static void watch_record(char type, const char *rel, const char *name) {
  char buf[PATH_MAX * 2 + 4];
  int n = snprintf(buf, sizeof buf, "%c%s%s%s", type, rel, *rel && *name ? "/" : "", name);
  if (n < 0 || (size_t)n >= sizeof buf) return;
  write_all(1, buf, (size_t)n + 1); // with the NUL
}

static int watch_add(const char *root, const char *rel, int recursive, int depth) {
  char full[PATH_MAX];
  if (snprintf(full, sizeof full, "%s%s%s", root, *rel ? "/" : "", rel) >= (int)sizeof full) return -1;
  int wd = inotify_add_watch(watch_fd, full, WATCH_MASK);
  if (wd < 0) return -1;
  if (wd >= watch_cap) {
    int cap = wd * 2 + 16;
    char **r = realloc(watch_rel, (size_t)cap * sizeof *r);
    if (!r) die("out of memory");
    memset(r + watch_cap, 0, (size_t)(cap - watch_cap) * sizeof *r);
    watch_rel = r;
    watch_cap = cap;
  }
  free(watch_rel[wd]);
  watch_rel[wd] = strdup(rel);
  if (!recursive || depth >= WATCH_MAX_DEPTH) return wd;
  DIR *d = opendir(full);
  if (!d) return wd;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char sub[PATH_MAX];
    if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) < (int)sizeof sub) watch_add(root, sub, 1, depth + 1);
  }
  closedir(d);
  return wd;
}

int watch_dir(const char *dir, int recursive) {
  signal(SIGPIPE, SIG_DFL); // the reader went away: end quietly
  watch_fd = inotify_init1(IN_CLOEXEC);
  if (watch_fd < 0) die("inotify: %s", strerror(errno));
  int top = watch_add(dir, "", recursive, 0);
  if (top < 0) {
    fprintf(stderr, "cube-launch: watch %s: %s\n", dir, strerror(errno));
    return 2;
  }
  watch_record('S', "", "");
  char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t n = read(watch_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("read inotify");
    for (char *p = buf; p < buf + n;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) { watch_record('O', "", ""); continue; }
      if (ev->wd < 0 || ev->wd >= watch_cap || !watch_rel[ev->wd]) continue;
      const char *rel = watch_rel[ev->wd];
      if (ev->mask & IN_IGNORED) {
        free(watch_rel[ev->wd]);
        watch_rel[ev->wd] = NULL;
        if (ev->wd == top) return 0;
        continue;
      }
      if (ev->wd == top && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))) return 0;
      if (ev->len == 0) continue; // about a watched directory itself: its parent reports it by name
      const char *name = ev->name;
      if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
        watch_record('C', rel, name);
        if (recursive && (ev->mask & IN_ISDIR)) {
          char sub[PATH_MAX];
          if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", name) < (int)sizeof sub) watch_add(dir, sub, 1, 1);
        }
      }
      if (ev->mask & IN_MODIFY) watch_record('W', rel, name);
      if (ev->mask & IN_DELETE) watch_record('R', rel, name);
      if (ev->mask & IN_MOVED_FROM) watch_record('N', rel, name);
      if (ev->mask & IN_ATTRIB) watch_record('M', rel, name);
    }
  }
}
