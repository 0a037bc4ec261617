#include "hang/hang_evidence.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/file_text.h"
#include "core/proc_stat.h"
#include "ddprun/common/safe_files.h"

extern char** environ;

namespace ddprun::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string errorText(int error) { return std::strerror(error); }

long long elapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - since).count();
}

// /proc entries are small; anything past 1 MiB is not worth keeping.
constexpr std::size_t kProcFileLimit = 1u << 20;

std::optional<std::string> readSmallFile(const std::string& path, std::string* why = nullptr) {
  return readFileText(path, why, kProcFileLimit);
}

std::string trimmed(std::string text) {
  const auto isSpace = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && isSpace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && isSpace(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  std::string line;
  while (std::getline(stream, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

char processState(pid_t pid) {
  const auto stat = readProcStat(pid);
  return stat ? stat->state : '?';
}

bool isStopped(char state) { return state == 'T' || state == 't'; }

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
    if (digit >= '0' && digit <= '9') value = digit - '0';
    else if (digit >= 'a' && digit <= 'f') value = digit - 'a' + 10;
    else if (digit >= 'A' && digit <= 'F') value = digit - 'A' + 10;
    return ((value >> (bit % 4)) & 1) != 0;
  }
  return std::nullopt;
}

std::optional<off_t> fileSize(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return info.st_size;
}

// --- (a) the kernel's view ---

void collectThreads(pid_t pid, HangEvidence& evidence) {
  const std::string taskDir = fmt::format("/proc/{}/task", pid);
  std::vector<pid_t> tids;
  std::error_code error;
  for (std::filesystem::directory_iterator it(taskDir, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    char* stop = nullptr;
    const long tid = std::strtol(name.c_str(), &stop, 10);
    if (stop != name.c_str() && *stop == '\0' && tid > 0) tids.push_back(static_cast<pid_t>(tid));
  }
  if (error && tids.empty()) {
    evidence.notes.push_back(fmt::format("threads: cannot list {}: {}", taskDir, error.message()));
    return;
  }
  std::sort(tids.begin(), tids.end());
  // The main thread (tid == pid) first, then the others in creation order (roughly, by tid).
  std::stable_partition(tids.begin(), tids.end(), [pid](pid_t tid) { return tid == pid; });

  std::string stackError;
  bool anyStack = false;
  for (pid_t tid : tids) {
    const std::string dir = fmt::format("{}/{}", taskDir, tid);
    ThreadView view;
    view.tid = tid;
    const auto stat = readProcStat(dir + "/stat");
    if (!stat) continue;  // the thread ended while we looked
    view.state = stat->state;
    if (auto comm = readSmallFile(dir + "/comm")) view.name = trimmed(*comm);
    if (auto wchan = readSmallFile(dir + "/wchan")) view.waitChannel = trimmed(*wchan);
    std::string why;
    if (auto stack = readSmallFile(dir + "/stack", &why)) {
      anyStack = true;
      for (std::string line : splitLines(*stack)) {
        // "[<0>] futex_wait_queue+0x60/0xa0" -> "futex_wait_queue+0x60/0xa0"
        if (line.rfind("[<", 0) == 0) {
          const auto close = line.find("] ");
          if (close != std::string::npos) line = line.substr(close + 2);
        }
        line = trimmed(line);
        if (!line.empty()) view.kernelStack.push_back(line);
      }
    } else if (stackError.empty()) {
      stackError = why;
    }
    // This kernel finds wchan by unwinding the sleeper's stack, and says "0" when the task
    // stirred while it looked (a timer tick, a ptrace stop): a sleeper's wait channel is then
    // the function on top of the kernel stack just read, "hrtimer_nanosleep+0x8f/0x120" minus
    // its offset.
    const bool sleeping = view.state == 'S' || view.state == 'D';
    if (sleeping && (view.waitChannel.empty() || view.waitChannel == "0") &&
        !view.kernelStack.empty()) {
      const std::string& top = view.kernelStack.front();
      view.waitChannel = top.substr(0, top.find('+'));
    }
    evidence.threads.push_back(std::move(view));
  }
  if (evidence.threads.empty()) {
    evidence.notes.push_back(fmt::format("threads: none readable under {}", taskDir));
  } else if (!anyStack && !stackError.empty()) {
    evidence.notes.push_back(
        fmt::format("kernel stacks: {}/*/stack not readable ({})", taskDir, stackError));
  }
}

// --- (b) the Python stack, from the hook (python_stack_hook.h) ---

void collectPythonStack(pid_t pid, const EvidenceOptions& options, HangEvidence& evidence) {
  const int signal = options.pythonStackSignal;
  const std::string path = fmt::format("{}/{}.txt", options.pythonStackDir, pid);
  const auto sizeBefore = fileSize(path);
  if (!sizeBefore) {
    evidence.notes.push_back(fmt::format(
        "Python stack: none ({} does not exist: not a Python process, or the stack hook is not "
        "loaded in it)",
        path));
    return;
  }
  const auto catches = catchesSignal(pid, signal);
  if (!catches) {
    evidence.notes.push_back(
        fmt::format("Python stack: none (cannot read /proc/{}/status)", pid));
    return;
  }
  if (!*catches) {
    // Sending it would kill the process (a real-time signal's default action): the hook is not
    // registered there (a stale file from an earlier process with this pid, or a hook that failed).
    evidence.notes.push_back(fmt::format(
        "Python stack: none (process {} does not catch signal {}: the stack hook is not active "
        "in it)",
        pid, signal));
    return;
  }
  if (isStopped(processState(pid))) {
    evidence.notes.push_back(fmt::format(
        "Python stack: process {} is stopped (state T); the dump comes only once it continues", pid));
  }

  const auto start = Clock::now();
  if (::kill(pid, signal) != 0) {
    evidence.notes.push_back(
        fmt::format("Python stack: cannot send signal {} to {}: {}", signal, pid, errorText(errno)));
    return;
  }
  const auto deadline = start + options.pythonWait;
  constexpr auto kQuiet = milliseconds(50);
  off_t base = *sizeBefore;
  off_t last = base;
  auto lastChange = Clock::now();
  bool grown = false;
  bool settled = false;
  for (;;) {
    std::this_thread::sleep_for(milliseconds(10));
    const auto now = Clock::now();
    const off_t size = fileSize(path).value_or(last);
    if (size != last) {
      if (size < base) base = 0;  // truncated: a new process with this pid started a new file
      last = size;
      lastChange = now;
      grown = size > base;
    }
    if (grown && now - lastChange >= kQuiet) {
      settled = true;
      break;
    }
    if (now >= deadline) break;
  }
  if (!grown) {
    evidence.notes.push_back(fmt::format(
        "Python stack: {} did not grow within {} ms of signal {} (the process may be stopped, "
        "blocking the signal, or gone)",
        path, elapsedMs(start), signal));
    return;
  }
  // The dump file is in the private directory, but the worker writes it: never through a link.
  std::string text = readFileText(path, nullptr, static_cast<std::size_t>(last - base),
                                  static_cast<std::size_t>(base), common::Links::kRefuse)
                         .value_or("");
  text.resize(std::min(text.size(), static_cast<std::size_t>(last - base)));
  if (text.empty()) {
    evidence.notes.push_back(fmt::format("Python stack: cannot read {}", path));
    return;
  }
  evidence.pythonStack = std::move(text);
  if (!settled) {
    evidence.notes.push_back(fmt::format(
        "Python stack: {} was still growing after {} ms; the dump may be incomplete", path,
        elapsedMs(start)));
  }
}

// --- (c) the debugger ---

struct SpawnedDebugger {
  pid_t pid = -1;
  int output = -1;  // read end of its stdout + stderr
};

std::optional<SpawnedDebugger> spawnDebugger(const std::string& debugger, pid_t target,
                                             std::string& why) {
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) {
    why = "pipe: " + errorText(errno);
    return std::nullopt;
  }
  std::vector<std::string> args = nativeStackCommand(debugger, target);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // The agent's environment, with messages in English (the output is parsed) and no debuginfod
  // (it would download symbols over the network while the budget runs).
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
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attributes);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipeFds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipeFds[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  // Its own process group (to kill it and anything it starts at once), no blocked signals and
  // default dispositions whatever the calling thread has.
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);

  pid_t pid = -1;
  const int error = ::posix_spawnp(&pid, debugger.c_str(), &actions, &attributes, argv.data(),
                                   envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(pipeFds[1]);
  if (error != 0) {
    ::close(pipeFds[0]);
    why = errorText(error);
    return std::nullopt;
  }
  return SpawnedDebugger{pid, pipeFds[0]};
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

// The gdb line that says why there is no backtrace ("ptrace: Operation not permitted."), or the
// last line it printed.
std::string debuggerComplaint(const std::vector<std::string>& lines) {
  for (const std::string& line : lines) {
    if (line.find("ptrace") != std::string::npos || line.find("Could not attach") != std::string::npos ||
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

void collectNativeStack(pid_t pid, const EvidenceOptions& options, HangEvidence& evidence) {
  const char stateBefore = processState(pid);
  const auto start = Clock::now();
  std::string why;
  const auto debugger = spawnDebugger(options.debugger, pid, why);
  if (!debugger) {
    evidence.notes.push_back(
        fmt::format("native stack: cannot run the debugger {}: {}", options.debugger, why));
    return;
  }

  // Read everything it prints until it closes the pipe or the budget is spent.
  constexpr std::size_t kMaxOutput = 8u << 20;
  std::string output;
  const auto deadline = start + options.debuggerBudget;
  bool timedOut = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd readable{debugger->output, POLLIN, 0};
    const int ready = ::poll(&readable, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[16384];
    const ssize_t n = ::read(debugger->output, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (n == 0) break;  // EOF: it exited (or closed its output)
    if (output.size() < kMaxOutput) output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(debugger->output);

  bool gone = false;
  std::optional<int> status;
  if (!timedOut) status = reap(debugger->pid, milliseconds(2000), gone);
  if (!gone) {
    // Still running (over budget, or it closed its output without exiting): kill its group. It
    // has not been reaped, so its pid (its group's id) is not reused yet.
    int ignored = 0;
    if (::waitpid(debugger->pid, &ignored, WNOHANG) == 0) ::kill(-debugger->pid, SIGKILL);
    status = reap(debugger->pid, milliseconds(2000), gone);
  }
  const long long took = elapsedMs(start);

  // A debugger killed while attaching can leave the process stopped (the SIGSTOP of
  // PTRACE_ATTACH still pending when the tracer died): let it run on, as it did before.
  if (!isStopped(stateBefore)) {
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

  const std::vector<std::string> lines = splitLines(output);
  std::string backtrace;
  for (const std::string& line : lines) {
    if (isNativeThreadHeader(line) || line.rfind("#", 0) == 0) {
      backtrace += line;
      backtrace += '\n';
    }
  }
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

// --- the summary ---

struct Block {
  std::string header;
  std::vector<std::string> lines;
};

// Splits a dump into one block per thread: a header line (accepted by `isHeader`), then its
// frames; blank lines are dropped.
template <typename IsHeader>
std::vector<Block> threadBlocks(const std::string& text, IsHeader&& isHeader) {
  std::vector<Block> blocks;
  for (const std::string& raw : splitLines(text)) {
    if (trimmed(raw).empty()) continue;
    if (isHeader(raw) || blocks.empty()) {
      blocks.push_back({});
      if (isHeader(raw)) {
        blocks.back().header = raw;
        continue;
      }
    }
    blocks.back().lines.push_back(raw);
  }
  return blocks;
}

// At most `maxLines` lines of `blocks`: every block's header with at least its top frame, and
// further frames handed out a round at a time (the top of each stack tells the most). Blocks
// that do not fit are counted in a last line.
std::vector<std::string> fitBlocks(const std::vector<Block>& blocks, std::size_t maxLines) {
  std::vector<std::string> out;
  if (maxLines == 0 || blocks.empty()) return out;
  std::size_t total = 0;
  for (const Block& block : blocks) total += (block.header.empty() ? 0 : 1) + block.lines.size();
  std::vector<std::size_t> frames(blocks.size(), 0);
  std::size_t shown = blocks.size();
  if (total > maxLines) {
    // How many blocks get their header and a frame; if not all, one line says how many are left.
    std::size_t used = 0;
    shown = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::size_t cost =
          (blocks[i].header.empty() ? 0 : 1) + std::min<std::size_t>(1, blocks[i].lines.size());
      const std::size_t reserve = i + 1 < blocks.size() ? 1 : 0;  // the "... more" line
      if (used + cost + reserve > maxLines) break;
      used += cost;
      frames[i] = std::min<std::size_t>(1, blocks[i].lines.size());
      ++shown;
    }
    if (shown == 0) {
      // Not even one thread's header and top frame fit with the "... more" line: the first
      // thread's top lines alone.
      if (!blocks[0].header.empty()) out.push_back(blocks[0].header);
      for (const std::string& line : blocks[0].lines) {
        if (out.size() >= maxLines) break;
        out.push_back(line);
      }
      out.resize(std::min(out.size(), maxLines));
      return out;
    }
    std::size_t budget = maxLines - std::min(maxLines, used + (shown < blocks.size() ? 1 : 0));
    for (bool progress = true; budget > 0 && progress;) {
      progress = false;
      for (std::size_t i = 0; i < shown && budget > 0; ++i) {
        if (frames[i] < blocks[i].lines.size()) {
          ++frames[i];
          --budget;
          progress = true;
        }
      }
    }
  } else {
    for (std::size_t i = 0; i < blocks.size(); ++i) frames[i] = blocks[i].lines.size();
  }
  for (std::size_t i = 0; i < shown; ++i) {
    if (!blocks[i].header.empty() && out.size() < maxLines) out.push_back(blocks[i].header);
    for (std::size_t f = 0; f < frames[i] && out.size() < maxLines; ++f) {
      out.push_back(blocks[i].lines[f]);
    }
  }
  if (shown < blocks.size() && out.size() < maxLines) {
    out.push_back(fmt::format("... and {} more thread{}", blocks.size() - shown,
                              blocks.size() - shown == 1 ? "" : "s"));
  }
  return out;
}

std::string shortened(const std::string& line, std::size_t width = 240) {
  if (line.size() <= width) return line;
  return line.substr(0, width - 3) + "...";
}

std::string threadLine(const ThreadView& thread) {
  std::string wait = thread.waitChannel;
  if (wait.empty() || wait == "0") wait = "-";
  return fmt::format("tid {} {} {} {}", thread.tid, thread.name.empty() ? "?" : thread.name,
                     thread.state, wait);
}

// --- the threaded collector ---

// Writes text() into `path` (off the loop: the text can be megabytes of gdb output). The file is
// new (O_EXCL, never through a link: the rank's directory is one the worker writes into too), in
// a directory of the agent's own (made if missing, never another user's).
void saveEvidence(HangEvidence& evidence, const std::string& path) {
  const std::string directory = std::filesystem::path(path).parent_path().string();
  std::optional<common::FileError> problem = common::ensureOwnDirectories(directory);
  if (!problem) {
    auto file = common::createNewFile(path, 0600);
    problem = file ? common::writeAll(file->get(), evidence.text()) : file.error();
    if (file && !problem && ::close(file->release()) != 0) {
      problem = common::FileError{common::FileProblem::kSystem, errno};
    }
  }
  if (!problem) {
    evidence.savedTo = path;
  } else {
    evidence.notes.push_back(fmt::format("evidence: cannot write {}: {}", path, problem->describe()));
  }
}

class ThreadedEvidenceCollector final : public EvidenceCollector {
 public:
  ThreadedEvidenceCollector(EventLoop& loop, EvidenceOptions options)
      : loop_(loop), options_(std::move(options)) {}

  ~ThreadedEvidenceCollector() override {
    std::list<Job> jobs;
    {
      std::lock_guard lock(mutex_);
      jobs.swap(jobs_);
    }
    for (Job& job : jobs) {
      if (job.thread.joinable()) job.thread.join();
    }
  }

  void collect(pid_t pid, std::string saveTo, std::function<void(HangEvidence)> done) override {
    std::lock_guard lock(mutex_);
    // Join the collections that have finished, so threads do not pile up.
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->finished->load()) {
        it->thread.join();
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    auto finished = std::make_shared<std::atomic<bool>>(false);
    jobs_.push_back(Job{std::thread([this, pid, saveTo = std::move(saveTo), done = std::move(done),
                                     finished]() mutable {
                          HangEvidence evidence;
                          try {
                            evidence = collectHangEvidence(pid, options_);
                          } catch (...) {
                            evidence.pid = pid;
                            evidence.notes.push_back("evidence: collection failed unexpectedly");
                          }
                          saveEvidence(evidence, saveTo);
                          loop_.post([done = std::move(done), evidence = std::move(evidence)]() mutable {
                            done(std::move(evidence));
                          });
                          finished->store(true);
                        }),
                        finished});
  }

 private:
  struct Job {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };

  EventLoop& loop_;
  const EvidenceOptions options_;
  std::mutex mutex_;
  std::list<Job> jobs_;
};

}  // namespace

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
  return {path, "-p", pidText, "-batch", "-nx", "-ex", "set pagination off",
          "-ex", "thread apply all bt"};
}

bool isNativeThreadHeader(const std::string& line) {
  return line.rfind("Thread ", 0) == 0 || line.rfind("TID ", 0) == 0;
}

HangEvidence collectHangEvidence(pid_t pid, const EvidenceOptions& options) {
  HangEvidence evidence;
  evidence.pid = pid;
  try {
    if (pid <= 0) {
      // kill() would reach a process group or every process: never.
      evidence.notes.push_back(fmt::format("process {}: not a valid process id", pid));
      return evidence;
    }
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      evidence.notes.push_back(fmt::format("process {} does not exist (it has exited)", pid));
      return evidence;
    }
    const char state = processState(pid);
    if (state == '?') {
      evidence.notes.push_back(fmt::format("process {}: /proc/{}/stat is not readable", pid, pid));
    }
    if (state == 'Z' || state == 'X') {
      evidence.notes.push_back(
          fmt::format("process {} has exited (a zombie): no stacks to collect", pid));
      return evidence;
    }
    // The kernel's view first, as it was before the signal and the debugger disturb it.
    collectThreads(pid, evidence);
    if (options.pythonStackSignal != 0 && !options.pythonStackDir.empty()) {
      collectPythonStack(pid, options, evidence);
    }
    // The debugger last: it stops the process while it looks (and the Python dump needs it
    // running).
    if (!options.debugger.empty()) collectNativeStack(pid, options, evidence);
  } catch (const std::exception& error) {
    evidence.notes.push_back(fmt::format("evidence: collection failed: {}", error.what()));
  } catch (...) {
    evidence.notes.push_back("evidence: collection failed");
  }
  return evidence;
}

std::string HangEvidence::text() const {
  std::string out;
  out += fmt::format("=== Where process {} is ===\n", pid);
  out += fmt::format("\n--- Threads ({}), as the kernel sees them: tid name state wait-channel ---\n",
                     threads.size());
  if (threads.empty()) out += "(none)\n";
  for (const ThreadView& thread : threads) {
    out += threadLine(thread);
    out += '\n';
    for (const std::string& frame : thread.kernelStack) out += "    " + frame + "\n";
  }
  out += "\n--- Python stacks (faulthandler), most recent call first ---\n";
  out += pythonStack.empty() ? "(none)\n" : pythonStack;
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "\n--- Native stacks (debugger: eu-stack or gdb) ---\n";
  if (nativeStack.empty()) {
    out += "(none)\n";
  } else {
    bool first = true;
    for (const std::string& line : splitLines(nativeStack)) {
      if (isNativeThreadHeader(line) && !first) out += '\n';
      first = false;
      out += line;
      out += '\n';
    }
  }
  if (!notes.empty()) {
    out += "\n--- Notes ---\n";
    for (const std::string& note : notes) out += "- " + note + "\n";
  }
  return out;
}

std::vector<std::string> HangEvidence::summary(std::size_t maxLines) const {
  std::vector<std::string> lines;
  if (maxLines == 0) return lines;
  if (!trimmed(pythonStack).empty()) {
    auto blocks = threadBlocks(pythonStack, [](const std::string& line) {
      return line.rfind("Thread 0x", 0) == 0 || line.rfind("Current thread 0x", 0) == 0;
    });
    // The main thread first: its stack ends in the script's "<module>".
    std::stable_partition(blocks.begin(), blocks.end(), [](const Block& block) {
      return !block.lines.empty() && block.lines.back().find("in <module>") != std::string::npos;
    });
    lines = fitBlocks(blocks, maxLines);
  } else if (!trimmed(nativeStack).empty()) {
    auto blocks = threadBlocks(nativeStack,
                               [](const std::string& line) { return isNativeThreadHeader(line); });
    // gdb lists the threads last to first: the main thread ("Thread 1 ") first (eu-stack lists
    // it first already).
    std::stable_partition(blocks.begin(), blocks.end(), [](const Block& block) {
      return block.header.rfind("Thread 1 ", 0) == 0;
    });
    lines = fitBlocks(blocks, maxLines);
  } else {
    for (const ThreadView& thread : threads) {
      if (lines.size() + 1 == maxLines && threads.size() > maxLines) {
        lines.push_back(fmt::format("... and {} more threads", threads.size() - lines.size()));
        break;
      }
      lines.push_back(threadLine(thread));
    }
    if (lines.empty() && !notes.empty()) lines.push_back(notes.front());
  }
  for (std::string& line : lines) line = shortened(line);
  return lines;
}

std::unique_ptr<EvidenceCollector> makeThreadedEvidenceCollector(EventLoop& loop, EvidenceOptions options) {
  return std::make_unique<ThreadedEvidenceCollector>(loop, std::move(options));
}

}  // namespace ddprun::launcher
