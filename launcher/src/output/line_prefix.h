// LinePrefix: the console prefix of one worker's lines, from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
// (log_router.h, linePrefix()). The worker's own fields (${rank}, ${attempt}, ...) are substituted
// once, when the worker is prepared; the fields of the moment, ${time} (the wall clock when the
// lines arrived, local time, "12:34:56.789", as the time of the agent's own log lines) and
// ${elapsed} (since the agent started, "+123.456s"), are filled in per batch of lines read at one
// moment, so a clock is read and formatted once per read, not once per line. A prefix without
// them is one constant string.
//
// Thread safety: a plain value.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

class LinePrefix {
 public:
  using WallTime = std::chrono::system_clock::time_point;

  // What safeSubstitute left with kTimeMark for each ${time} and kElapsedMark for each
  // ${elapsed} (NUL bytes cannot come from a template, an environment or a host name).
  static constexpr std::string_view kTimeMark{"\0time\0", 6};
  static constexpr std::string_view kElapsedMark{"\0elapsed\0", 9};

  LinePrefix() = default;
  explicit LinePrefix(std::string_view substituted);

  // Whether it holds ${time} or ${elapsed} (else text() is the whole prefix, at any time).
  bool timed() const { return timed_; }
  // The prefix of lines that arrived at `wall`, `elapsed` after the agent started.
  std::string at(WallTime wall, std::chrono::nanoseconds elapsed) const;
  // The prefix with no time in it (for a timed one: as at the agent's start, for its width).
  std::string text() const { return at(WallTime{}, std::chrono::nanoseconds(0)); }

 private:
  enum class Field { kText, kTime, kElapsed };
  struct Part {
    Field field = Field::kText;
    std::string text;
  };
  std::vector<Part> parts_;
  bool timed_ = false;
};

// "12:34:56.789": local time of day, to the millisecond.
std::string clockText(LinePrefix::WallTime wall);
// "+123.456s".
std::string elapsedText(std::chrono::nanoseconds elapsed);

}  // namespace ddprun::launcher
