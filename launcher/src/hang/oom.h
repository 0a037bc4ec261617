// OomWitness: whether the kernel's OOM killer killed a worker, so that the failure summary can say
// "out of memory" where torchrun says "Signal 9 (SIGKILL)" and nothing else. Three sources, from
// the most to the least exact:
//   1. the kernel log (/dev/kmsg, readable by root): "Killed process <pid> (...)" names the pid;
//   2. the worker cgroup's memory.events (cgroup v2 with the memory controller): oom_kill rose;
//   3. /proc/vmstat's oom_kill counter rose while the worker ran (some process on this host was
//      OOM-killed; with the worker's SIGKILL that the agent did not send, most likely it).
//
// Thread safety: used from the agent's event-loop thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ddprun::launcher {

class OomWitness {
 public:
  virtual ~OomWitness() = default;
  // Before an attempt's workers start: remembers the counters.
  virtual void attemptStarted() = 0;
  // Worker `pid` died of a SIGKILL the agent did not send: how it is known that the OOM killer
  // killed it ("" = it is not).
  virtual std::string explain(pid_t pid) = 0;
};

class KernelOomWitness final : public OomWitness {
 public:
  // `cgroupPath`: the worker cgroup ("" = none). The paths are seams for the tests.
  explicit KernelOomWitness(std::string cgroupPath, std::string kernelLog = "/dev/kmsg",
                            std::string vmstat = "/proc/vmstat");
  void attemptStarted() override;
  std::string explain(pid_t pid) override;

 private:
  std::optional<std::uint64_t> cgroupCount() const;
  std::optional<std::uint64_t> hostCount() const;

  std::string cgroupPath_;
  std::string kernelLog_;
  std::string vmstat_;
  std::optional<std::uint64_t> cgroupAtStart_;
  std::optional<std::uint64_t> hostAtStart_;
};

// The "oom_kill N" value of a memory.events or vmstat text (nothing: no such line).
std::optional<std::uint64_t> oomKillCount(const std::string& text);
// The kernel log line that says `pid` was killed for want of memory ("" = none), from the
// records of /dev/kmsg ("<prio>,<seq>,<usec>,<flags>;<text>").
std::string oomKillRecord(const std::string& records, pid_t pid);

}  // namespace ddprun::launcher
