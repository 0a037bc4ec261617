#include "health/hook_runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/child_start.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kSlice = 100ms;
// A hook's line longer than this is logged in pieces.
constexpr std::size_t kMaxLine = 4096;
// The line the wrapper shell writes last: the mark and the command's exit code.
constexpr std::string_view kExitMark =
    "\x1e"
    "ddprun-hook-exit";

// The exit code once the mark's line is complete in `pending`, which is cut before it.
std::optional<int> takeExitMark(std::string& pending) {
  const auto at = pending.find(kExitMark);
  if (at == std::string::npos) return std::nullopt;
  const auto end = pending.find('\n', at);
  if (end == std::string::npos) return std::nullopt;
  int code = 0;
  const char* first = pending.data() + at + kExitMark.size() + 1;
  std::from_chars(first, pending.data() + end, code);
  // The newline the wrapper wrote before the mark (so that it starts a line) goes with it.
  const auto cut = at > 0 && pending[at - 1] == '\n' ? at - 1 : at;
  pending.erase(cut);
  if (!pending.empty() && pending.back() != '\n') pending += '\n';
  return code;
}

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
  // The command runs in a shell of its own ($1: no quoting), and the outer shell writes its exit
  // code last on the output: the agent reaps every child that exits (its subreaper's sweep), so
  // the code comes through the pipe, never through waitpid.
  std::string shell = "/bin/sh";
  std::string dashC = "-c";
  std::string wrapper = fmt::format("/bin/sh -c \"$1\"; printf '\\n{} %d\\n' $?", kExitMark);
  std::string name = "sh";
  std::string command = hook.command;
  std::vector<char*> argv{shell.data(), dashC.data(),   wrapper.data(),
                          name.data(),  command.data(), nullptr};
  ChildSteps steps;
  // Its own group: the timeout kills whatever it started too.
  steps.group = ChildSteps::Group::kNewGroup;
  steps.signals = ChildSteps::Signals::kDefault;
  steps.dieWithParent = ::getpid();
  steps.stdinFd = devNull;
  steps.stdoutFd = output[1];
  steps.stderrFd = output[1];
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
  std::optional<int> code;
  bool open = true;
  while (open && !code && !cancelled.load() && Clock::now() < deadline) {
    pollfd ready{output[0], POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto wait = std::max(0ms, std::min(left, std::chrono::milliseconds(kSlice)));
    if (::poll(&ready, 1, static_cast<int>(wait.count())) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(output[0], buffer, sizeof buffer);
    if (n > 0) {
      pending.append(buffer, static_cast<std::size_t>(n));
      code = takeExitMark(pending);
      logLines(hook.name, pending, false);
    } else if (n == 0 || errno != EINTR) {
      open = false;  // EOF without the mark: the outer shell was killed
    }
  }
  ::close(output[0]);
  logLines(hook.name, pending, true);
  // Whatever is left of its group goes (what it started in the background included).
  ::kill(-child.pid, SIGKILL);
  // Reaped here unless the agent's reaper was first.
  int ignored = 0;
  ::waitpid(child.pid, &ignored, WNOHANG);
  if (code) return {HookOutcome::Kind::kExited, *code, {}};
  if (cancelled.load()) return {HookOutcome::Kind::kCancelled, 0, {}};
  if (!open) return {HookOutcome::Kind::kNotStarted, 0, "its shell was killed"};
  return {HookOutcome::Kind::kTimedOut, 0, {}};
}

}  // namespace ddprun::launcher
