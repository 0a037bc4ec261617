// Liveness: this node's alive hold in the rendezvous store and what hangs on it
// (docs/architecture.md, "Liveness and fencing"):
//
//   heartbeat  a thread of its own renews the hold every keep_alive_interval on a connection of
//              its own; the hold names the armed round's stop key and the node_lost notice the
//              store writes there when the hold lapses;
//   fencing    when the last renewal the store acknowledged was sent (a renewal counts from its
//              send, since the store's time to live starts when it receives it), and the round
//              this node fenced itself off: no renewal and no write to it from then on;
//   lapses     where the store only deletes a lapsed key (HoldLapse::kKeyDeletedOnly), the
//              LapseReporter writes the notices of the peers this member watches.
//
// Membership owns one and tells it which round is armed. The decisions (FencingClock,
// peersToWatch, answeredBeforeTimeout) are pure and tested without the thread.
//
// Thread safety: every call from any thread, except connect/reportLapsesThrough/start, which run
// once, before the others.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/stoppable_thread.h"
#include "ddprun/launcher/launch_config.h"
#include "ddprun/rendezvous/holding_store.h"
#include "membership/lapse_reporter.h"
#include "membership/membership_keys.h"
#include "membership/round_records.h"

namespace ddprun::launcher {

// When the last acknowledged liveness renewal was sent, and the latest round fenced off.
// Lock-free; any thread.
class FencingClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // A renewal sent at `sent` was acknowledged. Two threads renew, so the latest send is kept: an
  // older one acknowledged after a newer must not move the time back.
  void acknowledged(TimePoint sent);
  // Nothing before the first acknowledgement.
  std::optional<TimePoint> acknowledgedAt() const;
  // Fences off `round` and every earlier one (a later fence never moves back).
  void fence(int round);
  bool fenced(int round) const { return round <= fencedRound_.load(); }
  bool anyFenced() const { return fencedRound_.load() >= 0; }

 private:
  std::atomic<TimePoint::rep> lastAckedSend_{0};  // 0: none yet
  std::atomic<int> fencedRound_{-1};
};

// The round this node's hold is armed for, and what this member knows of it.
struct ArmedRound {
  int round = -1;
  int groupRank = -1;
  std::int64_t closer = -1;
  int nodes = 0;
  // The members in group-rank order: in a job of up to kNamedJoinersMax nodes, or once the exit
  // barrier's line read them; else empty.
  std::vector<NodeInfo> members;
  std::vector<Seat::Neighbour> next;  // this node's ring neighbours, from its seat
};

// Whose liveness this member (`selfId`) of `round` watches. In a job of up to kNamedJoinersMax
// nodes: every other member. In a bigger one (or where the members are not known): the first
// `ringWidth` of its ring neighbours; any set of lost nodes short of all has one whose
// predecessor is still there to report it, and one loss stops the round.
std::vector<Seat::Neighbour> peersToWatch(const ArmedRound& round, std::int64_t selfId,
                                          int ringWidth);

// Whether a call that failed after `took` was answered (refused, or closed by the store's side)
// rather than timed out in silence (the network cut, the host down): decided on the time taken,
// never on the error's text.
bool answeredBeforeTimeout(std::chrono::nanoseconds took, std::chrono::milliseconds callTimeout);

class Liveness {
 public:
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  // `now`: the clock of the fencing times.
  Liveness(const MembershipKeys& keys, const RendezvousSettings& settings, Now now);
  ~Liveness();  // stop()
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // The connection renewals go through; its calls time out after `callTimeout`.
  void connect(std::unique_ptr<rendezvous::HoldingStore> store,
               std::chrono::milliseconds callTimeout);
  bool connected() const { return store_ != nullptr; }
  // REQUIRES: connected().
  rendezvous::HoldingStore& store() { return *store_; }
  // The store does not report lapsed holds: report the watched peers' through `store`.
  void reportLapsesThrough(std::unique_ptr<rendezvous::HoldingStore> store);
  // Holds `self`'s alive key (armed for no round) and starts the heartbeat.
  void start(const NodeInfo& self);
  // From now on a lapse of the hold stops `round`: renews at once, armed for it, and watches
  // the peers' lapses where the store does not report them.
  void arm(ArmedRound round);
  // The armed round, if it is `round`.
  std::optional<ArmedRound> armed(int round) const;
  // Keeps `round`'s members (read late, by the exit barrier's line) if it is still the armed one.
  void rememberMembers(int round, std::vector<NodeInfo> members);

  std::optional<std::chrono::steady_clock::time_point> acknowledgedAt() const {
    return clock_.acknowledgedAt();
  }
  // No renewal from now on: the hold lapses and the store reports the node lost.
  void fence(int round);
  bool fenced(int round) const { return clock_.fenced(round); }
  bool anyFenced() const { return clock_.anyFenced(); }

  // A renewal failed: the store stopped answering this node.
  bool lost() const { return lost_.load(); }
  // Throws StoreLostError once lost().
  void throwIfLost() const;

  // Stops the heartbeat and the lapse reports, giving nothing up. False when stopped already.
  bool stop();
  // stop(), then drops the renewals' connection without a release: to the store this node
  // vanished, as a killed agent does, and it reports the node lost to the armed round.
  void abandon();

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  void renew(int round, int groupRank);
  void run();

  const MembershipKeys& keys_;
  const RendezvousSettings& settings_;
  Now now_;
  NodeInfo self_;
  std::unique_ptr<rendezvous::HoldingStore> store_;
  std::unique_ptr<LapseReporter> lapseReporter_;
  std::chrono::milliseconds callTimeout_{0};
  FencingClock clock_;

  StoppableThread heartbeat_;  // its lock also guards armed_
  ArmedRound armed_;           // round -1: armed for none

  std::atomic<bool> lost_{false};
  std::atomic<bool> closedByHost_{false};  // the failing renewal was answered (closed, refused)
  mutable std::mutex lostMutex_;
  std::string lostReason_;
};

}  // namespace ddprun::launcher
