#include "agent/stdin_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "agent/startup_error.h"

namespace ddprun::launcher {
namespace {

// What every refusal of the token line ends with: where the line comes from, and the fix for a
// person who gave the flag by hand.
constexpr std::string_view kTokenLineFix =
    "--token-from-stdin is set by ddprun --hosts, whose driver writes the job's token there; "
    "outside such a launch give --rdzv-conf token_file=PATH instead";

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

class AsioStdinReader final : public StdinReader {
 public:
  AsioStdinReader(boost::asio::io_context& io, int fd, std::function<void(int)> onSignal)
      : stream_(io, fd), onSignal_(std::move(onSignal)) {}

  void read() {
    stream_.async_read_some(boost::asio::buffer(buffer_),
                            [this](const boost::system::error_code& error, std::size_t n) {
                              if (error == boost::asio::error::operation_aborted) return;
                              if (error || n == 0) {
                                spdlog::warn(
                                    "stdin closed: the ssh driver or its connection is "
                                    "gone; stopping as on SIGTERM");
                                onSignal_(SIGTERM);
                                return;
                              }
                              for (std::size_t i = 0; i < n; ++i)
                                onSignal_(signalOfByte(buffer_[i]));
                              read();
                            });
  }

 private:
  boost::asio::posix::stream_descriptor stream_;
  std::function<void(int)> onSignal_;
  std::array<unsigned char, 64> buffer_{};
};

}  // namespace

rendezvous::JobSecret readTokenLine(int fd, std::chrono::milliseconds limit) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + limit;
  std::string line;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      throw StartupError(fmt::format("no token line on stdin within {:g} s; {}",
                                     static_cast<double>(limit.count()) / 1000, kTokenLineFix));
    }
    pollfd ready{fd, POLLIN, 0};
    const int polled = ::poll(&ready, 1, static_cast<int>(left.count()));
    if (polled < 0 && errno != EINTR) {
      throw StartupError(fmt::format("cannot read the token line on stdin ({}); {}",
                                     std::strerror(errno), kTokenLineFix));
    }
    if (polled <= 0) continue;
    char byte = 0;
    const ssize_t n = ::read(fd, &byte, 1);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      throw StartupError(fmt::format("cannot read the token line on stdin ({}); {}",
                                     std::strerror(errno), kTokenLineFix));
    }
    if (n == 0) {
      throw StartupError(fmt::format("stdin ended before the token line; {}", kTokenLineFix));
    }
    if (byte == '\n') break;
    if (line.size() + 1 >= kLongestTokenLine) {
      throw StartupError(fmt::format("the token line on stdin is longer than {} bytes; {}",
                                     kLongestTokenLine, kTokenLineFix));
    }
    line += byte;
  }
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
    line.pop_back();
  }
  if (line.size() < rendezvous::JobSecret::kMinBytes) {
    throw StartupError(
        fmt::format("the token line on stdin holds {} bytes, fewer than the {} a "
                    "token needs; {}",
                    line.size(), rendezvous::JobSecret::kMinBytes, kTokenLineFix));
  }
  return rendezvous::JobSecret::fromBytes(std::move(line), "the token line on stdin");
}

std::unique_ptr<StdinReader> readStdinSignals(boost::asio::io_context& io,
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
    auto reader = std::make_unique<AsioStdinReader>(io, fd, std::move(onSignal));
    reader->read();
    return reader;
  } catch (const std::exception& error) {
    ::close(fd);  // not adopted: the stream descriptor threw before holding it
    spdlog::warn(
        "--stop-on-stdin-eof: cannot read stdin ({}); the agent will not notice its "
        "driver go",
        error.what());
    return nullptr;
  }
}

}  // namespace ddprun::launcher
