# shellcheck shell=bash
# Sourced by the scripts that debootstrap a Debian root (setup-torch2-chroot.sh,
# setup-deb-root.sh): debian_mirror prints the machine's own Debian archive, the first URI of a
# `deb` source that is not the security archive, in deb822 (.sources) or one-line (sources.list)
# form, without a trailing '/'; nothing when there is none. The project names no host of its own:
# whatever mirror this machine is set up to use is the one its roots use.
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
