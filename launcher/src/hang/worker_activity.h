// WorkerActivity: how much work each worker's process tree has done so far, so that the exit
// timeout's straggler rule (ProgressMonitor, docs/errors.md "Hangs") can tell a rank that is still
// working (a final evaluation, an export, a checkpoint upload) from one that is stuck for good
// (torch 1.13's gloo teardown deadlock: blocked, using no CPU). ProcActivity reads /proc; the
// unit tests fake it.
//
// The signals, and why: CPU time (utime + stime) is what any computation, compression,
// encryption or Python loop costs, whatever it talks to; the bytes moved through read/write calls
// and to or from storage (/proc/<pid>/io) are what a rank that mostly waits on a disk, a pipe or
// its own output still shows. Both are counters the kernel keeps anyway, so sampling them costs
// the worker nothing and the agent one pass over /proc per window. Network transfers through
// send/recv are not in the I/O counters, but they cost CPU time.
//
// The tree: a worker may be a shell or a wrapper whose child does the work, and DataLoader
// workers are children too. The launcher gives each worker a session of its own (sid = its pid),
// which its descendants keep unless they make one of their own, so the tree is "every process of
// the worker's session"; the CPU time of children it has already waited for stays in the tree
// through their parent's cutime + cstime.
//
// Thread safety: used on the agent's event-loop thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

namespace ddprun::launcher {

// What one process of a tree had done when it was sampled (counters that only grow while it
// lives).
struct ProcessWork {
  std::uint64_t startTicks = 0;      // when it started: with its pid, which process it is
  std::chrono::milliseconds cpu{0};  // its threads' CPU time and its waited-for children's
  std::uint64_t ioBytes = 0;         // read + written (calls and storage); 0 where unreadable
};

// One worker's tree at one moment: each of its processes, by pid.
using TreeSample = std::map<pid_t, ProcessWork>;

// The work a tree did between two samples of it.
struct WorkDone {
  std::chrono::milliseconds cpu{0};
  std::uint64_t ioBytes = 0;
};

// A process in both samples (the same pid and start time) counts its growth; a process only in
// `after` (it started, or could not be read before) counts all it did. One gone from `after`
// counts nothing more: its parent in the tree has it in its children's time once it is reaped.
// Mistakes (a child's whole time reaching its parent's cutime at once) only ever count more.
WorkDone workBetween(const TreeSample& before, const TreeSample& after);

class WorkerActivity {
 public:
  virtual ~WorkerActivity() = default;
  // One sample per worker, in the order given (`workers`: their pids, also their session ids),
  // taken in one pass. A worker whose tree cannot be read gets an empty sample.
  virtual std::vector<TreeSample> sample(const std::vector<pid_t>& workers) = 0;
};

// Over /proc: every process whose session is a worker's (core/proc_stat.h).
class ProcActivity final : public WorkerActivity {
 public:
  ProcActivity();
  std::vector<TreeSample> sample(const std::vector<pid_t>& workers) override;

 private:
  long ticksPerSecond_;
};

}  // namespace ddprun::launcher
