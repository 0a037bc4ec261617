#include "process/clone_spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

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

#if defined(__x86_64__) && defined(SYS_clone3) && defined(CLONE_INTO_CGROUP)
constexpr bool kHaveClone3 = true;
// clone3(args) whose child calls fn(arg) on the stack `args` gives it and exits with what fn
// returns (fn here never returns: it execs or _exits). glibc 2.36 wraps no clone3. The child
// starts at the syscall's return with this thread's registers and the new stack, so it must not
// come back into compiled code that expects the old stack: it calls fn straight from there
// (the stack's top is 16-byte aligned, so fn starts aligned as the ABI wants). Returns the pid,
// or -errno.
long clone3Calling(clone_args* args, int (*fn)(void*), void* arg) {
  long result = SYS_clone3;
  register int (*function)(void*) __asm__("r12") = fn;
  register void* argument __asm__("r13") = arg;
  __asm__ volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xorl %%ebp, %%ebp\n\t"
      "movq %%r13, %%rdi\n\t"
      "callq *%%r12\n\t"
      "movl %%eax, %%edi\n\t"
      "movl $60, %%eax\n\t"  // SYS_exit
      "syscall\n\t"
      "hlt\n\t"
      "1:\n\t"
      : "+a"(result)
      : "D"(args), "S"(sizeof(clone_args)), "r"(function), "r"(argument)
      : "rcx", "r11", "memory");
  return result;
}
#else
constexpr bool kHaveClone3 = false;
long clone3Calling(clone_args*, int (*)(void*), void*) { return -ENOSYS; }
#endif

// What clone3 answers where the kernel or the hierarchy cannot create a child in a cgroup
// (before 5.7, a cgroup v1 descriptor, a seccomp filter that does not know clone3): the
// cgroup.procs write still can.
bool unsupported(long error) {
  return error == ENOSYS || error == E2BIG || error == EINVAL || error == EOPNOTSUPP ||
         error == EPERM || error == EBADF;
}

}  // namespace

CloneSpawner::~CloneSpawner() {
  if (childStack_ != nullptr) ::munmap(childStack_, kChildStackBytes);
}

pid_t CloneSpawner::spawn(const ExecPlan& plan, CgroupTarget cgroup) {
  if (self_ == 0) self_ = ::getpid();
  if (childStack_ == nullptr) {
    void* stack = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
      const int error = errno;
      throw SpawnError(fmt::format("cannot start {}: mmap: {}", plan.path(), std::strerror(error)),
                       error);
    }
    childStack_ = static_cast<char*>(stack);
  }
  int errorPipe[2];
  if (::pipe2(errorPipe, O_CLOEXEC) != 0) {
    const int error = errno;
    throw SpawnError(fmt::format("cannot start {}: pipe: {}", plan.path(), std::strerror(error)),
                     error);
  }
  // The child shares our memory until it execs: a signal handled there would run the agent's
  // handler in it. So every signal stays blocked until the child has reset them all to default
  // (execChild) and we are back from clone.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  ChildStart start{&plan, errorPipe[1], self_, -1, descriptorLimit_ ? &*descriptorLimit_ : nullptr};
  // CLONE_VFORK: this thread resumes once the child has exec'd or exited.
  pid_t pid = -1;
  int cloneError = 0;
  if (kHaveClone3 && intoCgroup_ && cgroup.directoryFd >= 0) {
    clone_args args{};
    args.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.stack = reinterpret_cast<std::uintptr_t>(childStack_);
    args.stack_size = kChildStackBytes;
    args.cgroup = static_cast<std::uint64_t>(cgroup.directoryFd);
    const long result = clone3Calling(&args, childMain, &start);
    if (result >= 0) {
      pid = static_cast<pid_t>(result);
    } else if (unsupported(-result)) {
      intoCgroup_ = false;
    } else {
      cloneError = static_cast<int>(-result);
    }
  }
  if (pid < 0 && cloneError == 0) {
    start.cgroupProcs = cgroup.procsFd;
    pid = ::clone(childMain, childStack_ + kChildStackBytes, CLONE_VM | CLONE_VFORK | SIGCHLD,
                  &start);
    cloneError = errno;
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(errorPipe[1]);
  if (pid < 0) {
    ::close(errorPipe[0]);
    throw SpawnError(
        fmt::format("cannot start {}: clone: {}", plan.path(), std::strerror(cloneError)),
        cloneError);
  }
  // EOF: exec succeeded (the pipe closed on exec); otherwise the step that failed.
  if (const auto failure = readChildReport(errorPipe[0])) {
    ::waitpid(pid, nullptr, 0);
    throw SpawnError(startFailureText(plan.path(), *failure), failure->error,
                     failure->step == ChildStep::kExec);
  }
  return pid;
}

}  // namespace ddprun::launcher
