// cube-launch: the one native helper of the `ns` runtime driver.
//
//   create -i ID -l LOWER -u UPPER -w WORK -m MERGED [-L LAYERS_DIR] [-U] [-t TMPFS_MIB] [-q LIMIT_BYTES] [-n NETNS] [-I HOST_ID_BASE] [-c CGROUP_PROCS]... [-v HOSTDIR:/PATH]...
//     A request of `serve` (op 0), not a command of its own: builds a sandbox and answers the host
//     pid of its init ("cube-init"), forked by serve itself (create.c): no other process stays
//     behind or comes between. The init is pid 1 of a new pid namespace, never execs and only reaps.
//     LOWER is overlayfs' lowerdir (a:b:c, top first); with -L its relative entries resolve in
//     LAYERS_DIR, so a stack of 64-hex layer names fits the kernel's one-page option limit.
//     -q: UPPER is in a btrfs subvolume of the sandbox store; its exclusive quota-group limit is set
//     first (in this request, so the store's pooled subvolumes cost the create no extra round trip).
//     -I: the sandbox's own host ids (see "identity" below): ids 0-65535 inside are host
//     HOST_ID_BASE to HOST_ID_BASE+65535; UPPER and WORK must then share their parent directory.
//   cube-launch exec -p INIT_PID [-u UID] [-g GID] [-I HOST_ID_BASE] [-Q UPPER] [-d CWD] [-R] [-N NOFILE] [-W [-r] | -X] [-c CGROUP_PROCS]... -- ARGV...
//     UID and GID are ids inside the sandbox: a sandbox with its own user namespace (create -I) is
//     joined there, where they are mapped; -I (the create's) gives a terminal its host owner.
//     -Q (under serve): the sandbox's writable layer, whose quota group statfs of its root reports.
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
//     per spawn measured under load). A request is either a `create` (above: the init forked from
//     here) or a command run with its stdin, output and wait status collected. Creates run in a
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
//     create/snapshot/delete and quota-group limits, one at a time on a thread of the helper in the
//     host's mount namespace (op 9; no exec: `btrfs` would cost a spawn; no fork either: see serve.c).
//     Request: u32 len, u32 id, u32 op (0 create, 1 run, 2 holders, 3-8 exec, 9 store), u32 argc, u32 stdin_len,
//     argv as NUL-terminated strings, stdin bytes. Answer: u32 len, u32 id, i32 wait status (-1: not
//     started; exec jobs also -2 data and -3 closed), u32 stdout_len, stdout bytes, stderr bytes.
//
// Linked statically: the helper runs as host root before it enters the sandbox, with an environment
// the sandbox user chose, so the dynamic loader must never read LD_PRELOAD and friends.

#include "launch.h"

int main(int argc, char **argv) {
  main_argc = argc;
  main_argv = argv;
  if (argc >= 2 && strcmp(argv[1], "exec") == 0) return cmd_exec(argc - 1, argv + 1);
  if (argc == 2 && strcmp(argv[1], "serve") == 0) return cmd_serve();
  fprintf(stderr, "usage: cube-launch exec|serve ...\n");
  return 2;
}
