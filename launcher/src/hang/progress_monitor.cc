#include "hang/progress_monitor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <thread>
#include <vector>

#include "ddprun/common/safe_files.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;

// The exit rule's idea of a worker that works (see progress_monitor.h): over one window, at least
// a hundredth of one core, or a page read or written.
constexpr double kBusyCpuShare = 0.01;
constexpr std::uint64_t kBusyIoBytes = 4096;

double seconds(std::chrono::milliseconds duration) {
  return std::chrono::duration<double>(duration).count();
}

std::chrono::milliseconds since(EventLoop::WallTime from, EventLoop::WallTime now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - from);
}

}  // namespace

std::string HeartbeatFiles::path(int localRank) const {
  return fmt::format("{}/heartbeat-{}", directory_, localRank);
}

HeartbeatFiles::~HeartbeatFiles() {
  if (ahead_.joinable()) ahead_.join();
}

void HeartbeatFiles::checkDirectory() {
  // The directory is the agent's own (its private directory); one that is a link or another
  // user's is refused, never used. Checked once, before the first file: one mkdir and lstat per
  // agent, not per worker and attempt.
  if (directoryChecked_) return;
  if (auto problem = common::ensureOwnDirectory(directory_)) {
    throw std::system_error(problem->code(), "cannot create " + directory_);
  }
  directoryChecked_ = true;
}

void HeartbeatFiles::prepareAhead(int count) {
  checkDirectory();
  if (ahead_.joinable() || count <= 0) return;
  std::vector<std::string> files;
  for (int rank = 0; rank < count; ++rank) files.push_back(path(rank));
  try {
    ahead_ = std::thread([files = std::move(files)] {
      // As prepare() makes one (O_EXCL, never through a link, time 0); a name already taken is
      // left for prepare() to judge.
      const timespec zero[2] = {{0, 0}, {0, 0}};
      for (const std::string& file : files) {
        if (auto made = common::createNewFile(file, 0600)) ::futimens(made->get(), zero);
      }
    });
  } catch (const std::system_error&) {
    // No thread to be had: prepare() makes each file when its worker is prepared.
  }
}

std::string HeartbeatFiles::prepare(int localRank) {
  if (ahead_.joinable()) ahead_.join();
  checkDirectory();
  const std::string file = path(localRank);
  // A restart finds the last attempt's file. Its workers could touch it or put something else in
  // its place, so it is kept only as what this agent made: opened without following a link and
  // without blocking on a FIFO, a regular file of this user's, with no other name and no access
  // for others. Then it is only reset to time 0 below: no inode freed and made again per worker
  // and restart (the costly part: prepareAhead). Opening it
  // writes nothing, and nothing is ever written into it. A file made ahead (prepareAhead) is
  // found and kept the same way.
  common::FileDescriptor kept(
      ::open(file.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  const bool none = !kept && errno == ENOENT;
  if (kept) {
    struct stat info {};
    if (::fstat(kept.get(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_uid != ::geteuid() ||
        info.st_nlink != 1 || (info.st_mode & 0077) != 0) {
      kept.reset();
    }
  }
  // Otherwise a fresh file: whatever is there is removed, and the new one made with O_EXCL, so
  // nothing planted is written through.
  if (!kept && !none && ::unlink(file.c_str()) != 0 && errno != ENOENT) {
    throw std::system_error(errno, std::generic_category(), "cannot replace " + file);
  }
  auto made = kept ? common::FileOutcome<common::FileDescriptor>(std::move(kept))
                   : common::createNewFile(file, 0600);
  if (!made) throw std::system_error(made.error().code(), "cannot create " + file);
  // Time 0: "no report yet" (a worker's report sets the time to now).
  const timespec zero[2] = {{0, 0}, {0, 0}};
  if (::futimens(made->get(), zero) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot reset " + file);
  }
  return file;
}

std::optional<EventLoop::WallTime> HeartbeatFiles::lastReport(int localRank) const {
  struct stat status {};
  if (::stat(path(localRank).c_str(), &status) != 0) return std::nullopt;
  if (status.st_mtim.tv_sec == 0 && status.st_mtim.tv_nsec == 0) return std::nullopt;
  return EventLoop::WallTime(std::chrono::duration_cast<EventLoop::WallTime::duration>(
      std::chrono::seconds(status.st_mtim.tv_sec) +
      std::chrono::nanoseconds(status.st_mtim.tv_nsec)));
}

ProgressMonitor::ProgressMonitor(EventLoop& loop, const HangPolicy& policy, Heartbeats* heartbeats,
                                 WorkerActivity* activity, OnHung onHung)
    : loop_(loop),
      policy_(policy),
      heartbeats_(heartbeats),
      activity_(activity),
      onHung_(std::move(onHung)) {}

void ProgressMonitor::start(std::vector<pid_t> pids) {
  workers_.assign(pids.size(), Monitored{});
  for (std::size_t i = 0; i < pids.size(); ++i) {
    workers_[i].pid = pids[i];
    workers_[i].running = pids[i] > 0;
  }
  startedAt_ = loop_.wallNow();
  firstSuccessAt_.reset();
  check();
}

void ProgressMonitor::exited(int localRank, bool succeeded) {
  if (localRank < 0 || static_cast<std::size_t>(localRank) >= workers_.size()) return;
  workers_[localRank].running = false;
  if (succeeded && !firstSuccessAt_) {
    firstSuccessAt_ = loop_.wallNow();
    if (policy_.exitTimeout) openWindows(*firstSuccessAt_);
    check();
  }
}

void ProgressMonitor::stop() {
  workers_.clear();
  timer_.reset();
}

void ProgressMonitor::pause() {
  paused_ = true;
  timer_.reset();
}

void ProgressMonitor::resume() {
  if (!paused_) return;
  paused_ = false;
  const auto now = loop_.wallNow();
  resumedAt_ = now;
  // What the trees did before the stop must not make a worker look busy in its first window
  // after it, so every window starts here, with a fresh sample.
  if (firstSuccessAt_ && policy_.exitTimeout) openWindows(now);
  check();
}

std::vector<TreeSample> ProgressMonitor::sample(const std::vector<std::size_t>& which) {
  std::vector<pid_t> pids;
  for (std::size_t i : which) pids.push_back(workers_[i].pid);
  std::vector<TreeSample> samples = activity_ ? activity_->sample(pids) : std::vector<TreeSample>{};
  samples.resize(which.size());
  return samples;
}

void ProgressMonitor::openWindows(EventLoop::WallTime now) {
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].running && !workers_[i].hung) which.push_back(i);
  }
  if (which.empty()) return;
  std::vector<TreeSample> samples = sample(which);
  for (std::size_t k = 0; k < which.size(); ++k) {
    workers_[which[k]].windowStart = now;
    workers_[which[k]].atWindowStart = std::move(samples[k]);
  }
}

void ProgressMonitor::judgeWindows(EventLoop::WallTime now, std::vector<HungWorker>& found) {
  if (!firstSuccessAt_ || !policy_.exitTimeout) return;
  const auto timeout = *policy_.exitTimeout;
  std::vector<std::size_t> due;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const Monitored& worker = workers_[i];
    if (worker.running && !worker.hung && worker.windowStart + timeout <= now) due.push_back(i);
  }
  if (due.empty()) return;
  std::vector<TreeSample> samples = sample(due);
  for (std::size_t k = 0; k < due.size(); ++k) {
    const int localRank = static_cast<int>(due[k]);
    Monitored& worker = workers_[due[k]];
    const WorkDone done = workBetween(worker.atWindowStart, samples[k]);
    const auto window = since(worker.windowStart, now);
    std::optional<EventLoop::WallTime> report;
    if (heartbeats_ != nullptr) report = heartbeats_->lastReport(localRank);
    const bool reported = report && *report > worker.windowStart;
    // Busy: a hundredth of one core over the window (never "any tick": torch 2.x's NCCL watchdog
    // wakes ten times a second in a process stuck for good, and costs far less), or a page of
    // I/O, or a progress report.
    const bool busy =
        reported || (activity_ != nullptr && (done.cpu.count() >= window.count() * kBusyCpuShare ||
                                              done.ioBytes >= kBusyIoBytes));
    if (busy) {
      spdlog::info(
          "worker {} (pid {}) still runs {:.1f} s after a worker of this node exited 0, "
          "and works ({:.2f} s of CPU time, {} bytes of I/O{} in the last {:.1f} s): "
          "looking again in {:g} s (--exit-timeout)",
          localRank, worker.pid, seconds(since(*firstSuccessAt_, now)), seconds(done.cpu),
          done.ioBytes, reported ? ", a progress report" : "", seconds(window), seconds(timeout));
      worker.windowStart = now;
      worker.atWindowStart = std::move(samples[k]);
      continue;
    }
    worker.hung = true;
    const double after = seconds(since(*firstSuccessAt_, now));
    std::string detail;
    if (activity_ == nullptr) {
      detail = fmt::format(
          "still running {:.1f} s after a worker of this node exited 0 "
          "(--exit-timeout {:g})",
          after, seconds(timeout));
    } else {
      detail = fmt::format(
          "still running {:.1f} s after a worker of this node exited 0 and idle {}: {:.2f} s of "
          "CPU "
          "time, {} bytes of I/O{} (--exit-timeout {:g})",
          after,
          worker.windowStart == *firstSuccessAt_
              ? std::string("all that time")
              : fmt::format("for the last {:.1f} s", seconds(window)),
          seconds(done.cpu), done.ioBytes, heartbeats_ != nullptr ? ", no progress report" : "",
          seconds(timeout));
    }
    found.push_back(HungWorker{localRank, HangKind::kAtExit, window, std::move(detail)});
  }
}

std::optional<HungWorker> ProgressMonitor::progressVerdict(
    int localRank, EventLoop::WallTime now, std::optional<EventLoop::WallTime>& deadline) const {
  // Each rule gives a deadline; the worker is hung by the first one that passed.
  std::optional<HungWorker> hung;
  auto consider = [&](EventLoop::WallTime due, HangKind kind, EventLoop::WallTime from,
                      std::string detail) {
    if (due <= now) {
      if (!hung) hung = HungWorker{localRank, kind, since(from, now), std::move(detail)};
    } else if (!deadline || due < *deadline) {
      deadline = due;
    }
  };
  // No silence counts from before the job's latest resume (job control).
  auto counted = [&](EventLoop::WallTime from) {
    return resumedAt_ && *resumedAt_ > from ? *resumedAt_ : from;
  };
  if (!policy_.startPattern.empty() && heartbeats_ != nullptr &&
      !heartbeats_->startReport(localRank)) {
    const auto from = counted(startedAt_);
    consider(from + policy_.startTimeout, HangKind::kNoStart, from,
             fmt::format("wrote no line matching --start-pattern '{}' in the {:.1f} s since {} "
                         "(--start-timeout {:g})",
                         common::printable(policy_.startPattern), seconds(since(from, now)),
                         from == startedAt_ ? "it started" : "the job was resumed",
                         seconds(policy_.startTimeout)));
  }
  if (policy_.hangTimeout && heartbeats_ != nullptr) {
    const auto timeout = *policy_.hangTimeout;
    if (const auto last = heartbeats_->lastReport(localRank)) {
      const auto from = counted(*last);
      consider(from + timeout, HangKind::kNoProgress, from,
               fmt::format("no progress reported for {:.1f} s{} (--hang-timeout {:g})",
                           seconds(since(from, now)),
                           from == *last ? "" : " since the job was resumed", seconds(timeout)));
    } else {
      if (policy_.startupTimeout) {
        const auto from = counted(startedAt_);
        consider(from + *policy_.startupTimeout, HangKind::kNoFirstProgress, from,
                 fmt::format("no progress reported in the {:.1f} s since {} "
                             "(--hang-startup-timeout {:g})",
                             seconds(since(from, now)),
                             from == startedAt_ ? "it started" : "the job was resumed",
                             seconds(*policy_.startupTimeout)));
      }
      // Look again within one hang timeout: a first report may come any time, and from then on
      // the worker is on the hang timeout's clock.
      if (!deadline || now + timeout < *deadline) deadline = now + timeout;
    }
  }
  return hung;
}

void ProgressMonitor::check() {
  if (paused_) return;
  timer_.reset();
  const auto now = loop_.wallNow();
  std::optional<EventLoop::WallTime> deadline;
  std::vector<HungWorker> found;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    Monitored& worker = workers_[i];
    if (!worker.running || worker.hung) continue;
    if (auto hung = progressVerdict(static_cast<int>(i), now, deadline)) {
      worker.hung = true;
      found.push_back(std::move(*hung));
    }
  }
  judgeWindows(now, found);
  if (firstSuccessAt_ && policy_.exitTimeout) {
    for (const Monitored& worker : workers_) {
      if (!worker.running || worker.hung) continue;
      const auto due = worker.windowStart + *policy_.exitTimeout;
      if (!deadline || due < *deadline) deadline = due;
    }
  }
  rearm(deadline);
  // Last: a verdict may stop the monitor (re-entrantly).
  for (const HungWorker& hung : found) onHung_(hung);
}

void ProgressMonitor::rearm(std::optional<EventLoop::WallTime> deadline) {
  if (!deadline) return;
  // Rounded up: waking a little late costs nothing, waking early means a second wake-up.
  const auto delay = std::chrono::ceil<std::chrono::milliseconds>(*deadline - loop_.wallNow());
  timer_ = loop_.after(std::max(delay, 1ms), [this] { check(); });
}

}  // namespace ddprun::launcher
