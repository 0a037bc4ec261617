// StopFiles: the real StopRequests, one file per attempt in the agent's private directory,
// "<directory>/stop-<n>" (n counts this agent's attempts from 1). No file is there while the
// attempt's workers may run; request() makes it appear complete (written under a temporary name
// and renamed: common/safe_files.h's writeFileAtomically), two lines a worker can read with the
// standard library:
//
//   reason=SIGTERM
//   deadline=1767225630.250      (epoch seconds: then the agent kills what is left)
//
// Thread safety: used from the agent's event-loop thread only.
#pragma once

#include <string>
#include <string_view>

#include "core/stop_requests.h"

namespace ddprun::launcher {

class StopFiles final : public StopRequests {
 public:
  // `directory`: the agent's private directory (made by the agent; refused at the first
  // prepare() when it is a link or another user's).
  explicit StopFiles(std::string directory) : directory_(std::move(directory)) {}
  ~StopFiles() override;
  StopFiles(const StopFiles&) = delete;
  StopFiles& operator=(const StopFiles&) = delete;

  std::string prepare() override;
  void request(std::string_view reason, EventLoop::WallTime deadline) override;

  // The text request() writes.
  static std::string content(std::string_view reason, EventLoop::WallTime deadline);

 private:
  std::string directory_;
  bool directoryChecked_ = false;
  int attempts_ = 0;
  std::string current_;  // the current attempt's path ("" before the first prepare())
};

}  // namespace ddprun::launcher
