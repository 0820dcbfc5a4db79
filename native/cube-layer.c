// cube-layer: the two things Node cannot do while the layer store unpacks an image layer:
// overlayfs whiteouts (a 0/0 character device) and opaque directories (the
// trusted.overlay.opaque xattr). One run per layer, never on the sandbox create path.
//
//   cube-layer ROOT < OPS
//     OPS: records 'w' PATH NUL (whiteout PATH), 'o' PATH NUL (mark directory PATH opaque) or
//     'q' PATH NUL (is directory PATH opaque? one byte 'y' or 'n' on stdout per record: a template
//     build hashes a captured layer with its opaque marks),
//     PATH relative to ROOT. The caller has checked the paths already (no '..', no symlink on
//     the way); each one is still walked from ROOT a component at a time with O_NOFOLLOW, so a
//     symlink the caller missed cannot lead outside ROOT. Exit 0, or 1 with the reason on stderr.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

static int fail(const char *what, const char *path) {
  fprintf(stderr, "cube-layer: %s %s: %s\n", what, path, strerror(errno));
  return 1;
}

// Opens the directory holding the last component of `path` (modified in place); *last points at it.
static int open_parent(int root, char *path, char **last) {
  int fd = dup(root);
  char *p = path, *slash;
  while ((slash = strchr(p, '/')) != NULL) {
    *slash = 0;
    if (*p) {
      int next = openat(fd, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      close(fd);
      if (next < 0) return -1;
      fd = next;
    }
    *slash = '/';
    p = slash + 1;
  }
  *last = p;
  return fd;
}

static int apply(int root, char op, char *path) {
  if (!*path || strcmp(path, "..") == 0 || strstr(path, "../") || path[0] == '/') {
    errno = EINVAL;
    return fail("refused path", path);
  }
  char *last;
  int dir = open_parent(root, path, &last);
  if (dir < 0) return fail("open parent of", path);
  int rc = 0;
  if (op == 'w') {
    if (unlinkat(dir, last, 0) < 0 && errno == EISDIR) unlinkat(dir, last, AT_REMOVEDIR);
    if (mknodat(dir, last, S_IFCHR | 0000, makedev(0, 0)) < 0) rc = fail("whiteout", path);
  } else if (op == 'o') {
    int fd = *last ? openat(dir, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : dup(dir);
    if (fd < 0) rc = fail("open directory", path);
    else {
      if (fsetxattr(fd, "trusted.overlay.opaque", "y", 1, 0) < 0) rc = fail("mark opaque", path);
      close(fd);
    }
  } else if (op == 'q') {
    int fd = openat(dir, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    char v = 0;
    if (fd < 0) rc = fail("open directory", path);
    else {
      putchar(fgetxattr(fd, "trusted.overlay.opaque", &v, 1) == 1 && v == 'y' ? 'y' : 'n');
      close(fd);
    }
  } else {
    errno = EINVAL;
    rc = fail("unknown operation for", path);
  }
  close(dir);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cube-layer ROOT < OPS\n");
    return 2;
  }
  int root = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return fail("open", argv[1]);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (len == cap && !(buf = realloc(buf, cap *= 2))) return fail("read", "stdin");
    ssize_t r = read(0, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail("read", "stdin");
    if (r == 0) break;
    len += (size_t)r;
  }
  for (size_t i = 0; i < len;) {
    char *end = memchr(buf + i, 0, len - i);
    if (!end || end == buf + i) {
      errno = EINVAL;
      return fail("malformed operations", "on stdin");
    }
    if (apply(root, buf[i], buf + i + 1)) return 1;
    i = (size_t)(end - buf) + 1;
  }
  return 0;
}
