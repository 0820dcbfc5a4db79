#!/usr/bin/env bash
# Installs cubed, cubectl and cubectl-tui from this checkout onto PATH. Run as root on
# Debian 12 with Node 20. Idempotent: run it again after a pull. It starts nothing
# (cubectl-tui starts the daemon when none answers; see README.md).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"

say() { printf 'install.sh: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root: cubed creates namespaces, cgroups, network devices and nftables rules"
command -v node >/dev/null || die "Node.js 20 is required (node not found)"
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=18)?0:1)' \
  || die "Node.js >= 20.18 is required (found $(node --version))"

# System tools cubed shells out to (ip, nft, unshare/nsenter/mount, ps), the C compiler for
# its launcher, conntrack (flushing a recycled network slot), btrfs-progs (mkfs.btrfs for the
# sandbox store image when the data dir is not on btrfs), tmux for the console, and for the
# microvm runtime QEMU, qemu-img (per-sandbox disk overlays), busybox-static (the guest's
# initramfs; the tests also build their images around it), e2fsprogs (template images) and skopeo
# (pulls images from a registry, where one is reachable, for `cubectl template import`). The guest
# kernel is not installed: npm run build fetches it with apt-get download
# (scripts/build-microvm.mjs). ccache keeps the compiled better-sqlite3 (see npm ci below). Only
# what is missing is installed.
missing=()
for pkg in iproute2 nftables conntrack util-linux procps build-essential ccache btrfs-progs tmux qemu-system-x86 qemu-utils busybox-static e2fsprogs skopeo mmdebstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

say "npm ci"
# better-sqlite3 compiles its C sources here (its prebuilt download is not reachable): JOBS=max lets
# node-gyp's make build them side by side (87 s instead of 108 s on this 2-core machine, load 1).
# Through ccache (paths taken relative to this checkout, so another clone hits too) the install
# after the first one on a machine (a pull, CI's clean clone) reuses the objects: npm ci in 26 s
# instead of 86-101 s (a second clone, load 1-2).
CC="ccache gcc" CXX="ccache g++" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true JOBS=max \
  npm ci --no-audit --no-fund --loglevel=error
say "npm run build"
npm run build --silent
say "npm link (cubed, cubectl, cubectl-tui)"
npm link --no-audit --no-fund --loglevel=error

bin="$(npm prefix -g)/bin"
for cmd in cubed cubectl cubectl-tui; do
  [[ -x "$bin/$cmd" ]] || die "$cmd was not linked into $bin"
done
case ":$PATH:" in *":$bin:"*) ;; *) say "note: add $bin to PATH" ;; esac
say "done: run cubectl-tui (starts cubed on 127.0.0.1:3000 when none answers), or cubed, or cubectl --help"
