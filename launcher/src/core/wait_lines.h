// When an agent that waits on other machines (the rendezvous store, the other nodes, the exit
// barrier) says so: a wait that ends within kQuietStart says nothing (a job whose nodes start
// together forms in milliseconds, and a line on every start would be noise); after that, one line
// at once whenever what it waits for changes (a node joined or left) and otherwise one every
// kWaitLineInterval, so that a stuck job says what it is stuck on without flooding the log.
//
// Thread safety: a plain value, used by the one thread that waits.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

// Often enough that someone looking at a stuck job sees it waiting and on what within seconds,
// rarely enough that a 600 s join timeout prints at most 60 lines.
inline constexpr std::chrono::seconds kWaitLineInterval{10};
// How long a wait goes unmentioned: longer than a normal rendezvous takes.
inline constexpr std::chrono::seconds kQuietStart{1};

class WaitLines {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // The wait began at `start`.
  explicit WaitLines(TimePoint start) : start_(start) {}

  // Whether to print a line at `now` while the wait is in `state` (what the line would say apart
  // from the time: who joined, why the store does not answer). A due line is counted as printed.
  bool due(TimePoint now, std::string_view state) {
    if (now - start_ < kQuietStart) return false;
    const bool changed = !last_ || state != state_;
    if (!changed && now - *last_ < kWaitLineInterval) return false;
    last_ = now;
    state_ = state;
    return true;
  }

 private:
  TimePoint start_;
  std::optional<TimePoint> last_;
  std::string state_;
};

}  // namespace ddprun::launcher
