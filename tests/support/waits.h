// Bounded waits that say what they saw. Every wait in a test has a bound well below the test's
// CTest TIMEOUT, and when it gives up the state it last observed (the processes' exit statuses,
// the process tree, the output so far) is attached to the test's next assertion, so a failure
// reads as a diagnosis instead of a timeout with nothing to go on:
//
//   REQUIRE(eventually([&] { return countLines(job.output(), "ready") == 3; }, 20s, {&job}));
//   REQUIRE(exitsWith(job, 0, 30s));
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"

namespace ddprun::test {

// A point in time a test, or a stretch of it, must be done by: several waits in a row share one
// budget instead of adding up their own.
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds budget)
      : end_(std::chrono::steady_clock::now() + budget) {}
  std::chrono::milliseconds left() const {
    const auto rest = std::chrono::duration_cast<std::chrono::milliseconds>(
        end_ - std::chrono::steady_clock::now());
    return std::max(rest, std::chrono::milliseconds(0));
  }

 private:
  std::chrono::steady_clock::time_point end_;
};

// Polls `condition` (every 10 ms) until it holds or `timeout` passes. On giving up returns false
// and attaches "gave up after N ms" and `describe()` (what it last saw) to the next assertion.
template <typename Condition, typename Describe>
bool eventually(Condition&& condition, std::chrono::milliseconds timeout, Describe&& describe) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  std::ostringstream message;
  message << "gave up waiting after " << waited.count() << " ms; last seen:\n" << describe();
  UNSCOPED_INFO(message.str());
  return false;
}

// The same, describing `processes` (describeAll) when it gives up.
template <typename Condition>
bool eventually(Condition&& condition, std::chrono::milliseconds timeout,
                const std::vector<Subprocess*>& processes) {
  return eventually(std::forward<Condition>(condition), timeout,
                    [&] { return describeAll(processes); });
}

// `process`'s exit status within `timeout`; if it still runs then, nothing, with what was seen
// attached to the next assertion.
std::optional<int> exitStatus(Subprocess& process, std::chrono::milliseconds timeout);

// True if `process` exits with `expected` within `timeout`; otherwise false, with what was seen
// (how it exited or that it still runs, its output, the process tree) attached to the next
// assertion. `others` are described too: the peers of a multi-process job.
bool exitsWith(Subprocess& process, int expected, std::chrono::milliseconds timeout,
               const std::vector<Subprocess*>& others = {});

// Until the stdout of `nodes` (a job's agents, their workers' lines) holds `count` lines
// matching `pattern` in all: true, or false after `timeout` with what was seen attached.
bool reported(const std::vector<Subprocess*>& nodes, const std::string& pattern, int count,
              std::chrono::milliseconds timeout);

// The port of a server that prints "listening on HOST:PORT" as its first stdout line (the
// rendezvous daemon, the torch store server), or 0, with what was seen attached.
int listeningPort(Subprocess& server, std::chrono::milliseconds timeout);

}  // namespace ddprun::test
