// Starting a child program: the steps a child of ddprun takes between fork (or clone) and exec,
// and the close-on-exec pipe through which it tells its parent which step failed and why.
// Every child that runs a program goes through runChild(): the workers (process/clone_spawn.h,
// on a clone that shares the agent's memory), the ssh driver's ssh, `ddprun detach`'s command
// and the hang collector's debugger (those three through spawnChild(), a fork). So each parent
// can say in one line what could not be started and why (startFailureText()).
//
// The child may share its parent's memory (clone with CLONE_VM) and its parent may be
// multi-threaded, so runChild() makes async-signal-safe calls only: everything it needs is
// prepared by the parent (ChildSteps, plain arrays for exec), and it never allocates, locks or
// logs.
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

// The child of a clone runs on a stack AddressSanitizer does not know, sharing the agent's
// memory: no instrumentation there (glibc's own posix_spawn child is not instrumented either).
#define DDPRUN_CHILD_CODE __attribute__((no_sanitize("address")))

namespace ddprun::launcher {

// What the child does before exec, in this order; each step is skipped when left as is.
struct ChildSteps {
  enum class Group {
    kInherit,     // the parent's session and process group
    kNewSession,  // setsid(): leads its own session and group (workers, a detached command)
    kNewGroup,    // setpgid(0, 0): its own group in the parent's session (ssh, the debugger)
  };
  enum class Signals {
    kInherit,  // dispositions and mask as the parent had them when it called spawnChild()
    kDefault,  // every disposition default, and the mask `signalMask` (null: nothing blocked)
  };
  Group group = Group::kInherit;
  // Not 0: the child gets SIGKILL when its parent dies, and exits 1 at once when the parent
  // (this pid) died before that was armed.
  pid_t dieWithParent = 0;
  Signals signals = Signals::kDefault;
  const sigset_t* signalMask = nullptr;
  // An open cgroup.procs the child moves itself into, or -1.
  int cgroupProcs = -1;
  // Descriptors that become the child's stdin, stdout and stderr, or -1 (inherited).
  int stdinFd = -1;
  int stdoutFd = -1;
  int stderrFd = -1;
  // Every other descriptor is closed on exec: nothing of the parent's (store sockets, pipes of
  // the job) leaks into the program.
  const char* workingDirectory = nullptr;
  const rlimit* descriptorLimit = nullptr;  // the child's RLIMIT_NOFILE, or inherited
  // The CPUs the program runs on (sched_setaffinity, `cpuAffinitySize` bytes), or inherited.
  const cpu_set_t* cpuAffinity = nullptr;
  std::size_t cpuAffinitySize = 0;
};

// The step that failed: the child's report through the pipe, or the parent's own start.
enum class ChildStep : int {
  kPipe,  // the parent could not make the report pipe
  kFork,
  kGroup,
  kParentDeath,
  kSignals,
  kCgroup,
  kDescriptors,  // stdin/stdout/stderr
  kDirectory,
  kDescriptorLimit,
  kCpuAffinity,
  kExec,
};

struct ChildFailure {
  ChildStep step = ChildStep::kExec;
  int error = 0;  // errno
};

// Runs in the child: `steps`, then execve(path, argv, envp). On failure writes a ChildFailure to
// `reportFd` (the write end of a close-on-exec pipe: its reader sees EOF once exec succeeded) and
// exits 127 when exec found nothing (ENOENT), 126 otherwise, as a shell does. Never returns.
[[noreturn]] void runChild(const ChildSteps& steps, const char* path, char* const* argv,
                           char* const* envp, int reportFd);

// The parent's side: reads what the child reported on `readFd` and closes it. Nothing: the child
// exec'd.
std::optional<ChildFailure> readChildReport(int readFd);

// A child started by spawnChild(): its pid once it exec'd, or why it did not (then it was reaped,
// or never existed).
struct SpawnedChild {
  pid_t pid = -1;
  std::optional<ChildFailure> failure;
};

// fork() + runChild(): returns once the child exec'd or failed to. Every signal is blocked in the
// parent's thread across the fork, so that no handler of the parent runs in the child before
// its dispositions are set.
SpawnedChild spawnChild(const ChildSteps& steps, const char* path, char* const* argv,
                        char* const* envp);

// "cannot start WHAT: <strerror>", the one line a parent says about a child that did not start.
std::string startFailureText(std::string_view what, const ChildFailure& failure);

}  // namespace ddprun::launcher
