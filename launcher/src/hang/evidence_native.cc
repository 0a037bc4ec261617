// A native backtrace of every thread of a hung worker, by eu-stack or gdb within a budget (the
// worker's kill, and so the group's restart, waits for it). What the budget cuts short is said in
// a note.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <thread>

#include "hang/debugger_spawn.h"
#include "hang/evidence_parts.h"
#include "hang/hang_evidence.h"

namespace ddprun::launcher {

NativeStackTool nativeStackTool(const std::string& path) {
  return std::filesystem::path(path).filename() == "eu-stack" ? NativeStackTool::kEuStack
                                                              : NativeStackTool::kGdb;
}

std::vector<std::string> nativeStackCommand(const std::string& path, pid_t pid) {
  const std::string pidText = std::to_string(pid);
  if (nativeStackTool(path) == NativeStackTool::kEuStack) {
    // -m: each frame's module, which names the library of a frame without a symbol.
    return {path, "-m", "-p", pidText};
  }
  return {path,
          "-p",
          pidText,
          "-batch",
          "-nx",
          "-ex",
          "set pagination off",
          "-ex",
          "thread apply all bt"};
}

bool isNativeThreadHeader(const std::string& line) {
  return line.rfind("Thread ", 0) == 0 || line.rfind("TID ", 0) == 0;
}

namespace evidence {

namespace {

using std::chrono::milliseconds;

// The gdb line that says why there is no backtrace ("ptrace: Operation not permitted."), or the
// last line it printed.
std::string debuggerComplaint(const std::vector<std::string>& lines) {
  for (const std::string& line : lines) {
    if (line.find("ptrace") != std::string::npos ||
        line.find("Could not attach") != std::string::npos ||
        line.find("No such process") != std::string::npos ||
        line.find("not permitted") != std::string::npos) {
      return trimmed(line);
    }
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const std::string line = trimmed(*it);
    if (!line.empty()) return line;
  }
  return "no output";
}

std::string describeStatus(const std::optional<int>& status) {
  if (!status) return "exit status unknown";
  if (WIFEXITED(*status)) return fmt::format("exit status {}", WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) return fmt::format("killed by signal {}", WTERMSIG(*status));
  return fmt::format("wait status {}", *status);
}

// Everything the debugger prints on `fd` (up to 8 MiB) until it closes the pipe or `deadline`
// passes (`timedOut`).
std::string readOutput(int fd, Clock::time_point deadline, bool& timedOut) {
  constexpr std::size_t kMaxOutput = 8u << 20;
  std::string output;
  timedOut = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd readable{fd, POLLIN, 0};
    const int ready = ::poll(&readable, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[16384];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (n == 0) break;  // EOF: it exited (or closed its output)
    if (output.size() < kMaxOutput) output.append(buffer, static_cast<std::size_t>(n));
  }
  return output;
}

// A debugger killed while attaching can leave the process stopped (the SIGSTOP of
// PTRACE_ATTACH still pending when the tracer died): let it run on, as it did before.
void resumeIfLeftStopped(pid_t pid, char stateBefore, HangEvidence& evidence) {
  if (isStopped(stateBefore)) return;
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (!isStopped(processState(pid))) break;
    if (attempt == 0 || attempt == 10) ::kill(pid, SIGCONT);
    std::this_thread::sleep_for(milliseconds(10));
  }
  if (isStopped(processState(pid))) {
    evidence.notes.push_back(fmt::format(
        "native stack: process {} is left stopped after the debugger; SIGCONT did not resume it",
        pid));
  }
}

// The thread headers and frames of the debugger's output.
std::string backtraceOf(const std::vector<std::string>& lines) {
  std::string backtrace;
  for (const std::string& line : lines) {
    if (isNativeThreadHeader(line) || line.rfind("#", 0) == 0) {
      backtrace += line;
      backtrace += '\n';
    }
  }
  return backtrace;
}

}  // namespace

void collectNativeStack(pid_t pid, const EvidenceOptions& options, HangEvidence& evidence) {
  const char stateBefore = processState(pid);
  const auto start = Clock::now();
  std::string why;
  const auto debugger = spawnDebugger(options.debugger, pid, why);
  if (!debugger) {
    evidence.notes.push_back(fmt::format("native stack: {}", why));
    return;
  }
  bool timedOut = false;
  const std::string output = readOutput(debugger->output, start + options.debuggerBudget, timedOut);
  ::close(debugger->output);
  const std::optional<int> status = endDebugger(debugger->pid, /*waitFirst=*/!timedOut);
  const long long took = elapsedMs(start);
  resumeIfLeftStopped(pid, stateBefore, evidence);

  const std::vector<std::string> lines = splitLines(output);
  std::string backtrace = backtraceOf(lines);
  if (timedOut) {
    // The kill does not wait longer than the budget: say what it cost, and how to get more.
    evidence.notes.push_back(fmt::format(
        "native stack: {} within {:g} s ({} was stopped at the budget); "
        "--hang-native-stack-budget to wait longer",
        backtrace.empty() ? "not collected" : "only partly collected",
        static_cast<double>(options.debuggerBudget.count()) / 1000.0, options.debugger));
  }
  if (backtrace.empty()) {
    if (!timedOut) {
      evidence.notes.push_back(fmt::format("native stack: {} gave no backtrace ({}, {} ms): {}",
                                           options.debugger, describeStatus(status), took,
                                           debuggerComplaint(lines)));
    }
    return;
  }
  evidence.nativeStack = std::move(backtrace);
}

}  // namespace evidence

}  // namespace ddprun::launcher
