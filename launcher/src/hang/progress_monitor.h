// ProgressMonitor: which of the running workers are hung, by two rules (docs/errors.md, "Hangs").
//   - No progress (--hang-timeout T): each worker has a heartbeat channel; one that reported
//     progress and then reports none for T is hung; one that never reports is hung after the
//     startup allowance (--hang-startup-timeout).
//   - No start line (--start-pattern with --start-timeout S): a worker that has written no line
//     matching the pattern S after its start is hung (Heartbeats::startReport()).
//   - Stragglers (--exit-timeout E): once a worker exited 0, each other worker of the node is
//     looked at every E; one that was idle for a whole window is hung. Idle means its process
//     tree used less than 1% of one core, read and wrote less than 4 KiB, and reported no
//     progress (WorkerActivity, worker_activity.h). So torch 1.13's gloo teardown deadlock
//     (blocked, no CPU) is still killed at first success + E, while a rank 0 that evaluates,
//     exports or uploads for an hour after its peers exited is left to finish: its next look is
//     one window later. A threshold, not "any tick": torch 2.x's NCCL watchdog thread wakes
//     every 100 ms in a process that is otherwise stuck for good.
// One EventLoop timer is armed for the earliest deadline that the last look allows; when it
// fires the channels are looked at again (one stat per worker; for the exit rule one pass over
// /proc) and the timer re-armed, so the agent wakes about once per T or E whatever the workers
// report, and a report costs the agent nothing at all.
//
// Job control: pause() (the job was stopped, Ctrl-Z) cancels the timer; resume() gives every
// rule a fresh start at the resume time, so the stopped time never counts as silence.
//
// The heartbeat channel is a file per worker (DDPRUN_HEARTBEAT_FILE): reporting progress is
// setting its modification time to now (os.utime(path) in Python, utimensat in C++), one system
// call in the worker and no message to read in the agent. The agent creates it with the time 0,
// meaning "no report yet".
//
// Thread safety: every method runs on the event loop's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/event_loop.h"
#include "core/worker_failure.h"
#include "ddprun/launcher/launch_config.h"
#include "hang/worker_activity.h"

namespace ddprun::launcher {

// The workers' heartbeat channels (HeartbeatFiles; the unit tests fake them).
class Heartbeats {
 public:
  virtual ~Heartbeats() = default;
  // A fresh channel for worker `localRank` of a new attempt; returns what the worker gets as
  // DDPRUN_HEARTBEAT_FILE. Throws std::system_error naming the path.
  virtual std::string prepare(int localRank) = 0;
  // When worker `localRank` last reported progress (nothing: not since prepare()).
  virtual std::optional<EventLoop::WallTime> lastReport(int localRank) const = 0;
  // When it wrote its first line matching --start-pattern (nothing: not since prepare(), or a
  // channel that does not read lines: hang/line_progress.h).
  virtual std::optional<EventLoop::WallTime> startReport(int /*localRank*/) const {
    return std::nullopt;
  }
};

// Heartbeat files "<directory>/heartbeat-<local rank>" (the agent's private directory: no
// directory of their own, which would cost every launch a mkdir and a removal).
class HeartbeatFiles final : public Heartbeats {
 public:
  explicit HeartbeatFiles(std::string directory) : directory_(std::move(directory)) {}
  ~HeartbeatFiles() override;
  HeartbeatFiles(const HeartbeatFiles&) = delete;
  HeartbeatFiles& operator=(const HeartbeatFiles&) = delete;

  // Makes the files of local ranks 0..count-1 now, on a thread of their own, while the agent
  // sets up and forms its round: making a file (an inode) is the costly part of prepare(), a
  // fraction of a millisecond each against microseconds for the rest (docs/benchmarks.md,
  // "Launch at the floor"), and prepare() only resets a file made ahead, as it does a restart's.
  // The first prepare() waits for that thread. What could not be made ahead is made by
  // prepare(); throws std::system_error when the directory is not the agent's own.
  void prepareAhead(int count);
  std::string prepare(int localRank) override;
  std::optional<EventLoop::WallTime> lastReport(int localRank) const override;

 private:
  std::string path(int localRank) const;
  void checkDirectory();
  std::string directory_;
  bool directoryChecked_ = false;  // made or found to be ours (the first prepare())
  std::thread ahead_;              // prepareAhead()'s, until the first prepare() joins it
};

// A worker found hung.
struct HungWorker {
  int localRank = 0;
  HangKind kind = HangKind::kNone;
  // Since its last report, its start (or the job's resume), or since its idle window began.
  std::chrono::milliseconds silentFor{0};
  std::string detail;  // "no progress reported for 30.0 s (--hang-timeout 30)"
};

class ProgressMonitor {
 public:
  using OnHung = std::function<void(const HungWorker&)>;
  // `onHung` is called once per hung worker, on the loop. No `heartbeats`: no progress rule, and
  // no report counts against the exit rule. No `activity`: the exit rule cannot tell busy from
  // idle and kills whatever still runs E after the first success.
  ProgressMonitor(EventLoop& loop, const HangPolicy& policy, Heartbeats* heartbeats,
                  WorkerActivity* activity, OnHung onHung);

  // The attempt's workers started: local rank i is `pids[i]` (<= 0: it could not be started);
  // forgets the previous attempt.
  void start(std::vector<pid_t> pids);
  // Worker `localRank` exited (`succeeded`: with 0). The first success starts the exit rule.
  void exited(int localRank, bool succeeded);
  // The attempt is stopping: no more verdicts.
  void stop();
  // The job is stopped (job control): no verdicts, no wake-ups, until resume().
  void pause();
  // The job runs again: every rule starts afresh now (a full hang, startup and exit timeout).
  void resume();

 private:
  struct Monitored {
    pid_t pid = -1;
    bool running = true;
    bool hung = false;
    // The exit rule's current window: since when the worker is judged for idleness, and what
    // its tree had done by then.
    EventLoop::WallTime windowStart{};
    TreeSample atWindowStart;
  };
  // Starts an exit-rule window now for every running worker (one sample of all of them).
  void openWindows(EventLoop::WallTime now);
  // The exit rule for the workers whose window ended: hung if idle all along, else a new window.
  void judgeWindows(EventLoop::WallTime now, std::vector<HungWorker>& found);
  std::optional<HungWorker> progressVerdict(int localRank, EventLoop::WallTime now,
                                            std::optional<EventLoop::WallTime>& deadline) const;
  std::vector<TreeSample> sample(const std::vector<std::size_t>& which);
  void check();
  void rearm(std::optional<EventLoop::WallTime> deadline);

  EventLoop& loop_;
  const HangPolicy& policy_;
  Heartbeats* heartbeats_;
  WorkerActivity* activity_;
  OnHung onHung_;
  std::vector<Monitored> workers_;
  EventLoop::WallTime startedAt_{};
  // The latest resume of a stopped job: no silence before it counts.
  std::optional<EventLoop::WallTime> resumedAt_;
  std::optional<EventLoop::WallTime> firstSuccessAt_;
  bool paused_ = false;
  std::unique_ptr<EventLoop::Timer> timer_;
};

}  // namespace ddprun::launcher
