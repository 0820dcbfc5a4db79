// cube-launch: the one native helper of the `ns` runtime driver.
//
//   cube-launch create -i ID -l LOWER -u UPPER -w WORK -m MERGED [-L LAYERS_DIR] [-U] [-t TMPFS_MIB] [-q LIMIT_BYTES] [-n NETNS] [-I HOST_ID_BASE] [-c CGROUP_PROCS]...
//     LOWER is overlayfs' lowerdir (a:b:c, top first); with -L its relative entries resolve in
//     LAYERS_DIR, so a stack of 64-hex layer names fits the kernel's one-page option limit.
//     Builds a sandbox and prints the host pid of its init ("cube-init"), then exits: no supervisor
//     process stays behind. The init is pid 1 of a new pid namespace, never execs and only reaps.
//     -q: UPPER is in a btrfs subvolume of the sandbox store; its exclusive quota-group limit is set
//     first (in this request, so the store's pooled subvolumes cost the create no extra round trip).
//     -I: the sandbox's own host ids (see "identity" below): ids 0-65535 inside are host
//     HOST_ID_BASE to HOST_ID_BASE+65535; UPPER and WORK must then share their parent directory.
//   cube-launch exec -p INIT_PID [-u UID] [-g GID] [-I HOST_ID_BASE] [-d CWD] [-R] [-N NOFILE] [-W [-r] | -X] [-c CGROUP_PROCS]... -- ARGV...
//     UID and GID are ids inside the sandbox: a sandbox with its own user namespace (create -I) is
//     joined there, where they are mapped; -I (the create's) gives a terminal its host owner.
//     Runs ARGV inside the sandbox of INIT_PID with the environment this helper was started with,
//     waits for it and ends the way it ended (same exit code, or the same signal).
//     SIGTERM/SIGINT/SIGHUP/SIGQUIT go to the command's process group; SIGUSR1 means "SIGKILL the
//     whole process group" (a SIGKILL cannot be forwarded); if the helper dies the command is killed.
//     Exit 125: the helper itself failed (message on stderr); 126/127: the command could not run.
//     -W (watch): instead of running ARGV, the helper itself watches directory ARGV[0] of the sandbox
//     with inotify, as the user, after entering like a command (-r: and its subdirectories); see
//     watch_dir below for what it prints.
//     -X (metadata): instead of running ARGV, the helper reads or replaces the user.e2b.* extended
//     attributes of files in the sandbox, as the user; see file_metadata below.
//     -A (access): instead of running ARGV, the helper asks the kernel whether the user may reach
//     paths of the sandbox in the given ways; see check_access below.
//   cube-launch serve
//     Stays up and runs requests framed on stdin, answering on stdout, so the daemon never forks
//     itself (a fork of the daemon blocks its event loop for its whole page-table copy: 40-50 ms
//     per spawn measured under load). A request is either a `create` done in a forked child (no
//     exec) or a command run with its stdin, output and wait status collected. Creates run in a
//     slim mount namespace of the helper without the host's per-netns nsfs mounts, so the copy
//     each sandbox's unshare(CLONE_NEWNS) makes stays small however large the netns pool grows;
//     it is remade when the host's other mounts change (a template on a filesystem mounted later,
//     and a filesystem the host unmounted, which the copy would otherwise pin). Netns paths are still opened in the host's tree (through a
//     saved root fd), and commands run back in the host's mount namespace.
//     A third request, `holders NETNS_PATH`, lists the pids whose network namespace it is (a scan
//     of /proc that costs the daemon's event loop milliseconds per call when done from Node).
//     A fourth, `exec`, runs a sandbox command (the code of `cube-launch exec`) in a forked child,
//     streaming its output back as it comes and taking stdin, signals and pty resizes meanwhile
//     (ops 3-8, described at start_exec_job), so a command costs the daemon no fork either.
//     A fifth, `store ...`, issues the btrfs ioctls of the sandbox store (src/storage/): subvolume
//     create/snapshot/delete and quota-group limits, in a forked child (op 9; no exec: `btrfs`
//     would cost a spawn).
//     Request: u32 len, u32 id, u32 op (0 create, 1 run, 2 holders, 3-8 exec, 9 store), u32 argc, u32 stdin_len,
//     argv as NUL-terminated strings, stdin bytes. Answer: u32 len, u32 id, i32 wait status (-1: not
//     started; exec jobs also -2 data and -3 closed), u32 stdout_len, stdout bytes, stderr bytes.
//
// Linked statically: the helper runs as host root before it enters the sandbox, with an environment
// the sandbox user chose, so the dynamic loader must never read LD_PRELOAD and friends.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <stdint.h>
#include <limits.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>

#define MAX_CGROUPS 8
// overlayfs' own limit on lower layers (OVL_MAX_STACK).
#define MAX_LAYERS 500
#define EXIT_HELPER 125

// serve: the host's root, mount namespace and mount table, saved before the helper leaves them
// (fds 3, 4 and 5; children close everything above HOST_MNT_FD).
#define HOST_ROOT_FD 3
#define HOST_MNT_FD 4
#define HOST_MOUNTS_FD 5
static int host_root = -1;

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

// Capabilities a sandbox root keeps (Docker's default set without CAP_MKNOD and CAP_NET_RAW).
// Everything else (SYS_ADMIN, NET_ADMIN, SYS_MODULE, DAC_READ_SEARCH, SYS_PTRACE, ...) is dropped
// from the bounding set, so no process started in the sandbox can ever gain it. NET_RAW (raw
// and packet sockets: forged ARP and addresses on the slot link) only for a sandbox that asks
// (`exec -R`, the create's metadata label cube.net_raw=true).
static const int kept_caps[] = {
  CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_SETGID, CAP_SETUID,
  CAP_SETFCAP, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_KILL, CAP_AUDIT_WRITE,
};
static int keep_net_raw = 0;

static int cap_kept(int cap) {
  if (cap == CAP_NET_RAW) return keep_net_raw;
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
// keep 0: none at all (the sandbox init, which only reaps).
static void limit_own_caps(int keep) {
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

// ---- seccomp ------------------------------------------------------------------------------
// Every command run in a sandbox, and the sandbox's pid 1, get this filter (inherited by all their
// descendants, never removable). It is an allowlist modelled on Docker's default profile: a
// syscall it does not name gets ENOSYS ("not on this kernel"), so a program probing a newer call
// falls back as it would on an older kernel. Beyond Docker's list it refuses (EPERM, what the
// caller would see without the right capability) what needs no capability and opens a large
// kernel surface: a new user namespace (full capabilities inside it, and with them mount,
// netfilter and the rest of the namespaced kernel, the root of many escapes), the keyring, BPF,
// perf events, userfaultfd; and io_uring (ENOSYS: users fall back to plain syscalls).
// Three calls are checked by argument: socket (families AF_UNIX, AF_INET, AF_INET6, AF_NETLINK,
// and AF_PACKET only when the sandbox asked for NET_RAW; others get EAFNOSUPPORT as on a kernel
// without them: AF_VSOCK reaches the host's vsock transports, AF_XDP and AF_PACKET the raw link),
// clone (no namespace flags) and personality (only the values Docker allows: the default, Linux32
// and UNAME26, and the query; READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE would weaken the process's
// own exploit mitigations). modify_ldt (16-bit segments, several past kernel CVEs) is refused.
// Other architectures' syscall ABIs (i386 int 0x80, x32) would bypass a table of x86_64 numbers,
// so they are refused outright. The kernel caches the verdict of every syscall whose outcome does
// not depend on arguments (the seccomp action cache), so only the three checked calls run the
// program: the list's length costs the hot path nothing.
#if defined(__x86_64__)
#define CUBE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define CUBE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "cube-launch: no seccomp architecture for this target"
#endif
// Numbers newer than some build hosts' headers; syscalls added since 5.x have one number on every
// architecture this file builds for.
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_map_shadow_stack
#define __NR_map_shadow_stack 453
#endif
#ifndef __NR_futex_wake
#define __NR_futex_wake 454
#define __NR_futex_wait 455
#define __NR_futex_requeue 456
#endif
#ifndef __NR_mseal
#define __NR_mseal 462
#endif

static const int allowed_syscalls[] = {
  // files and directories
  __NR_read, __NR_write, __NR_close, __NR_close_range, __NR_fstat, __NR_newfstatat, __NR_statx,
  __NR_lseek, __NR_pread64, __NR_pwrite64, __NR_readv, __NR_writev, __NR_preadv, __NR_pwritev,
  __NR_preadv2, __NR_pwritev2, __NR_openat, __NR_openat2, __NR_faccessat, __NR_faccessat2,
  __NR_mkdirat, __NR_mknodat, __NR_fchownat, __NR_unlinkat, __NR_renameat, __NR_renameat2,
  __NR_linkat, __NR_symlinkat, __NR_readlinkat, __NR_fchmodat, __NR_fchmodat2, __NR_utimensat,
  __NR_getdents64, __NR_getcwd, __NR_chdir, __NR_fchdir, __NR_chroot, __NR_fchmod, __NR_fchown,
  __NR_truncate, __NR_ftruncate, __NR_fallocate, __NR_fadvise64, __NR_readahead, __NR_fsync,
  __NR_fdatasync, __NR_sync, __NR_syncfs, __NR_sync_file_range, __NR_flock, __NR_fcntl,
  __NR_ioctl, __NR_dup, __NR_dup3, __NR_pipe2, __NR_umask, __NR_statfs, __NR_fstatfs,
  __NR_sendfile, __NR_splice, __NR_tee, __NR_vmsplice, __NR_copy_file_range, __NR_cachestat,
  __NR_setxattr, __NR_lsetxattr, __NR_fsetxattr, __NR_getxattr, __NR_lgetxattr, __NR_fgetxattr,
  __NR_listxattr, __NR_llistxattr, __NR_flistxattr, __NR_removexattr, __NR_lremovexattr,
  __NR_fremovexattr, __NR_inotify_init1, __NR_inotify_add_watch, __NR_inotify_rm_watch,
  __NR_fanotify_mark, __NR_memfd_create, __NR_memfd_secret,
  __NR_io_setup, __NR_io_destroy, __NR_io_getevents, __NR_io_pgetevents, __NR_io_submit, __NR_io_cancel,
  // memory
  __NR_mmap, __NR_mprotect, __NR_munmap, __NR_brk, __NR_mremap, __NR_msync, __NR_mincore,
  __NR_madvise, __NR_mlock, __NR_mlock2, __NR_munlock, __NR_mlockall, __NR_munlockall,
  __NR_remap_file_pages, __NR_membarrier, __NR_mbind, __NR_set_mempolicy, __NR_get_mempolicy,
  __NR_set_mempolicy_home_node, __NR_pkey_mprotect, __NR_pkey_alloc, __NR_pkey_free,
  __NR_map_shadow_stack, __NR_mseal,
  // processes, threads, signals
  __NR_execve, __NR_execveat, __NR_exit, __NR_exit_group, __NR_wait4, __NR_waitid, __NR_kill,
  __NR_tkill, __NR_tgkill, __NR_getpid, __NR_getppid, __NR_gettid, __NR_set_tid_address,
  __NR_set_robust_list, __NR_get_robust_list, __NR_rseq, __NR_futex, __NR_futex_waitv,
  __NR_futex_wake, __NR_futex_wait, __NR_futex_requeue, __NR_restart_syscall,
  __NR_rt_sigaction, __NR_rt_sigprocmask, __NR_rt_sigreturn, __NR_rt_sigpending,
  __NR_rt_sigtimedwait, __NR_rt_sigqueueinfo, __NR_rt_tgsigqueueinfo, __NR_rt_sigsuspend,
  __NR_sigaltstack, __NR_signalfd4, __NR_pidfd_open, __NR_pidfd_send_signal, __NR_pidfd_getfd,
  __NR_process_mrelease, __NR_process_madvise, __NR_process_vm_readv, __NR_process_vm_writev,
  __NR_ptrace, __NR_kcmp, __NR_prctl, __NR_seccomp, __NR_capget, __NR_capset,
  __NR_getpriority, __NR_setpriority, __NR_getrlimit, __NR_setrlimit, __NR_prlimit64,
  __NR_getrusage, __NR_times, __NR_sched_yield, __NR_sched_setparam, __NR_sched_getparam,
  __NR_sched_setscheduler, __NR_sched_getscheduler, __NR_sched_get_priority_max,
  __NR_sched_get_priority_min, __NR_sched_rr_get_interval, __NR_sched_setaffinity,
  __NR_sched_getaffinity, __NR_sched_setattr, __NR_sched_getattr, __NR_ioprio_get, __NR_ioprio_set,
  __NR_getcpu, __NR_landlock_create_ruleset, __NR_landlock_add_rule, __NR_landlock_restrict_self,
  // ids and sessions
  __NR_getuid, __NR_geteuid, __NR_getgid, __NR_getegid, __NR_getresuid, __NR_getresgid,
  __NR_getgroups, __NR_setuid, __NR_setgid, __NR_setreuid, __NR_setregid, __NR_setresuid,
  __NR_setresgid, __NR_setfsuid, __NR_setfsgid, __NR_setgroups, __NR_setpgid, __NR_getpgid,
  __NR_getsid, __NR_setsid,
  // time
  __NR_nanosleep, __NR_clock_nanosleep, __NR_clock_gettime, __NR_clock_getres, __NR_gettimeofday,
  __NR_getitimer, __NR_setitimer, __NR_timer_create, __NR_timer_settime, __NR_timer_gettime,
  __NR_timer_getoverrun, __NR_timer_delete, __NR_timerfd_create, __NR_timerfd_settime,
  __NR_timerfd_gettime,
  // waiting on fds
  __NR_ppoll, __NR_pselect6, __NR_epoll_create1, __NR_epoll_ctl, __NR_epoll_pwait,
  __NR_epoll_pwait2, __NR_eventfd2,
  // network (socket itself is checked by family below)
  __NR_socketpair, __NR_connect, __NR_accept, __NR_accept4, __NR_bind, __NR_listen,
  __NR_getsockname, __NR_getpeername, __NR_setsockopt, __NR_getsockopt, __NR_sendto,
  __NR_recvfrom, __NR_sendmsg, __NR_recvmsg, __NR_sendmmsg, __NR_recvmmsg, __NR_shutdown,
  // System V and POSIX IPC (the sandbox's own IPC namespace)
  __NR_shmget, __NR_shmat, __NR_shmctl, __NR_shmdt, __NR_semget, __NR_semop, __NR_semctl,
  __NR_semtimedop, __NR_msgget, __NR_msgsnd, __NR_msgrcv, __NR_msgctl, __NR_mq_open,
  __NR_mq_unlink, __NR_mq_timedsend, __NR_mq_timedreceive, __NR_mq_notify, __NR_mq_getsetattr,
  // system information
  __NR_uname, __NR_sysinfo, __NR_getrandom,
#if defined(__x86_64__)
  // the legacy x86_64 calls the generic table replaced with *at and friends
  __NR_open, __NR_stat, __NR_lstat, __NR_poll, __NR_access, __NR_pipe, __NR_select, __NR_dup2,
  __NR_pause, __NR_alarm, __NR_fork, __NR_vfork, __NR_getdents, __NR_rename, __NR_mkdir,
  __NR_rmdir, __NR_creat, __NR_link, __NR_unlink, __NR_symlink, __NR_readlink, __NR_chmod,
  __NR_chown, __NR_lchown, __NR_getpgrp, __NR_utime, __NR_utimes, __NR_futimesat, __NR_mknod,
  __NR_time, __NR_epoll_create, __NR_epoll_wait, __NR_signalfd, __NR_eventfd, __NR_inotify_init,
  __NR_arch_prctl, __NR_set_thread_area, __NR_get_thread_area,
#endif
};
// EPERM: what the caller would see without the right capability anyway (most also need one of
// the dropped capabilities; the first group needs none).
static const int denied_syscalls[] = {
  __NR_unshare, __NR_setns, __NR_add_key, __NR_keyctl, __NR_request_key, __NR_bpf,
  __NR_perf_event_open, __NR_userfaultfd,
  __NR_mount, __NR_umount2, __NR_pivot_root, __NR_open_tree, __NR_move_mount, __NR_fsopen,
  __NR_fsconfig, __NR_fsmount, __NR_fspick, __NR_mount_setattr,
  __NR_kexec_load, __NR_kexec_file_load, __NR_reboot, __NR_init_module, __NR_finit_module,
  __NR_delete_module, __NR_swapon, __NR_swapoff, __NR_acct, __NR_quotactl, __NR_syslog,
  __NR_settimeofday, __NR_clock_settime, __NR_clock_adjtime, __NR_adjtimex, __NR_sethostname,
  __NR_setdomainname, __NR_open_by_handle_at, __NR_name_to_handle_at, __NR_vhangup,
  __NR_fanotify_init,
#if defined(__x86_64__)
  __NR_modify_ldt, __NR_iopl, __NR_ioperm,
#endif
};
// ENOSYS although listed: io_uring users fall back to plain syscalls, glibc's threads retry clone3
// as clone, whose flags the filter can read (clone3 passes them in memory).
static const int unimplemented_syscalls[] = {
  __NR_clone3, __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register,
};
// personality(2) values that keep the process's mitigations: PER_LINUX, PER_LINUX32, UNAME26
// alone or with PER_LINUX32, and 0xffffffff (query).
static const uint32_t allowed_personalities[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff };

#define CLONE_NAMESPACES (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP | 0x00000080 /* CLONE_NEWTIME */)

#define N_OF(a) (sizeof a / sizeof a[0])

// The verdict of each syscall number below NR_TABLE from the three lists (ENOSYS when unlisted);
// numbers at and above it are unlisted too (the highest listed is 462).
#define NR_TABLE 512
struct interval { uint32_t lo; uint32_t action; };

static size_t verdict_intervals(struct interval *iv) {
  static uint32_t action[NR_TABLE];
  for (size_t i = 0; i < NR_TABLE; i++) action[i] = SECCOMP_RET_ERRNO | ENOSYS;
  for (size_t i = 0; i < N_OF(allowed_syscalls); i++) action[allowed_syscalls[i]] = SECCOMP_RET_ALLOW;
  for (size_t i = 0; i < N_OF(denied_syscalls); i++) action[denied_syscalls[i]] = SECCOMP_RET_ERRNO | EPERM;
  for (size_t i = 0; i < N_OF(unimplemented_syscalls); i++) action[unimplemented_syscalls[i]] = SECCOMP_RET_ERRNO | ENOSYS;
  size_t k = 0;
  for (uint32_t nr = 0; nr < NR_TABLE; nr++)
    if (k == 0 || iv[k - 1].action != action[nr]) iv[k++] = (struct interval){ nr, action[nr] };
  if (iv[k - 1].action != (SECCOMP_RET_ERRNO | ENOSYS)) iv[k++] = (struct interval){ NR_TABLE, SECCOMP_RET_ERRNO | ENOSYS };
  return k;
}

// Instructions of the search over intervals i..j: a leaf returns, a node is one compare.
static size_t search_size(size_t i, size_t j) {
  if (i == j) return 1;
  size_t mid = (i + j + 1) / 2;
  return 1 + search_size(i, mid - 1) + search_size(mid, j);
}

static size_t emit_range(struct sock_filter *f, size_t n, const struct interval *iv, size_t i, size_t j) {
  if (i == j) {
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, iv[i].action);
    return n;
  }
  size_t mid = (i + j + 1) / 2, left = search_size(i, mid - 1);
  // Classic BPF jumps forward by at most 255: the left half follows, the right half after it.
  if (left > 255) { errno = E2BIG; die("seccomp search tree"); }
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, iv[mid].lo, (uint8_t)left, 0);
  n = emit_range(f, n, iv, i, mid - 1);
  return emit_range(f, n, iv, mid, j);
}

static size_t emit_search(struct sock_filter *f, size_t n, size_t cap) {
  struct interval iv[NR_TABLE + 1];
  size_t k = verdict_intervals(iv);
  if (n + search_size(0, k - 1) > cap) { errno = E2BIG; die("seccomp program"); }
  return emit_range(f, n, iv, 0, k - 1);
}

// keep_net_raw: the sandbox asked for NET_RAW, so AF_PACKET passes (for root: users still lack the capability).
static void install_seccomp(void) {
  struct sock_filter f[32 + N_OF(allowed_personalities) + 2 * (NR_TABLE + 1)];
  size_t n = 0;
#define EMIT(insn) (f[n++] = (struct sock_filter)insn)
#define RET(action) EMIT(BPF_STMT(BPF_RET | BPF_K, (action)))
#define LOAD_ARG0() EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])))
  EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CUBE_AUDIT_ARCH, 1, 0));
  RET(SECCOMP_RET_KILL_PROCESS);
  EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
#if defined(__x86_64__)
  EMIT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000 /* __X32_SYSCALL_BIT */, 0, 1));
  RET(SECCOMP_RET_ERRNO | ENOSYS);
#endif
  // socket(family, ...): the family is an int, the low 32 bits of the first argument.
  static const uint32_t families[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET };
  size_t nfam = N_OF(families) - (keep_net_raw ? 0 : 1);
  EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, (uint8_t)(nfam + 3)));
  LOAD_ARG0();
  for (size_t i = 0; i < nfam; i++) EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, families[i], (uint8_t)(nfam - i), 0));
  RET(SECCOMP_RET_ERRNO | EAFNOSUPPORT);
  RET(SECCOMP_RET_ALLOW);
  // clone(flags, ...): the namespace flags all sit in the low 32 bits of the first argument.
  EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4));
  LOAD_ARG0();
  EMIT(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NAMESPACES, 0, 1));
  RET(SECCOMP_RET_ERRNO | EPERM);
  RET(SECCOMP_RET_ALLOW);
  // personality(persona): an unsigned int.
  EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_personality, 0, (uint8_t)(N_OF(allowed_personalities) + 3)));
  LOAD_ARG0();
  for (size_t i = 0; i < N_OF(allowed_personalities); i++)
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, allowed_personalities[i], (uint8_t)(N_OF(allowed_personalities) - i), 0));
  RET(SECCOMP_RET_ERRNO | EPERM);
  RET(SECCOMP_RET_ALLOW);
  // The plain lists as a binary search over intervals of syscall numbers with one verdict each
  // (the accumulator still holds the number): a linear list of compares made the kernel's
  // per-syscall verdict cache cost 0.65 ms to build at every filter install (0.14 ms for the old
  // denylist; the allowlist has ~330 entries), a search ~8 compares deep costs what the denylist did.
  n = emit_search(f, n, sizeof f / sizeof f[0]);
#undef LOAD_ARG0
#undef RET
#undef EMIT
  struct sock_fprog prog = { (unsigned short)n, f };
  // Still host root with CAP_SYS_ADMIN here, so no_new_privs is not required: setuid programs
  // inside the sandbox keep working for root commands.
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0) die("install seccomp filter");
}

// When the host runs out of memory, its OOM killer takes sandbox processes first: +500 here,
// while cubed runs at -900 (0 where the host withholds CAP_SYS_RESOURCE). Without that
// capability a process inside may lower its score only down to 0 (-100 is refused, measured),
// so never below the daemon's.
#define SANDBOX_OOM_SCORE_ADJ "500"

static void raise_oom_score(void) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, SANDBOX_OOM_SCORE_ADJ, strlen(SANDBOX_OOM_SCORE_ADJ)) < 0) die("oom_score_adj");
  close(fd);
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

// ---- identity -----------------------------------------------------------------------------------
// A sandbox created with -I has host ids of its own (issue 12): its processes live in a user
// namespace mapping ids 0-65535 to HOST_ID_BASE.. (root inside is not host root, `user` is not
// host 1000, so per-uid kernel limits and /proc/<pid> access are the sandbox's alone). The init
// makes it once its mounts are done, with HOST_ID_BASE as its effective uid: the kernel charges a
// namespace's per-user counts (inotify instances among them) at the host's level to the
// namespace's owner, so one owned by root would pool every sandbox's with root's. Its other
// namespaces stay owned by the host's, so root inside holds no capability over the mounts, the
// network or the pid namespace: all mounts are made beforehand, here, as host root.
// Files keep ids 0/1000 on disk (templates and snapshots move between sandboxes unchanged): every
// overlay layer (and /usr of host-usr templates) is an idmapped mount through a second namespace,
// whose map adds on-disk 65536 <-> host 0: the daemon's files API creates files as host root (and
// then chowns them to the sandbox's ids), which an idmapped layer without host 0 refuses
// (EOVERFLOW). No process ever runs in that second namespace.
#define ID_RANGE 65536
static long id_base = -1; // create: -I
static int idmap_ns = -1;

static void write_file_at(int dfd, const char *path, const char *s) {
  int fd = openat(dfd, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t)strlen(s)) die("write %s", path);
  close(fd);
}

// `proc`: the host's /proc, held open: the init's pivot_root moves the root of every process of
// its mount namespace, the creating one's too, into the sandbox (whose /proc has no host pids).
static void write_id_maps(int proc, pid_t pid, const char *map) {
  char p[64];
  snprintf(p, sizeof p, "%d/uid_map", (int)pid);
  write_file_at(proc, p, map);
  snprintf(p, sizeof p, "%d/gid_map", (int)pid);
  write_file_at(proc, p, map);
}

// The layers' namespace: a child born in it waits while its maps are written, then returns. It
// shares this process's memory (CLONE_VM, a stack of its own) instead of a copy: a fork's page
// table copy, copy-on-write faults and teardown cost ~1.9 ms of CPU (parent and child) per create
// on the benchmark VM (a PVM guest: page-table writes and TLB flushes trap), this ~0.1 ms
// (bench/userns-overlay.c --clone, load 12). Raw syscalls only in the child: it runs on this
// process's thread-local storage, errno included.
static int idmap_hold[2];
static int hold_idmap_ns(void *arg) {
  char b;
  (void)arg;
  syscall(SYS_close, idmap_hold[1]); // its copy of the write end: the parent's close (or death) ends the read
  return syscall(SYS_read, idmap_hold[0], &b, 1) < 0;
}

static int make_idmap_ns(int proc, long base) {
  static char stack[16384] __attribute__((aligned(16)));
  if (pipe2(idmap_hold, O_CLOEXEC) < 0) die("pipe");
  pid_t c = clone(hold_idmap_ns, stack + sizeof stack, CLONE_VM | CLONE_NEWUSER | SIGCHLD, NULL);
  if (c < 0) die("clone a user namespace");
  close(idmap_hold[0]);
  char map[96], p[64];
  snprintf(map, sizeof map, "0 %ld %d\n%d 0 1\n", base, ID_RANGE, ID_RANGE);
  write_id_maps(proc, c, map);
  snprintf(p, sizeof p, "%d/ns/user", (int)c);
  int fd = openat(proc, p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open %s", p);
  close(idmap_hold[1]);
  waitpid(c, NULL, 0);
  return fd;
}

// A detached copy of the mount tree at `path` seen through the layers' id map, with `attrs` set
// (AT_RECURSIVE in `recursive`: the submounts too).
static int idmapped_tree(const char *path, unsigned recursive, uint64_t attrs) {
  int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | recursive);
  if (fd < 0) die("open_tree %s", path);
  struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP | attrs, .userns_fd = (uint64_t)idmap_ns };
  if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | recursive, &a, sizeof a) < 0) die("idmapped mount of %s", path);
  return fd;
}

// idmapped_tree of a layer (or of upper and work's parent), attached at the overlay's mountpoint
// `m`, under the overlay mounted there next: the overlay takes its own private copy of each layer,
// so the trees are only held until they go with the old root's unmount after pivot_root, all in
// one RCU grace period. Closed detached, each tree cost one (0.16-0.6 ms wall, 3.4 ms per create
// for the host template's two at load 12, more for a template of many layers).
static int idmapped_layer(const char *path, const char *m) {
  int fd = idmapped_tree(path, 0, 0);
  if (syscall(SYS_move_mount, fd, "", AT_FDCWD, m, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("mount %s on %s", path, m);
  return fd;
}

// The init's last step as host root: into its own user namespace, root there. The parent writes
// the maps between the two pipe messages.
static void enter_own_userns(int ready, int go) {
  if (setresuid(-1, (uid_t)id_base, -1) < 0) die("owner of the user namespace");
  if (unshare(CLONE_NEWUSER) < 0) die("unshare user namespace");
  char b;
  if (write(ready, "\1", 1) != 1 || read(go, &b, 1) != 1) die("user namespace maps");
  gid_t none[1] = {0};
  if (setresgid(0, 0, 0) < 0 || setgroups(1, none) < 0 || setresuid(0, 0, 0) < 0) die("become root of the user namespace");
}

// ---- volumes -------------------------------------------------------------------------------------
// create -v HOSTDIR:PATH (repeatable): a volume (a subvolume of the store, src/storage/volumes.ts)
// mounted at PATH inside the sandbox, nosuid and nodev, after the overlay and before /proc, /dev
// and /tmp. Under -I it is an idmapped mount like the layers, so its files keep ids 0/1000 on
// disk and every sandbox that mounts it sees them as its own root and user. The mount point is
// looked up and made below the sandbox's root with RESOLVE_IN_ROOT, one component at a time: a
// template's symlink (`/data -> /etc`) resolves inside the sandbox, never to the host's tree.
#define MAX_VOLUMES 16
static const char *vol_src[MAX_VOLUMES], *vol_dst[MAX_VOLUMES];
static int nvol;

static int open_in_root(int root, const char *rel) {
  struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
  return (int)syscall(SYS_openat2, root, rel[0] ? rel : ".", &how, sizeof how);
}

// The directory PATH below the root `m`, made (0755, host root's) where missing; an O_PATH fd.
static int volume_mountpoint(const char *m, const char *path) {
  int root = open(m, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) die("open %s", m);
  char rel[4096];
  snprintf(rel, sizeof rel, "%s", path[0] == '/' ? path + 1 : path);
  size_t n = strlen(rel);
  for (size_t i = 0; i <= n; i++) {
    if (rel[i] != '/' && rel[i] != '\0') continue;
    char save = rel[i];
    rel[i] = '\0';
    int fd = open_in_root(root, rel);
    if (fd < 0 && errno == ENOENT) {
      char *slash = strrchr(rel, '/');
      int parent;
      if (slash) {
        *slash = '\0';
        parent = open_in_root(root, rel);
        *slash = '/';
      } else {
        parent = dup(root);
      }
      if (parent < 0) die("volume mount point %s: parent", path);
      if (mkdirat(parent, slash ? slash + 1 : rel, 0755) < 0 && errno != EEXIST) die("volume mount point %s: mkdir", path);
      close(parent);
      fd = open_in_root(root, rel);
    }
    if (fd < 0) die("volume mount point %s", path);
    rel[i] = save;
    if (save == '\0') {
      close(root);
      return fd;
    }
    close(fd);
  }
  close(root);
  errno = EINVAL;
  die("volume mount point %s", path);
  return -1;
}

static void mount_volumes(const char *m) {
  for (int i = 0; i < nvol; i++) {
    int tree;
    if (id_base >= 0) {
      tree = idmapped_tree(vol_src[i], 0, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    } else {
      tree = (int)syscall(SYS_open_tree, AT_FDCWD, vol_src[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
      if (tree < 0) die("open_tree %s", vol_src[i]);
      struct mount_attr a = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
      if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &a, sizeof a) < 0) die("volume %s: nosuid, nodev", vol_src[i]);
    }
    int at = volume_mountpoint(m, vol_dst[i]);
    if (syscall(SYS_move_mount, tree, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) die("mount volume %s on %s", vol_src[i], vol_dst[i]);
    close(at);
    close(tree);
  }
}

static void sandbox_init(const char *id, const char *lower, const char *lower_base, const char *upper,
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
  snprintf(opts, sizeof opts, "mode=1777,size=%dm,uid=%ld,gid=%ld", tmp_mib, owner, owner);
  mount_at("tmpfs", m, "tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts);
  if (sethostname(id, strlen(id)) < 0) die("sethostname");
  if (chdir(m) < 0) die("chdir %s", m);
  mkdir_at(".", ".oldroot", 0700);
  if (syscall(SYS_pivot_root, ".", ".oldroot") < 0) die("pivot_root");
  if (chdir("/") < 0) die("chdir /");
  if (umount2("/.oldroot", MNT_DETACH) < 0) die("umount old root");
  if (rmdir("/.oldroot") < 0) die("rmdir old root");
  raise_oom_score(); // first: the id change below makes /proc/self host root's (not dumpable)
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
  install_seccomp();
  limit_own_caps(0);
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) die("dumpable");
  if (write(ready, "ok", 2) != 2) _exit(EXIT_HELPER);
  close(ready);
  report_fd = -1;
  init_loop();
}

static int limit_fd(int fd, uint64_t bytes);

static int cmd_create(int argc, char **argv) {
  const char *id = NULL, *lower = NULL, *lower_base = NULL, *upper = NULL, *work = NULL, *merged = NULL, *netns = NULL;
  const char *cgroups[MAX_CGROUPS];
  int ncg = 0, bind_usr = 0, tmp_mib = 64, opt;
  uint64_t disk_limit = 0;
  while ((opt = getopt(argc, argv, "i:l:L:u:w:m:n:c:t:q:UI:v:")) != -1) {
    switch (opt) {
      case 'v': {
        char *colon = strchr(optarg, ':');
        if (!colon || nvol == MAX_VOLUMES || colon[1] != '/') { fprintf(stderr, "cube-launch: -v HOSTDIR:/PATH, at most %d\n", MAX_VOLUMES); return 2; }
        *colon = '\0';
        vol_src[nvol] = optarg;
        vol_dst[nvol++] = colon + 1;
        break;
      }
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

static volatile pid_t command_pid = 0;
static int watch_dir(const char *dir, int recursive);
static int file_metadata(char **args);
static int check_access(char **args);
static void write_all(int fd, const void *p, size_t n);
// serve's exec jobs with a terminal: the command leads its own session with stdin (the pty slave
// the helper opened inside the sandbox) as its controlling terminal, instead of only a new group.
static int exec_on_tty = 0;

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

static int cmd_exec(int argc, char **argv) {
  const char *cgroups[MAX_CGROUPS], *cwd = NULL;
  int ncg = 0, pid = 0, opt, watch = 0, recursive = 0, metadata = 0, access_check = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  rlim_t nofile = 0;
  while ((opt = getopt(argc, argv, "+p:u:g:d:c:RN:WrXAI:")) != -1) {
    switch (opt) {
      case 'I': break; // read by serve: the pty's owner in host ids (the namespace itself is the init's)
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
    install_seccomp();
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

static int watch_dir(const char *dir, int recursive) {
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

// ---- metadata: envd's file metadata, user.e2b.* xattrs (src/runtime/ns/metadata.ts) ----------------
//   get PATH...             prints "INDEX\0KEY\0VALUE\0" per attribute (KEY without the prefix);
//                           a path that cannot be read prints nothing
//   set PATH [KEY VALUE]... replaces the file's user.e2b.* attributes with these; exit 1 and a message
// Runs like watch_dir: in the sandbox, as the user, so the file's permissions decide.
#define META_PREFIX "user.e2b."

static int file_metadata(char **args) {
  char names[65536], value[65536];
  if (!args[0] || !args[1]) { fprintf(stderr, "cube-launch: metadata get|set PATH...\n"); return 2; }
  if (strcmp(args[0], "get") == 0) {
    for (int i = 1; args[i]; i++) {
      ssize_t n = llistxattr(args[i], names, sizeof names);
      for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1) {
        const char *name = names + off;
        if (strncmp(name, META_PREFIX, strlen(META_PREFIX)) != 0) continue;
        ssize_t v = lgetxattr(args[i], name, value, sizeof value);
        if (v < 0) continue;
        char idx[16];
        int k = snprintf(idx, sizeof idx, "%d", i - 1);
        write_all(1, idx, (size_t)k + 1);
        write_all(1, name + strlen(META_PREFIX), strlen(name + strlen(META_PREFIX)) + 1);
        write_all(1, value, (size_t)v);
        write_all(1, "", 1);
      }
    }
    return 0;
  }
  if (strcmp(args[0], "set") != 0) { fprintf(stderr, "cube-launch: metadata get|set PATH...\n"); return 2; }
  const char *path = args[1];
  ssize_t n = llistxattr(path, names, sizeof names);
  if (n < 0) { fprintf(stderr, "cube-launch: metadata of %s: %s\n", path, strerror(errno)); return 1; }
  for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1) {
    if (strncmp(names + off, META_PREFIX, strlen(META_PREFIX)) == 0 && lremovexattr(path, names + off) < 0) {
      fprintf(stderr, "cube-launch: metadata of %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  for (int i = 2; args[i] && args[i + 1]; i += 2) {
    char name[512];
    if (snprintf(name, sizeof name, META_PREFIX "%s", args[i]) >= (int)sizeof name || lsetxattr(path, name, args[i + 1], strlen(args[i + 1]), 0) < 0) {
      fprintf(stderr, "cube-launch: metadata %s of %s: %s\n", args[i], path, strerror(errno));
      return 1;
    }
  }
  return 0;
}

// ---- access: the files API as a user (src/runtime/ns/files.ts) -----------------------------------
//   MODE PATH [MODE PATH]...   MODE: R_OK 4 | W_OK 2 | X_OK 1 (0: exists and reachable), plus
//     8  UNLINK: PATH (not followed) may be removed from, or renamed out of, its directory: that
//        directory writable and searchable, and where it is sticky (/tmp) the user owns PATH or it
//     16 TREE: PATH, when a directory, may be emptied: every directory below it (itself included)
//        readable, writable and searchable, the sticky rule for each entry (what rm -r needs)
//     32 SOFT: a refusal of this pair is printed on stdout ("INDEX\n", the pair's place from 0)
//        and the checks go on
// The daemon reads and writes a sandbox's files as host root through /proc/<init>/root; before it
// acts for a user it asks here, in the sandbox and as that user, so every directory on the way and
// the file's own mode, owner and ACLs decide as they would for the user's own process (before,
// a write as `user` replaced a root-owned 0600 file and created files in /root, a read showed it).
// The real ids are the user's (setuid above), so faccessat without AT_EACCESS checks them; the
// sticky rule is the kernel's (may_delete): no capability is left to the user to pass it otherwise.
// Exit 1 and "PATH: reason" at the first refusal that is not SOFT.
#define CHECK_UNLINK 8
#define CHECK_TREE 16
#define CHECK_SOFT 32

// The sticky directory rule: in a directory with S_ISVTX only the owner of an entry or of the
// directory may remove or rename the entry.
static int sticky_allows(const struct stat *dir, const struct stat *entry) {
  if (!(dir->st_mode & S_ISVTX) || entry->st_uid == getuid() || dir->st_uid == getuid()) return 1;
  errno = EPERM;
  return 0;
}

static int may_unlink(const char *path) {
  char parent[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash || strlen(path) >= sizeof parent) { errno = EINVAL; return -1; }
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  memcpy(parent, path, n);
  parent[n] = '\0';
  struct stat dir, entry;
  if (faccessat(AT_FDCWD, parent, W_OK | X_OK, 0) < 0 || stat(parent, &dir) < 0 || lstat(path, &entry) < 0) return -1;
  return sticky_allows(&dir, &entry) ? 0 : -1;
}

// The directories of the tree walk by level, for each entry's sticky rule (nftw gives no parent).
static struct stat *tree_dirs;
static int tree_depth;
static int tree_errno;
static char tree_path[PATH_MAX];

static int tree_entry(const char *fpath, const struct stat *st, int flag, struct FTW *ftw) {
  if (flag == FTW_DNR || flag == FTW_NS) {
    tree_errno = flag == FTW_DNR ? EACCES : errno;
  } else if (ftw->level > 0 && !sticky_allows(&tree_dirs[ftw->level - 1], st)) {
    tree_errno = errno;
  } else if (flag == FTW_D && faccessat(AT_FDCWD, fpath + ftw->base, R_OK | W_OK | X_OK, 0) < 0) {
    tree_errno = errno;
  } else {
    if (flag == FTW_D) {
      if (ftw->level >= tree_depth) {
        int more = tree_depth ? tree_depth * 2 : 64;
        struct stat *grown = realloc(tree_dirs, (size_t)more * sizeof *grown);
        if (!grown) { tree_errno = ENOMEM; goto refused; }
        tree_dirs = grown;
        tree_depth = more;
      }
      tree_dirs[ftw->level] = *st;
    }
    return 0;
  }
refused:
  snprintf(tree_path, sizeof tree_path, "%s", fpath);
  return 1;
}

// Whether the whole tree at PATH may be removed by the user (a file or link: nothing below it).
static int may_empty(const char *path) {
  tree_errno = 0;
  // FTW_CHDIR: names are looked up relative to their directory, so a deep tree is no long path.
  int r = nftw(path, tree_entry, 16, FTW_PHYS | FTW_CHDIR);
  if (r < 0) return -1;
  if (r > 0) {
    errno = tree_errno;
    return -1;
  }
  return 0;
}

static int check_access(char **args) {
  for (int i = 0; args[i] && args[i + 1]; i += 2) {
    int mode = atoi(args[i]);
    const char *path = args[i + 1];
    tree_path[0] = '\0';
    int bits = mode & (R_OK | W_OK | X_OK);
    // Not followed for UNLINK and TREE alone: a dangling link may be removed.
    int refused = ((bits || !(mode & (CHECK_UNLINK | CHECK_TREE))) && faccessat(AT_FDCWD, path, bits, 0) < 0)
      || ((mode & CHECK_UNLINK) && may_unlink(path) < 0)
      || ((mode & CHECK_TREE) && may_empty(path) < 0);
    if (!refused) continue;
    if (mode & CHECK_SOFT) {
      printf("%d\n", i / 2);
      continue;
    }
    fprintf(stderr, "cube-launch: %s: %s\n", tree_path[0] ? tree_path : path, strerror(errno));
    fflush(stdout); // the caller _exits
    return 1;
  }
  fflush(stdout);
  return 0;
}

// ---- store: btrfs subvolumes and quota groups (src/storage/btrfs-store.ts) -------------------
//   store subvol PATH LIMIT_BYTES           a subvolume with an exclusive limit (0: none); prints its id
//   store snapshot SRC PATH LIMIT_BYTES     a writable snapshot of subvolume SRC, limited; prints its id
//   store keep SRC PATH                     a read-only snapshot of subvolume SRC (a kept sandbox snapshot); prints its id
//   store limit PATH LIMIT_BYTES            sets the exclusive limit of subvolume PATH (a ready clone taken by a create)
//   store delete PATH                       deletes the subvolume (gone already: fine); exit 3: not one
//   store ids PATH...                       subvolume id per path, 0 when not a subvolume
//   store quota PATH                        enables quota groups (simple quotas where the kernel has them)
//   store fsid PATH                         the filesystem's uuid (its directory in /sys/fs/btrfs)
// The exclusive limit counts data and metadata the subvolume alone holds, so both a writer and a
// file flood stop at it (EDQUOT); a referenced limit would also count what a snapshot shares.

#ifndef BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA 4
#endif
#define EXIT_NOT_SUBVOL 3

static int open_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) die("open %s", path);
  return fd;
}

// The parent directory of PATH, opened; its last component in `name`.
static int open_parent(const char *path, char name[BTRFS_PATH_NAME_MAX + 1]) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  size_t n = slash == path ? 1 : (size_t)(slash ? slash - path : 0);
  if (!slash || !slash[1] || strlen(slash + 1) > BTRFS_PATH_NAME_MAX || n >= sizeof dir) {
    errno = EINVAL;
    die("bad store path %s", path);
  }
  memcpy(dir, path, n);
  dir[n] = '\0';
  strcpy(name, slash + 1);
  return open_dir(dir);
}

// A subvolume's root directory is inode 256 of a btrfs tree.
static int is_subvol(int fd) {
  struct stat st;
  struct statfs sf;
  return fstat(fd, &st) == 0 && fstatfs(fd, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC && st.st_ino == 256;
}

static uint64_t subvol_id(int fd) {
  struct btrfs_ioctl_ino_lookup_args a;
  memset(&a, 0, sizeof a);
  a.objectid = 256;
  return ioctl(fd, BTRFS_IOC_INO_LOOKUP, &a) < 0 ? 0 : a.treeid;
}

// The exclusive limit of the subvolume that holds fd (qgroupid 0 means that one).
static int limit_fd(int fd, uint64_t bytes) {
  struct btrfs_ioctl_qgroup_limit_args l;
  memset(&l, 0, sizeof l);
  l.lim.flags = BTRFS_QGROUP_LIMIT_MAX_EXCL;
  l.lim.max_excl = bytes;
  return ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &l);
}

static int destroy_at(int dfd, const char *name) {
  struct btrfs_ioctl_vol_args a;
  memset(&a, 0, sizeof a);
  strcpy(a.name, name);
  return ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &a);
}

// Undoes a half-made subvolume, then fails with the error that stopped it.
static void undo_and_die(int dfd, const char *name, const char *what, const char *path) {
  int err = errno;
  if (destroy_at(dfd, name) < 0) {}
  errno = err;
  die("%s %s", what, path);
}

static int store_subvol(const char *path, const char *src, uint64_t limit, int readonly) {
  char name[BTRFS_PATH_NAME_MAX + 1];
  int dfd = open_parent(path, name);
  if (src) {
    struct btrfs_ioctl_vol_args_v2 a;
    memset(&a, 0, sizeof a);
    a.fd = open_dir(src);
    if (readonly) a.flags = BTRFS_SUBVOL_RDONLY;
    strcpy(a.name, name);
    if (ioctl(dfd, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0) die("snapshot %s to %s", src, path);
    close((int)a.fd);
  } else {
    struct btrfs_ioctl_vol_args a;
    memset(&a, 0, sizeof a);
    strcpy(a.name, name);
    if (ioctl(dfd, BTRFS_IOC_SUBVOL_CREATE, &a) < 0) die("create subvolume %s", path);
  }
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) undo_and_die(dfd, name, "open", path);
  if (limit > 0 && limit_fd(fd, limit) < 0) undo_and_die(dfd, name, "limit", path);
  printf("%llu\n", (unsigned long long)subvol_id(fd));
  return fflush(stdout) == 0 ? 0 : EXIT_HELPER;
}

static int store_limit(const char *path, uint64_t limit) {
  int fd = open_dir(path);
  if (!is_subvol(fd)) {
    fprintf(stderr, "cube-launch: %s is not a subvolume\n", path);
    return EXIT_NOT_SUBVOL;
  }
  if (limit_fd(fd, limit) < 0) die("limit %s", path);
  close(fd);
  return 0;
}

static int store_delete(const char *path) {
  char name[BTRFS_PATH_NAME_MAX + 1];
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return 0;
  if (fd < 0 || !is_subvol(fd)) {
    fprintf(stderr, "cube-launch: %s is not a subvolume\n", path);
    return EXIT_NOT_SUBVOL;
  }
  close(fd);
  if (destroy_at(open_parent(path, name), name) < 0 && errno != ENOENT) die("delete subvolume %s", path);
  return 0;
}

static int store_quota(const char *path) {
  int fd = open_dir(path);
  struct btrfs_ioctl_quota_ctl_args q;
  memset(&q, 0, sizeof q);
  q.cmd = BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA;
  if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) == 0) return 0;
  q.cmd = BTRFS_QUOTA_CTL_ENABLE;
  if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0) die("enable quota on %s", path);
  return 0;
}

static int store_fsid(const char *path) {
  int fd = open_dir(path);
  struct btrfs_ioctl_fs_info_args a;
  memset(&a, 0, sizeof a);
  if (ioctl(fd, BTRFS_IOC_FS_INFO, &a) < 0) die("filesystem info of %s", path);
  const unsigned char *u = a.fsid;
  for (int i = 0; i < 16; i++) printf("%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
  printf("\n");
  return fflush(stdout) == 0 ? 0 : EXIT_HELPER;
}

static int store_cmd(int argc, char **argv) {
  const char *c = argv[0];
  if (strcmp(c, "fsid") == 0 && argc == 2) return store_fsid(argv[1]);
  if (strcmp(c, "subvol") == 0 && argc == 3) return store_subvol(argv[1], NULL, strtoull(argv[2], NULL, 10), 0);
  if (strcmp(c, "snapshot") == 0 && argc == 4) return store_subvol(argv[2], argv[1], strtoull(argv[3], NULL, 10), 0);
  if (strcmp(c, "keep") == 0 && argc == 3) return store_subvol(argv[2], argv[1], 0, 1);
  if (strcmp(c, "limit") == 0 && argc == 3) return store_limit(argv[1], strtoull(argv[2], NULL, 10));
  if (strcmp(c, "delete") == 0 && argc == 2) return store_delete(argv[1]);
  if (strcmp(c, "quota") == 0 && argc == 2) return store_quota(argv[1]);
  if (strcmp(c, "ids") == 0) {
    for (int i = 1; i < argc; i++) {
      int fd = open(argv[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      printf("%llu\n", (unsigned long long)(fd >= 0 && is_subvol(fd) ? subvol_id(fd) : 0));
      if (fd >= 0) close(fd);
    }
    return fflush(stdout) == 0 ? 0 : EXIT_HELPER;
  }
  fprintf(stderr, "cube-launch: bad store request %s\n", c);
  return 2;
}

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

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) die("write answer");
    c += w;
    n -= (size_t)w;
  }
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

static void start_job(uint32_t id, uint32_t op, int argc, char **argv, const char *in, size_t inlen, const sigset_t *oldmask) {
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
    if (op == 0) {
      optind = 1;
      exit(cmd_create(argc, argv));
    }
    if (op == 2) exit(netns_holders(argv[0]));
    if (setns(HOST_MNT_FD, CLONE_NEWNS) < 0) die("join host mount namespace");
    if (op == OP_STORE) exit(store_cmd(argc, argv));
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
}

static int job_done(struct job *j) { return j->reaped && j->out < 0 && j->err < 0; }

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
  for (int k = i + 1; k + 1 < argc && strcmp(argv[k], "--") != 0; k++) {
    if (strcmp(argv[k], "-p") == 0) pid = atoi(argv[++k]);
    else if (strcmp(argv[k], "-u") == 0) uid = (uid_t)atoi(argv[++k]);
    else if (strcmp(argv[k], "-g") == 0) gid = (gid_t)atoi(argv[++k]);
    else if (strcmp(argv[k], "-I") == 0) host_base = (uid_t)strtoul(argv[++k], NULL, 10);
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
    syscall(SYS_close_range, 3, ~0U, 0);
    environ = env;
    exec_on_tty = pty;
    optind = 1;
    exit(cmd_exec(argc - i, argv + i));
  }
  struct job *j = &jobs[njobs++];
  memset(j, 0, sizeof *j);
  j->pid = child;
  j->id = id;
  j->stream = 1;
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

static int cmd_serve(void) {
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
  struct pollfd *pfd = calloc(3 + 3 * MAX_JOBS, sizeof *pfd);
  if (!pfd) die("out of memory");
  while (in_open || njobs > 0) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = in_open ? 0 : -1, .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = HOST_MOUNTS_FD, .events = POLLPRI};
    for (int i = 0; i < njobs; i++) {
      pfd[n++] = (struct pollfd){.fd = job_poll_fd(&jobs[i], jobs[i].out), .events = POLLIN};
      pfd[n++] = (struct pollfd){.fd = job_poll_fd(&jobs[i], jobs[i].err), .events = POLLIN};
      pfd[n++] = (struct pollfd){.fd = jobs[i].stream && jobs[i].ilen > 0 ? jobs[i].in : -1, .events = POLLOUT};
    }
    int wait = -1;
    if (refresh_at) {
      long long left = refresh_at - monotonic_ms();
      wait = left > 0 ? (int)left : 0;
    }
    if (poll(pfd, (nfds_t)n, wait) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    for (int i = 0; i < njobs; i++) {
      if (pfd[3 + 3 * i].revents) read_job_fd(&jobs[i], &jobs[i].out, &jobs[i].obuf, &jobs[i].olen, &jobs[i].ocap);
      if (pfd[4 + 3 * i].revents) read_job_fd(&jobs[i], &jobs[i].err, &jobs[i].ebuf, &jobs[i].elen, &jobs[i].ecap);
      if (pfd[5 + 3 * i].revents) flush_job_input(&jobs[i]);
    }
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
      else answer(j->id, j->status, j->obuf, j->olen, j->ebuf, j->elen);
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
        else {
          if (op == 0) refresh_slim_namespace();
          start_job(id, op, (int)argc, argv, end, inlen, &old);
        }
        memmove(req, req + total, rlen - total);
        rlen -= total;
      }
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  main_argc = argc;
  main_argv = argv;
  if (argc >= 2 && strcmp(argv[1], "create") == 0) return cmd_create(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "exec") == 0) return cmd_exec(argc - 1, argv + 1);
  if (argc == 2 && strcmp(argv[1], "serve") == 0) return cmd_serve();
  fprintf(stderr, "usage: cube-launch create|exec|serve ...\n");
  return 2;
}
