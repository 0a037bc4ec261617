#include "process/posix_launcher.h"

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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/file_text.h"
#include "core/kept_process.h"
#include "core/proc_stat.h"
#include "ddprun/common/worker_env_names.h"

namespace ddprun::launcher {

PosixLauncher::PosixLauncher(Guardian* guardian, std::optional<rlimit> workerDescriptorLimit)
    : spawner_(workerDescriptorLimit),
      guardian_(guardian),
      cgroup_(WorkerCgroup::create()),
      self_(::getpid()) {
  // Orphaned grandchildren come back to us instead of init: we reap them (no zombies) and can
  // find and kill them when a worker group stops.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (cgroup_ && guardian_) guardian_->guardCgroup(cgroup_->path());
}

pid_t PosixLauncher::spawn(const ExecPlan& plan) {
  // The marker `ddprun detach` copies into DDPRUN_DETACHED is the one its worker carries: learn
  // it from what the workers get, so that only this agent's kept processes are spared.
  for (char* const* entry = plan.envp(); *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view prefix = common::kEnvDdprunAgent;
    if (text.size() > prefix.size() && text.starts_with(prefix) && text[prefix.size()] == '=') {
      keptEntry_ = keptEntry(text.substr(prefix.size() + 1));
    }
  }
  const pid_t pid = spawner_.spawn(
      plan, cgroup_ ? CgroupTarget{cgroup_->cloneIntoFd(), cgroup_->procsFd()} : CgroupTarget{});
  running_.insert(pid);
  if (guardian_) guardian_->track(pid);
  return pid;
}

void PosixLauncher::signalAll(int signal) {
  for (pid_t pid : running_) ::kill(-pid, signal);
  for (pid_t pid : lingering_) ::kill(-pid, signal);
}

void PosixLauncher::signalLeaders(int signal) {
  for (pid_t pid : running_) ::kill(pid, signal);
}

void PosixLauncher::signalProcess(pid_t pid, int signal) { ::kill(pid, signal); }

bool PosixLauncher::anyLeftBehind() const {
  return std::any_of(lingering_.begin(), lingering_.end(),
                     [](pid_t group) { return ::kill(-group, 0) == 0 || errno != ESRCH; });
}

bool PosixLauncher::belongsToWorkers(pid_t pid) const {
  // A chain of parents ends at init (1), the kernel's threads (0, 2) or this agent; the bound
  // only guards against a chain that a reused pid made circular while it was read.
  constexpr int kMaxDepth = 4096;
  for (int depth = 0; depth < kMaxDepth && pid > 1 && pid != self_; ++depth) {
    if (running_.count(pid) > 0) return true;
    const auto stat = readProcStat(pid);
    if (!stat) return false;  // gone
    pid = stat->parent;
  }
  return false;
}

std::vector<ExitedWorker> PosixLauncher::reap() {
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
      spdlog::warn(
          "the guardian process exited; workers still die with the agent through "
          "their death signal");
    }
  }
  // Descendants of exited workers come back to this subreaper, so their last exit is reaped
  // here too: that is when their group stops existing and may be forgotten.
  if (anyReaped) forgetEmptyGroups();
  return exited;
}

void PosixLauncher::forgetEmptyGroups() {
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

// The parent pid of `pid`, or -1 when it is gone.
pid_t parentOf(pid_t pid) {
  const auto stat = readProcStat(pid);
  return stat ? stat->parent : -1;
}

// `parent`'s children: the kernel's list where it keeps one, else by each process's parent.
std::vector<pid_t> childrenByAnyMeans(pid_t parent) {
  if (auto children = childrenOf(parent)) return std::move(*children);
  std::vector<pid_t> children;
  for (const pid_t pid : listProcesses()) {
    if (parentOf(pid) == parent) children.push_back(pid);
  }
  return children;
}

}  // namespace

void PosixLauncher::killStrays() {
  if (cgroup_) cgroup_->killAll();
  for (pid_t group : lingering_) ::kill(-group, SIGKILL);
  // Killing a stray reparents its own children to us: go round until nothing is left (bounded).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    int killed = 0;
    for (pid_t pid : childrenByAnyMeans(self_)) {
      if (running_.count(pid) || (guardian_ && pid == guardian_->pid()) || kept(pid)) continue;
      ::kill(pid, SIGKILL);
      ++killed;
    }
    reap();
    if (killed == 0 || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool PosixLauncher::kept(pid_t pid) const {
  if (keptEntry_.empty()) return false;
  const auto bytes = readEnviron(pid);
  return bytes && environHolds(*bytes, keptEntry_);
}

void PosixLauncher::killAll() {
  if (running_.empty()) return;
  signalAll(SIGKILL);
  // SIGKILL cannot be caught: every worker is gone in moments, and each is reaped here.
  while (!running_.empty()) {
    reap();
    if (!running_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace ddprun::launcher
