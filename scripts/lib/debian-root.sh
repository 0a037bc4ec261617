# Helpers for the scripts that build a Debian root of their own (scripts/setup-torch2-chroot.sh,
# scripts/setup-deb-root.sh, scripts/time-fresh-main-job.sh). Sourced, not run.

# The machine's own Debian archive: the first URI of a `deb` source that is not the security
# archive, in deb822 (.sources) or one-line (sources.list) form, without a trailing '/'; nothing
# when there is none. The project names no host of its own: whatever mirror this machine is set up
# to use is the one a root built here uses.
debian_mirror() {
  local f
  {
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -f $f ]] || continue
      awk 'BEGIN { IGNORECASE = 1 }
           /^[[:space:]]*$/ { if (deb && uri != "") exit; deb = 0; uri = ""; next }
           /^Types:/ { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
           /^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { uri = $i; break } }
           END { if (deb && uri != "") print uri }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f $f ]] || continue
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i ~ /:\/\//) { if ($i !~ /security/) print $i; break } }' "$f"
    done
  } | awk 'NR == 1 { sub(/\/+$/, ""); print }'  # reads all its input: no SIGPIPE upstream
}

# Mount points at or below $1, deepest first.
mounts_under() {
  awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

# Unmount everything at or below $1; fail if something stays mounted.
unmount_all() {
  local m
  for _ in 1 2 3 4 5; do
    [[ -n "$(mounts_under "$1")" ]] || return 0
    while read -r m; do
      [[ -n $m ]] || continue
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(mounts_under "$1")
  done
  [[ -z "$(mounts_under "$1")" ]]
}
