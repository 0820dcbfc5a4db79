#include "launch.h"
#include "seccomp.h"

// ---- seccomp: the policy (seccomp-policy.c, one row a syscall) compiled to a BPF program --------
// The program: the architecture check (other ABIs killed), x32 numbers refused, then the calls
// checked by argument in their rows' order, then a binary search over the rest by number.
#if defined(__x86_64__)
#define CUBE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define CUBE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "cube-launch: no seccomp architecture for this target"
#endif

// The verdict of each syscall number below NR_TABLE from the policy's rows without an argument
// check (ENOSYS when unlisted); numbers at and above it are unlisted too (the highest listed is 462).
#define NR_TABLE 512
#define UNLISTED (SECCOMP_RET_ERRNO | ENOSYS)
struct interval { uint32_t lo; uint32_t action; };

// With no listener (a command outside `serve`), a notified call is allowed: a USER_NOTIF verdict
// without one fails with ENOSYS.
static uint32_t verdict(uint32_t action, int listen) {
  return action == SECCOMP_RET_USER_NOTIF && !listen ? SECCOMP_RET_ALLOW : action;
}

static size_t verdict_intervals(struct interval *iv, int listen) {
  static uint32_t action[NR_TABLE];
  static unsigned char listed[NR_TABLE];
  for (size_t i = 0; i < NR_TABLE; i++) action[i] = UNLISTED, listed[i] = 0;
  for (size_t i = 0; i < seccomp_policy_len; i++) {
    const struct syscall_rule *r = &seccomp_policy[i];
    if (r->nr < 0 || r->nr >= NR_TABLE) { errno = ERANGE; die("seccomp policy: syscall %d", r->nr); }
    if (listed[r->nr]) { errno = EEXIST; die("seccomp policy: syscall %d listed twice", r->nr); }
    listed[r->nr] = 1;
    if (!r->check) action[r->nr] = verdict(r->action, listen);
  }
  size_t k = 0;
  for (uint32_t nr = 0; nr < NR_TABLE; nr++)
    if (k == 0 || iv[k - 1].action != action[nr]) iv[k++] = (struct interval){ nr, action[nr] };
  if (iv[k - 1].action != UNLISTED) iv[k++] = (struct interval){ NR_TABLE, UNLISTED };
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

static size_t emit_search(struct sock_filter *f, size_t n, size_t cap, int listen) {
  struct interval iv[NR_TABLE + 1];
  size_t k = verdict_intervals(iv, listen);
  if (n + search_size(0, k - 1) > cap) { errno = E2BIG; die("seccomp program"); }
  return emit_range(f, n, iv, 0, k - 1);
}

// One row checked by argument: jump past the block unless it is this syscall, load the argument,
// then its check, returning the row's action when it passes and `otherwise` when not.
static size_t emit_check(struct sock_filter *f, size_t n, size_t cap, const struct syscall_rule *r) {
  const struct arg_check *c = r->check;
  size_t nv = c->op == ARG_IN ? c->nvalues + (keep_net_raw ? c->nnet_raw_values : 0) : 1;
  size_t block = 1 + nv + 2; // the load, the compares (or the one bit test), two returns
  if (n + 1 + block > cap || block > 255 || c->arg >= 6) { errno = E2BIG; die("seccomp check of syscall %d", r->nr); }
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)r->nr, 0, (uint8_t)block);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]) + 8 * c->arg);
  if (c->op == ARG_IN) {
    for (size_t i = 0; i < nv; i++) {
      uint32_t v = i < c->nvalues ? c->values[i] : c->net_raw_values[i - c->nvalues];
      f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, v, (uint8_t)(nv - i), 0);
    }
  } else {
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, c->mask, 0, 1);
  }
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, c->otherwise);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, r->action);
  return n;
}

// keep_net_raw: the sandbox asked for NET_RAW, so the checks' net_raw_values pass too.
static size_t compile_policy(struct sock_filter *f, size_t cap, int listen) {
  size_t n = 0;
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CUBE_AUDIT_ARCH, 1, 0);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000 /* __X32_SYSCALL_BIT */, 0, 1);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
#endif
  // A check's block is jumped over whole when the number differs, so the accumulator still holds
  // the number for the next one and for the search.
  for (size_t i = 0; i < seccomp_policy_len; i++)
    if (seccomp_policy[i].check) n = emit_check(f, n, cap, &seccomp_policy[i]);
  // The plain rows as a binary search over intervals of syscall numbers with one verdict each
  // (the accumulator still holds the number): a linear list of compares made the kernel's
  // per-syscall verdict cache cost 0.65 ms to build at every filter install (0.14 ms for the old
  // denylist; the allowlist has ~330 entries), a search ~8 compares deep costs what the denylist did.
  return emit_search(f, n, cap, listen);
}

// Installs the filter; with `listen`, the notified calls wait for an answer from the returned
// listener (close-on-exec), which the caller hands to the helper (send_listener); else -1.
int install_seccomp(int listen) {
  static struct sock_filter f[64 + 2 * (NR_TABLE + 1)];
  size_t n = compile_policy(f, N_OF(f), listen);
  struct sock_fprog prog = { (unsigned short)n, f };
  // Still host root with CAP_SYS_ADMIN here, so no_new_privs is not required: setuid programs
  // inside the sandbox keep working for root commands.
  int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, listen ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
  if (fd < 0) die("install seccomp filter");
  return listen ? fd : -1;
}
