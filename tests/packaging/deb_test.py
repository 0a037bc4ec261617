#!/usr/bin/env python3
"""The Debian package (issue #36), as a node would get it: built with cpack from the build tree,
installed with dpkg -i into a fresh copy of a minimal bookworm root, used there, removed.

    deb_test.py --build BUILD_DIR

The root is scripts/setup-deb-root.sh's (debootstrap --variant=minbase, with the Depends minbase
lacks downloaded into its apt cache), copied for each run as an overlay in a private mount
namespace, so the test downloads nothing and the cached root stays as it was. In it:
  - the downloaded packages are installed, then the .deb with a plain dpkg -i, which refuses a
    package whose Depends are not met (nothing forced);
  - a 2-worker --standalone job of the installed ddprun prints each rank;
  - `ddprun status` reads a running c10d job of the installed ddprun;
  - a job with a token (libssl3 loaded on demand): the worker's LD_PRELOAD names the relay's
    handoff shim as installed, found from /usr/bin/ddprun;
  - the man pages and the bash completion are where man and bash-completion look, and the
    installed completion completes --rdzv-b;
  - dpkg -r leaves no file behind (and --purge forgets the package).
The package holds no test or benchmark. Prints the .deb's size and the time from dpkg -i to the
job's first line (docs/benchmarks.md, "Install from the package").

Skips (77) when not root, or when the prepared root is absent (run scripts/setup-deb-root.sh).
Every wait is bounded by one deadline, and a step that fails prints what it saw.
"""
import argparse
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import SKIP, Deadline, Job, give_up, run  # noqa: E402
from ports import free_port  # noqa: E402

ROOT = os.environ.get("DDPRUN_DEB_ROOT", "/var/cache/ddprun/bookworm-minbase")
STAMP = ".ddprun-deb-root-ok"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSIDE = "DDPRUN_DEB_TEST_NAMESPACE"
# What the package must hold, as paths in it ("<libdir>" is lib or lib/<triplet>).
EXPECTED = [r"usr/bin/ddprun", r"usr/bin/ddprun-rendezvous",
            r"usr/lib(/[^/]+)?/ddprun/libddprun-relay-handoff\.so",
            r"usr/lib(/[^/]+)?/libddprun-runtime\.so\.\d+", r"usr/include/ddprun/runtime/process_group\.h",
            r"usr/lib(/[^/]+)?/cmake/ddprun/ddprunConfig\.cmake",
            r"usr/lib(/[^/]+)?/pkgconfig/ddprun-runtime\.pc",
            r"usr/share/man/man1/ddprun\.1\.gz", r"usr/share/man/man1/ddprun-rendezvous\.1\.gz",
            r"usr/share/bash-completion/completions/ddprun"]
# Not compared before install and after removal: dpkg's and the jobs' own state.
UNCOMPARED = ("proc", "dev", "sys", "run", "tmp", "root", "var/lib/dpkg", "var/log",
              "var/cache/ldconfig", "var/cache/debconf", STAMP)


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def in_root(root, *argv, env=()):
    """argv run in the root, with a clean environment."""
    return ["chroot", root, "/usr/bin/env", "-i", "PATH=" + CHROOT_PATH, "HOME=/root", "LANG=C.UTF-8",
            *env, *argv]


def checked(argv, timeout, what):
    job = run(argv, timeout, name=what)
    if job.returncode != 0:
        give_up("%s: exit %d" % (what, job.returncode), [job])
    return job


def files(root):
    """Every path under the root but UNCOMPARED, relative."""
    found = set()
    for top, dirs, names in os.walk(root):
        relative = os.path.relpath(top, root)
        relative = "" if relative == "." else relative + "/"
        dirs[:] = [d for d in dirs if (relative + d) not in UNCOMPARED]
        found.update(relative + n for n in names + dirs if (relative + n) not in UNCOMPARED)
    return found


def build_package(build, work, deadline):
    out = os.path.join(work, "cpack")
    checked(["cpack", "--config", os.path.join(build, "CPackConfig.cmake"), "-B", out],
            deadline.cap(240), "cpack")
    debs = [f for f in os.listdir(out) if re.fullmatch(r"ddprun_.+_.+\.deb", f)]
    if len(debs) != 1:
        give_up("cpack wrote %s, not one ddprun_<version>_<arch>.deb" % sorted(os.listdir(out)))
    return os.path.join(out, debs[0])


def check_contents(deb, deadline):
    fields = {}
    for name in ("Package", "Version", "Depends", "Recommends"):
        fields[name] = checked(["dpkg-deb", "-f", deb, name], deadline.cap(20), "dpkg-deb -f").output.strip()
    print("control: %s" % fields)
    listing = checked(["dpkg-deb", "-c", deb], deadline.cap(20), "dpkg-deb -c").output
    # "-rw-r--r-- root/root 543 2026-12-02 11:28 ./usr/...", a link with " -> target" after it.
    paths = [line.split(" -> ")[0].split()[-1].lstrip("./") for line in listing.splitlines()
             if line.strip()]
    for pattern in EXPECTED:
        if not any(re.fullmatch(pattern, p) for p in paths):
            give_up("the package has no %s; it holds:\n%s" % (pattern, listing))
    stray = [p for p in paths if re.search(r"test|bench", os.path.basename(p.rstrip("/")))]
    if stray:
        give_up("the package holds tests or benchmarks: %s" % stray)
    depends = [d.split()[0] for d in fields["Depends"].split(",") if d.strip()]
    if "libgloo0" not in depends:  # what libddprun-runtime links: dpkg-shlibdeps found it
        give_up("Depends lacks libgloo0 (libddprun-runtime links it): %s" % fields["Depends"])
    # ddprun-rendezvous links it; ddprun loads it for a token or TLS (then a Recommends would do).
    if "libssl3" not in depends and "libssl3" not in fields["Recommends"]:
        give_up("neither Depends nor Recommends names libssl3 (a token or TLS needs it): %s" % fields)
    return fields, depends


def mount_root(work, deadline):
    """A writable copy of the cached root: an overlay (the cache stays as it was), else a copy."""
    root = os.path.join(work, "root")
    upper, scratch = os.path.join(work, "upper"), os.path.join(work, "overlay-work")
    for d in (root, upper, scratch):
        os.mkdir(d)
    overlay = run(["mount", "-t", "overlay", "overlay", "-o",
                   "lowerdir=%s,upperdir=%s,workdir=%s" % (ROOT, upper, scratch), root],
                  deadline.cap(20), name="mount overlay")
    if overlay.returncode != 0:
        print("no overlay (%s); copying the root" % overlay.errors.strip())
        os.rmdir(root)
        checked(["cp", "-a", ROOT, root], deadline.cap(120), "cp -a root")
    for d in ("proc", "sys", "dev"):
        checked(["mount", "--rbind", "/" + d, os.path.join(root, d)], deadline.cap(10), "mount " + d)
    return root


def install_depends(root, depends, deadline):
    """The packages the prepared root downloaded, installed: the node as apt would leave it."""
    archives = os.path.join(root, "var/cache/apt/archives")
    debs = sorted("/var/cache/apt/archives/" + f for f in os.listdir(archives) if f.endswith(".deb"))
    checked(in_root(root, "dpkg", "-i", *debs), deadline.cap(120), "dpkg -i (the prepared Depends)")
    listed = run(in_root(root, "dpkg-query", "-W", "-f", "${Package}\n"), deadline.cap(20)).output.split()
    missing = [d for d in depends if d not in listed]
    if missing:
        give_up("the package depends on %s, which the prepared root neither has nor downloaded: add "
                "it to PREFETCH in scripts/setup-deb-root.sh and run it with --rebuild" % missing)


def first_job(root, deb, deadline):
    """dpkg -i, then a 2-worker job; returns the seconds dpkg -i took and from dpkg -i to the
    job's first line."""
    started = time.monotonic()
    install = run(in_root(root, "dpkg", "-i", "/tmp/" + os.path.basename(deb)), deadline.cap(120),
                  name="dpkg -i ddprun")
    if install.returncode != 0:
        give_up("dpkg -i of the package failed (its Depends?)", [install])
    installed = time.monotonic()
    job = Job(in_root(root, "ddprun", "--standalone", "--nproc-per-node", "2", "--no-python",
                      "/bin/sh", "-c", "echo rank $RANK of $WORLD_SIZE"), name="installed ddprun")
    line = job.read_line(deadline.cap(60)) or give_up("the job printed nothing", [job])
    first = time.monotonic()
    if job.wait(deadline.cap(60)) != 0:
        give_up("the installed ddprun's job failed", [job])
    seen = line + "\n" + job.output
    for rank in (0, 1):
        if "rank %d of 2" % rank not in seen:
            give_up("worker %d's line is missing" % rank, [job])
    return installed - started, first - started


def status_of_running_job(root, deadline):
    port = free_port()
    endpoint = "127.0.0.1:%d" % port
    job = Job(in_root(root, "ddprun", "--nnodes", "1", "--nproc-per-node", "1", "--rdzv-backend",
                      "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "deb-test", "--no-python",
                      "/bin/sh", "-c", "echo started; exec sleep 60"), name="c10d job")
    try:
        line = job.read_line(deadline.cap(60))
        if line is None or "started" not in line:
            give_up("the c10d job's worker did not start", [job])
        seen = []
        until = Deadline(deadline.cap(30))
        while until.left() > 0:
            status = run(in_root(root, "ddprun", "status", "--rdzv-endpoint", endpoint, "--rdzv-id",
                                 "deb-test"), until.cap(15), name="ddprun status")
            seen.append("exit %s: %s%s" % (status.returncode, status.output, status.errors))
            if status.returncode == 0 and "running" in status.output:
                print("ddprun status in the root:\n%s" % status.output.rstrip())
                return
            time.sleep(0.5)
        give_up("ddprun status never showed the job running; it said:\n%s" % "\n".join(seen[-3:]), [job])
    finally:
        job.kill()


def token_job(root, deadline):
    """A job with a token, its worker a stand-in python3 that prints its LD_PRELOAD."""
    home = os.path.join(root, "root")
    os.makedirs(os.path.join(home, "bin"), exist_ok=True)
    with open(os.path.join(home, "bin", "python3"), "w") as f:
        f.write("#!/bin/sh\nprintf 'preload=%s\\n' \"$LD_PRELOAD\"\n")
    os.chmod(os.path.join(home, "bin", "python3"), 0o755)
    open(os.path.join(home, "train.py"), "w").close()
    token = os.path.join(home, "token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    job = checked(in_root(root, "ddprun", "--standalone", "--nproc-per-node", "1", "--rdzv-conf",
                          "token_file=/root/token", "/root/train.py",
                          env=["PATH=/root/bin:" + CHROOT_PATH]),
                  deadline.cap(60), "a job with a token")
    found = re.search(r"preload=(\S*libddprun-relay-handoff\.so)", job.output)
    if not found or not os.path.isfile(root + found.group(1)):
        give_up("the worker's LD_PRELOAD does not name the installed handoff shim", [job])
    print("the worker preloads %s" % found.group(1))


def check_documentation(root, deadline):
    for program in ("ddprun", "ddprun-rendezvous"):
        page = os.path.join(root, "usr/share/man/man1/%s.1.gz" % program)
        text = checked(["zcat", page], deadline.cap(10), "zcat").output
        if not text.startswith(".\\\"") and ".TH" not in text:
            give_up("%s is not a man page" % page)
        if ".TH %s" % program.upper().replace("-", "\\-") not in text and \
                ".TH %s" % program.upper() not in text:
            give_up("%s has no .TH header for %s" % (page, program))
    if "rdzv\\-backend" not in checked(["zcat", os.path.join(root, "usr/share/man/man1/ddprun.1.gz")],
                                       deadline.cap(10), "zcat").output:
        give_up("ddprun(1) does not list --rdzv-backend")
    probe = ('source /usr/share/bash-completion/completions/ddprun && '
             'COMP_WORDS=(ddprun --rdzv-b) && COMP_CWORD=1 && _ddprun && echo "${COMPREPLY[*]}"')
    reply = checked(in_root(root, "bash", "-c", probe), deadline.cap(10), "the installed completion")
    if reply.output.strip() != "--rdzv-backend":
        give_up("ddprun --rdzv-b<TAB> in the root completes to %r" % reply.output.strip())


def mounts_under(path):
    with open("/proc/self/mountinfo") as f:
        return [m for m in (line.split()[4] for line in f) if m == path or m.startswith(path + "/")]


def remove(work):
    """The work directory, unless something is still mounted in it (the root's /dev, /proc ...):
    then it stays, and the namespace's end takes the mounts."""
    subprocess.run(["umount", "-R", os.path.join(work, "root")], capture_output=True, timeout=30)
    left = mounts_under(work)
    if left:
        print("not removing %s: still mounted there: %s" % (work, left))
        return
    subprocess.run(["rm", "-rf", "--one-file-system", "--", work], timeout=120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    args = parser.parse_args()
    if os.geteuid() != 0:
        skip("needs root: dpkg -i into a root of its own, chroot, mounts")
    if not os.path.isfile(os.path.join(ROOT, STAMP)):
        skip("no prepared bookworm root at %s; run scripts/setup-deb-root.sh" % ROOT)
    for tool in ("cpack", "dpkg-deb", "chroot", "unshare"):
        if shutil.which(tool) is None:
            skip("%s is not installed" % tool)
    if os.environ.get(INSIDE) != "1":
        # Mounts in a namespace of the test's own: they end with it, whatever happens.
        os.environ[INSIDE] = "1"
        os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable,
                              os.path.abspath(__file__), *sys.argv[1:]])

    deadline = Deadline(330)
    work = tempfile.mkdtemp(prefix="ddprun-deb-", dir="/var/tmp")
    try:
        deb = build_package(os.path.abspath(args.build), work, deadline)
        size = os.path.getsize(deb)
        _, depends = check_contents(deb, deadline)
        root = mount_root(work, deadline)
        install_depends(root, depends, deadline)
        shutil.copy(deb, os.path.join(root, "tmp"))
        before = files(root)
        dpkg_s, first_line_s = first_job(root, deb, deadline)
        status_of_running_job(root, deadline)
        token_job(root, deadline)
        check_documentation(root, deadline)
        checked(in_root(root, "dpkg", "-r", "ddprun"), deadline.cap(60), "dpkg -r ddprun")
        left = sorted(files(root) - before)
        if left:
            give_up("dpkg -r left behind: %s" % left[:20])
        # CPack's ldconfig postrm keeps the package known ("config-files") until it is purged.
        checked(in_root(root, "dpkg", "--purge", "ddprun"), deadline.cap(60), "dpkg --purge ddprun")
        state = run(in_root(root, "dpkg-query", "-W", "-f", "${db:Status-Status}", "ddprun"),
                    deadline.cap(10)).output.strip()
        if state not in ("", "not-installed"):
            give_up("after dpkg --purge the package's state is %r" % state)
        print("the .deb: %s, %d bytes (%.2f MiB)" % (os.path.basename(deb), size, size / 2**20))
        print("dpkg -i: %.2f s; dpkg -i to the job's first line: %.2f s" % (dpkg_s, first_line_s))
    finally:
        remove(work)


if __name__ == "__main__":
    main()
