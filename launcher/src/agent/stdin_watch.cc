#include "agent/stdin_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <spdlog/spdlog.h>

namespace ddprun::launcher {
namespace {

int signalOfByte(unsigned char byte) {
  switch (byte) {
    case SIGINT:
    case SIGTERM:
    case SIGHUP:
    case SIGQUIT:
      return byte;
    default:
      return SIGTERM;
  }
}

class AsioStdinWatch final : public StdinWatch {
 public:
  AsioStdinWatch(boost::asio::io_context& io, int fd, std::function<void(int)> onSignal)
      : stream_(io, fd), onSignal_(std::move(onSignal)) {}

  void read() {
    stream_.async_read_some(boost::asio::buffer(buffer_),
                            [this](const boost::system::error_code& error, std::size_t n) {
                              if (error == boost::asio::error::operation_aborted) return;
                              if (error || n == 0) {
                                spdlog::warn("stdin closed: the ssh driver or its connection is "
                                             "gone; stopping as on SIGTERM");
                                onSignal_(SIGTERM);
                                return;
                              }
                              for (std::size_t i = 0; i < n; ++i) onSignal_(signalOfByte(buffer_[i]));
                              read();
                            });
  }

 private:
  boost::asio::posix::stream_descriptor stream_;
  std::function<void(int)> onSignal_;
  std::array<unsigned char, 64> buffer_{};
};

}  // namespace

std::unique_ptr<StdinWatch> watchStdin(boost::asio::io_context& io,
                                       std::function<void(int signal)> onSignal) {
  // The driver's pipe moves to a descriptor of the agent's own (close-on-exec), and fd 0, which
  // the workers inherit, becomes /dev/null: a worker reading stdin would otherwise eat the
  // driver's signal bytes, and find it non-blocking (Asio sets O_NONBLOCK on the shared pipe).
  const int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) {
    spdlog::warn("--stop-on-stdin-eof: stdin is not open; the agent will not notice its driver go");
    return nullptr;
  }
  if (const int null = ::open("/dev/null", O_RDONLY); null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::close(null);
  }
  try {
    auto watch = std::make_unique<AsioStdinWatch>(io, fd, std::move(onSignal));
    watch->read();
    return watch;
  } catch (const std::exception& error) {
    ::close(fd);  // not adopted: the stream descriptor threw before holding it
    spdlog::warn("--stop-on-stdin-eof: cannot watch stdin ({}); the agent will not notice its "
                 "driver go",
                 error.what());
    return nullptr;
  }
}

}  // namespace ddprun::launcher
