#include "process/clone_spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/process_launcher.h"

namespace ddprun::launcher {
namespace {

struct ChildStart {
  const ExecPlan* plan;
  int errorPipe;
  pid_t parent;
  int cgroupProcs;
  const rlimit* descriptorLimit;
};

DDPRUN_CHILD_CODE int childMain(void* argument) {
  const auto* start = static_cast<const ChildStart*>(argument);
  execChild(*start->plan, start->errorPipe, start->parent, start->cgroupProcs,
            start->descriptorLimit);
}

}  // namespace

CloneSpawner::~CloneSpawner() {
  if (childStack_ != nullptr) ::munmap(childStack_, kChildStackBytes);
}

pid_t CloneSpawner::spawn(const ExecPlan& plan, int cgroupProcs) {
  if (self_ == 0) self_ = ::getpid();
  if (childStack_ == nullptr) {
    void* stack = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
      throw SpawnError(fmt::format("cannot start {}: mmap: {}", plan.path(), std::strerror(errno)));
    }
    childStack_ = static_cast<char*>(stack);
  }
  int errorPipe[2];
  if (::pipe2(errorPipe, O_CLOEXEC) != 0) {
    throw SpawnError(fmt::format("cannot start {}: pipe: {}", plan.path(), std::strerror(errno)));
  }
  // The child shares our memory until it execs: a signal handled there would run the agent's
  // handler in it. So every signal stays blocked until the child has reset them all to default
  // (execChild) and we are back from clone.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  ChildStart start{&plan, errorPipe[1], self_, cgroupProcs,
                   descriptorLimit_ ? &*descriptorLimit_ : nullptr};
  // CLONE_VFORK: this thread resumes once the child has exec'd or exited.
  const pid_t pid = ::clone(childMain, childStack_ + kChildStackBytes,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
  const int cloneError = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(errorPipe[1]);
  if (pid < 0) {
    ::close(errorPipe[0]);
    throw SpawnError(fmt::format("cannot start {}: clone: {}", plan.path(), std::strerror(cloneError)));
  }
  // EOF: exec succeeded (the pipe closed on exec). An int: the errno of the failed step.
  int childError = 0;
  ssize_t n;
  do {
    n = ::read(errorPipe[0], &childError, sizeof childError);
  } while (n < 0 && errno == EINTR);
  ::close(errorPipe[0]);
  if (n == static_cast<ssize_t>(sizeof childError)) {
    ::waitpid(pid, nullptr, 0);
    throw SpawnError(fmt::format("cannot start {}: {}", plan.path(), std::strerror(childError)));
  }
  return pid;
}

}  // namespace ddprun::launcher
