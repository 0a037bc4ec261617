#!/usr/bin/env python3
"""Worker probe: records what the launcher gave this worker process, then exits 0.

    <launcher> ... env_probe.py OUT_DIR [extra args...]

Writes OUT_DIR/rank<RANK>.json (RANK from the environment; "unknown" if unset) with:
the full os.environ, sys.argv, sys.orig_argv (Python >= 3.10; else null), /proc/self/cmdline,
sys.executable, cwd, pid, ppid, pgid, sid, stdin's tty-ness and target, the open file
descriptors, the blocked / ignored signal masks, the parent-death signal, umask and a few
rlimits. Needs only the standard library of any Python 3 (no torch). The file is written under a
temporary name and renamed, so a reader never sees half a file.

Used by env_compare.py, which runs it under torchrun and under ddprun and compares the records.
"""
import json
import os
import sys


def _read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "surrogateescape")
    except OSError:
        return None


def _cmdline():
    raw = None
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")[:-1]]


def _status_masks():
    """SigBlk / SigIgn / SigCgt from /proc/self/status, as hex strings (None if unavailable)."""
    masks = {}
    text = _read_text("/proc/self/status") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigBlk", "SigIgn", "SigCgt"):
            masks[key] = value.strip()
    return masks


def _open_fds():
    """fd number -> link target, without the descriptor used to list the directory."""
    fds = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        try:
            fds[name] = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue  # the listing's own descriptor, already closed
    # os.listdir's descriptor shows up as a link to this very directory.
    own = "/proc/%d/fd" % os.getpid()
    return {k: v for k, v in sorted(fds.items(), key=lambda kv: int(kv[0])) if v != own}


def _pdeathsig():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int(0)
        pr_get_pdeathsig = 2
        if libc.prctl(pr_get_pdeathsig, ctypes.byref(value), 0, 0, 0) != 0:
            return None
        return value.value
    except Exception:  # no ctypes, not Linux, ...
        return None


def _rlimits():
    try:
        import resource
    except ImportError:
        return None
    limits = {}
    for name in ("RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_STACK", "RLIMIT_NPROC"):
        which = getattr(resource, name, None)
        if which is not None:
            try:
                limits[name] = list(resource.getrlimit(which))
            except (OSError, ValueError):
                pass
    return limits


def _stdin():
    try:
        isatty = os.isatty(0)
    except OSError:
        isatty = None
    try:
        target = os.readlink("/proc/self/fd/0")
    except OSError:
        target = None
    return isatty, target


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: env_probe.py OUT_DIR [args...]\n")
        return 2
    out_dir = sys.argv[1]
    umask = os.umask(0o022)
    os.umask(umask)
    isatty, stdin_target = _stdin()
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    record = {
        "environ": dict(os.environ),
        "argv": list(sys.argv),
        "orig_argv": list(getattr(sys, "orig_argv", None) or []) or None,
        "cmdline": _cmdline(),
        "executable": sys.executable,
        "python_version": list(sys.version_info[:3]),
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "stdin_isatty": isatty,
        "stdin_target": stdin_target,
        "fds": _open_fds(),
        "signals": _status_masks(),
        "pdeathsig": _pdeathsig(),
        "umask": umask,
        "rlimits": _rlimits(),
        "error_file_dir_exists": (os.path.isdir(os.path.dirname(error_file))
                                  if error_file else None),
    }
    os.makedirs(out_dir, exist_ok=True)
    name = "rank%s.json" % os.environ.get("RANK", "unknown")
    tmp = os.path.join(out_dir, ".%s.%d.tmp" % (name, os.getpid()))
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    os.rename(tmp, os.path.join(out_dir, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
