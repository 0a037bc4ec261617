#include "health/hook_runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/child_start.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kSlice = 100ms;
// A hook's line longer than this is logged in pieces.
constexpr std::size_t kMaxLine = 4096;

void logLines(const std::string& name, std::string& pending, bool flush) {
  std::size_t start = 0;
  for (;;) {
    const auto end = pending.find('\n', start);
    if (end == std::string::npos) break;
    spdlog::info("[{}] {}", name,
                 common::printable(std::string_view(pending).substr(start, end - start)));
    start = end + 1;
  }
  pending.erase(0, start);
  while (pending.size() > kMaxLine || (flush && !pending.empty())) {
    const auto piece = std::min(pending.size(), kMaxLine);
    spdlog::info("[{}] {}", name, common::printable(std::string_view(pending).substr(0, piece)));
    pending.erase(0, piece);
  }
}

}  // namespace

std::string HookOutcome::text(std::chrono::milliseconds timeout) const {
  switch (kind) {
    case Kind::kExited:
      return fmt::format("exited with {}", code);
    case Kind::kSignalled:
      return fmt::format("was killed by {}", common::signalName(code));
    case Kind::kTimedOut:
      return fmt::format("ran past its {:.1f} s timeout (--health-check-timeout) and was killed",
                         timeout.count() / 1000.0);
    case Kind::kNotStarted:
      return detail;
    case Kind::kCancelled:
      return "was stopped as the agent ends";
  }
  return {};
}

HookOutcome runHook(const HookRun& hook, const std::atomic<bool>& cancelled) {
  int output[2];
  if (::pipe2(output, O_CLOEXEC) != 0) {
    return {HookOutcome::Kind::kNotStarted, 0,
            fmt::format("cannot start it: {}", std::strerror(errno))};
  }
  const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<std::string> environment = hook.environment;
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string shell = "/bin/sh";
  std::string dashC = "-c";
  std::string command = hook.command;
  std::vector<char*> argv{shell.data(), dashC.data(), command.data(), nullptr};
  ChildSteps steps;
  // Its own group: the timeout kills whatever it started too.
  steps.group = ChildSteps::Group::kNewGroup;
  steps.signals = ChildSteps::Signals::kDefault;
  steps.dieWithParent = ::getpid();
  steps.stdinFd = devNull;
  steps.stdoutFd = output[1];
  steps.stderrFd = output[1];
  steps.quietExit = true;
  const auto started = Clock::now();
  const SpawnedChild child = spawnChild(steps, shell.c_str(), argv.data(), envp.data());
  if (devNull >= 0) ::close(devNull);
  ::close(output[1]);
  if (child.failure) {
    ::close(output[0]);
    return {HookOutcome::Kind::kNotStarted, 0, startFailureText("/bin/sh", *child.failure)};
  }
  const auto deadline = started + hook.timeout;
  std::string pending;
  std::optional<int> status;
  bool open = true;
  // Its output until it exits (what it started in the background may hold the pipe open longer),
  // the deadline or a cancel.
  while (!cancelled.load() && Clock::now() < deadline) {
    if (open) {
      pollfd ready{output[0], POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      const auto wait = std::max(0ms, std::min(left, std::chrono::milliseconds(kSlice)));
      if (::poll(&ready, 1, static_cast<int>(wait.count())) > 0) {
        char buffer[4096];
        const ssize_t n = ::read(output[0], buffer, sizeof buffer);
        if (n > 0) {
          pending.append(buffer, static_cast<std::size_t>(n));
          logLines(hook.name, pending, false);
        } else if (n == 0 || errno != EINTR) {
          open = false;  // EOF: the hook and all it started closed their output
        }
      }
    } else {
      ::usleep(10000);
    }
    int got = 0;
    const pid_t reaped = ::waitpid(child.pid, &got, WNOHANG | __WCLONE);
    if (reaped == child.pid) {
      status = got;
      break;
    }
    if (reaped < 0 && errno != EINTR) {
      status = 0;  // not ours to wait for any more
      break;
    }
  }
  if (status) {
    // What it wrote last is in the pipe already.
    ::fcntl(output[0], F_SETFL, O_NONBLOCK);
    char buffer[4096];
    for (ssize_t n; open && (n = ::read(output[0], buffer, sizeof buffer)) > 0;) {
      pending.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(output[0]);
  logLines(hook.name, pending, true);
  if (!status) {
    // Still running: its group goes (the pid is not reaped yet, so the group's id is its own).
    ::kill(-child.pid, SIGKILL);
    int ignored = 0;
    ::waitpid(child.pid, &ignored, __WCLONE);
    return {cancelled.load() ? HookOutcome::Kind::kCancelled : HookOutcome::Kind::kTimedOut, 0, {}};
  }
  if (WIFSIGNALED(*status)) return {HookOutcome::Kind::kSignalled, WTERMSIG(*status), {}};
  return {HookOutcome::Kind::kExited, WIFEXITED(*status) ? WEXITSTATUS(*status) : 0, {}};
}

}  // namespace ddprun::launcher
