// The kernel's view of a hung worker's threads: /proc/<pid>/task/<tid>'s name, state, wait channel
// and, where readable, kernel stack.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "core/proc_stat.h"
#include "hang/evidence_parts.h"

namespace ddprun::launcher::evidence {

namespace {

// The ids of `pid`'s threads: the main thread (tid == pid) first, then the others in creation
// order (roughly, by tid).
std::vector<pid_t> threadIds(pid_t pid, const std::string& taskDir, std::error_code& error) {
  std::vector<pid_t> tids;
  for (std::filesystem::directory_iterator it(taskDir, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    char* stop = nullptr;
    const long tid = std::strtol(name.c_str(), &stop, 10);
    if (stop != name.c_str() && *stop == '\0' && tid > 0) tids.push_back(static_cast<pid_t>(tid));
  }
  std::sort(tids.begin(), tids.end());
  std::stable_partition(tids.begin(), tids.end(), [pid](pid_t tid) { return tid == pid; });
  return tids;
}

// The kernel stack's frames: "[<0>] futex_wait_queue+0x60/0xa0" -> "futex_wait_queue+0x60/0xa0".
std::vector<std::string> kernelFrames(const std::string& stack) {
  std::vector<std::string> frames;
  for (std::string line : splitLines(stack)) {
    if (line.rfind("[<", 0) == 0) {
      const auto close = line.find("] ");
      if (close != std::string::npos) line = line.substr(close + 2);
    }
    line = trimmed(line);
    if (!line.empty()) frames.push_back(line);
  }
  return frames;
}

// The thread whose /proc directory is `dir`, or nothing when it ended meanwhile. Its kernel stack
// when readable (`anyStack` set), else the first reason it was not in `stackError`.
std::optional<ThreadView> readThread(const std::string& dir, pid_t tid, bool& anyStack,
                                     std::string& stackError) {
  ThreadView view;
  view.tid = tid;
  const auto stat = readProcStat(dir + "/stat");
  if (!stat) return std::nullopt;
  view.state = stat->state;
  if (auto comm = readSmallFile(dir + "/comm")) view.name = trimmed(*comm);
  if (auto wchan = readSmallFile(dir + "/wchan")) view.waitChannel = trimmed(*wchan);
  std::string why;
  if (auto stack = readSmallFile(dir + "/stack", &why)) {
    anyStack = true;
    view.kernelStack = kernelFrames(*stack);
  } else if (stackError.empty()) {
    stackError = why;
  }
  // The kernel finds wchan by unwinding the sleeper's stack, and says "0" when the task stirred
  // while it looked (a timer tick, a ptrace stop): a sleeper's wait channel is then the function
  // on top of the kernel stack just read, "hrtimer_nanosleep+0x8f/0x120" minus its offset.
  const bool sleeping = view.state == 'S' || view.state == 'D';
  if (sleeping && (view.waitChannel.empty() || view.waitChannel == "0") &&
      !view.kernelStack.empty()) {
    const std::string& top = view.kernelStack.front();
    view.waitChannel = top.substr(0, top.find('+'));
  }
  return view;
}

}  // namespace

void collectThreads(pid_t pid, HangEvidence& evidence) {
  const std::string taskDir = fmt::format("/proc/{}/task", pid);
  std::error_code error;
  const std::vector<pid_t> tids = threadIds(pid, taskDir, error);
  if (error && tids.empty()) {
    evidence.notes.push_back(fmt::format("threads: cannot list {}: {}", taskDir, error.message()));
    return;
  }
  std::string stackError;
  bool anyStack = false;
  for (pid_t tid : tids) {
    auto view = readThread(fmt::format("{}/{}", taskDir, tid), tid, anyStack, stackError);
    if (view) evidence.threads.push_back(std::move(*view));
  }
  if (evidence.threads.empty()) {
    evidence.notes.push_back(fmt::format("threads: none readable under {}", taskDir));
  } else if (!anyStack && !stackError.empty()) {
    evidence.notes.push_back(
        fmt::format("kernel stacks: {}/*/stack not readable ({})", taskDir, stackError));
  }
}

}  // namespace ddprun::launcher::evidence
