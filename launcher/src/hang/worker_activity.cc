#include "hang/worker_activity.h"

#include <unistd.h>

#include <algorithm>

#include "core/proc_stat.h"

namespace ddprun::launcher {

WorkDone workBetween(const TreeSample& before, const TreeSample& after) {
  WorkDone done;
  for (const auto& [pid, now] : after) {
    const auto then = before.find(pid);
    if (then != before.end() && then->second.startTicks == now.startTicks) {
      done.cpu += std::max(now.cpu - then->second.cpu, std::chrono::milliseconds(0));
      done.ioBytes += now.ioBytes > then->second.ioBytes ? now.ioBytes - then->second.ioBytes : 0;
    } else {
      done.cpu += now.cpu;
      done.ioBytes += now.ioBytes;
    }
  }
  return done;
}

ProcActivity::ProcActivity() : ticksPerSecond_(std::max(1L, ::sysconf(_SC_CLK_TCK))) {}

std::vector<TreeSample> ProcActivity::sample(const std::vector<pid_t>& workers) {
  std::vector<TreeSample> samples(workers.size());
  std::map<pid_t, std::size_t> bySession;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (workers[i] > 0) bySession.emplace(workers[i], i);
  }
  if (bySession.empty()) return samples;
  // One pass for all the workers: the stat file of each process (its session), then the io file
  // of those that are a worker's. Once per exit-timeout window, not per report. The candidates
  // are the agent's descendants (workers, their trees, and their orphans, which come back to the
  // agent, a subreaper): the job's size. Walking /proc read every process's stat file on the
  // machine, ~1,200 system calls with 170 processes when a job's first worker exited.
  const auto candidates = descendantsOf(::getpid());
  for (const pid_t pid : candidates ? *candidates : listProcesses()) {
    const auto stat = readProcStat(pid);
    if (!stat) continue;  // gone meanwhile
    const auto worker = bySession.find(stat->session);
    if (worker == bySession.end()) continue;
    ProcessWork work;
    work.startTicks = stat->startTicks;
    const std::uint64_t ticks =
        stat->userTicks + stat->systemTicks + stat->childUserTicks + stat->childSystemTicks;
    work.cpu =
        std::chrono::milliseconds(ticks * 1000 / static_cast<std::uint64_t>(ticksPerSecond_));
    if (const auto io = readProcIo(pid)) {
      work.ioBytes = io->readChars + io->writtenChars + io->readBytes + io->writtenBytes;
    }
    samples[worker->second].emplace(pid, work);
  }
  return samples;
}

}  // namespace ddprun::launcher
