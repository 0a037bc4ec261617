// The stoppable thread every background loop of the launcher is written with
// (core/stoppable_thread.h): stop() must wake a thread wherever it waits and join it, so that an
// agent leaving never hangs on its own heartbeat or reporter.
#include "core/stoppable_thread.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <deque>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ddprun::launcher::StoppableThread;
using Clock = std::chrono::steady_clock;

TEST_CASE("a worker thread consumes what its owner queues and stops when asked",
          "[stoppable_thread][unit]") {
  StoppableThread thread;
  std::deque<int> queue;
  std::vector<int> seen;
  thread.start([&] {
    auto lock = thread.lock();
    while (thread.waitUntil(lock, [&] { return !queue.empty(); })) {
      seen.push_back(queue.front());
      queue.pop_front();
      thread.wake();
    }
  });
  for (int i = 1; i <= 3; ++i) {
    auto lock = thread.lock();
    queue.push_back(i);
    thread.wake();
  }
  {
    auto lock = thread.lock();
    // The owner waits on the same lock for the thread's progress (bounded: a hang guard).
    REQUIRE(thread.waitFor(lock, 5s, [&] { return queue.empty(); }));
  }
  thread.stop();
  CHECK(seen == std::vector<int>{1, 2, 3});
}

TEST_CASE("stop() wakes a thread in a long sleep at once", "[stoppable_thread][unit]") {
  StoppableThread thread;
  bool sleptFully = true;
  thread.start([&] {
    auto lock = thread.lock();
    sleptFully = thread.sleepFor(lock, 60s);
  });
  const auto started = Clock::now();
  thread.stop();
  CHECK(Clock::now() - started < 10s);
  CHECK_FALSE(sleptFully);
}

TEST_CASE("requestStop() ends a wait that never becomes ready, and waitFor times out without it",
          "[stoppable_thread][unit]") {
  StoppableThread thread;
  bool ready = true;
  thread.start([&] {
    auto lock = thread.lock();
    ready = thread.waitUntil(lock, [] { return false; });
  });
  CHECK(thread.running());
  // An owner cancels here what the thread may be blocked in (a store call), then joins.
  thread.requestStop();
  thread.stop();
  CHECK_FALSE(thread.running());
  CHECK_FALSE(ready);
  CHECK(thread.stopping());

  StoppableThread idle;
  auto lock = idle.lock();
  CHECK_FALSE(idle.waitFor(lock, 1ms, [] { return false; }));
  CHECK(idle.sleepFor(lock, 1ms));
}

TEST_CASE("a worker thread never started stops, twice, without waiting",
          "[stoppable_thread][unit]") {
  StoppableThread thread;
  thread.stop();
  thread.stop();
  auto lock = thread.lock();
  CHECK(thread.stopping());
}

TEST_CASE("an owner's const reader takes the same lock as the thread", "[stoppable_thread][unit]") {
  StoppableThread thread;
  int shared = 0;
  const StoppableThread& reader = thread;
  thread.start([&] {
    auto lock = thread.lock();
    shared = 1;
    thread.wake();
  });
  {
    auto lock = reader.lock();
    REQUIRE(thread.waitFor(lock, 5s, [&] { return shared == 1; }));
  }
  thread.stop();
}

}  // namespace
