// EventLoop: the agent's time and its one thread. The state machine reads the time, arms timers
// and is handed the results of blocking calls through this interface only, so a test can drive
// it with a manual clock (advance by hand, run what is due) instead of waiting in real time.
// AsioEventLoop (asio_event_loop.h) is the real one.
//
// Thread safety: post() and now() may be called from any thread; everything else, and every
// callback, runs on the loop's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace ddprun::launcher {

class EventLoop {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using WallTime = std::chrono::system_clock::time_point;
  using Callback = std::function<void()>;

  // A pending timer: destroying or cancelling it before it is due means it never runs.
  class Timer {
   public:
    virtual ~Timer() = default;
    virtual void cancel() = 0;
  };

  virtual ~EventLoop() = default;
  virtual TimePoint now() const = 0;
  // The wall clock, for deadlines that workers give as epoch times (torch's FileTimer) and for
  // file modification times (progress heartbeats).
  virtual WallTime wallNow() const = 0;
  // Runs `callback` on the loop once `delay` has passed.
  [[nodiscard]] virtual std::unique_ptr<Timer> after(std::chrono::milliseconds delay,
                                                     Callback callback) = 0;
  // Runs `callback` on the loop soon (from any thread).
  virtual void post(Callback callback) = 0;
};

}  // namespace ddprun::launcher
