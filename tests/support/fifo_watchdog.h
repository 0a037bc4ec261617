// For tests of code that must never wait on a FIFO planted where it expects a file: runs the call,
// and should it block opening or reading the FIFO anyway, a watchdog opens the FIFO after 2 s
// (read-write, which never blocks itself) so the call returns and the test fails instead of
// hanging the suite.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace ddprun::test {

// Whether `call` blocked on the FIFO at `fifo` until the watchdog released it.
template <typename Call>
bool blockedOnFifo(const std::string& fifo, Call call) {
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> done{false};
  std::atomic<bool> released{false};
  std::thread watchdog([&] {
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!done && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (done) return;
    released = true;
    const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (fd >= 0) ::close(fd);
  });
  call();
  done = true;
  watchdog.join();
  return released;
}

}  // namespace ddprun::test
