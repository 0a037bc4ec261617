#include "output/console_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "ddprun/common/safe_files.h"
#include "output/console_lines.h"

namespace ddprun::launcher {
namespace {

// How long the agent, leaving, lets the console take what is still queued.
constexpr std::chrono::seconds kExitPatience{2};

}  // namespace

bool samePlace(int fd, int other) {
  struct stat first {};
  struct stat second {};
  if (::fstat(fd, &first) != 0 || ::fstat(other, &second) != 0) return false;
  return first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

struct ConsoleWriter::Shared : std::enable_shared_from_this<ConsoleWriter::Shared> {
  // A descriptor of its own: the thread may outlive the owner's use of `descriptor` (a test
  // closing its end), and must never write to a number reused for something else.
  Shared(int descriptor, boost::asio::io_context& context, std::size_t bound)
      : fd(::fcntl(descriptor, F_DUPFD_CLOEXEC, 3)), io(context), limit(bound) {}
  ~Shared() {
    if (fd >= 0) ::close(fd);
  }

  int fd;
  boost::asio::io_context& io;
  const std::size_t limit;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> queue;
  ConsoleLines lines;      // framed in queue order, which is the order written
  std::size_t queued = 0;  // bytes in queue, the one being written included
  std::size_t lost = 0;
  bool stopping = false;
  bool broken = false;   // the console is closed: everything after is lost
  bool started = false;  // the writing thread runs (from the first bytes queued on)
  std::vector<std::function<void()>> waiting;
  std::function<void()> onClosed;

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) {
        // Done: close our descriptor now (readers of the console see its end with the agent's).
        ::close(fd);
        fd = -1;
        return;
      }
      std::string next = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      // Blocking, as long as it takes: this thread is the one allowed to wait on the console (a
      // descriptor somebody else made non-blocking is waited for with poll()).
      const bool written = !broken && !common::writeAll(fd, next);
      lock.lock();
      if (!written) {
        if (!broken && onClosed) boost::asio::post(io, std::exchange(onClosed, nullptr));
        broken = true;
        lost += next.size();
      }
      queued -= next.size();
      if (queued <= limit / 2 && !waiting.empty()) {
        for (auto& resume : std::exchange(waiting, {})) boost::asio::post(io, std::move(resume));
      }
      changed.notify_all();
    }
  }

  // Under the lock.
  void enqueue(std::string bytes) {
    queued += bytes.size();
    queue.push_back(std::move(bytes));
    startThread();
    changed.notify_all();
  }

  // The writing thread, started by the first bytes queued: a job whose workers and agent print
  // nothing (a quiet launch) never starts it, nor has it to be woken and ended when the agent
  // leaves. Detached: a thread blocked
  // on a stalled console must not keep the agent from exiting. Under the lock; it waits for the
  // lock before its first look at the queue. A thread that cannot be started now (no resources)
  // is tried again by the next bytes; what is queued meanwhile waits for it.
  void startThread() {
    if (started || stopping) return;
    try {
      std::thread([self = shared_from_this()] { self->run(); }).detach();
      started = true;
    } catch (const std::system_error&) {
    }
  }
};

ConsoleWriter::ConsoleWriter(int fd, boost::asio::io_context& io, std::size_t limit)
    : shared_(std::make_shared<Shared>(fd, io, limit)) {}

ConsoleWriter::~ConsoleWriter() {
  flush(kExitPatience);
  std::lock_guard lock(shared_->mutex);
  shared_->stopping = true;
  shared_->waiting.clear();
  shared_->onClosed = nullptr;
  shared_->changed.notify_all();
}

int ConsoleWriter::fd() const { return shared_->fd; }

void ConsoleWriter::write(std::string bytes) {
  if (bytes.empty()) return;
  std::lock_guard lock(shared_->mutex);
  if (shared_->broken) {
    shared_->lost += bytes.size();
    return;
  }
  if (shared_->lines.openSource() != 0) {
    std::string framed;
    shared_->lines.frameUnsourced(bytes, framed);
    bytes = std::move(framed);
  }
  shared_->enqueue(std::move(bytes));
}

void ConsoleWriter::write(std::uint64_t source, std::string_view prefix, std::string_view text) {
  if (text.empty()) return;
  std::lock_guard lock(shared_->mutex);
  if (shared_->broken) {
    shared_->lost += text.size();
    return;
  }
  std::string framed;
  shared_->lines.frame(source, prefix, text, framed);
  shared_->enqueue(std::move(framed));
}

bool ConsoleWriter::full() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->queued > shared_->limit;
}

void ConsoleWriter::whenRoom(std::function<void()> resume) {
  std::lock_guard lock(shared_->mutex);
  if (shared_->queued <= shared_->limit / 2) {
    boost::asio::post(shared_->io, std::move(resume));
  } else {
    shared_->waiting.push_back(std::move(resume));
  }
}

bool ConsoleWriter::flush(std::chrono::milliseconds patience) {
  std::unique_lock lock(shared_->mutex);
  return shared_->changed.wait_for(lock, patience, [&] { return shared_->queued == 0; });
}

void ConsoleWriter::whenClosed(std::function<void()> closed) {
  std::lock_guard lock(shared_->mutex);
  if (shared_->broken) {
    boost::asio::post(shared_->io, std::move(closed));
  } else {
    shared_->onClosed = std::move(closed);
  }
}

std::size_t ConsoleWriter::lost() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->lost;
}

}  // namespace ddprun::launcher
