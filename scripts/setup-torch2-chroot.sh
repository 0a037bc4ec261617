#!/usr/bin/env bash
# Build (once) and cache a Debian trixie chroot that contains Debian's
# python3-torch (PyTorch 2.6, CPU, gloo), used by scripts/torch2-python to run
# real PyTorch 2.x clients against ddprun.
#
# Usage: scripts/setup-torch2-chroot.sh [--rebuild | --umount | --help]
#   (no option)  build the chroot unless it is already built; print its path
#   --rebuild    unmount and delete the existing chroot, then build it again
#   --umount     only remove mounts left below the chroot (an interrupted build,
#                or an older torch2-python that left its binds in place)
#
# Environment:
#   DDPRUN_TORCH2_ROOT     chroot location (default /var/cache/ddprun/torch2-trixie)
#   DDPRUN_DEBIAN_MIRROR   Debian mirror (default: the machine's own Debian archive, read from
#                          /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list)
#
# The chroot is built in "$ROOT.tmp.<pid>", verified, stamped, and only then
# renamed to "$ROOT", so an interrupted build is never taken for a good one.
# Needs root and debootstrap.
set -euo pipefail

ROOT="${DDPRUN_TORCH2_ROOT:-/var/cache/ddprun/torch2-trixie}"
MIRROR="${DDPRUN_DEBIAN_MIRROR:-}"
SUITE=trixie
STAMP_NAME=.ddprun-torch2-ok
PACKAGES=(python3-torch python3-numpy)
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
# debian_mirror, mounts_under, unmount_all
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-root.sh"

log() { printf 'setup-torch2-chroot: %s\n' "$*" >&2; }
ERRMSG=
BUILDING=
# One-line error; during the build it is printed after the log tail (cleanup).
die() {
  if [[ -n $BUILDING ]]; then ERRMSG="$*"; else printf 'setup-torch2-chroot: ERROR: %s\n' "$*" >&2; fi
  exit 1
}

mode=build
case "${1:-}" in
  "") ;;
  --rebuild) mode=rebuild ;;
  --umount | --unmount) mode=umount ;;
  -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac

# Fast path: already built (no lock, no subprocesses).
if [[ $mode == build && -f "$ROOT/$STAMP_NAME" ]]; then
  printf 'torch 2.x chroot ready at %s (%s)\n' "$ROOT" "$(<"$ROOT/$STAMP_NAME")"
  exit 0
fi

[[ $EUID -eq 0 ]] || die "must run as root (debootstrap, chroot, mount); re-run with sudo"

if [[ -z $MIRROR && $mode != umount ]]; then
  MIRROR="$(debian_mirror)"
  [[ -n $MIRROR ]] ||
    die "no Debian archive found in /etc/apt/sources.list(.d); set DDPRUN_DEBIAN_MIRROR to your mirror's URL"
fi
case "$ROOT" in
  /*) ;;
  *) die "DDPRUN_TORCH2_ROOT must be an absolute path (got '$ROOT')" ;;
esac
ROOT="${ROOT%/}"
tmp_real="$(readlink -f /tmp)"
case "$ROOT/" in
  /tmp/* | "$tmp_real"/*) die "DDPRUN_TORCH2_ROOT must not be under /tmp (torch2-python bind-mounts /tmp into it)" ;;
esac

# Delete a chroot directory, but never while anything (host /tmp, the repo,
# /dev ...) is still bind-mounted inside it (torch2-python's binds live in
# private namespaces, but an interrupted build or an older version may have
# left some on the host).
safe_remove() {
  [[ -e $1 ]] || return 0
  unmount_all "$1" || die "cannot unmount everything below $1 (busy?); stop processes using it and retry"
  rm -rf --one-file-system -- "$1"
}

mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
if ! flock -n 9; then
  log "another setup is running; waiting for its lock ($ROOT.lock) ..."
  flock 9
fi

if [[ $mode == umount ]]; then
  unmount_all "$ROOT" || die "some mounts below $ROOT are busy; stop processes using it and retry"
  log "unmounted everything below $ROOT"
  exit 0
fi

if [[ $mode == rebuild && -e $ROOT ]]; then
  log "removing existing chroot $ROOT"
  safe_remove "$ROOT"
elif [[ -f "$ROOT/$STAMP_NAME" ]]; then
  # Someone else built it while we waited for the lock.
  printf 'torch 2.x chroot ready at %s (%s)\n' "$ROOT" "$(<"$ROOT/$STAMP_NAME")"
  exit 0
elif [[ -e $ROOT ]]; then
  log "removing unstamped (incomplete) $ROOT"
  safe_remove "$ROOT"
fi

# Leftovers of interrupted builds.
for old in "$ROOT".tmp.*; do
  [[ -d $old ]] || continue
  log "removing leftover of an interrupted build: $old"
  safe_remove "$old"
done

command -v debootstrap >/dev/null 2>&1 ||
  die "debootstrap is not installed; run: apt-get update && apt-get install -y debootstrap"
[[ -e /usr/share/debootstrap/scripts/$SUITE ]] ||
  die "this debootstrap does not know '$SUITE'; run: apt-get update && apt-get install -y debootstrap"

TMP="$ROOT.tmp.$$"
LOG="$ROOT.build.log"
: >"$LOG"
cleanup() {
  local rc=$?
  if [[ -e $TMP ]]; then
    unmount_all "$TMP" && rm -rf --one-file-system -- "$TMP"
  fi
  if [[ $rc -ne 0 ]]; then
    tail -n 15 "$LOG" 2>/dev/null | sed 's/^/  | /' >&2 || true
    log "ERROR: ${ERRMSG:-build failed or interrupted (exit $rc, log: $LOG); fix the cause and re-run $0}"
  fi
}
trap cleanup EXIT
BUILDING=1
trap 'exit 130' INT TERM HUP

t0=$SECONDS
step() { log "[$((SECONDS - t0))s] $*"; }

in_tmp() {
  chroot "$TMP" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

step "debootstrap --variant=minbase $SUITE from $MIRROR into $TMP (log: $LOG) ..."
debootstrap --variant=minbase "$SUITE" "$TMP" "$MIRROR" >>"$LOG" 2>&1 ||
  die "debootstrap failed (log: $LOG); check network access to $MIRROR and re-run"

# Keep the image small and quiet: no docs/man pages/translations, no
# recommends, no daemons started by maintainer scripts.
mkdir -p "$TMP/etc/dpkg/dpkg.cfg.d" "$TMP/etc/apt/apt.conf.d"
cat >"$TMP/etc/dpkg/dpkg.cfg.d/01-ddprun-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/lintian/*
EOF
cat >"$TMP/etc/apt/apt.conf.d/01-ddprun" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOF
printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
chmod 755 "$TMP/usr/sbin/policy-rc.d"
printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$TMP/etc/apt/sources.list"
cp -L /etc/resolv.conf "$TMP/etc/resolv.conf" 2>/dev/null || true
cp -L /etc/hosts "$TMP/etc/hosts" 2>/dev/null || true

for d in proc dev sys; do
  mkdir -p "$TMP/$d"
  mount --rbind "/$d" "$TMP/$d"
  mount --make-rslave "$TMP/$d"
done

step "apt-get update (trixie) ..."
in_tmp apt-get update >>"$LOG" 2>&1 ||
  die "apt-get update inside the chroot failed (log: $LOG); check network access to $MIRROR and re-run"

step "apt-get install --no-install-recommends ${PACKAGES[*]} ..."
in_tmp apt-get install -y --no-install-recommends "${PACKAGES[@]}" >>"$LOG" 2>&1 ||
  die "installing ${PACKAGES[*]} failed (log: $LOG); re-run $0 (with --rebuild if it persists)"
in_tmp apt-get clean >>"$LOG" 2>&1
rm -rf "$TMP"/var/lib/apt/lists/* "$TMP"/var/cache/apt/*.bin

step "verifying torch inside the chroot ..."
ver="$(in_tmp USE_LIBUV=0 python3 -c '
import torch, torch.distributed as d
assert d.is_available() and d.is_gloo_available(), "gloo backend missing"
print(torch.__version__)' 2>>"$LOG" | tail -n 1)" ||
  die "torch import/gloo check failed inside the chroot (log: $LOG); re-run with --rebuild"
case "$ver" in
  2.*) ;;
  *) die "expected torch 2.x inside the chroot, got '$ver' (log: $LOG)" ;;
esac
echo "verified torch $ver" >>"$LOG"

unmount_all "$TMP" || die "cannot unmount build mounts below $TMP"
printf 'torch %s, debian %s, built %s\n' "$ver" "$SUITE" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  >"$TMP/$STAMP_NAME"
sync -f "$TMP/$STAMP_NAME" 2>/dev/null || true
mv -T "$TMP" "$ROOT"
trap - EXIT

size="$(du -sh --one-file-system "$ROOT" 2>/dev/null | cut -f1)"
step "done: torch $ver, $size"
printf 'torch 2.x chroot ready at %s (%s)\n' "$ROOT" "$(<"$ROOT/$STAMP_NAME")"
