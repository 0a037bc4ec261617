#include "core/child_start.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/close_on_exec.h"

namespace ddprun::launcher {
namespace {

DDPRUN_CHILD_CODE [[noreturn]] void fail(int reportFd, ChildStep step, int error) {
  const ChildFailure failure{step, error};
  // Smaller than PIPE_BUF: a pipe takes it whole or not at all.
  while (::write(reportFd, &failure, sizeof failure) < 0 && errno == EINTR) {
  }
  ::_exit(step == ChildStep::kExec && error == ENOENT ? 127 : 126);
}

DDPRUN_CHILD_CODE bool becomes(int fd, int target) { return fd < 0 || ::dup2(fd, target) >= 0; }

}  // namespace

DDPRUN_CHILD_CODE void runChild(const ChildSteps& steps, const char* path, char* const* argv,
                                char* const* envp, int reportFd) {
  if (steps.group == ChildSteps::Group::kNewSession && ::setsid() < 0) {
    fail(reportFd, ChildStep::kGroup, errno);
  }
  if (steps.group == ChildSteps::Group::kNewGroup && ::setpgid(0, 0) != 0) {
    fail(reportFd, ChildStep::kGroup, errno);
  }
  if (steps.dieWithParent != 0) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(reportFd, ChildStep::kParentDeath, errno);
    // The parent may have died before the death signal was armed: then nobody would send it.
    if (::getppid() != steps.dieWithParent) ::_exit(1);
  }
  if (steps.signals == ChildSteps::Signals::kDefault) {
    struct sigaction defaults = {};
    defaults.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &defaults, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, steps.signalMask != nullptr ? steps.signalMask : &none,
                      nullptr) != 0) {
      fail(reportFd, ChildStep::kSignals, errno);
    }
  }
  // "0" moves the writer itself: done before exec, so nothing it starts can be outside.
  if (steps.cgroupProcs >= 0 && ::write(steps.cgroupProcs, "0", 1) != 1) {
    fail(reportFd, ChildStep::kCgroup, errno);
  }
  if (!becomes(steps.stdinFd, STDIN_FILENO) || !becomes(steps.stdoutFd, STDOUT_FILENO) ||
      !becomes(steps.stderrFd, STDERR_FILENO)) {
    fail(reportFd, ChildStep::kDescriptors, errno);
  }
  closeOnExecFrom3();
  if (steps.workingDirectory != nullptr && ::chdir(steps.workingDirectory) != 0) {
    fail(reportFd, ChildStep::kDirectory, errno);
  }
  // After the descriptors are marked: closeOnExecFrom3's fallback walks up to the parent's limit.
  if (steps.descriptorLimit != nullptr && ::setrlimit(RLIMIT_NOFILE, steps.descriptorLimit) != 0) {
    fail(reportFd, ChildStep::kDescriptorLimit, errno);
  }
  if (steps.cpuAffinity != nullptr &&
      ::sched_setaffinity(0, steps.cpuAffinitySize, steps.cpuAffinity) != 0) {
    fail(reportFd, ChildStep::kCpuAffinity, errno);
  }
  ::execve(path, argv, envp);
  fail(reportFd, ChildStep::kExec, errno);
}

std::optional<ChildFailure> readChildReport(int readFd) {
  ChildFailure failure;
  ssize_t n;
  do {
    n = ::read(readFd, &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  ::close(readFd);
  if (n != static_cast<ssize_t>(sizeof failure)) return std::nullopt;  // EOF: exec'd
  return failure;
}

SpawnedChild spawnChild(const ChildSteps& steps, const char* path, char* const* argv,
                        char* const* envp) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return {-1, ChildFailure{ChildStep::kPipe, errno}};
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    // Kept signals: the mask from before the fork, not the one blocking everything across it.
    if (steps.signals == ChildSteps::Signals::kInherit) {
      ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    }
    runChild(steps, path, argv, envp, report[1]);
  }
  const int forkError = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    return {-1, ChildFailure{ChildStep::kFork, forkError}};
  }
  if (auto failure = readChildReport(report[0])) {
    ::waitpid(pid, nullptr, 0);  // it exited at once
    return {-1, failure};
  }
  return {pid, std::nullopt};
}

std::string startFailureText(std::string_view what, const ChildFailure& failure) {
  return fmt::format("cannot start {}: {}", what, std::strerror(failure.error));
}

}  // namespace ddprun::launcher
