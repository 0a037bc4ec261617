// An EventLoop that is never run: for a benchmark that calls a component's synchronous part on
// its own thread (NodeHealthGate::builtIn()) and needs a loop only to construct it. Nothing is
// ever posted or timed through it.
#pragma once

#include <chrono>
#include <memory>

#include "core/event_loop.h"

namespace ddprun::test {

class NoLoop final : public launcher::EventLoop {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  WallTime wallNow() const override { return std::chrono::system_clock::now(); }
  std::unique_ptr<Timer> after(std::chrono::milliseconds, Callback) override { return nullptr; }
  void post(Callback) override {}
};

}  // namespace ddprun::test
