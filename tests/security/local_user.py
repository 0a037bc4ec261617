"""Another user of the same machine, for the local attacks (docs/security.md, "On the node"): an
unprivileged account the test makes, and commands run as it.

The account is `ddprun-attacker` (made once with useradd, no home, no login shell; kept between
tests, since making and removing users is slow and racy when tests run in parallel). Commands run
under it with setpriv: its uid and gid, no supplementary groups, and no way back to root
(no_new_privs). A test that cannot have such a user (not root, no useradd or setpriv) exits 77
with the reason, through skip().
"""
import fcntl
import os
import pwd
import shutil
import subprocess
import sys

NAME = "ddprun-attacker"
SKIP = 77
_LOCK = "/run/ddprun-attacker.lock"


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)


class LocalUser:
    """The other user: its uid and gid, and how to run a command as it."""

    def __init__(self, entry):
        self.name = entry.pw_name
        self.uid = entry.pw_uid
        self.gid = entry.pw_gid

    def command(self, argv):
        """`argv` as this user: setpriv drops to its uid and gid with no other groups."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--no-new-privs", "--"] + list(argv)

    def popen(self, argv, **kwargs):
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(argv), **kwargs)

    def run(self, argv, timeout, **kwargs):
        return subprocess.run(self.command(argv), timeout=timeout, **kwargs)


def other_user():
    """The unprivileged account, made if it does not exist yet; skip() when that cannot be."""
    if os.geteuid() != 0:
        skip("making another local user needs root")
    for tool in ("useradd", "setpriv"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed (Debian: passwd, util-linux)")
    # Tests run in parallel: one of them makes the account, the others wait for it.
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return LocalUser(pwd.getpwnam(NAME))
        except KeyError:
            pass
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", NAME],
                              capture_output=True, text=True, timeout=30)
        if made.returncode != 0:
            skip(f"useradd {NAME} failed: {made.stderr.strip()}")
        return LocalUser(pwd.getpwnam(NAME))


def readable_by(user, path):
    """Whether `user` can open `path` for reading (asked of the kernel, as that user)."""
    return user.run(["test", "-r", path], timeout=10).returncode == 0
