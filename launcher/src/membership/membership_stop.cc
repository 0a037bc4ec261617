// Membership: a running round's end (stop records, the exit barrier, the watch on the stop key)
// and leaving the rendezvous.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <set>
#include <thread>

#include "core/shown_text.h"
#include "membership/membership.h"

namespace ddprun::launcher {

using rendezvous::StoreTimeoutError;
using namespace std::chrono_literals;

void Membership::publishWorkerStore(int round, const std::string& host, std::uint16_t port) {
  if (!mayWriteRound(control(), round, "the workers' store")) return;
  control().set(keys_.master(round), fmt::format("{}:{}", host, port));
}

StopReason Membership::announce(int round, const StopReason& stop) {
  if (!mayWriteRound(control(), round, "a stop record")) return stop;
  return writeStop(round, stop);
}

StopReason Membership::writeStop(int round, const StopReason& stop) {
  const std::string text = stop.serialize();
  const std::string held = control().compareSet(keys_.stop(round), "", text);
  if (held == text) return stop;
  auto earlier = StopReason::parse(held);
  if (!earlier)
    throw MembershipError(fmt::format("round {}'s stop record in the store is corrupt", round));
  return *earlier;
}

void Membership::markDone(int round, int members) {
  if (!mayWriteRound(control(), round, "the exit barrier's count")) return;
  doneAt_.store(now_().time_since_epoch().count());
  doneRound_.store(round);
  control().set(keys_.finished(round, self_.id), "1");
  if (control().add(keys_.done(round), 1) >= members) announce(round, StopReason::done());
}

void Membership::sayWhoIsAtWork(int round, WaitLines& lines, int& lastCount) {
  const int count = static_cast<int>(watch_->add(keys_.done(round), 0));
  const std::optional<ArmedRound> armed = liveness_.armed(round);
  if (!armed) return;
  std::vector<NodeInfo> members = armed->members;
  const std::int64_t closer = armed->closer;
  const int nodes = armed->nodes;
  lastCount = count;
  // At once when a node finishes, in a job of up to kNamedJoinersMax nodes; a bigger one's every
  // kWaitLineInterval (each of thousands of arrivals at the barrier would otherwise make every
  // waiting node read who finished).
  const bool small = nodes <= kNamedJoinersMax;
  if (!lines.due(now_(), small ? std::to_string(count) : std::string())) return;
  if (members.empty()) {
    // A big job's member knows its seat, not the list: read the world once, at the first line
    // that is due (a node that waits kWaitLineInterval at the barrier), never at the round's start.
    auto world = readWorldThrough(*watch_, round, closer);
    if (!world || static_cast<int>(world->size()) != nodes) {
      spdlog::warn("waiting for {} of {} nodes to finish", nodes - count, nodes);
      return;
    }
    members = std::move(*world);
    liveness_.rememberMembers(round, members);
  }
  // Who finished: one listing of the round's finished/ keys (one request, not one per member). A
  // listing cut at the store's limit names no one rather than the wrong nodes.
  const rendezvous::ListedKeys listed =
      watch_->listPrefix(keys_.finishedPrefix(round), members.size());
  const std::set<std::string> finished(listed.keys.begin(), listed.keys.end());
  const auto doneAt = TimePoint(TimePoint::duration(doneAt_.load()));
  const auto left = settings_.exitBarrierTimeout - (now_() - doneAt);
  if (listed.more) {
    spdlog::warn("waiting for {} of {} nodes to finish, {} s left",
                 static_cast<int>(members.size()) - count, members.size(),
                 std::chrono::duration_cast<std::chrono::seconds>(left).count());
    return;
  }
  std::vector<std::pair<int, std::string>> atWork;  // group rank, host name
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    if (finished.count(keys_.finished(round, members[rank].id)) != 0) continue;
    atWork.emplace_back(static_cast<int>(rank), shown(members[rank].hostname));
  }
  if (atWork.empty()) return;
  spdlog::warn(
      "{}", barrierWaitLine(atWork, std::chrono::duration_cast<std::chrono::milliseconds>(left)));
}

void Membership::reportMembersLostEarly(int round) {
  const std::optional<ArmedRound> armed = liveness_.armed(round);
  if (!armed) return;
  // Every peer's alive key in one request (the usual answer: all there). In a job of more than
  // kNamedJoinersMax nodes each member asks only the next group rank's (a ring): every member is
  // still asked by one other, and a lost asker is itself found by its predecessor (any one loss
  // stops the round).
  const std::vector<Seat::Neighbour> asked = peersToWatch(*armed, self_.id, /*ringWidth=*/1);
  std::vector<std::string> others;
  for (const Seat::Neighbour& node : asked) others.push_back(keys_.alive(node.id));
  if (others.empty() || watch_->check(others)) return;
  for (const Seat::Neighbour& node : asked) {
    if (watch_->check({keys_.alive(node.id)})) continue;
    const std::string lost =
        StopReason::nodeLost(node.id, node.groupRank, node.hostname).serialize();
    if (!mayWriteRound(*watch_, round, "a lost member's notice")) return;
    watch_->compareSet(keys_.stop(round), "", lost);
    return;
  }
}

StopReason Membership::waitForStop(int round) {
  const std::string stopKey = keys_.stop(round);
  bool checkedMembers = false;
  std::optional<WaitLines> barrierLines;  // from when this node counted itself done
  int finishedCount = -1;
  TimePoint lastCountRead{};
  std::optional<std::chrono::steady_clock::time_point> troubleSince;
  for (;;) {
    try {
      // In slices: a store that went silent (network cut) is the heartbeat's to report, and the
      // slices keep this thread from blocking past the agent's life. A stop wakes it at once.
      watch_->wait({stopKey}, 250ms);
      // Read as it is now (one request): a stop record is never deleted while its round runs;
      // one gone meanwhile (the round forgotten) is waited for again.
      const std::optional<std::string> text = watch_->tryGet(stopKey);
      if (!text) continue;
      if (auto stop = StopReason::parse(*text)) return *stop;
      throw MembershipError(
          fmt::format("round {}'s stop record in the store is corrupt: {}", round, shown(*text)));
    } catch (const rendezvous::StoreConnectionError& error) {
      // A network blip broke the watch's connection (it holds nothing, so dropping it tells the
      // store nothing). The heartbeat decides whether the store is lost: until it does, or for
      // at most twice the liveness timeout, reconnect and watch again.
      throwIfStopped();
      const auto now = std::chrono::steady_clock::now();
      if (!troubleSince) troubleSince = now;
      if (now - *troubleSince > 2 * settings_.holdTimeToLive()) throw StoreLostError(error.what());
      std::this_thread::sleep_for(100ms);
      continue;
    } catch (const StoreTimeoutError&) {
      throwIfStopped();
      troubleSince.reset();
      // Every live member armed its hold for this round before starting its workers, a few
      // milliseconds after the round closed; one that died in between is reported here.
      if (!checkedMembers) {
        checkedMembers = true;
        reportMembersLostEarly(round);
      }
      // In the exit barrier: who is still at work, read at most once a second.
      if (doneRound_.load() == round && now_() - lastCountRead >= kQuietStart) {
        lastCountRead = now_();
        if (!barrierLines) barrierLines.emplace(TimePoint(TimePoint::duration(doneAt_.load())));
        sayWhoIsAtWork(round, *barrierLines, finishedCount);
      }
    }
  }
}

void Membership::close(bool hostsStore, std::optional<std::chrono::milliseconds> patience) {
  if (!liveness_.stop()) return;
  // A fenced node leaves without a release: its connections close with the object, and the
  // store reports it lost to its round if it has not yet (a quiet release would leave the others
  // waiting on workers that are gone).
  if (!liveness_.connected() || liveness_.lost() || liveness_.anyFenced()) return;
  try {
    liveness_.store().release(keys_.alive(self_.id));
    if (claimsStore_) liveness_.store().release(kActiveRunKey);
    if (hostsStore) waitForOthersToLeave(patience.value_or(settings_.closeTimeout));
    // A shared store (an etcd) outlives the job and nobody's exit takes it along: the last agent
    // out removes the run's keys, one prefix delete (each agent's alive key, held until its own
    // close, says who is still there).
    if (backend_.tenancy() == StoreTenancy::kShared &&
        !control().listPrefix(keys_.alivePrefix(), 0).more) {
      control().deletePrefix(keys_.prefix());
    }
  } catch (const std::exception& error) {
    spdlog::debug("leaving the rendezvous: {}", error.what());
  }
}

void Membership::waitForOthersToLeave(std::chrono::milliseconds patience) {
  // The others read the final state from this agent's store, so let them leave first (bounded:
  // one that died is gone with its connection anyway). Whether any alive key is left is one
  // bounded listing of our run's prefix (maxKeys 0: only "any?").
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!control().listPrefix(keys_.alivePrefix(), 0).more) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace ddprun::launcher
