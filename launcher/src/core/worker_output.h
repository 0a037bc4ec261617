// WorkerOutput: where the workers' stdout and stderr go, as the agent's state machine sees it.
// LogRouter (log_router.h) is the real one; the unit tests give workers no output at all.
//
// Thread safety: used from the agent's event-loop thread only; callbacks run there too.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// The descriptors a worker gets as its fd 1 and 2 (the child dup2()s them). They are O_CLOEXEC,
// so other workers never inherit them; they stay owned by the WorkerOutput. `out` and `err` may
// be one descriptor (one channel for both streams, so their order is kept).
struct ChildStreams {
  int out = -1;
  int err = -1;
};

// Where an attempt keeps worker `localRank`'s files: "<attemptDir>/<localRank>", holding its
// error file (error.json) and, with --log-dir, its stdout.log and stderr.log (torchrun's layout).
inline std::string rankDirectory(const std::string& attemptDir, int localRank) {
  return attemptDir + "/" + std::to_string(localRank);
}

class WorkerOutput {
 public:
  virtual ~WorkerOutput() = default;

  // Before spawning worker `localRank` (global `rank`, node `groupRank`) of attempt `attempt`
  // (the round's number, as its directory's name says).
  // attemptDir: the attempt's directory ("" for none); the rank's directory in it
  // (rankDirectory) is created, and holds its log files when `logFiles`. A rank still open from an
  // earlier attempt is closed first. Throws std::system_error naming the path on failure.
  virtual ChildStreams prepare(int localRank, int rank, int groupRank, int attempt,
                               const std::string& attemptDir, bool logFiles) = 0;
  // After the spawn: closes the child's ends in the agent and starts reading.
  virtual void started(int localRank) = 0;
  // The spawn failed: closes everything prepared for this worker.
  virtual void abandon(int localRank) = 0;
  // Calls `done` (posted, never from inside drain()) once every started worker's streams have
  // reached EOF, or after `grace`: what is still open is then flushed and closed.
  virtual void drain(std::chrono::milliseconds grace, std::function<void()> done) = 0;
  // The last lines worker `localRank` of the latest attempt wrote to stderr (those that passed
  // through the agent; none when its stderr goes straight to a file). With one channel for
  // both streams, the last lines of that channel, stdout's included.
  virtual std::vector<std::string> stderrTail(int localRank) const = 0;
  // Flushes and closes everything now (agent exiting); pending drains complete (posted).
  virtual void closeAll() = 0;
};

}  // namespace ddprun::launcher
