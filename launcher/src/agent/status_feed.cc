#include "agent/status_feed.h"

#include <utility>

namespace ddprun::launcher {
namespace {

// What a snapshot says, without what changes by itself (its own time, the heartbeats' times:
// only whether a worker has reported at all): two snapshots that mean the same are not written
// twice.
std::string meaning(const AgentSnapshot& snapshot) {
  nlohmann::json value = toJson(snapshot);
  value.erase("updated_at");
  for (auto& worker : value["workers"]) {
    if (worker.contains("last_heartbeat")) worker["last_heartbeat"] = true;
  }
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

StatusFeed::StatusFeed(EventLoop& loop, const AgentMachine& machine, StatusPublisher& publisher,
                       std::function<std::int64_t()> nodeId)
    : loop_(loop), machine_(machine), publisher_(publisher), nodeId_(std::move(nodeId)) {}

void StatusFeed::start() { look(); }

void StatusFeed::look() {
  const std::int64_t id = nodeId_();
  if (id >= 0) {
    const AgentSnapshot snapshot = machine_.snapshot();
    std::string now = meaning(snapshot);
    // A spare waits as long as the job runs: refreshed like a running node, so that it is not
    // shown as stale.
    const bool running = snapshot.phase == AgentPhase::kRunning ||
                         snapshot.phase == AgentPhase::kLocalDone || snapshot.spare;
    const bool due = lastAt_ && running && loop_.now() - *lastAt_ >= kRefresh;
    if (now != lastMeaning_ || id != lastId_ || due) {
      publisher_.publish(snapshot, id);
      lastMeaning_ = std::move(now);
      lastId_ = id;
      lastAt_ = loop_.now();
    }
  }
  timer_ = loop_.after(kLook, [this] { look(); });
}

void StatusFeed::finish(std::chrono::milliseconds patience) {
  if (timer_) timer_->cancel();
  timer_.reset();
  publisher_.publishLast(machine_.snapshot(), nodeId_(), patience);
}

}  // namespace ddprun::launcher
