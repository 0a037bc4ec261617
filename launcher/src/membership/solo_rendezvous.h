// SoloRendezvous: the RendezvousClient of a job that cannot have a second node, so that its
// rounds form at once, on the loop, without a word to any store.
//
// Why it exists: a --standalone job is one node on a store it hosts itself, on 127.0.0.1 at a
// free port, under a random run id: no other agent can ever be in its rounds, so its rendezvous
// decides nothing. Run through Membership, every round would still make dozens of loopback round
// trips over three connections and as many thread hand-offs with the hosted store's thread (the
// node id, the node and alive records, the round counter, the member slot, the close, world and
// master records, and at the end the exit barrier's count and the "done" stop), at the start of
// the launch and again at every restart.
//
// When it is used: agent.cc picks it only for --standalone, where this agent hosts the
// rendezvous store and --nnodes is 1 (its comment says why that is safe). Every other job keeps
// MembershipDriver.
//
// What it answers, as MembershipDriver would for such a job:
//   join(r)     round max(r, last + 1) (round 0 first): this node alone, group rank 0, world
//               size its nproc, base rank 0, hostsWorkerStore (the agent starts a fresh workers'
//               store per round, as the c10d rounds do); the restart history follows the
//               previous round's stop (historyAfter), as the close record's would.
//   announce    the round's first stop holds; a stop for a past round is dropped (the fencing
//               token's rule).
//   markDone    the last of the round's members (this one) announces "done".
//   watch(r)    onStop(r, its stop) once, as soon as both the watch and the stop are there.
//   nodeId      1 (the first ticket of a fresh run's node counter, what the driver got here, so
//               `ddprun status` still finds status/1), from the first round on.
//   liveness    nothing is ever acknowledged, so the machine arms no fence (armFence waits for a
//               first acknowledgement): the store dies with this process, so this node cannot
//               be counted lost while it runs, and fencing it would only kill healthy workers.
//   fence/rejoin  never reached without a fence; rejoin forms the next round all the same.
//   leave       nothing: no thread, no connection, nothing written.
// Every outcome is posted to the loop, never delivered inside the call that caused it.
//
// Thread safety: the loop's thread only (calls and outcomes alike).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/event_loop.h"
#include "core/rendezvous_client.h"
#include "core/stop_reason.h"

namespace ddprun::launcher {

class SoloRendezvous final : public RendezvousClient {
 public:
  // The id this node has in every round (what a fresh store's first node ticket is).
  static constexpr std::int64_t kNodeId = 1;

  // `self`: this node (its address is the workers' MASTER_ADDR); `storeAddress`: the hosted
  // rendezvous store, for messages. `loop` must outlive this object.
  SoloRendezvous(NodeInfo self, EventLoop& loop, std::string storeAddress);

  // Where outcomes go. REQUIRES: called before the first join().
  void attach(RendezvousEvents& events) { events_ = &events; }

  void join(int round) override;
  void publishWorkerStore(int round, std::string host, std::uint16_t port) override;
  void announce(int round, StopReason stop) override;
  void markDone(int round, int members) override;
  void watch(int round) override;
  std::int64_t nodeId() const override { return formed_ >= 0 ? kNodeId : -1; }
  std::string storeAddress() const override { return storeAddress_; }
  std::optional<std::chrono::steady_clock::time_point> livenessAcknowledgedAt() const override {
    return std::nullopt;
  }
  void fence(int) override {}
  void rejoin() override { join(-1); }
  void standAside() override {}
  void leave(bool, bool, std::optional<std::chrono::milliseconds>) override {
  }  // nothing held, nothing written

 private:
  // Posts onStop for the current round once both its watch and its stop are there.
  void deliverStop();

  NodeInfo self_;
  EventLoop& loop_;
  const std::string storeAddress_;
  RendezvousEvents* events_ = nullptr;
  int current_ = -1;                // the last round joined
  int formed_ = -1;                 // the last round handed to the machine (-1: none yet)
  RestartHistory history_;          // the current round's
  std::optional<StopReason> stop_;  // the current round's
  int done_ = 0;                    // the current round's exit-barrier count
  bool watched_ = false;            // the current round is watched
  bool stopDelivered_ = false;
};

}  // namespace ddprun::launcher
