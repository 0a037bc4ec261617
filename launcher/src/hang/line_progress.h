// LineProgress: what the workers' output lines say, for the hang rules (docs/errors.md, "Progress
// from log lines"). The log router matches each line against the job's patterns (core/line_scan.h)
// and tells this class; it keeps, per worker of the current attempt:
//   - --progress-pattern: when it last wrote a matching line. As a Heartbeats, it reports the later
//     of that and its heartbeat file (`files`), so --hang-timeout, --hang-startup-timeout, the
//     restart policy's progress and `ddprun status` see either, and a script needs no change;
//   - --start-pattern: when it wrote its first matching line (startReport(): the ProgressMonitor's
//     --start-timeout rule);
//   - --fail-pattern: its first matching line goes to `onFail` (posted to the loop, so never from
//     inside the router's read, and dropped when the rank was prepared for a new attempt
//     meanwhile), with the detail the summary shows (the pattern and the line, escaped and
//     bounded).
//
// Thread safety: every method runs on the event loop's thread (the router's reads run there).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/event_loop.h"
#include "core/line_scan.h"
#include "ddprun/launcher/launch_config.h"
#include "hang/progress_monitor.h"

namespace ddprun::launcher {

class LineProgress final : public Heartbeats, public LineEvents {
 public:
  // How much of a failing line the detail quotes.
  static constexpr std::size_t kShownLine = 200;
  using OnFail = std::function<void(int localRank, std::string detail)>;

  // `files`, `loop` and `policy` must outlive it.
  LineProgress(Heartbeats& files, EventLoop& loop, const HangPolicy& policy, OnFail onFail);

  // Heartbeats: a new attempt's worker starts with no line seen (and a fresh file).
  std::string prepare(int localRank) override;
  std::optional<EventLoop::WallTime> lastReport(int localRank) const override;
  std::optional<EventLoop::WallTime> startReport(int localRank) const override;

  // LineEvents (from the router):
  void progressLine(int localRank) override;
  void startLine(int localRank) override;
  void failLine(int localRank, std::string_view line) override;

 private:
  struct Seen {
    std::optional<EventLoop::WallTime> progress;
    std::optional<EventLoop::WallTime> start;
    bool failed = false;
    std::uint64_t attempt = 0;  // prepare()s of the rank so far
  };
  Heartbeats& files_;
  EventLoop& loop_;
  const HangPolicy& policy_;
  OnFail onFail_;
  std::map<int, Seen> seen_;  // by local rank
};

}  // namespace ddprun::launcher
