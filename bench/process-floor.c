// What a process costs on this machine, before any code of ours runs: the floor under issue 26's
// CPU budget per rollout (docs/benchmarks.md, Session 18). A create forks the sandbox's init, a
// command forks an exec child and its command and execs it (`bash -l -c ...` from the e2b SDK), and
// every one of them exits; on a PVM guest the kernel's share of that (a new address space, its first
// page touches paid to the hypervisor, the teardown) is most of the bill. Each row: N rounds in
// this process, CPU per round of this process and its reaped children (getrusage), and wall.
//   cc -O2 -o /tmp/process-floor bench/process-floor.c && /tmp/process-floor [N] [static-binary]
// static-binary defaults to build/cube-launch (the launcher: a static executable of ours).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void) {
  struct rusage s, c;
  getrusage(RUSAGE_SELF, &s);
  getrusage(RUSAGE_CHILDREN, &c);
  return (double)(s.ru_utime.tv_sec + s.ru_stime.tv_sec + c.ru_utime.tv_sec + c.ru_stime.tv_sec) +
         (double)(s.ru_utime.tv_usec + s.ru_stime.tv_usec + c.ru_utime.tv_usec + c.ru_stime.tv_usec) / 1e6;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

// argv == NULL: the child exits at once (fork and exit only).
static void row(const char *what, int n, char *const argv[]) {
  char *const env[] = {"PATH=/usr/bin:/bin", NULL};
  double c0 = cpu_seconds(), w0 = now();
  for (int i = 0; i < n; i++) {
    pid_t p = fork();
    if (p < 0) {
      perror("fork");
      exit(1);
    }
    if (p == 0) {
      if (argv) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execve(argv[0], argv, env);
      }
      _exit(argv ? 127 : 0);
    }
    int st;
    if (waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || (argv && WEXITSTATUS(st) == 127)) {
      fprintf(stderr, "%s: the child failed\n", what);
      exit(1);
    }
  }
  printf("%-34s %7.0f us CPU  %7.0f us wall  (n=%d)\n", what, (cpu_seconds() - c0) / n * 1e6, (now() - w0) / n * 1e6, n);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  char *launcher = argc > 2 ? argv[2] : "build/cube-launch";
  if (n <= 0 || access(launcher, X_OK) != 0) {
    fprintf(stderr, "usage: process-floor [N > 0] [static-binary, default build/cube-launch (run from the checkout)]\n");
    return 2;
  }
  row("fork + exit", n, NULL);
  row("fork + exec static (launcher) + exit", n, (char *[]){launcher, "--version", NULL});
  row("fork + exec /bin/true + exit", n, (char *[]){"/bin/true", NULL});
  row("fork + exec bash -c true", n, (char *[]){"/bin/bash", "--noprofile", "--norc", "-c", "true", NULL});
  return 0;
}
