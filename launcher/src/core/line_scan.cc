#include "core/line_scan.h"

#include <stdexcept>

namespace ddprun::launcher {
namespace {

std::optional<LinePattern> compiled(const std::string& source, const char* option) {
  if (source.empty()) return std::nullopt;
  std::string error;
  auto pattern = LinePattern::compile(source, error);
  if (!pattern) throw std::invalid_argument(std::string(option) + ": " + error);
  return pattern;
}

}  // namespace

LinePatterns LinePatterns::of(const HangPolicy& policy) {
  LinePatterns patterns;
  patterns.progress = compiled(policy.progressPattern, "--progress-pattern");
  patterns.start = compiled(policy.startPattern, "--start-pattern");
  patterns.fail = compiled(policy.failPattern, "--fail-pattern");
  return patterns;
}

void LineScan::line(std::string_view text) {
  if (patterns_.fail && !failed_ && patterns_.fail->matches(text)) {
    failed_ = true;
    failToTell_ = true;
    failLine_.assign(text.substr(0, kKeptFailLine));
  }
  if (patterns_.progress && !progress_ && patterns_.progress->matches(text)) progress_ = true;
  if (patterns_.start && !started_ && patterns_.start->matches(text)) {
    started_ = true;
    startToTell_ = true;
  }
}

void LineScan::endBatch(LineEvents& events) {
  if (progress_) {
    progress_ = false;
    events.progressLine(localRank_);
  }
  if (startToTell_) {
    startToTell_ = false;
    events.startLine(localRank_);
  }
  if (failToTell_) {
    failToTell_ = false;
    events.failLine(localRank_, failLine_);
    failLine_.clear();
  }
}

}  // namespace ddprun::launcher
