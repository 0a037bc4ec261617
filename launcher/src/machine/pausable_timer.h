// PausableTimer: one of the machine's own timeouts (the shutdown grace, the exit barrier) that a
// stopped job (Ctrl-Z) does not count down: pause() keeps what was left, resume() arms that much
// again. The event loop's clock goes on while the agent is stopped, so a plain timer would fire
// at once on the resume.
//
// Thread safety: on the event loop's thread, as the machine.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "core/event_loop.h"

namespace ddprun::launcher {

class PausableTimer {
 public:
  explicit PausableTimer(EventLoop& loop) : loop_(loop) {}

  // Runs `callback` once `delay` has passed (running time: paused time does not count); replaces
  // what was armed. Armed while paused, it starts counting at resume().
  void arm(std::chrono::milliseconds delay, EventLoop::Callback callback) {
    callback_ = std::move(callback);
    left_ = delay;
    timer_.reset();
    if (!paused_) start();
  }
  void cancel() {
    timer_.reset();
    left_.reset();
    callback_ = nullptr;
  }
  // Armed and not fired yet.
  bool pending() const { return left_.has_value(); }

  void pause() {
    if (paused_) return;
    paused_ = true;
    if (!timer_) return;
    timer_.reset();
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(due_ - loop_.now());
    left_ = std::max(left, std::chrono::milliseconds(0));
  }
  void resume() {
    if (!paused_) return;
    paused_ = false;
    if (left_) start();
  }

 private:
  void start() {
    due_ = loop_.now() + *left_;
    timer_ = loop_.after(*left_, [this] {
      left_.reset();
      // The callback may re-arm or cancel this timer: it runs from a copy.
      const EventLoop::Callback callback = std::move(callback_);
      callback_ = nullptr;
      if (callback) callback();
    });
  }

  EventLoop& loop_;
  EventLoop::Callback callback_;
  std::unique_ptr<EventLoop::Timer> timer_;
  EventLoop::TimePoint due_{};
  std::optional<std::chrono::milliseconds> left_;  // armed and not fired: (at pause) what is left
  bool paused_ = false;
};

}  // namespace ddprun::launcher
