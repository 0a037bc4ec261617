#include "hang/debugger_spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

#include "core/child_start.h"
#include "ddprun/common/path_lookup.h"
#include "hang/evidence_parts.h"
#include "hang/hang_evidence.h"

extern char** environ;

namespace ddprun::launcher::evidence {

using std::chrono::milliseconds;

namespace {

// The agent's environment, with messages in English (the output is parsed) and no debuginfod
// (it would download symbols over the network while the budget runs).
std::vector<std::string> debuggerEnvironment() {
  std::vector<std::string> environment;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (text.rfind("LC_ALL=", 0) == 0 || text.rfind("LANGUAGE=", 0) == 0 ||
        text.rfind("DEBUGINFOD_URLS=", 0) == 0) {
      continue;
    }
    environment.emplace_back(text);
  }
  environment.emplace_back("LC_ALL=C");
  return environment;
}

// Waits up to `patience` for `pid` to end. Another waiter (the agent reaps with waitpid(-1))
// may get its status first: then it is gone too, status unknown (nullopt, `gone` set).
std::optional<int> reap(pid_t pid, milliseconds patience, bool& gone) {
  const auto deadline = Clock::now() + patience;
  for (;;) {
    int status = 0;
    const pid_t result = ::waitpid(pid, &status, WNOHANG);
    if (result == pid) {
      gone = true;
      return status;
    }
    if (result < 0 && errno != EINTR) {
      gone = true;  // ECHILD: reaped by someone else
      return std::nullopt;
    }
    if (Clock::now() >= deadline) {
      gone = false;
      return std::nullopt;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
}

}  // namespace

std::optional<SpawnedDebugger> spawnDebugger(const std::string& debugger, pid_t target,
                                             std::string& why) {
  const std::string what = "the debugger " + debugger;
  // Searched as execvp would, in the agent's PATH: the child execs the path found.
  const char* searchPath = std::getenv("PATH");
  const std::optional<std::string> path = common::findExecutable(
      debugger, searchPath != nullptr ? searchPath : common::kDefaultSearchPath);
  if (!path) {
    why = startFailureText(what, ChildFailure{ChildStep::kExec, ENOENT});
    return std::nullopt;
  }
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) {
    why = startFailureText(what, ChildFailure{ChildStep::kPipe, errno});
    return std::nullopt;
  }
  const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devNull < 0) {
    why = startFailureText(what, ChildFailure{ChildStep::kDescriptors, errno});
    ::close(pipeFds[0]);
    ::close(pipeFds[1]);
    return std::nullopt;
  }
  std::vector<std::string> args = nativeStackCommand(debugger, target);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  std::vector<std::string> environment = debuggerEnvironment();
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);

  ChildSteps steps;
  // Its own process group (to kill it and anything it starts at once), no blocked signals and
  // default dispositions whatever the calling thread has.
  steps.group = ChildSteps::Group::kNewGroup;
  steps.signals = ChildSteps::Signals::kDefault;
  steps.stdinFd = devNull;
  steps.stdoutFd = pipeFds[1];
  steps.stderrFd = pipeFds[1];
  const SpawnedChild child = spawnChild(steps, path->c_str(), argv.data(), envp.data());
  ::close(devNull);
  ::close(pipeFds[1]);
  if (child.failure) {
    ::close(pipeFds[0]);
    why = startFailureText(what, *child.failure);
    return std::nullopt;
  }
  return SpawnedDebugger{child.pid, pipeFds[0]};
}

std::optional<int> endDebugger(pid_t pid, bool waitFirst) {
  bool gone = false;
  std::optional<int> status;
  if (waitFirst) status = reap(pid, milliseconds(2000), gone);
  if (!gone) {
    // Still running (over budget, or it closed its output without exiting): kill its group. It
    // has not been reaped, so its pid (its group's id) is not reused yet.
    int ignored = 0;
    if (::waitpid(pid, &ignored, WNOHANG) == 0) ::kill(-pid, SIGKILL);
    status = reap(pid, milliseconds(2000), gone);
  }
  return status;
}

}  // namespace ddprun::launcher::evidence
