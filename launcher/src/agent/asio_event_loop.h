// AsioEventLoop: the EventLoop of the real agent, on a Boost.Asio io_context that also serves
// the workers' pipes and the agent's signals.
//
// Thread safety: as EventLoop.
#pragma once

#include <boost/asio/io_context.hpp>

#include "core/event_loop.h"

namespace ddprun::launcher {

class AsioEventLoop final : public EventLoop {
 public:
  explicit AsioEventLoop(boost::asio::io_context& io) : io_(io) {}
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  WallTime wallNow() const override { return std::chrono::system_clock::now(); }
  std::unique_ptr<Timer> after(std::chrono::milliseconds delay, Callback callback) override;
  void post(Callback callback) override;

 private:
  boost::asio::io_context& io_;
};

}  // namespace ddprun::launcher
