// LineScan: a worker's output lines matched against the job's line patterns on the log router's
// read path (docs/errors.md, "Progress from log lines"): --progress-pattern (a matching line is a
// progress report), --start-pattern (the first matching line says the worker started) and
// --fail-pattern (a matching line says the worker failed). One LineScan per stream that the
// router reads; the router hands it each whole line of a batch (what one read brought), then
// ends the batch, and the scan tells its LineEvents what the batch said, each at most once.
//
// Bounded cost: a batch stops matching --progress-pattern at its first match (one report per
// batch is as good as many), a stream stops matching --start-pattern once it matched and
// --fail-pattern after its first match (the worker is being stopped). Lines are matched where they
// lie in the read buffer (LinePattern), never copied, but for the one failing line kept for the
// summary (kKeptFailLine bytes at most).
//
// Thread safety: used from the io_context's thread only, as the router.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/line_pattern.h"
#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

// The job's compiled line patterns (HangPolicy's; nothing: not given).
struct LinePatterns {
  std::optional<LinePattern> progress;
  std::optional<LinePattern> start;
  std::optional<LinePattern> fail;

  bool any() const { return progress || start || fail; }
  // HangPolicy's patterns compiled. The command line has compiled each already (a bad one is
  // refused there); throws std::invalid_argument naming the option if one does not compile.
  static LinePatterns of(const HangPolicy& policy);
};

// Where a worker's matching lines are told (LineProgress, hang/line_progress.h).
class LineEvents {
 public:
  virtual ~LineEvents() = default;
  // Worker `localRank` wrote a line matching --progress-pattern (at most once per batch).
  virtual void progressLine(int localRank) = 0;
  // Its first line matching --start-pattern (once per stream and attempt).
  virtual void startLine(int localRank) = 0;
  // Its first line matching --fail-pattern (once per stream and attempt): `line` is the line's
  // first kKeptFailLine bytes, raw (escape it before showing it).
  virtual void failLine(int localRank, std::string_view line) = 0;
};

class LineScan {
 public:
  static constexpr std::size_t kKeptFailLine = 1024;

  // `patterns` must outlive the scan.
  LineScan(const LinePatterns& patterns, int localRank)
      : patterns_(patterns), localRank_(localRank) {}

  // One whole line of the batch (without its '\n').
  void line(std::string_view text);
  // The batch is over: what it said, to `events` (progress, then start, then failure).
  void endBatch(LineEvents& events);

 private:
  const LinePatterns& patterns_;
  int localRank_;
  bool progress_ = false;     // this batch had a progress line
  bool started_ = false;      // this stream had its start line
  bool startToTell_ = false;  // ... in this batch
  bool failed_ = false;       // this stream had its failing line
  bool failToTell_ = false;   // ... in this batch
  std::string failLine_;
};

}  // namespace ddprun::launcher
