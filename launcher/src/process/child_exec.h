// The only code of ddprun that runs between the clone of a worker and its exec().
//
// Workers are started like posix_spawn does: clone(CLONE_VM | CLONE_VFORK) on a stack of their
// own, with every signal blocked around it. The child shares the agent's memory until it execs
// (no page tables copied, no copy-on-write faults, which a fork pays per worker)
// while the agent's thread waits. So the child must not write anything the agent owns, and since
// the agent is multi-threaded (store clients, the embedded store server), only async-signal-safe
// calls are allowed: everything the child needs is prepared by the parent into plain arrays
// (ExecPlan), and the child never allocates, locks or logs.
//
// In the child, in order (tini and dumb-init's rules, torchrun 2.2+'s session per worker):
//   1. setsid(): the worker leads its own session and process group, so the agent can signal the
//      whole group (grandchildren included) and a terminal's Ctrl-C reaches workers only through
//      the agent's forwarding;
//   2. PR_SET_PDEATHSIG(SIGKILL), then a check that the agent is still its parent: the worker
//      dies with the agent even when the agent is killed with SIGKILL;
//   3. default dispositions for every signal and an empty signal mask (the agent ignores SIGPIPE
//      and blocks signals; exec would keep both);
//   4. into the agent's worker cgroup when there is one and the child was not created in it
//      (clone_spawn.h: clone3 places it there where the kernel can; a descendant that leaves
//      the worker's session is still found there), stdout/stderr from the log router, every other
//      descriptor closed on exec;
//   5. the descriptor limit the agent started with (the agent raised its own for the stores it
//      hosts; a worker gets what it would get under torchrun), and with --numa-binding the CPUs
//      the agent planned for it (sched_setaffinity, inherited by every thread it starts);
//   6. execve() of an absolute path. On failure the step and errno go to the parent through a
//      close-on-exec pipe and the child exits 127 (not found) or 126 (not executable).
// The steps themselves are core/child_start.h's runChild(), which every child of ddprun runs.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include "core/child_start.h"
#include "core/exec_plan.h"

namespace ddprun::launcher {

// Runs in the child after clone(); never returns. `errorPipe` is the write end of the pipe the
// parent reads to learn whether exec succeeded (EOF) or failed (readChildReport()). `parent` is the
// agent's pid, to detect that it died before the death signal was armed. `cgroupProcs` is an
// open cgroup.procs file to join, or -1 (no worker cgroup, or the child was created in it).
// `descriptorLimit`, when not null, becomes the child's RLIMIT_NOFILE.
[[noreturn]] void execChild(const ExecPlan& plan, int errorPipe, pid_t parent, int cgroupProcs,
                            const rlimit* descriptorLimit);

}  // namespace ddprun::launcher
