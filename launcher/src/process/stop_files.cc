#include "process/stop_files.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <system_error>
#include <utility>

#include "ddprun/common/safe_files.h"

namespace ddprun::launcher {

namespace {

// Removes whatever is at `path` (never following a link); nothing there is fine.
void removeIfThere(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw std::system_error(errno, std::generic_category(), "cannot remove " + path);
  }
}

}  // namespace

StopFiles::~StopFiles() {
  if (!current_.empty()) ::unlink(current_.c_str());
}

std::string StopFiles::content(std::string_view reason, EventLoop::WallTime deadline) {
  const double seconds = std::chrono::duration<double>(deadline.time_since_epoch()).count();
  return fmt::format("reason={}\ndeadline={:.3f}\n", reason, seconds);
}

std::string StopFiles::prepare() {
  if (!directoryChecked_) {
    if (auto problem = common::ensureOwnDirectory(directory_)) {
      throw std::system_error(problem->code(), "cannot create " + directory_);
    }
    directoryChecked_ = true;
  }
  if (!current_.empty()) {
    const std::string previous = std::exchange(current_, std::string());
    removeIfThere(previous);
  }
  std::string next = fmt::format("{}/stop-{}", directory_, ++attempts_);
  // The directory is the agent's own; a name found taken there (a worker's doing) is cleared, so
  // the new attempt starts with no request.
  removeIfThere(next);
  current_ = std::move(next);
  return current_;
}

void StopFiles::request(std::string_view reason, EventLoop::WallTime deadline) {
  if (current_.empty()) return;
  if (auto problem = common::writeFileAtomically(current_, content(reason, deadline), 0600)) {
    spdlog::warn("cannot write the stop request {}: {}; the workers get the signal only", current_,
                 problem->describe());
  }
}

}  // namespace ddprun::launcher
