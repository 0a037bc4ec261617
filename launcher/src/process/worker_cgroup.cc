#include "process/worker_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "core/file_text.h"
#include "core/own_cgroup.h"

namespace ddprun::launcher {
namespace {

// /proc and cgroup files are small; past this, something is wrong and the rest is not needed.
constexpr std::size_t kProcFileLimit = 4u << 20;

}  // namespace

std::unique_ptr<WorkerCgroup> WorkerCgroup::create() {
  const auto parent = ownCgroup();
  if (!parent) return nullptr;
  const std::string path = *parent + "/" + workerCgroupName(::getpid());
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return nullptr;
  const int fd = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    ::rmdir(path.c_str());
    return nullptr;
  }
  const int directory = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  return std::unique_ptr<WorkerCgroup>(new WorkerCgroup(path, fd, directory));
}

WorkerCgroup::~WorkerCgroup() {
  ::close(procsFd_);
  if (directoryFd_ >= 0) ::close(directoryFd_);
  killAll();
  ::rmdir(path_.c_str());
}

void WorkerCgroup::killAll() {
  if (killCgroup(path_, std::chrono::seconds(2))) killed_ = true;
}

bool killCgroup(const std::string& path, std::chrono::milliseconds patience) {
  bool wroteKill = false;
  const std::string procs = path + "/cgroup.procs";
  const int killFd = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    std::vector<pid_t> members;
    {
      std::istringstream in(readFileText(procs, nullptr, kProcFileLimit).value_or(""));
      for (pid_t pid; in >> pid;) members.push_back(pid);
    }
    if (members.empty()) break;
    if (killFd >= 0) {
      // Linux 5.14+: the whole cgroup at once, no race with fork.
      if (::write(killFd, "1", 1) == 1) wroteKill = true;
    } else {
      for (pid_t pid : members) ::kill(pid, SIGKILL);
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (killFd >= 0) ::close(killFd);
  return wroteKill;
}

}  // namespace ddprun::launcher
