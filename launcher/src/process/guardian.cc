#include "process/guardian.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "core/kept_process.h"
#include "ddprun/common/safe_files.h"
#include "process/worker_cgroup.h"

namespace ddprun::launcher {
namespace {

// SIGKILLs every process (but this one) whose environment holds `entry` ("DDPRUN_AGENT=<marker>")
// and was not kept on purpose (core/kept_process.h: DDPRUN_DETACHED=<marker>, which `ddprun
// detach` sets, so it also spares a kept process that still carries the marker), until none is
// left (those being killed may still fork) or `patience` runs out. Processes of other users
// cannot be read, and are not ours anyway.
void killHolders(const std::string& entry, std::chrono::milliseconds patience) {
  const std::string self = std::to_string(::getpid());
  const auto equals = entry.find('=');
  const std::string kept =
      equals == std::string::npos ? std::string() : keptEntry(entry.substr(equals + 1));
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    int found = 0;
    if (DIR* proc = ::opendir("/proc")) {
      while (dirent* process = ::readdir(proc)) {
        const char* name = process->d_name;
        if (name[0] < '1' || name[0] > '9' || self == name) continue;
        const pid_t pid = static_cast<pid_t>(std::atol(name));
        const auto bytes = readEnviron(pid);
        if (!bytes || !environHolds(*bytes, entry) || environHolds(*bytes, kept)) continue;
        ::kill(pid, SIGKILL);
        ++found;
      }
      ::closedir(proc);
    }
    if (found == 0 || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Closes every descriptor from 3 up but `keep`: two close_range calls (Linux 5.9+) where a loop
// of a thousand close calls, most of them on nothing, cost the guardian a few hundred
// microseconds of CPU that the agent's own start competes for on a small machine.
void closeAllBut(int keep) {
  const auto closeRange = [](unsigned first, unsigned last) {
    if (first > last || ::syscall(SYS_close_range, first, last, 0U) == 0) return;
    for (unsigned fd = first; fd <= last && fd < 1024; ++fd) ::close(static_cast<int>(fd));
  };
  closeRange(3, static_cast<unsigned>(keep) - 1);
  closeRange(static_cast<unsigned>(keep) + 1, ~0U);
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
  closeAllBut(commandFd);
  std::set<pid_t> groups;
  std::string cgroup;
  // Every directory the agent registered (its scratch and private directories, and any other):
  // each "d" line adds one, none replaces another.
  std::vector<std::string> directories;
  std::string environmentEntry;
  std::string pending;
  char buffer[512];
  for (;;) {
    const ssize_t n = ::read(commandFd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the agent is gone, however it went
    pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos;
         pending.erase(0, end + 1)) {
      const std::string line = pending.substr(0, end);
      if (line.empty()) continue;
      if (line[0] == 'x') ::_exit(0);
      if (line[0] == 'c') cgroup = line.substr(1);
      if (line[0] == 'd') directories.push_back(line.substr(1));
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
  for (const std::string& directory : directories) {
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  }
  ::_exit(0);
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

void Guardian::send(const std::string& line) { (void)common::writeAll(commandFd_, line + "\n"); }

void Guardian::track(pid_t processGroup) { send(fmt::format("+{}", processGroup)); }
void Guardian::untrack(pid_t processGroup) { send(fmt::format("-{}", processGroup)); }
void Guardian::guardCgroup(const std::string& path) { send("c" + path); }
void Guardian::removeOnDeath(const std::string& directory) { send("d" + directory); }
void Guardian::killHoldersOf(const std::string& entry) { send("e" + entry); }

}  // namespace ddprun::launcher
