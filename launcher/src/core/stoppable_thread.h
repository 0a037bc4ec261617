// A thread that an owner stops: one stop flag, one lock and one condition variable, so that the
// owner's loops (a heartbeat, a reporter, a queue's consumer) are written without their own
// mutex + condition variable + flag, and stop() always wakes the thread before joining it.
//
// The lock guards the stop flag and whatever state the owner shares with the thread: the owner
// changes that state under lock() and calls wake(); the thread waits with waitUntil(), waitFor()
// or sleepFor(), each of which returns early once stop() is asked.
//
// Thread safety: start() and stop() from the owner's thread (stop() never from the thread
// itself); the rest from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ddprun::launcher {

class StoppableThread {
 public:
  StoppableThread() = default;
  // Stops the thread (stop()).
  ~StoppableThread();
  StoppableThread(const StoppableThread&) = delete;
  StoppableThread& operator=(const StoppableThread&) = delete;

  // Runs `body` on a new thread. Throws std::system_error when no thread can be made.
  void start(std::function<void()> body);
  // Asks the thread to stop and wakes its waits, without waiting for it: for an owner that must
  // then cancel a blocking call the thread is in (a store call) before it joins. Any thread.
  void requestStop();
  // requestStop(), then joins the thread. Idempotent; nothing to wait for when it was never
  // started. A stopped StoppableThread is not started again.
  void stop();
  // Whether a thread was started and not yet joined.
  bool running() const { return thread_.joinable(); }

  // The lock over the stop flag and the owner's shared state; const, so that an owner's const
  // reader of that state takes it too.
  std::unique_lock<std::mutex> lock() const { return std::unique_lock(mutex_); }
  // Wakes every wait, after a change made under lock().
  void wake() { wake_.notify_all(); }
  // Under lock(): whether stop() was asked.
  bool stopping() const { return stopping_; }

  // Under `lock`: sleeps until `ready()` holds or stop() is asked. True when ready and not
  // stopping.
  template <class Ready>
  bool waitUntil(std::unique_lock<std::mutex>& lock, Ready ready) {
    wake_.wait(lock, [&] { return stopping_ || ready(); });
    return !stopping_;
  }
  // The same for at most `patience`: false as well when it passed without `ready()`.
  template <class Rep, class Period, class Ready>
  bool waitFor(std::unique_lock<std::mutex>& lock, std::chrono::duration<Rep, Period> patience,
               Ready ready) {
    return wake_.wait_for(lock, patience, [&] { return stopping_ || ready(); }) && !stopping_;
  }
  // Under `lock`: sleeps for `pause` unless stop() is asked first. True when not stopping.
  template <class Rep, class Period>
  bool sleepFor(std::unique_lock<std::mutex>& lock, std::chrono::duration<Rep, Period> pause) {
    return !wake_.wait_for(lock, pause, [&] { return stopping_; });
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ddprun::launcher
