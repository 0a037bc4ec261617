// The Python stack of every thread of a worker that loaded ddprun's stack hook
// (python_stack_hook.h): faulthandler writes it into <dir>/<pid>.txt when the hook's signal
// arrives.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "core/file_text.h"
#include "ddprun/common/safe_files.h"
#include "hang/evidence_parts.h"

namespace ddprun::launcher::evidence {

namespace {

using std::chrono::milliseconds;

// Whether `pid` has a handler for `signal` (SigCgt in /proc/<pid>/status). The hook's signal is
// a real-time one, whose default action terminates: it is sent only to a process that catches it.
std::optional<bool> catchesSignal(pid_t pid, int signal) {
  const auto status = readSmallFile(fmt::format("/proc/{}/status", pid));
  if (!status) return std::nullopt;
  for (const std::string& line : splitLines(*status)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const std::string hex = trimmed(line.substr(7));
    // Bit (signal - 1) of a hex mask that may be wider than 64 bits.
    const int bit = signal - 1;
    const std::size_t digitFromEnd = static_cast<std::size_t>(bit / 4);
    if (bit < 0 || digitFromEnd >= hex.size()) return false;
    const char digit = hex[hex.size() - 1 - digitFromEnd];
    int value = 0;
    if (digit >= '0' && digit <= '9')
      value = digit - '0';
    else if (digit >= 'a' && digit <= 'f')
      value = digit - 'a' + 10;
    else if (digit >= 'A' && digit <= 'F')
      value = digit - 'A' + 10;
    return ((value >> (bit % 4)) & 1) != 0;
  }
  return std::nullopt;
}

std::optional<off_t> fileSize(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return info.st_size;
}

// The size of the hook's dump file of `pid` before the signal, when the hook is there to answer
// it; otherwise nothing, and a note saying why no signal is sent.
std::optional<off_t> hookReady(pid_t pid, int signal, const std::string& path,
                               HangEvidence& evidence) {
  const auto sizeBefore = fileSize(path);
  if (!sizeBefore) {
    evidence.notes.push_back(fmt::format(
        "Python stack: none ({} does not exist: not a Python process, or the stack hook is not "
        "loaded in it)",
        path));
    return std::nullopt;
  }
  const auto catches = catchesSignal(pid, signal);
  if (!catches) {
    evidence.notes.push_back(fmt::format("Python stack: none (cannot read /proc/{}/status)", pid));
    return std::nullopt;
  }
  if (!*catches) {
    // Sending it would kill the process (a real-time signal's default action): the hook is not
    // registered there (a stale file from an earlier process with this pid, or a hook that failed).
    evidence.notes.push_back(fmt::format(
        "Python stack: none (process {} does not catch signal {}: the stack hook is not active "
        "in it)",
        pid, signal));
    return std::nullopt;
  }
  return sizeBefore;
}

// Where the dump is in the file: [base, last), `grown` when there is one, `settled` when it
// stopped growing before the deadline.
struct DumpExtent {
  off_t base = 0;
  off_t last = 0;
  bool grown = false;
  bool settled = false;
};

// Waits for `path` to grow from `sizeBefore` and then stay quiet for a while, or for `deadline`.
DumpExtent awaitDump(const std::string& path, off_t sizeBefore, Clock::time_point deadline) {
  constexpr auto kQuiet = milliseconds(50);
  DumpExtent dump{sizeBefore, sizeBefore};
  auto lastChange = Clock::now();
  for (;;) {
    std::this_thread::sleep_for(milliseconds(10));
    const auto now = Clock::now();
    const off_t size = fileSize(path).value_or(dump.last);
    if (size != dump.last) {
      if (size < dump.base)
        dump.base = 0;  // truncated: a new process with this pid started a new file
      dump.last = size;
      lastChange = now;
      dump.grown = size > dump.base;
    }
    if (dump.grown && now - lastChange >= kQuiet) {
      dump.settled = true;
      break;
    }
    if (now >= deadline) break;
  }
  return dump;
}

}  // namespace

void collectPythonStack(pid_t pid, const EvidenceOptions& options, HangEvidence& evidence) {
  const int signal = options.pythonStackSignal;
  const std::string path = fmt::format("{}/{}.txt", options.pythonStackDir, pid);
  const auto sizeBefore = hookReady(pid, signal, path, evidence);
  if (!sizeBefore) return;
  if (isStopped(processState(pid))) {
    evidence.notes.push_back(fmt::format(
        "Python stack: process {} is stopped (state T); the dump comes only once it continues",
        pid));
  }

  const auto start = Clock::now();
  if (::kill(pid, signal) != 0) {
    evidence.notes.push_back(fmt::format("Python stack: cannot send signal {} to {}: {}", signal,
                                         pid, errorText(errno)));
    return;
  }
  const DumpExtent dump = awaitDump(path, *sizeBefore, start + options.pythonWait);
  if (!dump.grown) {
    evidence.notes.push_back(fmt::format(
        "Python stack: {} did not grow within {} ms of signal {} (the process may be stopped, "
        "blocking the signal, or gone)",
        path, elapsedMs(start), signal));
    return;
  }
  // The dump file is in the private directory, but the worker writes it: never through a link.
  const auto length = static_cast<std::size_t>(dump.last - dump.base);
  std::string text = readFileText(path, nullptr, length, static_cast<std::size_t>(dump.base),
                                  common::Links::kRefuse)
                         .value_or("");
  text.resize(std::min(text.size(), length));
  if (text.empty()) {
    evidence.notes.push_back(fmt::format("Python stack: cannot read {}", path));
    return;
  }
  evidence.pythonStack = std::move(text);
  if (!dump.settled) {
    evidence.notes.push_back(
        fmt::format("Python stack: {} was still growing after {} ms; the dump may be incomplete",
                    path, elapsedMs(start)));
  }
}

}  // namespace ddprun::launcher::evidence
