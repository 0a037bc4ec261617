// MembershipDriver: the RendezvousClient of the agent. Membership's calls block on the store, so
// they run off the event loop: a control thread runs join/announce/markDone one at a time in
// order, a watch thread blocks on the current round's stop key; every outcome is posted to the
// loop and handed to the RendezvousEvents (the agent's machine) there. The unit tests use the same
// driver over the in-process store. A rejoin (a node fenced or declared lost in an elastic job)
// replaces the Membership with a new one, a new member; a thread still in a call of the old one
// keeps it alive until it returns.
//
// Thread safety: the RendezvousClient calls, attach() and close() run on the loop's thread.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/event_loop.h"
#include "core/rendezvous_client.h"
#include "core/stoppable_thread.h"
#include "membership/membership.h"

namespace ddprun::launcher {

class MembershipDriver final : public RendezvousClient {
 public:
  // Every reference must outlive the driver.
  MembershipDriver(const RendezvousConfig& config, StoreBackend& backend, NodeInfo self,
                   EventLoop& loop);
  ~MembershipDriver() override;

  // Where outcomes go. REQUIRES: called before the first join().
  void attach(RendezvousEvents& events) { events_ = &events; }

  void join(int round) override;
  void publishWorkerStore(int round, std::string host, std::uint16_t port) override;
  void announce(int round, StopReason stop) override;
  void markDone(int round, int members) override;
  // Outcome: onStop for `round`, or onStoreLost; a stop of the membership in use when called.
  void watch(int round) override;
  std::int64_t nodeId() const override { return nodeId_.load(); }
  std::string storeAddress() const override { return backend_.address(); }
  bool waitingForPlace() const override { return current()->waitingForPlace(); }
  std::optional<std::chrono::steady_clock::time_point> livenessAcknowledgedAt() const override {
    return current()->livenessAcknowledgedAt();
  }
  void fence(int round) override { current()->fence(round); }
  void rejoin() override;
  // The member in use leaves as a killed agent would and an unopened one takes its place: the
  // next join() opens it (a new node id).
  void standAside() override;
  // Stops the blocked calls and the threads, then gives up the holds (blocking up to `patience`
  // when this agent hosts the store); with `storeEndsAlone` it only stops the heartbeat.
  void leave(bool hostsStore, bool storeEndsAlone,
             std::optional<std::chrono::milliseconds> patience) override;

 private:
  using Call = std::function<void()>;
  // Runs `call` on the control thread; what it throws is reported by `onError` on the loop.
  void runOnControl(Call call, std::function<void(std::exception_ptr)> onError);
  void controlLoop();
  enum class Attempt { kJoined, kFailed, kStopping };
  // One attempt of rejoin(): a new member opens and joins within `budget`; on a failure worth
  // another attempt, `lastProblem` says what it was.
  Attempt rejoinOnce(const JoinBudget& budget, std::string& lastProblem);
  void stopThreads();
  // The membership in use: a rejoin replaces it (a new member), the old one living on until the
  // last thread using it lets go. Any thread.
  std::shared_ptr<Membership> current() const;
  std::shared_ptr<Membership> fresh();

  const RendezvousConfig& config_;
  StoreBackend& backend_;
  const NodeInfo self_;  // as given: a rejoin starts from it (a new id)
  EventLoop& loop_;
  mutable std::mutex membershipMutex_;
  std::shared_ptr<Membership> membership_;
  std::atomic<std::int64_t> nodeId_{-1};
  RendezvousEvents* events_ = nullptr;
  bool opened_ = false;  // touched by the control thread only

  // Under control_'s lock:
  std::deque<std::pair<Call, std::function<void(std::exception_ptr)>>> queue_;
  StoppableThread control_;
  // A plain thread: one blocking call per round, ended by Membership::cancel(), with no loop or
  // stop flag of its own, and started anew each round (a StoppableThread starts once).
  std::thread watch_;
};

}  // namespace ddprun::launcher
