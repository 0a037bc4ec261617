// ConsoleWriter: the agent's output to one of its own streams (stdout or stderr), written by a
// thread of its own so that the event loop never waits on the console. A paused pager, a stuck
// log shipper or a full pipe then stalls only this thread: signals, reaping and the rendezvous
// go on (torchrun's agent never writes worker output itself, so it never blocks there either).
//
// Bounded: at most `limit` bytes wait to be written. Past that the agent applies back-pressure
// instead of dropping: the log router stops reading the workers' pipes until the console has
// taken half of it, so a worker that keeps writing blocks in its own write(2), exactly as a
// torchrun worker blocks on a stalled terminal it inherited. Nothing is dropped while the agent
// runs; when it exits, it gives the console 2 s and then leaves what is still queued.
//
// Thread safety: write(), full(), whenRoom() and flush() from the event loop's thread; the
// writer thread touches only the shared queue. A writer blocked in write(2) when the agent
// exits is left behind (detached): the process's exit ends it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace ddprun::launcher {

class ConsoleWriter {
 public:
  static constexpr std::size_t kDefaultLimit = std::size_t{8} << 20;

  // Writes to `fd` (not owned). whenRoom() callbacks are posted to `io`.
  ConsoleWriter(int fd, boost::asio::io_context& io, std::size_t limit = kDefaultLimit);
  // Gives the queue up to 2 s to be written, then leaves it to the detached thread.
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  int fd() const;
  // Queues `bytes` to be written in one piece (whole lines never interleave). Never blocks.
  void write(std::string bytes);
  // More than the limit is queued: stop producing until whenRoom() calls back.
  bool full() const;
  // Calls `resume` (posted) once the queue is at most half the limit; at once when it is.
  void whenRoom(std::function<void()> resume);
  // Waits up to `patience` for the queue to be written; false if the console did not take it.
  bool flush(std::chrono::milliseconds patience);
  // Bytes that could not be written (the console closed: EPIPE, EIO).
  std::size_t lost() const;
  // Calls `closed` (posted, once) when the console stops taking output: its reader went away.
  void whenClosed(std::function<void()> closed);

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace ddprun::launcher
