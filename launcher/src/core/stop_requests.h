// StopRequests: how the agent tells its workers to stop without a signal (DDPRUN_STOP_FILE,
// docs/env_contract.md, "Stopping gracefully"). A signal reaches one process (or a whole process
// group, DataLoader workers included, which then die under a rank still saving its checkpoint); a
// file reaches whatever process of the worker looks at it, a trainer behind a wrapper script
// included, at a moment of its choosing (a step boundary). StopFiles (process/stop_files.h) is the
// real one; the unit tests fake it.
//
// Thread safety: used from the agent's event-loop thread only.
#pragma once

#include <string>
#include <string_view>

#include "core/event_loop.h"

namespace ddprun::launcher {

class StopRequests {
 public:
  virtual ~StopRequests() = default;
  // The path the workers of a new attempt get as DDPRUN_STOP_FILE: one this agent never handed
  // out before, with nothing at it, so no request of an earlier attempt (nor a file left there)
  // stops the new workers. The previous attempt's request is removed. Throws std::system_error
  // naming the path.
  virtual std::string prepare() = 0;
  // The current attempt's workers are to stop: its file appears, complete, saying `reason` (a
  // signal's name, or a stop kind's: "SIGTERM", "failure", "node_lost") and `deadline` (when the
  // agent kills what is left). A second request replaces the first. Never throws: a file that
  // cannot be written is logged, and the signal that follows still goes.
  virtual void request(std::string_view reason, EventLoop::WallTime deadline) = 0;
};

}  // namespace ddprun::launcher
