#!/usr/bin/env bash
# Build (once) and cache a minimal Debian bookworm root (debootstrap --variant=minbase) for the
# package test (tests/packaging/deb_test.sh): it installs ddprun's .deb into a copy of this root
# with dpkg -i, which checks the package's Depends. The Depends that minbase lacks are downloaded
# here, into the root's /var/cache/apt/archives, so that the test itself downloads nothing.
#
# Usage: scripts/setup-deb-root.sh [--rebuild | --help]
#   (no option)  build the root unless it is already built; print its path
#   --rebuild    delete the existing root, then build it again
#
# Environment:
#   DDPRUN_DEB_ROOT        root location (default /var/cache/ddprun/bookworm-minbase)
#   DDPRUN_DEBIAN_MIRROR   Debian mirror (default: the machine's own Debian archive, read from
#                          /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list)
#
# The root is built in "$ROOT.tmp.<pid>", stamped, and only then renamed to "$ROOT", so an
# interrupted build is never taken for a good one. Needs root and debootstrap.
set -euo pipefail

ROOT="${DDPRUN_DEB_ROOT:-/var/cache/ddprun/bookworm-minbase}"
MIRROR="${DDPRUN_DEBIAN_MIRROR:-}"
SUITE=bookworm
STAMP_NAME=.ddprun-deb-root-ok
# The package's Depends (dpkg-shlibdeps over its binaries) that minbase lacks, and its Recommends:
# libgloo0 for libddprun-runtime, libssl3 for ddprun-rendezvous. The test says which name to
# add here when the package comes to depend on another.
PREFETCH=(libgloo0 libssl3)
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

log() { printf 'setup-deb-root: %s\n' "$*" >&2; }
die() {
  printf 'setup-deb-root: error: %s\n' "$*" >&2
  exit 1
}

rebuild=
case "${1:-}" in
  "") ;;
  --rebuild) rebuild=1 ;;
  -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac

if [[ -z $rebuild && -f "$ROOT/$STAMP_NAME" ]]; then
  printf 'bookworm root ready at %s (%s)\n' "$ROOT" "$(<"$ROOT/$STAMP_NAME")"
  exit 0
fi
[[ $EUID -eq 0 ]] || die "must run as root (debootstrap, chroot); re-run with sudo"
case "$ROOT" in
  /*) ROOT="${ROOT%/}" ;;
  *) die "DDPRUN_DEB_ROOT must be an absolute path (got '$ROOT')" ;;
esac
# shellcheck source=lib/debian-root.sh
source "$(dirname "$0")/lib/debian-root.sh"
[[ -n $MIRROR ]] || MIRROR="$(debian_mirror)"
[[ -n $MIRROR ]] ||
  die "no Debian archive found in /etc/apt/sources.list(.d); set DDPRUN_DEBIAN_MIRROR to your mirror's URL"
command -v debootstrap >/dev/null 2>&1 ||
  die "debootstrap is not installed; run scripts/install-deps.sh"

mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
if ! flock -n 9; then
  log "another setup is running; waiting for its lock ($ROOT.lock) ..."
  flock 9
fi
if [[ -z $rebuild && -f "$ROOT/$STAMP_NAME" ]]; then
  printf 'bookworm root ready at %s (%s)\n' "$ROOT" "$(<"$ROOT/$STAMP_NAME")"
  exit 0
fi
# Nothing is ever mounted below the root outside a private mount namespace (in_tmp), so a plain
# removal is safe; --one-file-system all the same.
for old in "$ROOT" "$ROOT".tmp.*; do
  [[ -e $old ]] || continue
  log "removing $old"
  rm -rf --one-file-system -- "$old"
done

TMP="$ROOT.tmp.$$"
LOG="$ROOT.build.log"
: >"$LOG"
cleanup() {
  local rc=$?
  [[ -e $TMP ]] && rm -rf --one-file-system -- "$TMP"
  if [[ $rc -ne 0 ]]; then
    tail -n 15 "$LOG" 2>/dev/null | sed 's/^/  | /' >&2 || true
    log "error: the build failed or was interrupted (exit $rc, log: $LOG); fix the cause and re-run $0"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# A command in the root, with /proc mounted in a private mount namespace that ends with it.
in_tmp() {
  # shellcheck disable=SC2016  # expanded by the inner sh
  unshare --mount --propagation private -- sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' \
    "$TMP" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

t0=$SECONDS
log "debootstrap --variant=minbase $SUITE from $MIRROR into $TMP (log: $LOG) ..."
debootstrap --variant=minbase "$SUITE" "$TMP" "$MIRROR" >>"$LOG" 2>&1 ||
  die "debootstrap failed (log: $LOG); check network access to $MIRROR and re-run"
printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$TMP/etc/apt/sources.list"
cp -L /etc/resolv.conf "$TMP/etc/resolv.conf" 2>/dev/null || true
# As an installed node has it (debootstrap writes none): jobs on 127.0.0.1 and localhost.
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$TMP/etc/hosts"
printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
chmod 755 "$TMP/usr/sbin/policy-rc.d"

log "[$((SECONDS - t0))s] apt-get install --download-only ${PREFETCH[*]} ..."
in_tmp apt-get update >>"$LOG" 2>&1 ||
  die "apt-get update inside the root failed (log: $LOG); check network access to $MIRROR"
# Only the prefetched packages in the cache (debootstrap leaves its own there): the test installs
# every .deb in it.
in_tmp apt-get clean >>"$LOG" 2>&1
in_tmp apt-get install -y --download-only --no-install-recommends "${PREFETCH[@]}" >>"$LOG" 2>&1 ||
  die "downloading ${PREFETCH[*]} failed (log: $LOG)"
ls "$TMP"/var/cache/apt/archives/*.deb >/dev/null 2>&1 || die "nothing was downloaded (log: $LOG)"
rm -rf "$TMP"/var/lib/apt/lists/* "$TMP"/var/cache/apt/*.bin "$TMP/etc/resolv.conf"

printf 'debian %s minbase, prefetched %s, built %s\n' "$SUITE" "${PREFETCH[*]}" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$TMP/$STAMP_NAME"
mv -T "$TMP" "$ROOT"
trap - EXIT
log "[$((SECONDS - t0))s] done: $(du -sh --one-file-system "$ROOT" | cut -f1)"
printf 'bookworm root ready at %s (%s)\n' "$ROOT" "$(<"$ROOT/$STAMP_NAME")"
