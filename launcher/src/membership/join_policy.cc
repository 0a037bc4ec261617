#include "membership/join_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "core/wait_lines.h"

namespace ddprun::launcher {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

milliseconds JoinBudget::left(JoinClock::time_point now) const {
  return std::max(milliseconds(0), duration_cast<milliseconds>(deadline() - now));
}

JoinEntry joinEntry(const std::optional<CloseRecord>& closed, int maxNodes) {
  if (!closed) return JoinEntry::kJoin;
  return closed->nodes >= maxNodes ? JoinEntry::kWaitForPlace : JoinEntry::kJoinNext;
}

bool LastCall::closes(int joined, std::optional<int> away, JoinClock::time_point now) {
  if (joined < rules_.minNodes) {
    start_.reset();
    return false;
  }
  if (away == 0) return true;
  if (joined >= rules_.maxNodes && !away) return true;  // nobody known to be away
  if (!start_) start_ = now;
  return now - *start_ >= rules_.lastCallTimeout;
}

std::optional<milliseconds> LastCall::left(JoinClock::time_point now) const {
  if (!start_) return std::nullopt;
  return duration_cast<milliseconds>(rules_.lastCallTimeout - (now - *start_));
}

std::vector<std::int64_t> roundMembers(const std::vector<std::int64_t>& live,
                                       const std::vector<std::int64_t>& previous, int maxNodes) {
  const std::set<std::int64_t> returning(previous.begin(), previous.end());
  std::vector<std::int64_t> ordered;
  ordered.reserve(live.size());
  std::copy_if(live.begin(), live.end(), std::back_inserter(ordered),
               [&](std::int64_t id) { return returning.count(id) > 0; });
  std::copy_if(live.begin(), live.end(), std::back_inserter(ordered),
               [&](std::int64_t id) { return returning.count(id) == 0; });
  ordered.resize(std::min(ordered.size(), static_cast<std::size_t>(std::max(0, maxNodes))));
  return ordered;
}

JoinerPolicy::JoinerPolicy(const JoinRules& rules, int slot, JoinClock::time_point now)
    : rules_(rules),
      slot_(slot),
      big_(rules.maxNodes > kNamedJoinersMax),
      // A job of thousands reads the whole list below MIN as often as it says so: each read
      // costs O(N) per joiner.
      fullReadPace_(duration_cast<milliseconds>(big_ ? kWaitLineInterval : kQuietStart)),
      lastCall_(rules) {
  // A big job's joiner does not read the whole list on arrival either (every joiner's first pass
  // would read all who came before it); only a deciding one does.
  if (big_) lastSlowPass_ = now;
}

bool JoinerPolicy::readsCounter(JoinClock::time_point now) {
  slowPassDue_ = !lastSlowPass_ || now - *lastSlowPass_ >= fullReadPace_;
  return !bystander_ || slowPassDue_;
}

bool JoinerPolicy::readsList(int counted, JoinClock::time_point now) {
  counted_ = counted;
  // A small job also reads at each arrival, for its line at once.
  const bool arrival = !big_ && counted != countedAtFullRead_;
  decides_ = !big_ || slot_ == counted || slot_ == rules_.minNodes;
  bystander_ = !decides_;
  if (slowPassDue_) lastSlowPass_ = now;
  const bool reads =
      (counted >= rules_.minNodes && decides_) || arrival || (slowPassDue_ && decides_);
  if (reads) countedAtFullRead_ = counted;
  return reads;
}

void JoinerPolicy::listed(std::optional<int> live) {
  if (live) deadJoiners_ = std::max(0, counted_ - *live);
  if (!live && counted_ < rules_.minNodes) lastCall_.reset();
}

int JoinerPolicy::joined(std::optional<int> live) const {
  return live ? *live : std::max(0, counted_ - deadJoiners_);
}

JoinerPolicy::Shortage JoinerPolicy::shortage(JoinClock::time_point now) {
  if (!remaining_ || *remaining_ >= rules_.minNodes) {
    shortSince_.reset();
    return Shortage::kNone;
  }
  if (!shortSince_) {
    shortSince_ = now;
    return Shortage::kBegins;
  }
  return now - *shortSince_ >= rules_.lastCallTimeout ? Shortage::kOver : Shortage::kWaits;
}

milliseconds JoinerPolicy::lineLeft(int joined, const JoinBudget& budget,
                                    JoinClock::time_point now) const {
  if (joined >= rules_.minNodes) {
    if (const auto left = lastCall_.left(now)) return *left;
  }
  return duration_cast<milliseconds>(budget.deadline() - now);
}

milliseconds JoinerPolicy::pace() const {
  // The close wakes the wait at once; the pace is that of noticing what the counter cannot say
  // (a joiner's death, last call running out). Below MIN neither can close the round, so waiting
  // joiners poll 4x less often there; a bystander has nothing to notice but the close and a
  // cancel, and polls once a second: the polls of N joiners are the store's load while a job forms.
  if (!decides_) return kJoinPollInterval * 20;
  return counted_ >= rules_.minNodes ? kJoinPollInterval : kJoinPollInterval * 4;
}

std::string joinWaitLine(int round, int minNodes, int maxNodes, int joined,
                         const std::vector<std::string>& joinedHosts, milliseconds left,
                         bool lastCall) {
  const long seconds =
      std::max<long>(0, std::chrono::duration_cast<std::chrono::seconds>(left).count());
  const std::string names = fmt::format("{}", fmt::join(joinedHosts, ", "));
  if (lastCall) {
    return fmt::format(
        "rendezvous round {}: {} of at most {} nodes joined{}; waiting {} s more "
        "(last_call_timeout) for others before it closes",
        round, joined, maxNodes, names.empty() ? "" : " (" + names + ")", seconds);
  }
  const int missing = minNodes - joined;
  return fmt::format(
      "waiting for {} more node{} ({} of {}{} joined{}), {} s left of the join "
      "timeout",
      missing, missing == 1 ? "" : "s", joined, minNodes == maxNodes ? "" : "at least ", minNodes,
      names.empty() ? "" : ": " + names, seconds);
}

std::string spareWaitLine(int spares, int maxNodes) {
  return fmt::format("spare: waiting for a place ({} spare{} wanted, the job runs {} node{})",
                     spares, spares == 1 ? "" : "s", maxNodes, maxNodes == 1 ? "" : "s");
}

std::string barrierWaitLine(const std::vector<std::pair<int, std::string>>& atWork,
                            milliseconds left) {
  std::vector<std::string> nodes;
  for (const auto& [rank, host] : atWork)
    nodes.push_back(fmt::format("{} (group rank {})", host, rank));
  const long seconds = std::chrono::duration_cast<std::chrono::seconds>(left).count();
  const std::string time = seconds > 0 ? fmt::format("{} s left", seconds)
                                       : std::string("the exit barrier's timeout has passed");
  return fmt::format("waiting for node{} {} to finish, {}", atWork.size() == 1 ? "" : "s",
                     fmt::join(nodes, ", "), time);
}

}  // namespace ddprun::launcher
