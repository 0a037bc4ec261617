#include "membership/liveness.h"

#include <algorithm>
#include <utility>

#include "core/stop_reason.h"
#include "membership/membership_errors.h"

namespace ddprun::launcher {

void FencingClock::acknowledged(TimePoint sent) {
  const TimePoint::rep at = sent.time_since_epoch().count();
  TimePoint::rep known = lastAckedSend_.load();
  while (known < at && !lastAckedSend_.compare_exchange_weak(known, at)) {
  }
}

std::optional<FencingClock::TimePoint> FencingClock::acknowledgedAt() const {
  const TimePoint::rep sent = lastAckedSend_.load();
  if (sent == 0) return std::nullopt;
  return TimePoint(TimePoint::duration(sent));
}

void FencingClock::fence(int round) {
  int fenced = fencedRound_.load();
  while (fenced < round && !fencedRound_.compare_exchange_weak(fenced, round)) {
  }
}

std::vector<Seat::Neighbour> peersToWatch(const ArmedRound& round, std::int64_t selfId,
                                          int ringWidth) {
  std::vector<Seat::Neighbour> peers;
  if (round.nodes > kNamedJoinersMax || round.members.empty()) {
    const auto count =
        std::min(round.next.size(), static_cast<std::size_t>(std::max(0, ringWidth)));
    peers.assign(round.next.begin(), round.next.begin() + static_cast<std::ptrdiff_t>(count));
    return peers;
  }
  for (std::size_t rank = 0; rank < round.members.size(); ++rank) {
    const NodeInfo& node = round.members[rank];
    if (node.id != selfId) peers.push_back({static_cast<int>(rank), node.id, node.hostname});
  }
  return peers;
}

bool answeredBeforeTimeout(std::chrono::nanoseconds took, std::chrono::milliseconds callTimeout) {
  return took < callTimeout * 9 / 10;
}

Liveness::Liveness(const MembershipKeys& keys, const RendezvousSettings& settings, Now now)
    : keys_(keys), settings_(settings), now_(std::move(now)) {}

Liveness::~Liveness() { stop(); }

void Liveness::connect(std::unique_ptr<rendezvous::HoldingStore> store,
                       std::chrono::milliseconds callTimeout) {
  store_ = std::move(store);
  callTimeout_ = callTimeout;
}

void Liveness::reportLapsesThrough(std::unique_ptr<rendezvous::HoldingStore> store) {
  lapseReporter_ = std::make_unique<LapseReporter>(std::move(store));
}

void Liveness::start(const NodeInfo& self) {
  self_ = self;
  renew(-1, -1);
  heartbeat_.start([this] { run(); });
}

void Liveness::renew(int round, int groupRank) {
  const std::string notify = round >= 0 ? keys_.stop(round) : std::string();
  const std::string lost = StopReason::nodeLost(self_.id, groupRank, self_.hostname).serialize();
  // The send time, taken before the request leaves: the store starts the hold's time to live
  // when it receives it, later, so the fence counted from here can only be early, never late.
  const TimePoint sent = now_();
  store_->hold(keys_.alive(self_.id), toJsonText(self_), settings_.holdTimeToLive(), notify, lost);
  clock_.acknowledged(sent);
}

void Liveness::arm(ArmedRound round) {
  const int number = round.round;
  const int groupRank = round.groupRank;
  const std::vector<Seat::Neighbour> peers = peersToWatch(round, self_.id, kSeatNeighbours);
  {
    auto lock = heartbeat_.lock();
    armed_ = std::move(round);
  }
  renew(number, groupRank);
  if (!lapseReporter_) return;
  // The store will not write the peers' notices: watch their alive keys and write them.
  std::vector<LapseReporter::Watched> watched;
  for (const Seat::Neighbour& node : peers) {
    watched.push_back({keys_.alive(node.id),
                       StopReason::nodeLost(node.id, node.groupRank, node.hostname).serialize()});
  }
  lapseReporter_->arm(keys_.stop(number), std::move(watched));
}

std::optional<ArmedRound> Liveness::armed(int round) const {
  auto lock = heartbeat_.lock();
  if (armed_.round != round) return std::nullopt;
  return armed_;
}

void Liveness::rememberMembers(int round, std::vector<NodeInfo> members) {
  auto lock = heartbeat_.lock();
  if (armed_.round == round) armed_.members = std::move(members);
}

void Liveness::fence(int round) {
  clock_.fence(round);
  heartbeat_.wake();
}

void Liveness::throwIfLost() const {
  if (!lost_.load()) return;
  std::lock_guard guard(lostMutex_);
  throw StoreLostError(lostReason_, closedByHost_.load());
}

void Liveness::run() {
  auto lock = heartbeat_.lock();
  for (;;) {
    if (!heartbeat_.sleepFor(lock, settings_.keepAliveInterval)) return;
    if (clock_.anyFenced()) continue;  // fenced: never renew again
    const int round = armed_.round;
    const int groupRank = armed_.groupRank;
    lock.unlock();
    const auto started = std::chrono::steady_clock::now();
    try {
      renew(round, groupRank);
    } catch (const std::exception& error) {
      {
        std::lock_guard guard(lostMutex_);
        lostReason_ = error.what();
      }
      closedByHost_.store(
          answeredBeforeTimeout(std::chrono::steady_clock::now() - started, callTimeout_));
      lost_.store(true);  // every blocked call of Membership's notices within its next slice
      return;
    }
    lock.lock();
  }
}

bool Liveness::stop() {
  {
    auto lock = heartbeat_.lock();
    if (heartbeat_.stopping() && !heartbeat_.running()) return false;
  }
  heartbeat_.stop();
  // Before the holds go: the others leaving from now on is no news to report.
  if (lapseReporter_) lapseReporter_->stop();
  return true;
}

void Liveness::abandon() {
  stop();
  store_.reset();
}

}  // namespace ddprun::launcher
