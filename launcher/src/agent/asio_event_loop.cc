#include "agent/asio_event_loop.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace ddprun::launcher {
namespace {

class AsioTimer final : public EventLoop::Timer {
 public:
  AsioTimer(boost::asio::io_context& io, std::chrono::milliseconds delay,
            EventLoop::Callback callback)
      : timer_(io, delay), armed_(std::make_shared<bool>(true)) {
    // A timer that expired just before cancel() has its handler queued already with success:
    // the flag keeps a cancelled timer from running whatever the handler is told.
    timer_.async_wait(
        [callback = std::move(callback), armed = armed_](const boost::system::error_code& error) {
          if (!error && *armed) callback();
        });
  }
  ~AsioTimer() override { cancel(); }
  void cancel() override {
    *armed_ = false;
    timer_.cancel();
  }

 private:
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> armed_;
};

}  // namespace

std::unique_ptr<EventLoop::Timer> AsioEventLoop::after(std::chrono::milliseconds delay,
                                                       Callback callback) {
  return std::make_unique<AsioTimer>(io_, delay, std::move(callback));
}

void AsioEventLoop::post(Callback callback) { boost::asio::post(io_, std::move(callback)); }

}  // namespace ddprun::launcher
