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
// Restart accounting is job-global: the restart count of round r+1 is restartsAfter(round r's,
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
// Thread safety: join/announce/markDone run on one thread (the agent's control thread),
// waitForStop on another (its watch thread), the heartbeat on its own; each has its own store
// connection. cancel() and storeLost() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ddprun/launcher/launch_config.h"
#include "membership/lapse_reporter.h"
#include "membership/membership_keys.h"
#include "stores/store_backend.h"
#include "core/rendezvous_client.h"
#include "core/stop_reason.h"
#include "core/wait_lines.h"

namespace ddprun::launcher {

// Joining failed for good: the message says why (timeout, too few nodes, closed job).
class MembershipError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The job cannot start because of what the user gave (exit 2): the message names the fix.
class BadInputError : public MembershipError {
 public:
  using MembershipError::MembershipError;
};

// The rendezvous endpoint never answered within read_timeout, its host name never resolved within
// the join timeout, or something that is not a ddprun store answers there: the endpoint given is
// wrong or its host is not up.
class EndpointError : public BadInputError {
 public:
  using BadInputError::BadInputError;
};

// The store stopped answering this agent: its host closed the connection (the agent hosting it
// exited, the daemon stopped) or it went silent (the network to it is cut, its host is down).
class StoreLostError : public MembershipError {
 public:
  explicit StoreLostError(const std::string& message, bool closedByHost = false)
      : MembershipError(message), closedByHost_(closedByHost) {}
  // The store's side ended the connection (or refused a new one): an answer, not silence.
  bool closedByHost() const { return closedByHost_; }

 private:
  bool closedByHost_;
};

// The job this agent waited to take part in finished without it (it was full): nothing to do.
class JobOverError : public MembershipError {
 public:
  using MembershipError::MembershipError;
};

// A blocking call gave up because cancel() was called (the agent is shutting down).
class MembershipCancelled : public std::runtime_error {
 public:
  MembershipCancelled() : std::runtime_error("cancelled") {}
};

// A member's seat in a closed round (round/<r>/seat/<closer>/<id>): what it needs to take its
// place, written by the closer for each member so that a member reads O(1) bytes, not the world.
struct Seat {
  std::int64_t closer = -1;  // the node that closed the round (the close record names it too)
  int nodes = 0;             // members in the round
  int groupRank = 0;
  int baseRank = 0;          // the global rank of this member's local rank 0
  int worldSize = 0;
  NodeInfo self;             // this member's record as the closer read it
  std::string rank0Address;  // group rank 0's (where the round's workers' store is, on c10d/etcd)
  // The next group ranks after this member's, in ring order (at most kSeatNeighbours, fewer in
  // a round of fewer nodes): whose liveness this member watches in a big job.
  struct Neighbour {
    int groupRank = 0;
    std::int64_t id = -1;
    std::string hostname;
  };
  std::vector<Neighbour> next;
};
inline constexpr int kSeatNeighbours = 2;

class Membership {
 public:
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  // `backend` must outlive this object. `now`: the clock of every deadline. Throws
  // std::invalid_argument for a static job on a backend without a StaticStoreFacet.
  Membership(const RendezvousConfig& config, StoreBackend& backend, NodeInfo self, Now now);
  ~Membership();

  // Connects (waiting up to `patience`, read_timeout when not given, for the store to come up;
  // for a host name that does not resolve yet, up to the join timeout, then `patience` again from
  // when it resolved; saying what it waits for, core/wait_lines.h), fills in this node's address
  // toward the store if it was unknown (empty),
  // checks, on a store that is this job's alone, that the store's active run is ours (a different
  // run id is refused, never merged), gets a node id, publishes this node and starts holding its
  // alive key. Throws EndpointError, MembershipError, MembershipCancelled or rendezvous::StoreError.
  void open(std::optional<std::chrono::milliseconds> patience = std::nullopt);
  const NodeInfo& self() const { return self_; }

  // Joins the first round this node can take part in, from `round` on (-1: whatever round the
  // job is in now), and blocks until it closes and its master is known, saying while it waits
  // who joined and the time left (joinWaitLine). Throws MembershipError:
  // join_timeout passed, or fewer than MIN nodes are left after losses and none came within
  // last_call_timeout; StoreLostError when the store stops answering.
  Round join(int round);

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

  // Makes every blocking call give up soon with MembershipCancelled. Any thread.
  void cancel() { cancelled_.store(true); }
  // Set by the heartbeat thread when the store stops answering it.
  bool storeLost() const { return storeLost_.load(); }

  // Liveness and fencing (docs/architecture.md): when the last liveness renewal the store
  // acknowledged was sent, on this membership's clock (a renewal counts from its send, since the
  // store's time to live starts when it receives it); nothing before open(). Any thread.
  std::optional<std::chrono::steady_clock::time_point> livenessAcknowledgedAt() const;
  // This node stopped (is stopping) its workers of `round` because its liveness went
  // unacknowledged for the fencing interval: no more renewals (the store then lets the hold lapse
  // and reports the node lost, if it has not already) and no more writes to `round` or an earlier
  // round, even if a renewal sent before is acknowledged late. Any thread.
  void fence(int round);
  // Whether writes to `round` are fenced off (fence() was called for it or a later round).
  bool fenced(int round) const { return round <= fencedRound_.load(); }

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
  // all there is to do when the store ends with this process (MembershipDriver::closeWithStore).
  // Returns false when the heartbeat had already been stopped and joined.
  bool stopHeartbeat();

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  rendezvous::HoldingStore& control() { return *control_; }
  void throwIfStopped() const;
  int currentRound();
  // Counts this node into `round` and returns its slot (1-based, in join order); nothing, and
  // nothing written, when the job has moved past `round` (mayWriteRound).
  std::optional<int> takeSlot(int round);
  // Blocks until `round`, where this node took slot `slot`, closes: the round if this node is in
  // it, else nothing.
  std::optional<Round> waitForClose(int round, int slot, TimePoint deadline);
  void waitForRoundToStop(int round, TimePoint deadline);
  // The close record of `round`: how many members, the node that closed it (whose seats and
  // world they read), and its restart count. Nothing while it is open. A closer that could not
  // read every member's record names the members' ids instead (`members`, closer -1): each member
  // then reads the records itself and names the bad one.
  struct Closed {
    int nodes = 0;
    std::int64_t closer = -1;
    std::vector<std::int64_t> members;  // only in a record without seats
    int restarts = 0;
  };
  std::optional<Closed> closed(int round);
  // The nodes that joined `round` and are still alive, in join order; with the static backend
  // one per node rank (a restarted agent replaces its dead predecessor). Nothing while a joiner
  // has counted itself but not written its id yet.
  std::optional<std::vector<std::int64_t>> liveJoiners(int round);
  // The host names in the node records of `ids` (shown: escaped), for the waiting lines.
  std::vector<std::string> hostnames(const std::vector<std::int64_t>& ids);
  // The exit barrier's waiting line (watch thread): which members of `round` have not counted
  // themselves done, when `lines` says a line is due (`lastCount`: the done count last read).
  void sayWhoIsAtWork(int round, WaitLines& lines, int& lastCount);
  // Tries to close `round`, whose live joiners are `live` (liveJoiners); true once it is closed
  // (by anyone).
  bool maybeClose(int round, const std::vector<std::int64_t>& live, TimePoint& lastCallStart);
  // How many members of round-1 are not among `live` but still alive; nothing when round-1 is
  // not known (round 0).
  std::optional<int> previousMembersStillAway(int round, const std::vector<std::int64_t>& live);
  bool alive(std::int64_t node);
  // Those of `nodes` that are alive, in order: one store request when all are.
  std::vector<std::int64_t> stillAlive(const std::vector<std::int64_t>& nodes);
  // Members of round `round` that died before they could arm their hold for it (they would go
  // unreported): announce them lost. Once per round, from the watch.
  void reportMembersLostEarly(int round);
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
  // The node ids of a closed round (a world read where the record has no list); nothing when
  // they cannot be read.
  std::optional<std::vector<std::int64_t>> memberIds(int round, const Closed& record);
  struct MemberIds {
    int round = -1;
    std::int64_t closer = -1;
    std::vector<std::int64_t> ids;
  };
  std::optional<MemberIds> memberIdsCache_;  // memberIds' last world read (control thread)
  // `members` (node ids) in group-rank order: sorts them in place, or throws MembershipError
  // when the static backend's node ranks are not 0..N-1.
  void toGroupRankOrder(std::vector<NodeInfo>& members) const;
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
  void heartbeat();
  // Holds this node's alive key again, reporting a lapse to `round`'s stop key (-1: none).
  void renewHold(int round, int groupRank);
  // The store's current round, read through `store` (nothing before the first agent made it).
  std::optional<int> storeRound(rendezvous::HoldingStore& store);
  // The fencing token: a write to `round` is made only while it is not fenced off and the store
  // has not moved past it (read through `store`, the calling thread's connection). `what` names
  // the write for the log line when it is refused.
  bool mayWriteRound(rendezvous::HoldingStore& store, int round, std::string_view what);
  // Writes `stop` into `round`'s stop key unless a record is there (create-if-absent); returns
  // the record that holds.
  StopReason writeStop(int round, const StopReason& stop);

  RendezvousConfig config_;
  const RendezvousSettings& settings_ = config_.settings;
  StoreBackend& backend_;
  NodeInfo self_;
  Now now_;
  MembershipKeys keys_;  // under "ddprun/<run id>/"
  std::unique_ptr<rendezvous::HoldingStore> control_;
  std::unique_ptr<rendezvous::HoldingStore> watch_;
  std::unique_ptr<rendezvous::HoldingStore> heartbeatStore_;
  // Where the store does not report lapsed holds itself (HoldLapse::kKeyDeletedOnly).
  std::unique_ptr<LapseReporter> lapseReporter_;
  bool claimsStore_ = false;  // holds kActiveRunKey (a store that is this job's alone)

  std::thread heartbeatThread_;
  std::mutex heartbeatMutex_;
  std::condition_variable heartbeatWake_;
  bool heartbeatStop_ = false;
  int heartbeatRound_ = -1;      // whose stop key a lapse of our hold reports to
  int heartbeatGroupRank_ = -1;  // our group rank in that round (for the notice)
  // Of heartbeatRound_: who closed it, how many members, the members in group-rank order (in a
  // job of up to kNamedJoinersMax nodes, or once the exit barrier's line read them; else empty)
  // and this node's ring neighbours (the next group ranks, from its seat).
  std::int64_t roundCloser_ = -1;
  int roundNodes_ = 0;
  std::vector<NodeInfo> roundMembers_;
  std::vector<Seat::Neighbour> roundNext_;
  std::atomic<bool> storeLost_{false};
  std::atomic<bool> storeClosed_{false};  // the failing renewal was answered (closed, refused)
  std::atomic<bool> cancelled_{false};
  std::chrono::milliseconds heartbeatCallTimeout_{0};
  // Send time (now_'s, in its ticks) of the last renewal the store acknowledged; 0: none yet.
  std::atomic<TimePoint::rep> lastAckedSend_{0};
  std::atomic<int> fencedRound_{-1};
  // The round this node counted itself done in (the exit barrier), and when (now_'s ticks).
  std::atomic<int> doneRound_{-1};
  std::atomic<TimePoint::rep> doneAt_{0};
  mutable std::mutex lostMutex_;
  std::string storeLostReason_;
};

std::string toJsonText(const NodeInfo& node);
std::optional<NodeInfo> nodeFromJsonText(std::string_view text);
// A round's world (round/<r>/world): its members' records, in group-rank order, as one compact
// JSON array of [id, nproc, address, hostname, pid, static_rank]. Nothing back when the text is
// not such an array or any entry fails nodeFromJsonText's checks.
std::string worldToText(const std::vector<NodeInfo>& members);
std::optional<std::vector<NodeInfo>> worldFromText(std::string_view text);
// Every member's seat of a round whose members are `members` (group-rank order), closed by node
// `closer`; in the same order.
std::vector<Seat> seatsOf(const std::vector<NodeInfo>& members, std::int64_t closer);
// A seat as one compact JSON object; nothing back when the text is not one seatToText wrote
// (fields missing or of the wrong type, a record that fails nodeFromJsonText's checks).
std::string seatToText(const Seat& seat);
std::optional<Seat> seatFromText(std::string_view text);

// Nothing read from the store is trusted blindly (anyone who reaches it can write it): what
// makes a round's world is checked before any worker is started. Each returns the problem in one
// line, or nothing when the value holds.
//
// The members of a closed round (`ids`, from its close record) and their node records
// (`members`, in the same order): each record is the one stored under its id, no id twice, a
// sane nproc, this node's own record exactly as it wrote it (`self`), and `ids.size()` within
// [1, maxNodes].
std::optional<std::string> roundMembersProblem(const std::vector<std::int64_t>& ids,
                                               const std::vector<NodeInfo>& members,
                                               const NodeInfo& self, int maxNodes);
// This node's seat (`seat`, read from round/<r>/seat/<closer>/<self id>) against the close record
// (`nodes` members, closed by `closer`): the same closer and count, within [1, maxNodes], this
// node's own record exactly as it wrote it, ranks that fit (group rank in the round, base rank
// plus its workers within the world, group rank 0's address its own where it is rank 0), with
// static node ranks (`staticRanks`) the group rank its node rank, and neighbours in the round.
std::optional<std::string> seatProblem(const Seat& seat, int nodes, std::int64_t closer, const NodeInfo& self,
                                       int maxNodes, bool staticRanks);
// "host:port" of the round's worker store: a port in 1..65535, and (c10d) the host is the
// address group rank 0 advertised (`expectedHost`; "" = any).
std::optional<std::string> masterProblem(const std::string& master, const std::string& expectedHost);

// The waiting lines (core/wait_lines.h says when they are printed). While round `round` forms:
// "waiting for 1 more node (1 of 2 joined: host-a), 590 s left of the join timeout", or once MIN
// nodes are in (`lastCall`), how long the round waits for more; `left` is the time to the join
// timeout or to the end of last_call_timeout. In the exit barrier, the members still at work
// (group rank, host name): "waiting for node host-b (group rank 1) to finish, 280 s left".
// `joinedHosts` names the `joined` nodes; a job too big to name them (more than 64 nodes) gives
// none, and the line counts them only.
std::string joinWaitLine(int round, int minNodes, int maxNodes, int joined,
                         const std::vector<std::string>& joinedHosts,
                         std::chrono::milliseconds left, bool lastCall);
std::string barrierWaitLine(const std::vector<std::pair<int, std::string>>& atWork,
                            std::chrono::milliseconds left);

}  // namespace ddprun::launcher
