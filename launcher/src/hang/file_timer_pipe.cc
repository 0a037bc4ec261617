#include "hang/file_timer_pipe.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <exception>
#include <system_error>
#include <utility>

namespace ddprun::launcher {
namespace {

// torch's client refuses requests over PIPE_BUF (4 KiB); a line sixteen times that is garbage.
constexpr std::size_t kMaxLineBytes = 64 * 1024;
constexpr std::size_t kReadChunk = 16 * 1024;

[[noreturn]] void throwErrno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace

// Shared with the pending read's handler, which keeps it alive until it runs; `open` is false
// once the FileTimerPipe is gone, and then the handler delivers nothing.
struct FileTimerPipe::State {
  State(boost::asio::io_context& io, std::string fifoPath, OnLine callback)
      : descriptor(io), path(std::move(fifoPath)), onLine(std::move(callback)) {}

  static void readMore(const std::shared_ptr<State>& self) {
    self->descriptor.async_read_some(boost::asio::buffer(self->buffer), [self](
                                                                            const boost::system::
                                                                                error_code& error,
                                                                            std::size_t size) {
      if (!self->open) return;
      if (size > 0) self->consume(std::string_view(self->buffer.data(), size));
      if (!self->open) return;  // the pipe was destroyed by onLine
      if (error) {
        // The agent holds a writing end itself, so there is no end-of-file; any error means
        // the pipe is unusable, and retrying would spin.
        spdlog::error(
            "ddprun: reading the FileTimer pipe {}: {}; FileTimer requests are ignored from now on",
            self->path, error.message());
        return;
      }
      readMore(self);
    });
  }

  // Splits what arrived into lines; keeps a partial line for the next read.
  void consume(std::string_view data) {
    while (!data.empty() && open) {
      const std::size_t newline = data.find('\n');
      const std::string_view piece = data.substr(0, newline);
      if (discarding) {
        // The rest of an over-long line, already reported.
      } else if (pending.size() + piece.size() > kMaxLineBytes) {
        spdlog::warn("ddprun: dropping a line of over {} bytes from the FileTimer pipe {}",
                     kMaxLineBytes, path);
        pending.clear();
        discarding = true;
      } else if (newline == std::string_view::npos) {
        pending.append(piece);
      } else if (pending.empty()) {
        deliver(piece);
      } else {
        pending.append(piece);
        deliver(std::exchange(pending, std::string()));
      }
      if (newline == std::string_view::npos) return;
      discarding = false;
      data.remove_prefix(newline + 1);
    }
  }

  void deliver(std::string_view line) {
    // A throwing callback must not end the reading: the watchdog would go deaf without a word.
    try {
      onLine(line);
    } catch (const std::exception& error) {
      spdlog::error("ddprun: handling a line from the FileTimer pipe {}: {}", path, error.what());
    }
  }

  boost::asio::posix::stream_descriptor descriptor;
  std::string path;
  OnLine onLine;
  std::array<char, kReadChunk> buffer;  // not zeroed: written by each read before it is read
  std::string pending;                  // a line whose newline has not arrived yet
  bool discarding = false;              // inside an over-long line: dropped up to its newline
  bool open = true;
  struct stat identity {};  // the FIFO made; only it is removed at the end
};

FileTimerPipe::FileTimerPipe(boost::asio::io_context& io, std::string path, OnLine onLine)
    : state_(std::make_shared<State>(io, std::move(path), std::move(onLine))) {
  const std::string& fifo = state_->path;
  // A stale FIFO (or file) from an earlier agent: replaced, as torch's server does.
  if (::unlink(fifo.c_str()) != 0 && errno != ENOENT) {
    throwErrno("cannot remove the stale FileTimer pipe " + fifo);
  }
  if (::mkfifo(fifo.c_str(), 0600) != 0) throwErrno("cannot create the FileTimer pipe " + fifo);
  // Read and write: the agent's own writing end means no end-of-file between clients, and a
  // client's non-blocking open for writing finds a reader.
  const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    ::unlink(fifo.c_str());
    errno = error;
    throwErrno("cannot open the FileTimer pipe " + fifo);
  }
  if (::fstat(fd, &state_->identity) != 0) {
    const int error = errno;
    ::close(fd);
    ::unlink(fifo.c_str());
    errno = error;
    throwErrno("cannot inspect the FileTimer pipe " + fifo);
  }
  if (!S_ISFIFO(state_->identity.st_mode)) {
    // Something else took the path between mkfifo and open: not ours to remove.
    ::close(fd);
    throw std::system_error(EEXIST, std::generic_category(),
                            "the FileTimer pipe " + fifo + " was replaced while being opened");
  }
  boost::system::error_code error;
  state_->descriptor.assign(fd, error);
  if (error) {
    ::close(fd);
    ::unlink(fifo.c_str());
    throw std::system_error(error.value(), std::generic_category(),
                            "cannot read the FileTimer pipe " + fifo);
  }
  State::readMore(state_);
}

FileTimerPipe::~FileTimerPipe() {
  state_->open = false;
  boost::system::error_code ignored;
  state_->descriptor.close(ignored);  // the pending read ends with operation_aborted
  // Only our own FIFO: a newer agent may have replaced it at the same path.
  struct stat now {};
  if (::stat(state_->path.c_str(), &now) == 0 && now.st_dev == state_->identity.st_dev &&
      now.st_ino == state_->identity.st_ino) {
    ::unlink(state_->path.c_str());
  }
}

const std::string& FileTimerPipe::path() const { return state_->path; }

void FileTimerPipe::readAvailable() {
  // The descriptor is non-blocking: read until the pipe is empty. The pending asynchronous read
  // runs on this same thread, so it cannot be filling the buffer meanwhile; it simply finds
  // nothing (or what comes later).
  // `onLine` may destroy this FileTimerPipe: the state is held here until the loop ends.
  const std::shared_ptr<State> state = state_;
  std::array<char, kReadChunk> chunk;
  while (state->open) {
    const ssize_t size = ::read(state->descriptor.native_handle(), chunk.data(), chunk.size());
    if (size > 0) {
      state->consume(std::string_view(chunk.data(), static_cast<std::size_t>(size)));
      continue;
    }
    if (size < 0 && errno == EINTR) continue;
    return;  // empty (EAGAIN), or an error the pending read will report
  }
}

}  // namespace ddprun::launcher
