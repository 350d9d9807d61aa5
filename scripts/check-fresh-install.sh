#!/usr/bin/env bash
# Runs the README's two set-up commands on a machine that has never seen the
# project: a clean Debian 12 root made from Debian's packages (mmdebstrap,
# minbase: what `--no-install-recommends` users start from), a fresh clone of
# this repository's HEAD inside it, then
#   1. command 1 (install, Release build, `halo serve`), and the README's curl
#      request against that server, which must answer a chat completion;
#   2. command 2 (install with --test, build, ctest), which must pass.
# The commands are read from README.md itself, so the README stays the truth.
#
#   sudo scripts/check-fresh-install.sh [--only 1|2] [--keep] [WORKDIR]
#
# Needs root (chroot, mounts) and reaches Debian's and npm's registries. The
# host's CA bundle and /etc/npmrc are copied in first: some networks (this
# project's CI among them) reach the registries through a TLS proxy that a
# stock root does not trust. Takes ~5 min for command 1 and ~30 min for both
# on 2 cores; run it before a release and after any change to
# scripts/install-deps.sh, CMake dependencies or the README's commands, not on
# every CI run.
set -euo pipefail

only="" keep=0 work=""
while (($#)); do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) work="$1"; shift ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "check-fresh-install: run as root (chroot and mounts)" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${work:-$(mktemp -d /tmp/halo-fresh.XXXXXX)}
mkdir -p "$work"
root="$work/root"
log() { printf '[fresh-install %(%H:%M:%S)T] %s\n' -1 "$*"; }

# The README's fenced sh blocks that start with scripts/install-deps.sh: the
# first is command 1, the second command 2.
readme_command() {
  awk '/^```sh/{inb=1; next} /^```/{inb=0} inb && /^scripts\/install-deps.sh/' "$repo/README.md" | sed -n "${1}p"
}
cmd1=$(readme_command 1)
cmd2=$(readme_command 2)
[[ -n "$cmd1" && -n "$cmd2" ]] || { echo "check-fresh-install: README.md lacks the two commands" >&2; exit 2; }

mounted=()
# Every process still running inside the root (the server of command 1).
kill_root_processes() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/root" 2>/dev/null)" == "$root" ]] && kill "${p#/proc/}" 2>/dev/null
  done
  return 0
}
cleanup() {
  kill_root_processes
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if ((keep)); then log "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

command -v mmdebstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap; }
log "creating a Debian 12 minbase root in $root"
t0=$SECONDS
mmdebstrap --quiet --variant=minbase bookworm "$root"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt" 2>/dev/null || true
# Kept when the root's own ca-certificates package regenerates the bundle.
mkdir -p "$root/usr/local/share/ca-certificates"
cp /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/host-bundle.crt" 2>/dev/null || true
[[ -f /etc/npmrc ]] && cp /etc/npmrc "$root/etc/npmrc"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
for m in dev dev/pts proc sys; do
  mkdir -p "$root/$m"
  mount --bind "/$m" "$root/$m"
  mounted+=("$root/$m")
done
log "root ready in $((SECONDS - t0)) s"

# A clone, as a user would have: committed files only.
git clone --quiet --no-hardlinks "$repo" "$root/root/halo"
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 TERM=dumb bash -c "cd /root/halo && $1"; }

if [[ "$only" != 2 ]]; then
  # The README's server listens on 127.0.0.1:8000, shared with this host.
  if (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null; then
    log "FAIL: 127.0.0.1:8000 is already in use on this host; stop what listens there first"; exit 1
  fi
  log "command 1: $cmd1"
  t1=$SECONDS
  in_root "$cmd1" >"$work/command1.log" 2>&1 &
  server_pid=$!
  until grep -q "ready at" "$work/command1.log" 2>/dev/null; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      tail -40 "$work/command1.log"; log "FAIL: command 1 exited before serving"; exit 1
    fi
    sleep 5
  done
  log "command 1 built and serves after $((SECONDS - t1)) s"
  # The README's curl request, verbatim, from inside the root.
  request=$(awk '/^```sh/{inb=1; buf=""; next} /^```/{if (inb && buf ~ /^curl /) {print buf; exit} inb=0} inb{buf = buf $0 "\n"}' "$repo/README.md")
  answer=$(in_root "$request")
  echo "$answer" | head -c 600; echo
  if ! echo "$answer" | grep -q '"content"'; then log "FAIL: the README's curl request got no chat completion"; exit 1; fi
  kill_root_processes; wait "$server_pid" 2>/dev/null || true
  log "command 1: PASS in $((SECONDS - t1)) s"
fi

if [[ "$only" != 1 ]]; then
  log "command 2: $cmd2"
  t2=$SECONDS
  if ! in_root "CI=true $cmd2" >"$work/command2.log" 2>&1; then
    tail -60 "$work/command2.log"; log "FAIL: command 2 (see $work/command2.log; --keep keeps it)"; exit 1
  fi
  grep -E "tests passed|tests failed" "$work/command2.log" | tail -1
  log "command 2: PASS in $((SECONDS - t2)) s"
fi
log "fresh install: PASS in $((SECONDS - t0)) s"
