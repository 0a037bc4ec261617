// ProgressWatch: which of the running workers are hung, by two rules (docs/errors.md, "Hangs").
//   - No progress (--hang-timeout T): each worker has a heartbeat channel; one that reported
//     progress and then reports none for T is hung; one that never reports is hung after the
//     startup allowance (--hang-startup-timeout).
//   - Stragglers (--exit-timeout E): once a worker exited 0, the others have E to exit too.
// One EventLoop timer is armed for the earliest deadline that the last look allows; when it
// fires the channels are looked at again (one stat per worker) and the timer re-armed, so the
// agent wakes about once per T whatever the workers report, and a report costs the agent
// nothing at all.
//
// The heartbeat channel is a file per worker (DDPRUN_HEARTBEAT_FILE): reporting progress is
// setting its modification time to now (os.utime(path) in Python, utimensat in C++), one system
// call in the worker and no message to read in the agent. The agent creates it with the time 0,
// meaning "no report yet".
//
// Thread safety: every method runs on the event loop's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/launcher/launch_config.h"
#include "core/event_loop.h"
#include "core/worker_failure.h"

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
};

// Heartbeat files "<directory>/<local rank>".
class HeartbeatFiles final : public Heartbeats {
 public:
  explicit HeartbeatFiles(std::string directory) : directory_(std::move(directory)) {}
  std::string prepare(int localRank) override;
  std::optional<EventLoop::WallTime> lastReport(int localRank) const override;

 private:
  std::string path(int localRank) const;
  std::string directory_;
};

// A worker found hung.
struct HungWorker {
  int localRank = 0;
  HangKind kind = HangKind::kNone;
  std::chrono::milliseconds silentFor{0};  // since its last report, its start, or the first exit
  std::string detail;                      // "no progress for 30.0 s (--hang-timeout 30)"
};

class ProgressWatch {
 public:
  using OnHung = std::function<void(const HungWorker&)>;
  // `onHung` is called once per hung worker, on the loop. No `heartbeats`: the exit rule only.
  ProgressWatch(EventLoop& loop, const HangPolicy& policy, Heartbeats* heartbeats, OnHung onHung);

  // The attempt's workers started (local ranks 0..count-1); forgets the previous attempt.
  void start(int count);
  // Worker `localRank` exited (`succeeded`: with 0). The first success starts the exit timeout.
  void exited(int localRank, bool succeeded);
  // The attempt is stopping: no more verdicts.
  void stop();

 private:
  struct Watched {
    bool running = true;
    bool hung = false;
  };
  std::optional<HungWorker> verdict(int localRank, EventLoop::WallTime now,
                                    std::optional<EventLoop::WallTime>& deadline) const;
  void check();
  void rearm(std::optional<EventLoop::WallTime> deadline);

  EventLoop& loop_;
  const HangPolicy& policy_;
  Heartbeats* heartbeats_;
  OnHung onHung_;
  std::vector<Watched> workers_;
  EventLoop::WallTime startedAt_{};
  std::optional<EventLoop::WallTime> firstSuccessAt_;
  std::unique_ptr<EventLoop::Timer> timer_;
};

}  // namespace ddprun::launcher
