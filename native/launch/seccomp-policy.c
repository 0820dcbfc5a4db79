#include "launch.h"
#include "seccomp.h"

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
//
// This file is the policy as data, one row a syscall (Firecracker keeps its seccomp policies as
// data too): the syscall, its action, and for the few checked by argument, the check. seccomp.c
// compiles it to the BPF program. A syscall listed twice is refused when the program is built.

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

#define ALLOW(name) { __NR_##name, SECCOMP_RET_ALLOW, NULL }
// DENY: EPERM, as without the capability; ABSENT: ENOSYS, as on a kernel without the call.
#define DENY(name) { __NR_##name, SECCOMP_RET_ERRNO | EPERM, NULL }
#define ABSENT(name) { __NR_##name, SECCOMP_RET_ERRNO | ENOSYS, NULL }
// NOTIFIED: answered by the helper outside the sandbox (notify.c); allowed where none listens.
#define NOTIFIED(name) { __NR_##name, SECCOMP_RET_USER_NOTIF, NULL }

// socket(family, ...): the family is an int, the low 32 bits of the first argument. AF_PACKET
// only for a sandbox that asked for NET_RAW (for root: users still lack the capability).
static const uint32_t socket_families[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK };
static const uint32_t socket_families_net_raw[] = { AF_PACKET };
static const struct arg_check socket_check = {
  .arg = 0, .op = ARG_IN, .values = socket_families, .nvalues = N_OF(socket_families),
  .net_raw_values = socket_families_net_raw, .nnet_raw_values = N_OF(socket_families_net_raw),
  .otherwise = SECCOMP_RET_ERRNO | EAFNOSUPPORT,
};
// clone(flags, ...): the namespace flags all sit in the low 32 bits of the first argument.
static const struct arg_check clone_check = {
  .arg = 0, .op = ARG_NO_BITS,
  .mask = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP | 0x00000080 /* CLONE_NEWTIME */,
  .otherwise = SECCOMP_RET_ERRNO | EPERM,
};
// personality(2) values that keep the process's mitigations: PER_LINUX, PER_LINUX32, UNAME26
// alone or with PER_LINUX32, and 0xffffffff (query).
static const uint32_t personalities[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff };
static const struct arg_check personality_check = {
  .arg = 0, .op = ARG_IN, .values = personalities, .nvalues = N_OF(personalities),
  .otherwise = SECCOMP_RET_ERRNO | EPERM,
};

const struct syscall_rule seccomp_policy[] = {
  // checked by argument (in this order in the program, ahead of the rest)
  { __NR_socket, SECCOMP_RET_ALLOW, &socket_check },
  { __NR_clone, SECCOMP_RET_ALLOW, &clone_check },
  { __NR_personality, SECCOMP_RET_ALLOW, &personality_check },
  // files and directories
  ALLOW(read), ALLOW(write), ALLOW(close), ALLOW(close_range), ALLOW(fstat), ALLOW(newfstatat),
  ALLOW(statx), ALLOW(lseek), ALLOW(pread64), ALLOW(pwrite64), ALLOW(readv), ALLOW(writev), ALLOW(preadv),
  ALLOW(pwritev), ALLOW(preadv2), ALLOW(pwritev2), ALLOW(openat), ALLOW(openat2), ALLOW(faccessat),
  ALLOW(faccessat2), ALLOW(mkdirat), ALLOW(mknodat), ALLOW(fchownat), ALLOW(unlinkat), ALLOW(renameat),
  ALLOW(renameat2), ALLOW(linkat), ALLOW(symlinkat), ALLOW(readlinkat), ALLOW(fchmodat), ALLOW(fchmodat2),
  ALLOW(utimensat), ALLOW(getdents64), ALLOW(getcwd), ALLOW(chdir), ALLOW(fchdir), ALLOW(chroot),
  ALLOW(fchmod), ALLOW(fchown), ALLOW(truncate), ALLOW(ftruncate), ALLOW(fallocate), ALLOW(fadvise64),
  ALLOW(readahead), ALLOW(fsync), ALLOW(fdatasync), ALLOW(sync), ALLOW(syncfs), ALLOW(sync_file_range),
  ALLOW(flock), ALLOW(fcntl), ALLOW(ioctl), ALLOW(dup), ALLOW(dup3), ALLOW(pipe2), ALLOW(umask),
  ALLOW(sendfile), ALLOW(splice), ALLOW(tee), ALLOW(vmsplice),
  ALLOW(copy_file_range), ALLOW(cachestat), ALLOW(setxattr), ALLOW(lsetxattr), ALLOW(fsetxattr),
  ALLOW(getxattr), ALLOW(lgetxattr), ALLOW(fgetxattr), ALLOW(listxattr), ALLOW(llistxattr),
  ALLOW(flistxattr), ALLOW(removexattr), ALLOW(lremovexattr), ALLOW(fremovexattr), ALLOW(inotify_init1),
  ALLOW(inotify_add_watch), ALLOW(inotify_rm_watch), ALLOW(fanotify_mark), ALLOW(memfd_create),
  ALLOW(memfd_secret), ALLOW(io_setup), ALLOW(io_destroy), ALLOW(io_getevents), ALLOW(io_pgetevents),
  ALLOW(io_submit), ALLOW(io_cancel),
  // memory
  ALLOW(mmap), ALLOW(mprotect), ALLOW(munmap), ALLOW(brk), ALLOW(mremap), ALLOW(msync), ALLOW(mincore),
  ALLOW(madvise), ALLOW(mlock), ALLOW(mlock2), ALLOW(munlock), ALLOW(mlockall), ALLOW(munlockall),
  ALLOW(remap_file_pages), ALLOW(membarrier), ALLOW(mbind), ALLOW(set_mempolicy), ALLOW(get_mempolicy),
  ALLOW(set_mempolicy_home_node), ALLOW(pkey_mprotect), ALLOW(pkey_alloc), ALLOW(pkey_free),
  ALLOW(map_shadow_stack), ALLOW(mseal),
  // processes, threads, signals
  ALLOW(execve), ALLOW(execveat), ALLOW(exit), ALLOW(exit_group), ALLOW(wait4), ALLOW(waitid), ALLOW(kill),
  ALLOW(tkill), ALLOW(tgkill), ALLOW(getpid), ALLOW(getppid), ALLOW(gettid), ALLOW(set_tid_address),
  ALLOW(set_robust_list), ALLOW(get_robust_list), ALLOW(rseq), ALLOW(futex), ALLOW(futex_waitv),
  ALLOW(futex_wake), ALLOW(futex_wait), ALLOW(futex_requeue), ALLOW(restart_syscall), ALLOW(rt_sigaction),
  ALLOW(rt_sigprocmask), ALLOW(rt_sigreturn), ALLOW(rt_sigpending), ALLOW(rt_sigtimedwait),
  ALLOW(rt_sigqueueinfo), ALLOW(rt_tgsigqueueinfo), ALLOW(rt_sigsuspend), ALLOW(sigaltstack),
  ALLOW(signalfd4), ALLOW(pidfd_open), ALLOW(pidfd_send_signal), ALLOW(pidfd_getfd),
  ALLOW(process_mrelease), ALLOW(process_madvise), ALLOW(process_vm_readv), ALLOW(process_vm_writev),
  ALLOW(ptrace), ALLOW(kcmp), ALLOW(prctl), ALLOW(seccomp), ALLOW(capget), ALLOW(capset),
  ALLOW(getpriority), ALLOW(setpriority), ALLOW(getrlimit), ALLOW(setrlimit), ALLOW(prlimit64),
  ALLOW(getrusage), ALLOW(times), ALLOW(sched_yield), ALLOW(sched_setparam), ALLOW(sched_getparam),
  ALLOW(sched_setscheduler), ALLOW(sched_getscheduler), ALLOW(sched_get_priority_max),
  ALLOW(sched_get_priority_min), ALLOW(sched_rr_get_interval), ALLOW(sched_setaffinity),
  ALLOW(sched_getaffinity), ALLOW(sched_setattr), ALLOW(sched_getattr), ALLOW(ioprio_get),
  ALLOW(ioprio_set), ALLOW(getcpu), ALLOW(landlock_create_ruleset), ALLOW(landlock_add_rule),
  ALLOW(landlock_restrict_self),
  // ids and sessions
  ALLOW(getuid), ALLOW(geteuid), ALLOW(getgid), ALLOW(getegid), ALLOW(getresuid), ALLOW(getresgid),
  ALLOW(getgroups), ALLOW(setuid), ALLOW(setgid), ALLOW(setreuid), ALLOW(setregid), ALLOW(setresuid),
  ALLOW(setresgid), ALLOW(setfsuid), ALLOW(setfsgid), ALLOW(setgroups), ALLOW(setpgid), ALLOW(getpgid),
  ALLOW(getsid), ALLOW(setsid),
  // time
  ALLOW(nanosleep), ALLOW(clock_nanosleep), ALLOW(clock_gettime), ALLOW(clock_getres), ALLOW(gettimeofday),
  ALLOW(getitimer), ALLOW(setitimer), ALLOW(timer_create), ALLOW(timer_settime), ALLOW(timer_gettime),
  ALLOW(timer_getoverrun), ALLOW(timer_delete), ALLOW(timerfd_create), ALLOW(timerfd_settime),
  ALLOW(timerfd_gettime),
  // waiting on fds
  ALLOW(ppoll), ALLOW(pselect6), ALLOW(epoll_create1), ALLOW(epoll_ctl), ALLOW(epoll_pwait),
  ALLOW(epoll_pwait2), ALLOW(eventfd2),
  // network (socket itself is checked by family below)
  ALLOW(socketpair), ALLOW(connect), ALLOW(accept), ALLOW(accept4), ALLOW(bind), ALLOW(listen),
  ALLOW(getsockname), ALLOW(getpeername), ALLOW(setsockopt), ALLOW(getsockopt), ALLOW(sendto),
  ALLOW(recvfrom), ALLOW(sendmsg), ALLOW(recvmsg), ALLOW(sendmmsg), ALLOW(recvmmsg), ALLOW(shutdown),
  // System V and POSIX IPC (the sandbox's own IPC namespace)
  ALLOW(shmget), ALLOW(shmat), ALLOW(shmctl), ALLOW(shmdt), ALLOW(semget), ALLOW(semop), ALLOW(semctl),
  ALLOW(semtimedop), ALLOW(msgget), ALLOW(msgsnd), ALLOW(msgrcv), ALLOW(msgctl), ALLOW(mq_open),
  ALLOW(mq_unlink), ALLOW(mq_timedsend), ALLOW(mq_timedreceive), ALLOW(mq_notify), ALLOW(mq_getsetattr),
  // system information
  ALLOW(uname), ALLOW(sysinfo), ALLOW(getrandom),
#if defined(__x86_64__)
  // the legacy x86_64 calls the generic table replaced with *at and friends
  ALLOW(open), ALLOW(stat), ALLOW(lstat), ALLOW(poll), ALLOW(access), ALLOW(pipe), ALLOW(select),
  ALLOW(dup2), ALLOW(pause), ALLOW(alarm), ALLOW(fork), ALLOW(vfork), ALLOW(getdents), ALLOW(rename),
  ALLOW(mkdir), ALLOW(rmdir), ALLOW(creat), ALLOW(link), ALLOW(unlink), ALLOW(symlink), ALLOW(readlink),
  ALLOW(chmod), ALLOW(chown), ALLOW(lchown), ALLOW(getpgrp), ALLOW(utime), ALLOW(utimes), ALLOW(futimesat),
  ALLOW(mknod), ALLOW(time), ALLOW(epoll_create), ALLOW(epoll_wait), ALLOW(signalfd), ALLOW(eventfd),
  ALLOW(inotify_init), ALLOW(arch_prctl), ALLOW(set_thread_area), ALLOW(get_thread_area),
#endif
// EPERM: what the caller would see without the right capability anyway (most also need one of
// the dropped capabilities; the first group needs none).
  DENY(unshare), DENY(setns), DENY(add_key), DENY(keyctl), DENY(request_key), DENY(bpf),
  DENY(perf_event_open), DENY(userfaultfd), DENY(mount), DENY(umount2), DENY(pivot_root),
  DENY(open_tree), DENY(move_mount), DENY(fsopen), DENY(fsconfig), DENY(fsmount), DENY(fspick),
  DENY(mount_setattr), DENY(kexec_load), DENY(kexec_file_load), DENY(reboot), DENY(init_module),
  DENY(finit_module), DENY(delete_module), DENY(swapon), DENY(swapoff), DENY(acct), DENY(quotactl),
  DENY(syslog), DENY(settimeofday), DENY(clock_settime), DENY(clock_adjtime), DENY(adjtimex),
  DENY(sethostname), DENY(setdomainname), DENY(open_by_handle_at), DENY(name_to_handle_at),
  DENY(vhangup), DENY(fanotify_init),
#if defined(__x86_64__)
  DENY(modify_ldt), DENY(iopl), DENY(ioperm),
#endif
// Answered by `cube-launch serve` (notify.c): the sandbox's disk size and use instead of the whole
// store's (statfs of the overlay root or of a volume reports the btrfs filesystem's numbers; a
// quota group's limit is invisible to statfs).
  NOTIFIED(statfs), NOTIFIED(fstatfs),
// ENOSYS although listed: io_uring users fall back to plain syscalls, glibc's threads retry clone3
// as clone, whose flags the filter can read (clone3 passes them in memory).
  ABSENT(clone3), ABSENT(io_uring_setup), ABSENT(io_uring_enter), ABSENT(io_uring_register),
};
const size_t seccomp_policy_len = N_OF(seccomp_policy);
