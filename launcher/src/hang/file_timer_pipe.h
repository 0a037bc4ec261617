// FileTimerPipe: the named pipe torch's FileTimerClient writes to, read on the agent's Asio loop.
// It creates the FIFO (replacing a stale one at the path), holds it open for reading and writing
// (so the agent never sees end-of-file between clients, and clients never block on open), splits
// what arrives into lines and hands each to `onLine`. Removes the FIFO when destroyed.
//
// Thread safety: constructed, used and destroyed on the loop's thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ddprun::launcher {

class FileTimerPipe {
 public:
  using OnLine = std::function<void(std::string_view line)>;
  // Throws std::system_error naming `path` when the FIFO cannot be made or opened.
  FileTimerPipe(boost::asio::io_context& io, std::string path, OnLine onLine);
  ~FileTimerPipe();
  FileTimerPipe(const FileTimerPipe&) = delete;
  FileTimerPipe& operator=(const FileTimerPipe&) = delete;
  const std::string& path() const;
  // Hands every whole line already in the pipe to `onLine` now, without waiting for the loop
  // (the job is being stopped: a request a worker wrote just before must be taken before the
  // agent stops, so that its deadline is moved on with the others).
  void readAvailable();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ddprun::launcher
