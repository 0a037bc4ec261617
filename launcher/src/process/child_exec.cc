#include "process/child_exec.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include "core/close_on_exec.h"

namespace ddprun::launcher {

namespace {

// write() until done or failure; async-signal-safe.
DDPRUN_CHILD_CODE void writeAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= static_cast<size_t>(n);
  }
}

DDPRUN_CHILD_CODE [[noreturn]] void fail(int errorPipe, int error) {
  writeAll(errorPipe, &error, sizeof error);
  _exit(error == ENOENT ? 127 : 126);
}

}  // namespace

DDPRUN_CHILD_CODE void execChild(const ExecPlan& plan, int errorPipe, pid_t parent,
                                 int cgroupProcs, const rlimit* descriptorLimit) {
  if (::setsid() < 0) fail(errorPipe, errno);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errorPipe, errno);
  // The agent may have died before the death signal was armed: then nobody would send it.
  if (::getppid() != parent) _exit(1);

  struct sigaction defaults = {};
  defaults.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &defaults, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  // "0" moves the writer itself: done before exec, so nothing it starts can be outside.
  if (cgroupProcs >= 0 && ::write(cgroupProcs, "0", 1) != 1) fail(errorPipe, errno);
  if (plan.stdoutFd() >= 0 && ::dup2(plan.stdoutFd(), STDOUT_FILENO) < 0) fail(errorPipe, errno);
  if (plan.stderrFd() >= 0 && ::dup2(plan.stderrFd(), STDERR_FILENO) < 0) fail(errorPipe, errno);
  // Nothing of the agent's (store sockets, the listening socket, other workers' pipes) may leak
  // into a worker: a leaked connection would keep it open after the agent closed it.
  closeOnExecFrom3();
  if (plan.workingDirectory() != nullptr && ::chdir(plan.workingDirectory()) != 0) {
    fail(errorPipe, errno);
  }
  // After the descriptors are marked: the fallback above walks up to the agent's raised limit.
  if (descriptorLimit != nullptr && ::setrlimit(RLIMIT_NOFILE, descriptorLimit) != 0) {
    fail(errorPipe, errno);
  }
  ::execve(plan.path(), plan.argv(), plan.envp());
  fail(errorPipe, errno);
}

}  // namespace ddprun::launcher
