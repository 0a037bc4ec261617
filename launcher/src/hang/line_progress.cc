#include "hang/line_progress.h"

#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/text.h"

namespace ddprun::launcher {

LineProgress::LineProgress(Heartbeats& files, EventLoop& loop, const HangPolicy& policy,
                           OnFail onFail)
    : files_(files), loop_(loop), policy_(policy), onFail_(std::move(onFail)) {}

std::string LineProgress::prepare(int localRank) {
  Seen& seen = seen_[localRank];
  const std::uint64_t attempt = seen.attempt + 1;
  seen = Seen{};
  seen.attempt = attempt;
  return files_.prepare(localRank);
}

std::optional<EventLoop::WallTime> LineProgress::lastReport(int localRank) const {
  std::optional<EventLoop::WallTime> report = files_.lastReport(localRank);
  if (auto it = seen_.find(localRank); it != seen_.end() && it->second.progress) {
    report = report ? std::max(*report, *it->second.progress) : it->second.progress;
  }
  return report;
}

std::optional<EventLoop::WallTime> LineProgress::startReport(int localRank) const {
  auto it = seen_.find(localRank);
  return it == seen_.end() ? std::nullopt : it->second.start;
}

void LineProgress::progressLine(int localRank) { seen_[localRank].progress = loop_.wallNow(); }

void LineProgress::startLine(int localRank) {
  Seen& seen = seen_[localRank];
  if (!seen.start) seen.start = loop_.wallNow();
}

void LineProgress::failLine(int localRank, std::string_view line) {
  Seen& seen = seen_[localRank];
  if (seen.failed) return;  // its other stream may match too: one verdict
  seen.failed = true;
  // The worker's bytes: escaped, and cut before escaping so the detail stays one short line.
  std::string shown = common::printablePrefix(line, kShownLine);
  if (line.size() > kShownLine) shown += "...";
  std::string detail = fmt::format("wrote a line matching --fail-pattern '{}': \"{}\"",
                                   common::printable(policy_.failPattern), shown);
  // Posted: the router is inside its read now. A line the router flushes from the last attempt's
  // stream when it prepares this rank again (a partial line at its end) is that attempt's: it
  // must not fail the worker prepared after it, so the verdict is dropped once the rank's attempt
  // changed.
  loop_.post([this, localRank, attempt = seen.attempt, detail = std::move(detail)]() mutable {
    if (seen_[localRank].attempt == attempt) onFail_(localRank, std::move(detail));
  });
}

}  // namespace ddprun::launcher
