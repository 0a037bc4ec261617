#include "process_group.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::launcher {
namespace {

// Whether /proc/<pid>/environ holds `entry` ("NAME=value") as one whole entry. Processes of
// other users cannot be read, and are not ours anyway.
bool environmentHolds(const char* pid, const std::string& entry) {
  std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  for (std::string item; std::getline(in, item, '\0');) {
    if (item == entry) return true;
  }
  return false;
}

// SIGKILLs every process (but this one) whose environment holds `entry`, until none is left
// (those being killed may still fork) or `patience` runs out.
void killHolders(const std::string& entry, std::chrono::milliseconds patience) {
  const std::string self = std::to_string(::getpid());
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    int found = 0;
    if (DIR* proc = ::opendir("/proc")) {
      while (dirent* process = ::readdir(proc)) {
        const char* name = process->d_name;
        if (name[0] < '1' || name[0] > '9' || self == name) continue;
        if (environmentHolds(name, entry)) {
          ::kill(static_cast<pid_t>(std::atol(name)), SIGKILL);
          ++found;
        }
      }
      ::closedir(proc);
    }
    if (found == 0 || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Guardian commands are text lines ("+<pgid>", "-<pgid>", "c<cgroup path>", "d<directory>",
// "e<NAME=value>", "x"), each sent in one write() shorter than PIPE_BUF, so they arrive whole.
[[noreturn]] void runGuardian(int commandFd) {
  // Out of the terminal's process group: a Ctrl-C is for the agent to forward, not for us.
  ::setsid();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2}) {
    ::signal(sig, SIG_IGN);
  }
  ::prctl(PR_SET_NAME, "ddprun-guardian");
  // Hold nothing of the agent's: not its output pipes (a caller waiting for EOF), not its sockets.
  const int devNull = ::open("/dev/null", O_RDWR);
  for (int fd : {0, 1, 2}) ::dup2(devNull, fd);
  for (int fd = 3; fd < 1024; ++fd) {
    if (fd != commandFd) ::close(fd);
  }
  std::set<pid_t> groups;
  std::string cgroup;
  std::string directory;
  std::string environmentEntry;
  std::string pending;
  char buffer[512];
  for (;;) {
    const ssize_t n = ::read(commandFd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the agent is gone, however it went
    pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1)) {
      const std::string line = pending.substr(0, end);
      if (line.empty()) continue;
      if (line[0] == 'x') ::_exit(0);
      if (line[0] == 'c') cgroup = line.substr(1);
      if (line[0] == 'd') directory = line.substr(1);
      if (line[0] == 'e') environmentEntry = line.substr(1);
      if (line[0] == '+') groups.insert(static_cast<pid_t>(std::atol(line.c_str() + 1)));
      if (line[0] == '-') groups.erase(static_cast<pid_t>(std::atol(line.c_str() + 1)));
    }
  }
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  if (!cgroup.empty()) {
    killCgroup(cgroup, std::chrono::seconds(2));
    ::rmdir(cgroup.c_str());
  }
  if (!environmentEntry.empty()) killHolders(environmentEntry, std::chrono::seconds(2));
  if (!directory.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  }
  ::_exit(0);
}

// The cgroup v2 path of this process ("0::/path" in /proc/self/cgroup) under the mount point of
// the cgroup2 file system, or nothing.
std::optional<std::string> ownCgroup() {
  std::string mount;
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    // "... <mount point> <options> - cgroup2 ..."
    const auto separator = line.find(" - cgroup2 ");
    if (separator == std::string::npos) continue;
    std::istringstream fields(line.substr(0, separator));
    std::string field;
    for (int i = 0; i < 5 && fields >> field; ++i) {
      if (i == 4) mount = field;
    }
    if (!mount.empty()) break;
  }
  if (mount.empty()) return std::nullopt;
  std::ifstream own("/proc/self/cgroup");
  for (std::string line; std::getline(own, line);) {
    if (line.rfind("0::", 0) == 0) return mount + (line.size() > 3 && line[3] == '/' && line.size() == 4 ? "" : line.substr(3));
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Guardian> Guardian::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return nullptr;
  }
  if (pid == 0) {
    ::close(fds[1]);
    runGuardian(fds[0]);
  }
  ::close(fds[0]);
  return std::unique_ptr<Guardian>(new Guardian(pid, fds[1]));
}

Guardian::~Guardian() {
  send("x");
  ::close(commandFd_);
  ::waitpid(pid_, nullptr, 0);
}

void Guardian::send(const std::string& line) {
  const std::string record = line + "\n";
  ssize_t n;
  do {
    n = ::write(commandFd_, record.data(), record.size());
  } while (n < 0 && errno == EINTR);
}

void Guardian::track(pid_t processGroup) { send(fmt::format("+{}", processGroup)); }
void Guardian::untrack(pid_t processGroup) { send(fmt::format("-{}", processGroup)); }
void Guardian::guardCgroup(const std::string& path) { send("c" + path); }
void Guardian::removeOnDeath(const std::string& directory) { send("d" + directory); }
void Guardian::killHoldersOf(const std::string& entry) { send("e" + entry); }

std::unique_ptr<WorkerCgroup> WorkerCgroup::create() {
  const auto parent = ownCgroup();
  if (!parent) return nullptr;
  const std::string path = fmt::format("{}/ddprun-{}", *parent, ::getpid());
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return nullptr;
  const int fd = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    ::rmdir(path.c_str());
    return nullptr;
  }
  return std::unique_ptr<WorkerCgroup>(new WorkerCgroup(path, fd));
}

WorkerCgroup::~WorkerCgroup() {
  ::close(procsFd_);
  killAll();
  ::rmdir(path_.c_str());
}

void WorkerCgroup::killAll() { killCgroup(path_, std::chrono::seconds(2)); }

void killCgroup(const std::string& path, std::chrono::milliseconds patience) {
  const std::string procs = path + "/cgroup.procs";
  const int killFd = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    std::vector<pid_t> members;
    {
      std::ifstream in(procs);
      for (pid_t pid; in >> pid;) members.push_back(pid);
    }
    if (members.empty()) break;
    if (killFd >= 0) {
      (void)!::write(killFd, "1", 1);  // Linux 5.14+: the whole cgroup at once, no race with fork
    } else {
      for (pid_t pid : members) ::kill(pid, SIGKILL);
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (killFd >= 0) ::close(killFd);
}

WorkerProcesses::WorkerProcesses(Guardian* guardian)
    : guardian_(guardian), cgroup_(WorkerCgroup::create()), self_(::getpid()) {
  // Orphaned grandchildren come back to us instead of init: we reap them (no zombies) and can
  // find and kill them when a worker group stops.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (cgroup_ && guardian_) guardian_->guardCgroup(cgroup_->path());
}

namespace {

struct ChildStart {
  const ExecPlan* plan;
  int errorPipe;
  pid_t parent;
  int cgroupProcs;
};

DDPRUN_CHILD_CODE int childMain(void* argument) {
  const auto* start = static_cast<const ChildStart*>(argument);
  execChild(*start->plan, start->errorPipe, start->parent, start->cgroupProcs);
}

}  // namespace

WorkerProcesses::~WorkerProcesses() {
  if (childStack_ != nullptr) ::munmap(childStack_, kChildStackBytes);
}

pid_t WorkerProcesses::spawn(const ExecPlan& plan) {
  if (childStack_ == nullptr) {
    void* stack = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
      throw SpawnError(fmt::format("cannot start {}: mmap: {}", plan.path(), std::strerror(errno)));
    }
    childStack_ = static_cast<char*>(stack);
  }
  int errorPipe[2];
  if (::pipe2(errorPipe, O_CLOEXEC) != 0) {
    throw SpawnError(fmt::format("cannot start {}: pipe: {}", plan.path(), std::strerror(errno)));
  }
  // The child shares our memory until it execs: a signal handled there would run the agent's
  // handler in it. So every signal stays blocked until the child has reset them all to default
  // (execChild) and we are back from clone.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  ChildStart start{&plan, errorPipe[1], self_, cgroup_ ? cgroup_->procsFd() : -1};
  // CLONE_VFORK: this thread resumes once the child has exec'd or exited.
  const pid_t pid = ::clone(childMain, childStack_ + kChildStackBytes,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
  const int cloneError = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(errorPipe[1]);
  if (pid < 0) {
    ::close(errorPipe[0]);
    throw SpawnError(fmt::format("cannot start {}: clone: {}", plan.path(), std::strerror(cloneError)));
  }
  // EOF: exec succeeded (the pipe closed on exec). An int: the errno of the failed step.
  int childError = 0;
  ssize_t n;
  do {
    n = ::read(errorPipe[0], &childError, sizeof childError);
  } while (n < 0 && errno == EINTR);
  ::close(errorPipe[0]);
  if (n == static_cast<ssize_t>(sizeof childError)) {
    ::waitpid(pid, nullptr, 0);
    throw SpawnError(fmt::format("cannot start {}: {}", plan.path(), std::strerror(childError)));
  }
  running_.insert(pid);
  if (guardian_) guardian_->track(pid);
  return pid;
}

void WorkerProcesses::signalAll(int signal) {
  for (pid_t pid : running_) ::kill(-pid, signal);
  for (pid_t pid : lingering_) ::kill(-pid, signal);
}

std::vector<ExitedWorker> WorkerProcesses::reap() {
  std::vector<ExitedWorker> exited;
  int status = 0;
  pid_t pid;
  bool anyReaped = false;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    anyReaped = true;
    if (running_.erase(pid) > 0) {
      // Its process group outlives it while its descendants do: keep it guarded till then.
      lingering_.insert(pid);
      exited.push_back({pid, status});
    } else if (guardian_ && pid == guardian_->pid()) {
      spdlog::warn("the guardian process exited; workers still die with the agent through "
                   "their death signal");
    }
  }
  // Descendants of exited workers come back to this subreaper, so their last exit is reaped
  // here too: that is when their group stops existing and may be forgotten.
  if (anyReaped) forgetEmptyGroups();
  return exited;
}

void WorkerProcesses::forgetEmptyGroups() {
  for (auto it = lingering_.begin(); it != lingering_.end();) {
    if (::kill(-*it, 0) == 0 || errno != ESRCH) {
      ++it;
      continue;
    }
    if (guardian_) guardian_->untrack(*it);
    it = lingering_.erase(it);
  }
}

namespace {

// The parent pid of `pid` from /proc/<pid>/stat, or -1.
pid_t parentOf(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos || close + 4 > text.size()) return -1;
  try {
    return static_cast<pid_t>(std::stol(text.substr(close + 4)));
  } catch (...) {
    return -1;
  }
}

std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    if (parentOf(static_cast<pid_t>(pid)) == parent) children.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return children;
}

}  // namespace

void WorkerProcesses::killStrays() {
  if (cgroup_) cgroup_->killAll();
  for (pid_t group : lingering_) ::kill(-group, SIGKILL);
  // Killing a stray reparents its own children to us: go round until nothing is left (bounded).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    int killed = 0;
    for (pid_t pid : childrenOf(self_)) {
      if (running_.count(pid) || (guardian_ && pid == guardian_->pid())) continue;
      ::kill(pid, SIGKILL);
      ++killed;
    }
    reap();
    if (killed == 0 || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::optional<std::string> findExecutable(const std::string& name, const std::string& path) {
  auto executable = [](const std::string& candidate) {
    struct stat info{};
    return ::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
           ::access(candidate.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return std::nullopt;
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = path.find(':', start);
    std::string_view dir = std::string_view(path).substr(
        start, end == std::string::npos ? std::string::npos : end - start);
    if (dir.empty()) dir = ".";  // an empty PATH entry means the current directory
    std::string candidate(dir);
    candidate += '/';
    candidate += name;
    if (executable(candidate)) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace ddprun::launcher
