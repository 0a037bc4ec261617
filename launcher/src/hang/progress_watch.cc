#include "hang/progress_watch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include <fmt/format.h>

#include "ddprun/common/safe_files.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;

double seconds(std::chrono::milliseconds duration) {
  return std::chrono::duration<double>(duration).count();
}

std::chrono::milliseconds since(EventLoop::WallTime from, EventLoop::WallTime now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - from);
}

}  // namespace

std::string HeartbeatFiles::path(int localRank) const {
  return fmt::format("{}/{}", directory_, localRank);
}

std::string HeartbeatFiles::prepare(int localRank) {
  // The directory is the agent's own (in its private directory); one that is a link or another
  // user's is refused, never used.
  if (auto problem = common::ensureOwnDirectory(directory_)) {
    throw std::system_error(problem->code(), "cannot create " + directory_);
  }
  const std::string file = path(localRank);
  // A fresh file for each attempt: the last attempt's (its workers could touch it, or put a link
  // there) is removed, and the new one made with O_EXCL, so nothing planted is written through.
  if (::unlink(file.c_str()) != 0 && errno != ENOENT) {
    throw std::system_error(errno, std::generic_category(), "cannot replace " + file);
  }
  auto made = common::createNewFile(file, 0600);
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
      std::chrono::seconds(status.st_mtim.tv_sec) + std::chrono::nanoseconds(status.st_mtim.tv_nsec)));
}

ProgressWatch::ProgressWatch(EventLoop& loop, const HangPolicy& policy, Heartbeats* heartbeats,
                             OnHung onHung)
    : loop_(loop), policy_(policy), heartbeats_(heartbeats), onHung_(std::move(onHung)) {}

void ProgressWatch::start(int count) {
  workers_.assign(static_cast<std::size_t>(count), Watched{});
  startedAt_ = loop_.wallNow();
  firstSuccessAt_.reset();
  check();
}

void ProgressWatch::exited(int localRank, bool succeeded) {
  if (localRank < 0 || static_cast<std::size_t>(localRank) >= workers_.size()) return;
  workers_[localRank].running = false;
  if (succeeded && !firstSuccessAt_) {
    firstSuccessAt_ = loop_.wallNow();
    check();
  }
}

void ProgressWatch::stop() {
  workers_.clear();
  timer_.reset();
}

std::optional<HungWorker> ProgressWatch::verdict(int localRank, EventLoop::WallTime now,
                                                 std::optional<EventLoop::WallTime>& deadline) const {
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
  if (policy_.hangTimeout && heartbeats_ != nullptr) {
    const auto timeout = *policy_.hangTimeout;
    if (const auto last = heartbeats_->lastReport(localRank)) {
      consider(*last + timeout, HangKind::kNoProgress, *last,
               fmt::format("no progress reported for {:.1f} s (--hang-timeout {:g})",
                           seconds(since(*last, now)), seconds(timeout)));
    } else {
      if (policy_.startupTimeout) {
        consider(startedAt_ + *policy_.startupTimeout, HangKind::kNoFirstProgress, startedAt_,
                 fmt::format("no progress reported in the {:.1f} s since it started "
                             "(--hang-startup-timeout {:g})",
                             seconds(since(startedAt_, now)), seconds(*policy_.startupTimeout)));
      }
      // Look again within one hang timeout: a first report may come any time, and from then on
      // the worker is on the hang timeout's clock.
      if (!deadline || now + timeout < *deadline) deadline = now + timeout;
    }
  }
  if (firstSuccessAt_ && policy_.exitTimeout) {
    consider(*firstSuccessAt_ + *policy_.exitTimeout, HangKind::kAtExit, *firstSuccessAt_,
             fmt::format("still running {:.1f} s after a worker of this node exited 0 "
                         "(--exit-timeout {:g})",
                         seconds(since(*firstSuccessAt_, now)), seconds(*policy_.exitTimeout)));
  }
  return hung;
}

void ProgressWatch::check() {
  timer_.reset();
  const auto now = loop_.wallNow();
  std::optional<EventLoop::WallTime> deadline;
  std::vector<HungWorker> found;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    Watched& worker = workers_[i];
    if (!worker.running || worker.hung) continue;
    if (auto hung = verdict(static_cast<int>(i), now, deadline)) {
      worker.hung = true;
      found.push_back(std::move(*hung));
    }
  }
  rearm(deadline);
  // Last: a verdict may stop the watch (re-entrantly).
  for (const HungWorker& hung : found) onHung_(hung);
}

void ProgressWatch::rearm(std::optional<EventLoop::WallTime> deadline) {
  if (!deadline) return;
  // Rounded up: waking a little late costs nothing, waking early means a second wake-up.
  const auto delay = std::chrono::ceil<std::chrono::milliseconds>(*deadline - loop_.wallNow());
  timer_ = loop_.after(std::max(delay, 1ms), [this] { check(); });
}

}  // namespace ddprun::launcher
