// The joining policy: when a round may close, what a joiner reads on each pass while it waits for
// the close, and how long it waits. Pure: values in, decision out, the time passed in; Membership
// does the reading and the writing.
//
// A round closes (docs/architecture.md) at MAX live joiners, or from MIN on once every
// still-alive member of the previous round is back (a restart or a node loss: no waiting) or
// last_call_timeout has passed since MIN was reached (new nodes may still come, as in torchrun).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "membership/round_records.h"

namespace ddprun::launcher {

using JoinClock = std::chrono::steady_clock;

// The join timeout as one value: its duration and when it started. Opening the membership,
// joining and rejoining share one, so that no path waits longer than join_timeout in all.
class JoinBudget {
 public:
  JoinBudget(std::chrono::milliseconds limit, JoinClock::time_point start)
      : limit_(limit), start_(start) {}
  std::chrono::milliseconds limit() const { return limit_; }
  JoinClock::time_point start() const { return start_; }
  JoinClock::time_point deadline() const { return start_ + limit_; }
  bool spent(JoinClock::time_point now) const { return now > deadline(); }
  // What is left at `now`; zero once spent.
  std::chrono::milliseconds left(JoinClock::time_point now) const;

 private:
  std::chrono::milliseconds limit_;
  JoinClock::time_point start_;
};

struct JoinRules {
  int minNodes = 1;
  int maxNodes = 1;
  std::chrono::milliseconds lastCallTimeout{0};
};

// A joiner that finds round `round` closed: the next step.
enum class JoinEntry {
  kJoin,          // the round is open: take a slot in it
  kWaitForPlace,  // it runs with MAX nodes: wait for it to stop, then try the next
  kJoinNext,      // it runs with fewer: take a slot in the next round, then stop this one
};
JoinEntry joinEntry(const std::optional<CloseRecord>& closed, int maxNodes);

// Whether a round whose live joiners are counted may close now, timing last call.
//
// Spares: an agent over MAX waits for a place and joins the round after the next stop beside the
// members coming back. A member of the previous round that is still alive is preferred to it
// (roundMembers), so MAX joiners do not close a round while such a member is away: one of them
// is a spare that would take its seat. The member is waited for as below MAX (it comes back in
// milliseconds after a restart; last_call_timeout bounds a wait for one that does not).
class LastCall {
 public:
  explicit LastCall(const JoinRules& rules) : rules_(rules) {}
  // Whether closes() needs to know who of the previous round is away for `joined` live joiners.
  bool asksWhoIsAway(int joined) const { return joined >= rules_.minNodes; }
  // `away`: members of the previous round not back yet but still alive (nothing: not known).
  bool closes(int joined, std::optional<int> away, JoinClock::time_point now);
  // Fewer than MIN are known to be in: last call has not started.
  void reset() { start_.reset(); }
  // The time left of last call at `now`, once it runs.
  std::optional<std::chrono::milliseconds> left(JoinClock::time_point now) const;

 private:
  JoinRules rules_;
  std::optional<JoinClock::time_point> start_;
};

// The joiners of a round: at most MAX of its live joiners, the members of the previous round
// (`previous`: their ids, empty when not known) first, then the others (spares, new nodes), each
// in join order.
std::vector<std::int64_t> roundMembers(const std::vector<std::int64_t>& live,
                                       const std::vector<std::int64_t>& previous, int maxNodes);

// One joiner's passes while it waits for round `round` to close, where it took slot `slot`.
//
// Below MIN the round cannot close, and the join counter (one request) says so: who joined and
// who is still alive (every slot, every alive key: O(N) for each of N joiners) is read only from
// MIN on, and below it at the slow pace by a joiner that can decide, for the waiting line and the
// check that enough nodes remain after losses. In a job of more than kNamedJoinersMax nodes, only
// the joiners whose view can close the round read the whole list on every pass from MIN on: the
// latest (its arrival may complete the round) and the one whose slot reached MIN (it times last
// call from then, as torchrun does). The others are bystanders: they wait on the close key, read
// the counter only at the slow pace (every kWaitLineInterval, when their line is due) and never
// the list; the counter only grows, so a joiner that cannot decide now never will.
class JoinerPolicy {
 public:
  enum class Shortage {
    kNone,    // enough nodes can still come
    kBegins,  // fewer than MIN remain after losses: last_call_timeout starts for new nodes
    kWaits,   // still too few, and last_call_timeout runs
    kOver,    // and it passed: give up
  };

  JoinerPolicy(const JoinRules& rules, int slot, JoinClock::time_point now);

  // A pass starts: whether it reads the join counter (otherwise the last count stands).
  bool readsCounter(JoinClock::time_point now);
  // With the counter as this pass knows it: whether the pass reads the list of live joiners.
  bool readsList(int counted, JoinClock::time_point now);
  // What the list said (`live` joiners; nothing: not read, or a joiner has counted itself but
  // not written its id yet).
  void listed(std::optional<int> live);
  // The nodes in, as this pass knows them: the list's count, or the counter less the dead.
  int joined(std::optional<int> live) const;
  LastCall& lastCall() { return lastCall_; }
  // After a list read: the nodes that can still be in (joined + those of the previous round still
  // alive; nothing when not known, or at MIN already). Kept until the next list read.
  void remaining(std::optional<int> nodes) { remaining_ = nodes; }
  std::optional<int> remaining() const { return remaining_; }
  Shortage shortage(JoinClock::time_point now);
  // Whether a waiting line may be said this pass (`listed`: the list was read).
  bool mayLine(bool listed) const { return listed || bystander_; }
  // The time the line says is left: of last call once it runs, else of the join timeout.
  std::chrono::milliseconds lineLeft(int joined, const JoinBudget& budget,
                                     JoinClock::time_point now) const;
  // How long to wait on the close key before the next pass.
  std::chrono::milliseconds pace() const;
  bool big() const { return big_; }
  int counted() const { return counted_; }

 private:
  JoinRules rules_;
  int slot_;
  bool big_;
  std::chrono::milliseconds fullReadPace_;
  std::optional<JoinClock::time_point> lastSlowPass_;
  bool slowPassDue_ = false;
  bool bystander_ = false;
  bool decides_ = true;
  int counted_ = 0;
  int countedAtFullRead_ = -1;
  int deadJoiners_ = 0;  // counted in, but dead, at the last list read (a node id never comes back)
  std::optional<int> remaining_;
  std::optional<JoinClock::time_point> shortSince_;
  LastCall lastCall_;
};

// How often joiners re-check whether their round can close while they wait for it.
inline constexpr std::chrono::milliseconds kJoinPollInterval{50};

// The waiting lines (core/wait_lines.h says when they are printed). While round `round` forms:
// "waiting for 1 more node (1 of 2 joined: host-a), 590 s left of the join timeout", or once MIN
// nodes are in (`lastCall`), how long the round waits for more; `left` is the time to the join
// timeout or to the end of last_call_timeout. In the exit barrier, the members still at work
// (group rank, host name): "waiting for node host-b (group rank 1) to finish, 280 s left".
// `joinedHosts` names the `joined` nodes; a job too big to name them (more than kNamedJoinersMax
// nodes) gives none, and the line counts them only.
std::string joinWaitLine(int round, int minNodes, int maxNodes, int joined,
                         const std::vector<std::string>& joinedHosts,
                         std::chrono::milliseconds left, bool lastCall);
// A spare's line as it starts to wait: "spare: waiting for a place (1 spare wanted, the job runs
// 2 nodes)"; `spares`: --spares.
std::string spareWaitLine(int spares, int maxNodes);
std::string barrierWaitLine(const std::vector<std::pair<int, std::string>>& atWork,
                            std::chrono::milliseconds left);

}  // namespace ddprun::launcher
