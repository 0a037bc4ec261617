// ConsoleWriter: the agent's output to one of its own streams (stdout or stderr), written by a
// thread of its own (started by the first bytes to write) so that the event loop never waits on
// the console. A paused pager, a stuck log shipper or a full pipe then stalls only this thread:
// signals, reaping and the rendezvous go on (torchrun's agent never writes worker output
// itself, so it never blocks there either).
//
// Bounded: at most `limit` bytes wait to be written. Past that the agent applies back-pressure
// instead of dropping: the log router stops reading the workers' pipes until the console has
// taken half of it, so a worker that keeps writing blocks in its own write(2), exactly as a
// torchrun worker blocks on a stalled terminal it inherited. Nothing is dropped while the agent
// runs; when it exits, it gives the console 2 s and then leaves what is still queued.
//
// Lines stay apart: the pieces are framed as they are queued (ConsoleLines, console_lines.h), so a
// worker's line left open (no '\n' yet: a progress bar) is ended before anybody else's text, and
// a source's prefix is put at the start of each of its lines and after each '\r' in them.
//
// Thread safety: write() from any thread (the agent's log lines come from its other threads
// too); full(), whenRoom() and flush() from the event loop's thread; the writer thread touches
// only the shared queue. A writer blocked in write(2) when the agent
// exits is left behind (detached): the process's exit ends it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace ddprun::launcher {

// Whether two descriptors write to the same place (one terminal, one pipe, one file: the same
// device and inode), e.g. the agent's stdout and stderr under `2>&1` or on one terminal. The
// agent then has one ConsoleWriter for both, so its own lines too are kept apart from a worker's
// open line (two writers on one terminal could not know of each other's).
bool samePlace(int fd, int other);

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
  // Queues `bytes` (whole lines of no worker's: the agent's own) to be written in one piece,
  // after ending a worker's open line. Never blocks.
  void write(std::string bytes);
  // Queues `text` of worker stream `source` (ConsoleLines::newSource()), framed with `prefix` as
  // ConsoleLines says; `text` may end inside a line. Never blocks.
  void write(std::uint64_t source, std::string_view prefix, std::string_view text);
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
