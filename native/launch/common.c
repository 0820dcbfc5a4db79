#include "launch.h"

// ---- common: errors, cgroups, loopback and capabilities every command shares --------------
int host_root = -1;

int report_fd = -1; // create: the ready pipe, where the sandbox init reports failures
int main_argc;      // the whole command line, overwritten by the sandbox init
char **main_argv;

void die(const char *fmt, ...) {
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

void join_cgroups(const char *const *procs, int n) {
  for (int i = 0; i < n; i++) {
    int fd = open(procs[i], O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) die("join cgroup %s", procs[i]);
    close(fd);
  }
}

void set_loopback_up(void) {
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

// Capabilities a sandbox root keeps (Docker's default set without CAP_MKNOD and CAP_NET_RAW).
// Everything else (SYS_ADMIN, NET_ADMIN, SYS_MODULE, DAC_READ_SEARCH, SYS_PTRACE, ...) is dropped
// from the bounding set, so no process started in the sandbox can ever gain it. NET_RAW (raw
// and packet sockets: forged ARP and addresses on the slot link) only for a sandbox that asks
// (`exec -R`, the create's metadata label cube.net_raw=true).
static const int kept_caps[] = {
  CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_SETGID, CAP_SETUID,
  CAP_SETFCAP, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_KILL, CAP_AUDIT_WRITE,
};
int keep_net_raw = 0;

static int cap_kept(int cap) {
  if (cap == CAP_NET_RAW) return keep_net_raw;
  for (size_t i = 0; i < sizeof kept_caps / sizeof kept_caps[0]; i++)
    if (kept_caps[i] == cap) return 1;
  return 0;
}

void drop_bounding_caps(void) {
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
// keep 0: none at all (the sandbox init, which only reaps).
void limit_own_caps(int keep) {
  struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  for (int c = 0; keep && c < 64; c++) {
    if (!cap_kept(c)) continue;
    data[c / 32].effective |= 1u << (c % 32);
    data[c / 32].permitted |= 1u << (c % 32);
  }
  if (syscall(SYS_capset, &hdr, data) < 0) die("capset");
}


void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) die("write answer");
    c += w;
    n -= (size_t)w;
  }
}
