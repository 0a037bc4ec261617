#!/usr/bin/env bash
# Times the README's main-job command (scripts/run-example.sh) on a fresh machine: a minimal Debian
# bookworm root (debootstrap --variant=minbase, from the machine's own Debian archive) holding a
# clean clone of this repository's HEAD and nothing else, entered with chroot. The command runs
# there twice: the first run installs and builds from nothing, the second must find everything in
# place. Prints each run's wall time, the first run's split into packages (apt), build and job, and
# the machine's load before and after. Needs root and debootstrap; the root is deleted afterwards.
#
#   scripts/time-fresh-main-job.sh            time the standalone job
#   scripts/time-fresh-main-job.sh --2nodes   time scripts/run-example.sh --2nodes
#
# Environment:
#   DDPRUN_FRESH_DIR       where the root is made (default /var/tmp; a new directory below it)
#   DDPRUN_DEBIAN_MIRROR   Debian mirror (default: the machine's own, from its apt sources)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# debian_mirror, unmount_all
source scripts/lib/debian-root.sh
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
SUITE=bookworm
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

job_args=()
case "${1:-}" in
  "") ;;
  --2nodes) job_args=(--2nodes) ;;
  *) echo "time-fresh-main-job: error: unknown argument '$1'; use --2nodes or nothing" >&2; exit 2 ;;
esac
if [[ $EUID -ne 0 ]]; then
  echo "time-fresh-main-job: error: needs root (debootstrap, chroot, mount); re-run with sudo" >&2
  exit 2
fi
command -v debootstrap > /dev/null ||
  { echo "time-fresh-main-job: error: debootstrap is missing; run: apt-get install debootstrap" >&2; exit 2; }
mirror="${DDPRUN_DEBIAN_MIRROR:-$(debian_mirror)}"
mirror="${mirror%/}"
[[ -n $mirror ]] || {
  echo "time-fresh-main-job: error: no Debian archive in /etc/apt/sources.list(.d); set DDPRUN_DEBIAN_MIRROR" >&2
  exit 2
}
commit=$(git rev-parse HEAD)
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  echo "time-fresh-main-job: note: uncommitted changes are not measured (the clone holds HEAD, ${commit:0:12})"
fi

work=$(mktemp -d "${DDPRUN_FRESH_DIR:-/var/tmp}/ddprun-fresh.XXXXXX")
root=$work/root
cleanup() {
  unmount_all "$work" || echo "time-fresh-main-job: warning: mounts left below $work" >&2
  rm -rf --one-file-system -- "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

log() { printf 'time-fresh-main-job: %s\n' "$*"; }
now_us() { echo "${EPOCHREALTIME/./}"; }
seconds_since() { awk -v a="$1" -v b="$(now_us)" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }

log "load before: $(uptime | sed 's/.*load average/load average/') on $(nproc) CPUs"
t=$(now_us)
log "debootstrap --variant=minbase $SUITE into $root (not timed below) ..."
debootstrap --variant=minbase "$SUITE" "$root" "$mirror" > "$work/debootstrap.log" 2>&1 || {
  tail -n 15 "$work/debootstrap.log" >&2
  echo "time-fresh-main-job: error: debootstrap failed; check access to $mirror" >&2
  exit 1
}
printf 'deb %s %s main\n' "$mirror" "$SUITE" > "$root/etc/apt/sources.list"
cp -L /etc/resolv.conf /etc/hosts "$root/etc/" 2> /dev/null || true
log "debootstrap took $(seconds_since "$t") s"

git clone --quiet --no-hardlinks "$(git rev-parse --path-format=absolute --git-common-dir)" "$root/root/ddprun"
git -C "$root/root/ddprun" checkout --quiet --detach "$commit"
for d in proc sys dev; do
  mount --rbind "/$d" "$root/$d"
  mount --make-rslave "$root/$d"
done

# One run of the main job in the root; its output is shown with the seconds since its start, and
# the lines that end a step (each install-deps set, the build) are the marks of its summary.
run_job() {
  local label=$1 start line last="" at cpu="" marks=()
  start=$(now_us)
  while IFS= read -r line; do
    last=$line
    at=$(seconds_since "$start")
    printf '%7s s | %s\n' "$at" "$line"
    case "$line" in
      install-deps:\ the\ *\ set\ installed) marks+=("${line#install-deps: the } at $at s") ;;
      install-deps:\ all\ *\ present) marks+=("${line#install-deps: all * of the } at $at s") ;;
      build:\ *\ ready) marks+=("build ready at $at s") ;;
      cpu\ *) cpu=${line#cpu } ;;
    esac
  done < <(chroot "$root" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 \
    /bin/bash -c 'cd /root/ddprun && TIMEFORMAT="cpu %U s user, %S s system"
                  time scripts/run-example.sh "$@"; echo "exit status $?"' \
    run-example "${job_args[@]}" 2>&1)
  [[ $last == "exit status 0" ]] || { echo "time-fresh-main-job: error: the $label run failed" >&2; exit 1; }
  # The CPU time is the whole run's: every process it waited for (bash's `time`).
  local IFS=";"
  printf 'time-fresh-main-job: %s run: %s s (%s; CPU %s)\n' "$label" "$(seconds_since "$start")" \
    "${marks[*]/#/ }" "$cpu" | sed 's/( /(/' | tee -a "$work/summary"
}

log "first run: scripts/run-example.sh${job_args[*]:+ ${job_args[*]}} in a root with nothing installed"
run_job first
log "second run: the same command again"
run_job second
log "load after: $(uptime | sed 's/.*load average/load average/')"
echo
cat "$work/summary"
