// StatusFeed: the wiring between the machine's snapshot() and the StatusPublisher, so that
// `ddprun status` sees what this agent does. On the loop, every kLook (half a second) it takes a
// snapshot and hands it over when it differs from the last one handed over (a round formed,
// workers started, one ended, a stop, stopping, finished: whatever changed it, on whichever path
// of the machine), and every kRefresh while workers run even when it does not (the heartbeats and
// updated_at stay recent). Looking instead of a hook in each transition keeps the machine as it
// is; a snapshot is a few small values, and handing it over never blocks (the publisher's thread
// writes it).
//
// Thread safety: the loop's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/event_loop.h"
#include "machine/agent_machine.h"
#include "membership/status_publisher.h"

namespace ddprun::launcher {

class StatusFeed {
 public:
  static constexpr std::chrono::milliseconds kLook{500};
  static constexpr std::chrono::milliseconds kRefresh{3000};

  // Every reference must outlive the feed. `nodeId`: this agent's member id now (-1: none yet).
  StatusFeed(EventLoop& loop, const AgentMachine& machine, StatusPublisher& publisher,
             std::function<std::int64_t()> nodeId);

  void start();
  // The final snapshot, before the agent leaves the rendezvous (the loop has stopped): waits up
  // to `patience` for it to be written.
  void finish(std::chrono::milliseconds patience);

 private:
  void look();

  EventLoop& loop_;
  const AgentMachine& machine_;
  StatusPublisher& publisher_;
  std::function<std::int64_t()> nodeId_;
  std::unique_ptr<EventLoop::Timer> timer_;
  std::string lastMeaning_;  // the last snapshot handed over, without its clocks
  std::int64_t lastId_ = -1;
  std::optional<EventLoop::TimePoint> lastAt_;
};

}  // namespace ddprun::launcher
