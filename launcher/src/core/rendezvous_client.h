// The rendezvous as the agent's state machine sees it: the vocabulary of a round (NodeInfo,
// Round), the asynchronous client the machine calls (RendezvousClient), the events that client
// reports back (RendezvousEvents), and the seam through which the machine hosts a round's workers'
// store (WorkerStoreHost). Membership (membership/) implements the rounds; MembershipDriver runs
// them off the loop and implements RendezvousClient; stores/hosted_stores implements
// WorkerStoreHost. Nothing here knows a store, a socket or a thread.
//
// Thread safety: plain values and interfaces; see each implementation.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/restart_policy.h"
#include "core/stop_reason.h"

namespace ddprun::launcher {

// One agent as the others see it.
struct NodeInfo {
  std::int64_t id = -1;  // unique for the run, assigned when the agent opens its membership
  std::string address;   // where this node's services are reached (MASTER_ADDR if rank 0)
  std::string hostname;
  int nproc = 1;
  long pid = 0;
  int staticRank = -1;  // --node-rank with the static backend, else -1
};

// The outcome of a rendezvous round: who is in, and where the workers meet.
struct Round {
  int number = 0;
  // How many nodes are in the round. Not their list: each member reads its own seat in the
  // round (O(1) bytes), never the whole world (O(N) bytes for each of N members: O(N^2) for the
  // store).
  int nodes = 0;
  std::string address;  // this node's, as its record in the round has it
  int groupRank = 0;    // this node's
  // The job's failures so far, as the round's close record has them (history.restarts: the
  // restart count, TORCHELASTIC_RESTART_COUNT).
  RestartHistory history;
  int worldSize = 0;
  int baseRank = 0;  // the global rank of this node's local rank 0
  // This node hosts the round's workers' store (c10d: group rank 0 starts a fresh one per round,
  // as torchrun does). The machine starts it and publishes its port; masterAddr/masterPort are
  // then empty here until it has.
  bool hostsWorkerStore = false;
  // The round's workers' store (MASTER_ADDR:MASTER_PORT) as the round's record names it.
  std::string masterAddr;
  std::uint16_t masterPort = 0;
};

// Why a join failed for good.
struct RendezvousFailure {
  enum class Kind {
    kFailed,    // the rendezvous failed (exit 1)
    kBadInput,  // what the user gave is wrong (an endpoint, a node rank): exit 2
    kJobOver,   // the job finished without this agent, which waited for a place: exit 0
  };
  Kind kind = Kind::kFailed;
  std::string message;
};

// The rendezvous store stopped answering: how.
struct StoreLoss {
  // The store's side closed the connection or refused a new one (the agent hosting it exited,
  // the daemon stopped): an answer. Otherwise silence: the network to it is cut, or its host is
  // down, and nobody can tell which from here.
  bool closedByHost = false;
  std::string detail;  // what the failing call said
};

// Where a RendezvousClient's outcomes go: called on the event loop's thread.
class RendezvousEvents {
 public:
  virtual ~RendezvousEvents() = default;
  virtual void onRoundFormed(Round round) = 0;
  virtual void onRendezvousFailed(const RendezvousFailure& failure) = 0;
  // Round `round` stopped, for `stop`.
  virtual void onStop(int round, StopReason stop) = 0;
  // The rendezvous store stopped answering.
  virtual void onStoreLost(const StoreLoss& loss) = 0;
};

// Membership, asynchronously: each call returns at once and its outcome reaches the
// RendezvousEvents later, on the loop. Calls run in the order they are made.
class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;
  // Opens the membership first if it is not open. Outcome: onRoundFormed or onRendezvousFailed.
  virtual void join(int round) = 0;
  // Round `round`'s workers' store listens on host:port (this node hosts it: Round::
  // hostsWorkerStore); the other members wait for this before their round forms. Outcome: a
  // failure to write it is onRendezvousFailed.
  virtual void publishWorkerStore(int round, std::string host, std::uint16_t port) = 0;
  // Fire and forget: a lost store is reported by the watch.
  virtual void announce(int round, StopReason stop) = 0;
  virtual void markDone(int round, int members) = 0;
  // Outcome: onStop for `round`, or onStoreLost.
  virtual void watch(int round) = 0;
  // This node's id in the rendezvous (valid once a round formed).
  virtual std::int64_t nodeId() const = 0;
  // Where the store is, for messages.
  virtual std::string storeAddress() const = 0;
  // Whether a join in progress waits for a place as a spare (the job runs with MAX nodes; this
  // agent is in the store, with no round of its own). Returns at once.
  virtual bool waitingForPlace() const { return false; }

  // Liveness and fencing (docs/architecture.md). The send time, on the loop's clock, of the last
  // liveness renewal the store acknowledged; nothing before the first. Returns at once.
  virtual std::optional<std::chrono::steady_clock::time_point> livenessAcknowledgedAt() const = 0;
  // This node's workers of `round` are being stopped for lack of acknowledged liveness: renew no
  // more and write nothing more to `round`, even if a renewal is acknowledged late. Returns at
  // once.
  virtual void fence(int round) = 0;
  // Leaves the rendezvous as a killed agent would (the store reports the node lost to its round
  // if it has not yet) and joins again as a new member from the job's current round, trying to
  // reach the store until join_timeout. Outcome: onRoundFormed or onRendezvousFailed.
  virtual void rejoin() = 0;
  // This node stays out of the next rounds (it failed the health gate): it leaves the rendezvous
  // as a killed agent would, so the others count it lost and never wait for it; a later join()
  // comes back as a new member. Nothing is posted. Returns at once.
  virtual void standAside() = 0;

  // At the agent's end: leaves the rendezvous quietly (a clean exit is not a lost node). Blocks
  // until it is done; nothing is posted. `hostsStore`: this agent hosts the rendezvous store and
  // gives the others up to `patience` (close_timeout when not given) to read the outcome and
  // leave. `storeEndsAlone`: the store ends with this process and can hold no other node (a
  // one-node job hosting it), so nothing written now would be read: only the renewals stop.
  virtual void leave(bool hostsStore, bool storeEndsAlone,
                     std::optional<std::chrono::milliseconds> patience) = 0;
};

// Hosts a round's workers' store, and tells where this node's workers reach a store.
class WorkerStoreHost {
 public:
  virtual ~WorkerStoreHost() = default;
  // Starts a fresh store reachable at `address` (the previous round's is closed); returns its
  // port. Throws what the store throws when it cannot listen.
  virtual std::uint16_t host(const std::string& address) = 0;
  // Where this node's workers connect (their MASTER_ADDR/MASTER_PORT) to reach the round's
  // workers' store at host:port: the store itself, or, when the stores want a token, this
  // agent's loopback relay to it (called once per round, before any worker starts).
  virtual std::pair<std::string, std::uint16_t> reachFromWorkers(const std::string& host,
                                                                 std::uint16_t port) = 0;
};

}  // namespace ddprun::launcher
