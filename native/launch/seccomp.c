#include "launch.h"

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
void install_seccomp(void) {
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
