#include "output/log_router.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>
#include <utility>

#include "ddprun/common/safe_files.h"
#include "ddprun/common/template.h"
#include "output/console_lines.h"

namespace ddprun::launcher {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kReadChunk = 64 * 1024;
// As torchrun's (Python's open(): 0666 less the umask); the directory above is the run's own,
// mode 0700, so this mode lets no one else in, and a user who opens that up means to share.
constexpr mode_t kFileMode = 0644;

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A worker's log file: a new one (O_EXCL), or one of ours already there to append to, never
// through a link or into a FIFO (common::openForAppend). The rank's directory is the agent's own,
// but the workers (and whatever they run) can write into it too.
Fd openLogFile(const std::string& path) {
  auto opened = common::openForAppend(path, kFileMode);
  if (!opened) {
    throw std::system_error(opened.error().code(), "cannot open " + path);
  }
  return Fd(opened->release());
}

Fd openDevNull() {
  const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open /dev/null");
  return Fd(fd);
}

// The attempt's and the rank's directories: made, or ours already (the ranks of an attempt share
// theirs); a link or another user's directory there is refused, never entered.
void makeOwnDirectory(const std::string& path) {
  if (auto problem = common::ensureOwnDirectory(path)) {
    throw std::system_error(problem->code(), "cannot create " + path);
  }
}

// A pseudo-terminal in raw mode (no "\r\n" for "\n", no echo): ends[0] the agent's side,
// ends[1] the worker's. Its size is the console's (`console`, when that is a terminal) less
// `prefixWidth` columns: tqdm and the like size their bar to the terminal, and a bar as wide as
// the console would wrap once the prefix is in front of it, so each '\r' redraw would leave its
// wrapped part behind. (A later resize of the console does not reach the worker.) False with
// errno set when none can be had.
bool openTerminal(int ends[2], int console, std::size_t prefixWidth) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return false;
  char name[64];
  if (::grantpt(master) != 0 || ::unlockpt(master) != 0 ||
      ::ptsname_r(master, name, sizeof name) != 0) {
    const int error = errno;
    ::close(master);
    errno = error;
    return false;
  }
  const int worker = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (worker < 0) {
    const int error = errno;
    ::close(master);
    errno = error;
    return false;
  }
  termios mode{};
  if (::tcgetattr(worker, &mode) == 0) {
    ::cfmakeraw(&mode);
    ::tcsetattr(worker, TCSANOW, &mode);
  }
  winsize size{};
  if (::ioctl(console, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    // A prefix too wide to leave a sensible line (20 columns) is ignored: the bar may wrap then.
    if (size.ws_col > prefixWidth + 20) {
      size.ws_col = static_cast<unsigned short>(size.ws_col - prefixWidth);
    }
    size.ws_xpixel = 0;
    size.ws_ypixel = 0;
    ::ioctl(worker, TIOCSWINSZ, &size);
  }
  ends[0] = master;
  ends[1] = worker;
  return true;
}

// Where one stream of one worker goes (see the table in log_router.h).
struct StreamPlan {
  bool file = false;
  bool console = false;
  bool filtered = false;
  // stderr always passes through the agent, even to a file only or to nowhere (a rank hidden by
  // --local-ranks-filter): its last lines go into the failure summary.
  bool keepTail = false;
  // Its lines are matched against the job's line patterns.
  bool watched = false;
  bool needsPipe() const { return console || filtered || keepTail || watched; }
};

// How much of each stream the agent keeps for its failure summary.
constexpr std::size_t kTailLines = 20;
constexpr std::size_t kTailLineBytes = 1024;

// Reads one worker stream (or one channel carrying both of a worker's streams) from its pipe or
// pseudo-terminal and fans the bytes out.
//
// To the console, whole lines go out as they arrive. A line without its '\n' yet is held for at
// most `partialDelay` and then written as it stands (the ConsoleWriter keeps it apart from other
// workers' lines and puts the prefix after each '\r' in it), so a progress bar drawn with '\r'
// shows as it is drawn; only its rest follows when the line ends. Holding a little first keeps
// the lines of a worker that writes a line in several pieces whole on the console.
class Reader : public std::enable_shared_from_this<Reader> {
 public:
  // What a Reader's lines are matched against, and where the matches are told (line_scan.h).
  struct Watch {
    const LinePatterns* patterns = nullptr;  // null: no matching
    LineEvents* events = nullptr;
    int localRank = 0;
  };

  Reader(asio::io_context& io, int readFd, LinePrefix prefix,
         std::chrono::steady_clock::time_point startedAt, std::shared_ptr<ConsoleWriter> console,
         Fd file, Fd filtered, std::vector<std::string> filters, std::string name,
         std::chrono::milliseconds partialDelay, Watch watch)
      : pipe_(io, readFd),
        holdTimer_(io),
        partialDelay_(partialDelay),
        prefix_(std::move(prefix)),
        prefixText_(prefix_.text()),
        startedAt_(startedAt),
        console_(std::move(console)),
        source_(ConsoleLines::newSource()),
        file_(std::move(file)),
        filtered_(std::move(filtered)),
        filters_(std::move(filters)),
        name_(std::move(name)) {
    if (watch.patterns != nullptr && watch.patterns->any() && watch.events != nullptr) {
      scan_.emplace(*watch.patterns, watch.localRank);
      events_ = watch.events;
    }
  }

  bool open() const { return open_; }
  // The stream's last lines (at most kTailLines, each cut to kTailLineBytes): what the agent
  // quotes when the worker fails.
  const std::deque<std::string>& tail() const { return tail_; }

  // Reads until EOF, then calls `closed`. Handlers hold the Reader alive; `closed` is only called
  // for an EOF or error seen while the Reader is still open (not after finish()).
  static void start(const std::shared_ptr<Reader>& self, std::function<void()> closed) {
    self->closed_ = std::move(closed);
    readMore(self);
  }

  // Flushes the partial line and closes the pipe and files. Pending reads end with
  // operation_aborted and do nothing.
  void finish() {
    if (!open_) return;
    open_ = false;
    holdTimer_.cancel();
    if (!pending_.empty()) {
      std::string console;
      std::string filtered;
      emitLine(pending_, console, filtered);
      pending_.clear();
      writeOut(console, filtered);
      tellMatches();
    }
    boost::system::error_code ignored;
    pipe_.close(ignored);
    file_.reset();
    filtered_.reset();
  }

 private:
  static void readMore(const std::shared_ptr<Reader>& self) {
    self->pipe_.async_read_some(
        asio::buffer(self->buffer_),
        [self](const boost::system::error_code& error, std::size_t size) {
          if (!self->open_) return;  // finished meanwhile (drain grace, closeAll)
          if (size > 0) self->consume(self->buffer_.data(), size);
          if (error) {
            // A pseudo-terminal reports the end of its last writer as EIO, not EOF.
            if (error != asio::error::eof && error != boost::system::errc::io_error) {
              spdlog::warn("ddprun: reading {}: {}", self->name_, error.message());
            }
            self->finish();
            if (self->closed_) std::exchange(self->closed_, nullptr)();
            return;
          }
          // Back-pressure: while the console has more queued than it may, the worker's pipe is
          // left unread (the worker blocks in its own write once the pipe is full).
          if (self->console_ && self->console_->full()) {
            self->console_->whenRoom([self] {
              if (self->open_) readMore(self);
            });
            return;
          }
          readMore(self);
        });
  }

  void consume(const char* data, std::size_t size) {
    if (file_.get() >= 0 &&
        common::writeAll(file_.get(), std::string_view(data, size), LogRouter::kStallLimit))
      warnOnce("its log file");
    // What was pending holds no newline: search only the new bytes (a long line arriving a few
    // bytes at a time must not be rescanned from its start on every read).
    std::size_t searchFrom = pending_.size();
    pending_.append(data, size);
    std::string console;
    std::string filtered;
    std::size_t start = 0;
    for (;;) {
      const std::size_t newline = pending_.find('\n', searchFrom);
      if (newline == std::string::npos) break;
      std::string_view line = std::string_view(pending_).substr(start, newline - start);
      while (line.size() > LogRouter::kMaxLineBytes) {
        const std::size_t piece = pieceLength(line);
        emitLine(line.substr(0, piece), console, filtered);
        line.remove_prefix(piece);
      }
      emitLine(line, console, filtered);
      start = newline + 1;
      searchFrom = start;
    }
    // A line without end is not buffered without bound: its first bytes go out as lines.
    while (pending_.size() - start > LogRouter::kMaxLineBytes) {
      const std::size_t piece = pieceLength(std::string_view(pending_).substr(start));
      emitLine(std::string_view(pending_).substr(start, piece), console, filtered);
      start += piece;
    }
    pending_.erase(0, start);
    writeOut(console, filtered);
    if (console_ && pending_.size() > shown_) holdPartial();
    tellMatches();
  }

  // What this read's lines said of the line patterns, told once the read is handled.
  void tellMatches() {
    if (scan_) scan_->endBatch(*events_);
  }

  // The prefix of the lines written now: with ${time} or ${elapsed}, the clock is read once for
  // the whole batch.
  const std::string& prefixNow() {
    if (prefix_.timed()) {
      prefixText_ = prefix_.at(std::chrono::system_clock::now(),
                               std::chrono::steady_clock::now() - startedAt_);
    }
    return prefixText_;
  }

  // The partial line goes to the console `partialDelay_` after its first unshown byte arrived,
  // however much more arrives meanwhile (a bar redrawn every 10 ms must still show).
  void holdPartial() {
    if (holding_) return;
    holding_ = true;
    holdTimer_.expires_after(partialDelay_);
    holdTimer_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
      self->holding_ = false;
      if (error || !self->open_ || self->pending_.size() <= self->shown_) return;
      const std::string_view unshown = std::string_view(self->pending_).substr(self->shown_);
      self->console_->write(self->source_, self->prefixNow(), unshown);
      self->shown_ = self->pending_.size();
    });
  }

  // How much of an over-long line goes out as one piece: kMaxLineBytes, moved back to the start
  // of a UTF-8 character when the cut would split one.
  static std::size_t pieceLength(std::string_view line) {
    const std::size_t cut = LogRouter::kMaxLineBytes;
    auto continuation = [&](std::size_t i) {
      return (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80;
    };
    std::size_t back = cut;
    while (back > cut - 3 && continuation(back)) --back;
    return continuation(back) ? cut : back;
  }

  // One line (or piece of an over-long one) from the start of pending_: to the tail, the
  // filtered file and the console (but for what the console already shows of it).
  void emitLine(std::string_view line, std::string& console, std::string& filtered) {
    if (scan_) scan_->line(line);
    if (tail_.size() == kTailLines) tail_.pop_front();
    tail_.emplace_back(line.substr(0, kTailLineBytes));
    if (console_) {
      const std::size_t shown = std::min(shown_, line.size());
      console += line.substr(shown);
      console += '\n';
      shown_ -= shown;
    }
    if (filtered_.get() >= 0 &&
        std::any_of(filters_.begin(), filters_.end(), [&](const std::string& filter) {
          return line.find(filter) != std::string_view::npos;
        })) {
      filtered += line;
      filtered += '\n';
    }
  }

  // One piece per destination: the console never sees half of a batch of lines.
  void writeOut(std::string& console, const std::string& filtered) {
    if (!console.empty()) console_->write(source_, prefixNow(), console);
    if (!filtered.empty() && common::writeAll(filtered_.get(), filtered, LogRouter::kStallLimit)) {
      warnOnce("its filtered log file");
    }
  }

  void warnOnce(const char* what) {
    if (warned_) return;
    warned_ = true;
    spdlog::warn("ddprun: cannot write {} to {}: {} (output is lost)", name_, what,
                 std::generic_category().message(errno));
  }

  asio::posix::stream_descriptor pipe_;
  asio::steady_timer holdTimer_;
  std::chrono::milliseconds partialDelay_;
  bool holding_ = false;                 // holdTimer_ is armed
  std::array<char, kReadChunk> buffer_;  // not zeroed: 64 KiB per stream, written before read
  std::string pending_;                  // bytes after the last newline
  std::size_t shown_ = 0;                // how much of pending_ the console already has
  LinePrefix prefix_;
  std::string prefixText_;  // the prefix as last written (the whole prefix when not timed)
  std::chrono::steady_clock::time_point startedAt_;  // the agent's start, for ${elapsed}
  std::optional<LineScan> scan_;                     // nothing: no line patterns
  LineEvents* events_ = nullptr;
  std::shared_ptr<ConsoleWriter> console_;  // null: not to the console
  std::uint64_t source_;                    // who this is to the console
  Fd file_;                                 // raw copy (-t, or -r with duplicate filters)
  Fd filtered_;                             // lines matching filters_
  std::vector<std::string> filters_;
  std::string name_;  // "local rank 3 stdout", for messages
  std::deque<std::string> tail_;
  bool open_ = true;
  bool warned_ = false;
  std::function<void()> closed_;
};

}  // namespace

LinePrefix linePrefix(const LogRouterOptions& options, int localRank, int rank, int groupRank,
                      int attempt) {
  const std::string pattern = options.prefixTemplate.value_or("[${role_name}${local_rank}]:");
  return LinePrefix(
      common::safeSubstitute(pattern, {{"role_name", options.role},
                                       {"local_rank", std::to_string(localRank)},
                                       {"rank", std::to_string(rank)},
                                       {"group_rank", std::to_string(groupRank)},
                                       {"hostname", options.hostname},
                                       {"attempt", std::to_string(attempt)},
                                       {"time", std::string(LinePrefix::kTimeMark)},
                                       {"elapsed", std::string(LinePrefix::kElapsedMark)}}));
}

struct LogRouter::Impl : std::enable_shared_from_this<LogRouter::Impl> {
  struct Worker {
    Fd childOut;
    Fd childErr;                  // none with one channel: childOut is both
    std::shared_ptr<Reader> out;  // null: no pipe (the child writes to a file or /dev/null)
    std::shared_ptr<Reader> err;  // with one channel: its reader (the tail comes from it)
    bool started = false;
  };
  struct Drain {
    std::function<void()> done;
    std::unique_ptr<asio::steady_timer> timer;
  };

  Impl(asio::io_context& context, LogRouterOptions routerOptions)
      : io(context),
        options(std::move(routerOptions)),
        oneConsole(samePlace(options.consoleOut, options.consoleErr)),
        watching(options.patterns && options.patterns->any() && options.lineEvents != nullptr),
        passThrough(options.passThrough && !watching) {
    if (!options.outWriter)
      options.outWriter = std::make_shared<ConsoleWriter>(options.consoleOut, io);
    if (!options.errWriter) {
      options.errWriter =
          oneConsole ? options.outWriter : std::make_shared<ConsoleWriter>(options.consoleErr, io);
    }
  }

  // The writer for one stream's console lines. On one console, both streams' lines go through
  // the stdout writer: one queue keeps a worker's open line (a bar) apart from every other line,
  // which two writers on the same terminal could not.
  const std::shared_ptr<ConsoleWriter>& consoleFor(bool stdoutStream) const {
    return stdoutStream || oneConsole ? options.outWriter : options.errWriter;
  }

  // Whether worker `localRank` gets one channel for its stdout and stderr: both go to the
  // console only (no -r/-t file, no duplicate filters, the rank not hidden), and the console's
  // stdout and stderr are one place (one terminal, or `2>&1`). Its lines then keep the order the
  // worker wrote them in (the kernel's), as under torchrun, whose workers write straight to that
  // place; with two channels nothing could tell which of two lines read apart came first. A
  // passed-through worker keeps the agent's own descriptors.
  bool oneChannel(int localRank, bool haveDir) const {
    auto consoleOnly = [](const StreamPlan& stream) {
      return stream.console && !stream.file && !stream.filtered;
    };
    return oneConsole && !passThrough && consoleOnly(plan(true, localRank, haveDir)) &&
           consoleOnly(plan(false, localRank, haveDir));
  }

  // The worker's one channel for both streams (oneChannel): a pseudo-terminal when the console
  // is a terminal, else a pipe, read as one stream whose lines go to the agent's stdout and
  // whose tail is the rank's "stderr tail" (its stdout lines among them).
  Fd openChannel(int localRank, const LinePrefix& prefix, std::shared_ptr<Reader>& reader) {
    int ends[2];
    const bool terminal = options.terminalStdout;
    if (terminal ? !openTerminal(ends, options.consoleOut, prefix.text().size())
                 : ::pipe2(ends, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(),
                              "cannot create a pipe for local rank " + std::to_string(localRank));
    }
    Fd readEnd(ends[0]);
    Fd writeEnd(ends[1]);
    reader =
        std::make_shared<Reader>(io, readEnd.get(), prefix, options.startedAt, options.outWriter,
                                 Fd(), Fd(), std::vector<std::string>{},
                                 "local rank " + std::to_string(localRank) + " stdout and stderr",
                                 options.partialLineDelay, watchOf(localRank));
    readEnd.release();  // the Reader's stream_descriptor owns it now
    return writeEnd;
  }

  StreamPlan plan(bool stdoutStream, int localRank, bool haveDir) const {
    const StdStreams redirect = options.redirects.forRank(localRank);
    const StdStreams tee = options.tee.forRank(localRank);
    const bool r = stdoutStream ? redirect.out : redirect.err;
    const bool t = stdoutStream ? tee.out : tee.err;
    const bool consoleAllowed =
        !options.localRanksFilter || options.localRanksFilter->count(localRank) > 0;
    const auto& filters =
        stdoutStream ? options.duplicateStdoutFilters : options.duplicateStderrFilters;
    StreamPlan result;
    result.file = haveDir && (r || t);
    result.console = consoleAllowed && (t || !r || !haveDir);
    result.filtered = haveDir && !filters.empty();
    result.keepTail = !stdoutStream;
    result.watched = watching;
    return result;
  }

  Reader::Watch watchOf(int localRank) const {
    if (!watching) return {};
    return Reader::Watch{options.patterns.get(), options.lineEvents, localRank};
  }

  // The child's descriptor for one stream; `reader` gets the pipe's reading side when there is one.
  Fd openStream(bool stdoutStream, int localRank, const LinePrefix& prefix, const std::string& dir,
                std::shared_ptr<Reader>& reader) {
    const StreamPlan streamPlan = plan(stdoutStream, localRank, !dir.empty());
    const std::string stream = stdoutStream ? "stdout" : "stderr";
    Fd file;
    if (streamPlan.file) file = openLogFile(dir + "/" + stream + ".log");
    if (!streamPlan.needsPipe()) {
      if (streamPlan.file) return file;
      return openDevNull();
    }
    if (passThrough && streamPlan.console && !streamPlan.file && !streamPlan.filtered) {
      const int console = stdoutStream ? options.consoleOut : options.consoleErr;
      const int own = ::fcntl(console, F_DUPFD_CLOEXEC, 3);
      if (own < 0) {
        throw std::system_error(
            errno, std::generic_category(),
            "cannot pass the console to local rank " + std::to_string(localRank));
      }
      return Fd(own);
    }
    Fd filtered;
    if (streamPlan.filtered) filtered = openLogFile(dir + "/filtered_" + stream + ".log");
    int ends[2];
    // On a terminal, a worker's stdout is a terminal too (a pseudo-terminal the agent reads),
    // so C stdio and Python flush it by line, as they do under torchrun, whose workers inherit
    // the terminal: "step 1" shows when it is printed, not when a 4 KiB buffer fills. Lines stay
    // whole and prefixed all the same.
    const bool terminal = stdoutStream && options.terminalStdout && streamPlan.console;
    if (terminal ? !openTerminal(ends, options.consoleOut, prefix.text().size())
                 : ::pipe2(ends, O_CLOEXEC) != 0) {
      throw std::system_error(
          errno, std::generic_category(),
          "cannot create a pipe for local rank " + std::to_string(localRank) + " " + stream);
    }
    Fd readEnd(ends[0]);
    Fd writeEnd(ends[1]);
    std::shared_ptr<ConsoleWriter> console;
    if (streamPlan.console) console = consoleFor(stdoutStream);
    reader = std::make_shared<Reader>(
        io, readEnd.get(), prefix, options.startedAt, console, std::move(file), std::move(filtered),
        stdoutStream ? options.duplicateStdoutFilters : options.duplicateStderrFilters,
        "local rank " + std::to_string(localRank) + " " + stream, options.partialLineDelay,
        watchOf(localRank));
    readEnd.release();  // the Reader's stream_descriptor owns it now
    return writeEnd;
  }

  void closeWorker(Worker& worker) {
    worker.childOut.reset();
    worker.childErr.reset();
    if (worker.out) worker.out->finish();
    if (worker.err) worker.err->finish();
  }

  bool allDrained() const {
    for (const auto& [localRank, worker] : workers) {
      if (!worker.started) continue;
      if ((worker.out && worker.out->open()) || (worker.err && worker.err->open())) return false;
    }
    return true;
  }

  void completeDrains() {
    auto pending = std::exchange(drains, {});
    for (auto& [id, drain] : pending) {
      drain.timer->cancel();
      asio::post(io, std::move(drain.done));
    }
  }

  void checkDrained() {
    if (!drains.empty() && allDrained()) completeDrains();
  }

  void startReading(const std::shared_ptr<Reader>& reader) {
    if (!reader) return;
    std::weak_ptr<Impl> weak = weak_from_this();
    Reader::start(reader, [weak] {
      if (auto self = weak.lock()) self->checkDrained();
    });
  }

  asio::io_context& io;
  LogRouterOptions options;
  const bool oneConsole;          // the console's stdout and stderr are one place
  const bool watching;            // lines are matched against the job's line patterns
  const bool passThrough;         // options.passThrough, but never while watching
  std::map<int, Worker> workers;  // by local rank
  // The attempt directory last made or found to be ours: the ranks of an attempt share it, so it
  // is checked once per attempt, not once per worker.
  std::string attemptDirMade;
  std::map<std::uint64_t, Drain> drains;
  std::uint64_t nextDrainId = 0;
};

LogRouter::LogRouter(asio::io_context& io, LogRouterOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

LogRouter::~LogRouter() {
  for (auto& [id, drain] : impl_->drains) drain.timer->cancel();
  impl_->drains.clear();
  closeAll();
}

ChildStreams LogRouter::prepare(int localRank, int rank, int groupRank, int attempt,
                                const std::string& attemptDir, bool logFiles) {
  if (auto old = impl_->workers.find(localRank); old != impl_->workers.end()) {
    impl_->closeWorker(old->second);
    impl_->workers.erase(old);
  }
  std::string dir;  // where the log files go: none without logFiles
  if (!attemptDir.empty()) {
    const std::string rankDir = rankDirectory(attemptDir, localRank);
    if (impl_->attemptDirMade != attemptDir) {
      makeOwnDirectory(attemptDir);
      impl_->attemptDirMade = attemptDir;
    }
    makeOwnDirectory(rankDir);
    if (logFiles) dir = rankDir;
  }
  const LinePrefix prefix = linePrefix(impl_->options, localRank, rank, groupRank, attempt);
  Impl::Worker worker;
  try {
    if (impl_->oneChannel(localRank, !dir.empty())) {
      worker.childOut = impl_->openChannel(localRank, prefix, worker.err);
    } else {
      worker.childOut = impl_->openStream(true, localRank, prefix, dir, worker.out);
      worker.childErr = impl_->openStream(false, localRank, prefix, dir, worker.err);
    }
  } catch (...) {
    impl_->closeWorker(worker);
    throw;
  }
  // One channel: fd 1 and fd 2 of the worker are the same descriptor.
  const int childErr = worker.childErr.get() >= 0 ? worker.childErr.get() : worker.childOut.get();
  const ChildStreams streams{worker.childOut.get(), childErr};
  impl_->workers.emplace(localRank, std::move(worker));
  impl_->checkDrained();  // closing an old attempt of this rank may have ended a drain
  return streams;
}

void LogRouter::started(int localRank) {
  auto it = impl_->workers.find(localRank);
  if (it == impl_->workers.end() || it->second.started) return;
  Impl::Worker& worker = it->second;
  // The agent must not keep the writing ends open, or EOF would never come.
  worker.childOut.reset();
  worker.childErr.reset();
  worker.started = true;
  impl_->startReading(worker.out);
  impl_->startReading(worker.err);
}

void LogRouter::abandon(int localRank) {
  auto it = impl_->workers.find(localRank);
  if (it == impl_->workers.end()) return;
  impl_->closeWorker(it->second);
  impl_->workers.erase(it);
  impl_->checkDrained();
}

void LogRouter::drain(std::chrono::milliseconds grace, std::function<void()> done) {
  if (impl_->allDrained()) {
    asio::post(impl_->io, std::move(done));
    return;
  }
  const std::uint64_t id = impl_->nextDrainId++;
  Impl::Drain& entry = impl_->drains[id];
  entry.done = std::move(done);
  entry.timer = std::make_unique<asio::steady_timer>(impl_->io, grace);
  std::weak_ptr<Impl> weak = impl_;
  entry.timer->async_wait([weak, id](const boost::system::error_code& error) {
    if (error) return;
    auto self = weak.lock();
    if (!self || self->drains.count(id) == 0) return;
    // Grace is over: whatever still holds a pipe open (a grandchild) loses its console.
    for (auto& [localRank, worker] : self->workers) {
      if (worker.started) self->closeWorker(worker);
    }
    self->completeDrains();
  });
}

std::vector<std::string> LogRouter::stderrTail(int localRank) const {
  auto it = impl_->workers.find(localRank);
  if (it == impl_->workers.end() || !it->second.err) return {};
  const auto& tail = it->second.err->tail();
  return {tail.begin(), tail.end()};
}

void LogRouter::closeAll() {
  for (auto& [localRank, worker] : impl_->workers) impl_->closeWorker(worker);
  impl_->workers.clear();
  impl_->completeDrains();
}

}  // namespace ddprun::launcher
