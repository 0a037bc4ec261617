// Membership: how the agents of one job agree, round after round, on who is in the job.
//
// Everything lives in the rendezvous store under "ddprun/<run id>/" (membership_keys.h writes the
// key layout once; docs/architecture.md has its table). A round:
//
//   join    every agent adds itself to round r (a counter and a member slot);
//   close   the first agent that sees the round complete writes its size: complete means MAX
//           nodes, or at least MIN nodes and either every still-alive member of round r-1 has
//           rejoined (a restart or a node loss: no waiting) or last_call_timeout has passed since
//           MIN was reached (new nodes may still come, as in torchrun). Before its close record
//           it writes each member's seat (ranks, group rank 0's address, ring neighbours): a
//           member reads its own seat, O(1) bytes, never the list of all N;
//   run     group rank 0 is told that it hosts the round's worker store (its agent starts it and
//           publishes where it listens: MASTER_ADDR:MASTER_PORT); everyone else waits for that,
//           then everyone starts its workers and blocks on the round's stop key;
//   stop    the first agent with news writes the stop key (a StopReason): a worker failure, a
//           node lost (written when a node's alive hold lapses or its connection drops: by the
//           store itself where it can, ddprun's; by the peers that see the key go, where the
//           store only deletes it, an etcd's: LapseReporter; nobody polls), a node joining below
//           MAX, a node leaving, or "done" from the last agent through the exit barrier.
//           Everyone wakes at once and moves on.
//
// Restart accounting is job-global: the restart history of round r+1 is historyAfter(round r's,
// its stop), written into round r+1's close record, the same for every node.
//
// Membership decides and returns; it never calls back into the agent (it starts no store: hosting
// the round's workers' store is the agent's, told by Round::hostsWorkerStore). Its store is reached
// through a StoreBackend, so the in-process store serves the unit tests, and its deadlines
// are measured on the clock it is given. What differs between stores is asked of the backend,
// never of the backend's name: whether the store reports a lapsed hold (HoldLapse), whether it
// is this job's alone (StoreTenancy: the store-wide active-run claim), and the static backend's
// extras (StaticStoreFacet). Every key it lists or deletes is under its run's prefix.
//
// Its parts, each tested on its own: round_records.h (the records of a round, encoded and checked),
// join_policy.h (when a round closes, what a joiner reads while it waits, the join budget) and
// liveness.h (the heartbeat, the fencing clock, the lapse reports). This class runs the protocol:
// membership.cc opens and joins, membership_rounds.cc reads and writes a round's records through
// the store, membership_stop.cc stops a round and leaves.
//
// Thread safety: join/announce/markDone run on one thread (the agent's control thread),
// waitForStop on another (its watch thread), the heartbeat on its own; each has its own store
// connection. cancel() and storeLost() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rendezvous_client.h"
#include "core/stop_reason.h"
#include "core/wait_lines.h"
#include "ddprun/launcher/launch_config.h"
#include "membership/join_policy.h"
#include "membership/liveness.h"
#include "membership/membership_errors.h"
#include "membership/membership_keys.h"
#include "membership/round_records.h"
#include "stores/store_backend.h"

namespace ddprun::launcher {

class Membership {
 public:
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  // `backend` must outlive this object. `now`: the clock of every deadline. Throws
  // std::invalid_argument for a static job on a backend without a StaticStoreFacet.
  Membership(const RendezvousConfig& config, StoreBackend& backend, NodeInfo self, Now now);
  ~Membership();

  // A join budget of join_timeout from now, on this membership's clock.
  JoinBudget freshBudget() const { return JoinBudget(settings_.joinTimeout, now_()); }

  // Connects (waiting up to `patience`, read_timeout when not given, for the store to come up;
  // for a host name that does not resolve yet, up to what is left of `budget`, then `patience`
  // again from when it resolved; never past `budget`; saying what it waits for,
  // core/wait_lines.h), fills in this node's address toward the store if it was unknown (empty),
  // checks, on a store that is this job's alone, that the store's active run is ours (a different
  // run id is refused, never merged), gets a node id, publishes this node and starts holding its
  // alive key. Throws EndpointError, MembershipError, MembershipCancelled or
  // rendezvous::StoreError.
  void open(const JoinBudget& budget,
            std::optional<std::chrono::milliseconds> patience = std::nullopt);
  void open(std::optional<std::chrono::milliseconds> patience = std::nullopt) {
    open(freshBudget(), patience);
  }
  const NodeInfo& self() const { return self_; }

  // Joins the first round this node can take part in, from `round` on (-1: whatever round the
  // job is in now), and blocks until it closes and its master is known, saying while it waits
  // who joined and the time left (joinWaitLine). Throws MembershipError: `budget` (join_timeout)
  // was spent, or fewer than MIN nodes are left after losses and none came within
  // last_call_timeout; StoreLostError when the store stops answering.
  Round join(int round, const JoinBudget& budget);
  Round join(int round) { return join(round, freshBudget()); }

  // Round `round`'s workers' store listens on host:port: written where the other members wait for
  // it. REQUIRES: this node hosts it (the round it joined said so).
  void publishWorkerStore(int round, const std::string& host, std::uint16_t port);

  // Writes `stop` into round `round`'s stop key unless something is there already; returns the
  // stop that holds (ours or the earlier one). Nothing is written to a round this node is fenced
  // off or the job has moved past (the fencing token): then `stop` is returned.
  StopReason announce(int round, const StopReason& stop);
  // Exit barrier: counts this node done in `round`; the last of `members` announces "done".
  // Nothing is written to a fenced or past round.
  void markDone(int round, int members);
  // Blocks until round `round` stops and returns why (watch thread); once this node counted itself
  // done there (markDone), says which members are still at work (barrierWaitLine). Throws
  // StoreLostError.
  StopReason waitForStop(int round);

  // Whether this node is a spare now: over MAX, joined to the store, waiting for a place (no
  // round of its own). Any thread.
  bool waitingForPlace() const { return waitingForPlace_.load(); }

  // Makes every blocking call give up soon with MembershipCancelled. Any thread.
  void cancel() { cancelled_.store(true); }
  // Set by the heartbeat thread when the store stops answering it.
  bool storeLost() const { return liveness_.lost(); }

  // Liveness and fencing (docs/architecture.md): when the last liveness renewal the store
  // acknowledged was sent, on this membership's clock; nothing before open(). Any thread.
  std::optional<std::chrono::steady_clock::time_point> livenessAcknowledgedAt() const {
    return liveness_.acknowledgedAt();
  }
  // This node stopped (is stopping) its workers of `round` because its liveness went
  // unacknowledged for the fencing interval: no more renewals (the store then lets the hold lapse
  // and reports the node lost, if it has not already) and no more writes to `round` or an earlier
  // round, even if a renewal sent before is acknowledged late. Any thread.
  void fence(int round) { liveness_.fence(round); }
  // Whether writes to `round` are fenced off (fence() was called for it or a later round).
  bool fenced(int round) const { return liveness_.fenced(round); }

  // Leaves the rendezvous as a killed agent would, for this node to come back as a new member:
  // cancels the blocking calls, stops the heartbeat and drops the connections this thread may
  // touch without giving up the holds, so the store reports the node lost to its round if it
  // has not yet. The others go with the object. Runs on the control thread; blocks until the
  // heartbeat's call in flight returns (at most its call timeout).
  void abandon();

  // Stops heartbeats and gives up the holds quietly (a clean exit is not a lost node). When this
  // agent hosts the rendezvous store (`hostsStore`), waits up to `patience` (close_timeout when
  // not given) for the other agents to leave.
  void close(bool hostsStore, std::optional<std::chrono::milliseconds> patience = std::nullopt);

  // Stops the heartbeat and the lapse reports, and gives nothing up: what close() does first, and
  // all there is to do when the store ends with this process (MembershipDriver::leave).
  // Returns false when the heartbeat had already been stopped and joined.
  bool stopHeartbeat() { return liveness_.stop(); }

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Closed = CloseRecord;
  rendezvous::HoldingStore& control() { return *control_; }
  void throwIfStopped() const;

  // open()'s steps (membership.cc).
  void connectControl(const JoinBudget& budget, std::chrono::milliseconds patience);
  std::unique_ptr<rendezvous::HoldingStore> connectMore(std::chrono::milliseconds callTimeout,
                                                        std::chrono::milliseconds attempt,
                                                        std::chrono::milliseconds patience);
  void claimStore();

  // join()'s steps (membership.cc).
  int currentRound();
  // Counts this node into `round` and returns its slot (1-based, in join order); nothing, and
  // nothing written, when the job has moved past `round` (mayWriteRound).
  std::optional<int> takeSlot(int round);
  // Blocks until `round`, where this node took slot `slot`, closes: the round if this node is in
  // it, else nothing.
  std::optional<Round> waitForClose(int round, int slot, const JoinBudget& budget);
  // One pass of waitForClose's: true once the round closed (by anyone).
  bool closePass(int round, JoinerPolicy& policy, const JoinBudget& budget, WaitLines& lines,
                 int& reportedJoined);
  // The round closed: this node's place in it, if it has one.
  std::optional<Round> takePlace(int round, const Closed& record);
  // After losses fewer than MIN may remain: says so once, and gives up after last_call_timeout.
  void checkShortage(JoinerPolicy& policy, std::optional<int> remaining);
  // The lines while a round forms: the log's at each change, the user's when due.
  void sayJoinProgress(int round, const JoinerPolicy& policy,
                       const std::optional<std::vector<std::int64_t>>& live, int joined,
                       const JoinBudget& budget, WaitLines& lines, int& reportedJoined);
  // A spare's wait: until round `round`, which runs with MAX nodes, stops (as long as it runs).
  void waitForRoundToStop(int round);

  // A round's records through the store (membership_rounds.cc).
  std::optional<Closed> closed(int round);
  // The nodes that joined `round` and are still alive, in join order; with the static backend
  // one per node rank (a restarted agent replaces its dead predecessor). Nothing while a joiner
  // has counted itself but not written its id yet.
  std::optional<std::vector<std::int64_t>> liveJoiners(int round);
  std::vector<std::int64_t> onePerNodeRank(const std::vector<std::int64_t>& live);
  // The host names in the node records of `ids` (shown: escaped), for the waiting lines.
  std::vector<std::string> hostnames(const std::vector<std::int64_t>& ids);
  // Tries to close `round`, whose live joiners are `live` (liveJoiners); true once it is closed
  // (by anyone).
  bool maybeClose(int round, const std::vector<std::int64_t>& live, LastCall& lastCall);
  // The members of round-1 (ids); nothing when round-1 is not known (round 0) or ended "done".
  std::optional<std::vector<std::int64_t>> previousMembers(int round);
  // How many members of round-1 are not among `live` but still alive; nothing when round-1 is
  // not known (round 0).
  std::optional<int> previousMembersStillAway(int round, const std::vector<std::int64_t>& live);
  bool alive(std::int64_t node);
  // Those of `nodes` that are alive, in order: one store request when all are.
  std::vector<std::int64_t> stillAlive(const std::vector<std::int64_t>& nodes);
  std::optional<StopReason> stopOf(int round);
  // The members of a closed round whose closer wrote no seats (record.members), from their node
  // records, checked (nothing read from the store is trusted) and in group-rank order.
  std::vector<NodeInfo> readMembers(int round, const Closed& record);
  // This node's seat in a round closed with seats: read and checked; nothing when it has none
  // (the round closed without it).
  std::optional<Seat> readSeat(int round, const Closed& record);
  // The members of round `round` (closed by `closer`), as its world says; nothing when it is
  // missing or not a list ddprun wrote. O(N) bytes: read only where the list is needed.
  std::optional<std::vector<NodeInfo>> readWorld(int round, std::int64_t closer);
  // The same through `store` (the calling thread's connection).
  std::optional<std::vector<NodeInfo>> readWorldThrough(rendezvous::HoldingStore& store, int round,
                                                        std::int64_t closer);
  // A small job's members, read from the world and checked against this node's seat.
  std::vector<NodeInfo> readCheckedWorld(int round, const Closed& record, const Seat& seat);
  // The node ids of a closed round (a world read where the record has no list); nothing when
  // they cannot be read.
  std::optional<std::vector<std::int64_t>> memberIds(int round, const Closed& record);
  struct MemberIds {
    int round = -1;
    std::int64_t closer = -1;
    std::vector<std::int64_t> ids;
  };
  std::optional<MemberIds> memberIdsCache_;  // memberIds' last world read (control thread)
  // The closer writes the round's world and every member's seat before its close record, under
  // its own node id: each member then reads its seat (O(1)) instead of the N node records.
  // False, and nothing written, when a record is unreadable or the node ranks are not a
  // permutation (the close record then names the members, who read the records and say what).
  bool writeSeats(int round, const std::vector<std::int64_t>& members);
  // Where the round's workers meet: group rank 0 is told it hosts the store (c10d) or points it
  // at the static backend's store; everyone else reads what group rank 0 published.
  // `rank0Address`: group rank 0's advertised address (where its worker store must be).
  void settleWorkerStore(Round& round, const std::string& rank0Address);
  Round readRound(int round, const Closed& record, std::optional<Seat> seat);
  // The job's current round as the store holds it (current_round); anything but a round number
  // is refused (MembershipError), never taken for round 0.
  static int roundFrom(const std::string& text);
  // The store's current round, read through `store` (nothing before the first agent made it).
  std::optional<int> storeRound(rendezvous::HoldingStore& store);
  // The fencing token: a write to `round` is made only while it is not fenced off and the store
  // has not moved past it (read through `store`, the calling thread's connection). `what` names
  // the write for the log line when it is refused.
  bool mayWriteRound(rendezvous::HoldingStore& store, int round, std::string_view what);

  // Stopping a round (membership_stop.cc).
  // Writes `stop` into `round`'s stop key unless a record is there (create-if-absent); returns
  // the record that holds.
  StopReason writeStop(int round, const StopReason& stop);
  // The exit barrier's waiting line (watch thread): which members of `round` have not counted
  // themselves done, when `lines` says a line is due (`lastCount`: the done count last read).
  void sayWhoIsAtWork(int round, WaitLines& lines, int& lastCount);
  // Members of round `round` that died before they could arm their hold for it (they would go
  // unreported): announce them lost. Once per round, from the watch.
  void reportMembersLostEarly(int round);
  // Waits for the other agents' alive keys to go, up to `patience` (this agent hosts the store).
  void waitForOthersToLeave(std::chrono::milliseconds patience);

  RendezvousConfig config_;
  const RendezvousSettings& settings_ = config_.settings;
  StoreBackend& backend_;
  NodeInfo self_;
  Now now_;
  MembershipKeys keys_;  // under "ddprun/<run id>/"
  std::unique_ptr<rendezvous::HoldingStore> control_;
  std::unique_ptr<rendezvous::HoldingStore> watch_;
  Liveness liveness_;
  bool claimsStore_ = false;  // holds kActiveRunKey (a store that is this job's alone)
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> waitingForPlace_{false};  // waitForRoundToStop runs
  // The round this node counted itself done in (the exit barrier), and when (now_'s ticks).
  std::atomic<int> doneRound_{-1};
  std::atomic<TimePoint::rep> doneAt_{0};
};

}  // namespace ddprun::launcher
