// The sandbox's seccomp policy as data (seccomp-policy.c) and what seccomp.c compiles it with.
#ifndef CUBE_LAUNCH_SECCOMP_H
#define CUBE_LAUNCH_SECCOMP_H

#include <stddef.h>
#include <stdint.h>

#define N_OF(a) (sizeof a / sizeof a[0])

// A check of one argument (its low 32 bits): when it fails, the call gets `otherwise`.
struct arg_check {
  unsigned arg;
  enum {
    ARG_IN,      // the argument is one of values (plus net_raw_values for a sandbox with NET_RAW)
    ARG_NO_BITS, // the argument has none of mask's bits set
  } op;
  const uint32_t *values;
  size_t nvalues;
  const uint32_t *net_raw_values;
  size_t nnet_raw_values;
  uint32_t mask;
  uint32_t otherwise;
};

// One row of the policy: the syscall, its action (SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno or
// SECCOMP_RET_USER_NOTIF),
// and for a call checked by argument, the check that must pass for the action to apply.
struct syscall_rule {
  int nr;
  uint32_t action;
  const struct arg_check *check;
};

extern const struct syscall_rule seccomp_policy[];
extern const size_t seccomp_policy_len;

#endif
