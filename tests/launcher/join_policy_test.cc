// The joining policy (membership/join_policy.h), pure: when a round closes (MIN:MAX, last call),
// what a joiner reads on each pass while it waits, when too few nodes remain, and the one join
// budget that opening, joining and rejoining share. Time is passed in by hand.
#include "membership/join_policy.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <vector>

namespace {

using namespace ddprun::launcher;
using namespace std::chrono_literals;

JoinClock::time_point at(std::chrono::milliseconds t) {
  return JoinClock::time_point(1'000'000ms + t);
}

JoinRules rules(int minNodes, int maxNodes, std::chrono::milliseconds lastCall = 30s) {
  return JoinRules{minNodes, maxNodes, lastCall};
}

TEST_CASE("the join budget: what is left of join_timeout from its start, never below zero",
          "[join_policy]") {
  const JoinBudget budget(10s, at(0ms));
  CHECK(budget.limit() == 10s);
  CHECK(budget.deadline() == at(10s));
  CHECK(budget.left(at(0ms)) == 10s);
  CHECK(budget.left(at(8s)) == 2s);
  CHECK(budget.left(at(12s)) == 0ms);
  CHECK_FALSE(budget.spent(at(10s)));
  CHECK(budget.spent(at(10s) + 1ms));
}

TEST_CASE("an open round is joined, a closed one next time below MAX and waited for at MAX",
          "[join_policy]") {
  CHECK(joinEntry(std::nullopt, 4) == JoinEntry::kJoin);
  CloseRecord running;
  running.nodes = 3;
  CHECK(joinEntry(running, 4) == JoinEntry::kJoinNext);
  running.nodes = 4;
  CHECK(joinEntry(running, 4) == JoinEntry::kWaitForPlace);
}

TEST_CASE("a round closes at MAX at once, and below it at MIN only once last call ran out",
          "[join_policy][last_call]") {
  LastCall lastCall(rules(2, 4, 30s));
  CHECK_FALSE(lastCall.closes(1, std::nullopt, at(0ms)));  // below MIN: never
  CHECK_FALSE(lastCall.left(at(0ms)));
  CHECK(lastCall.asksWhoIsAway(2));
  CHECK(lastCall.asksWhoIsAway(4));  // at MAX too: a spare may be among them
  CHECK_FALSE(lastCall.asksWhoIsAway(1));
  // MIN reached at 1 s, new nodes may come: last call runs 30 s from then.
  CHECK_FALSE(lastCall.closes(2, std::nullopt, at(1s)));
  CHECK(lastCall.left(at(11s)) == 20s);
  CHECK_FALSE(lastCall.closes(3, std::nullopt, at(30s)));
  CHECK(lastCall.closes(3, std::nullopt, at(31s)));
  // MAX closes at once, whatever last call says, with nobody of the last round away.
  LastCall full(rules(2, 4, 30s));
  CHECK(full.closes(4, std::nullopt, at(0ms)));
  CHECK(full.closes(4, 0, at(0ms)));
}

TEST_CASE("MAX joiners with a member of the last round away wait for it: a spare is among them",
          "[join_policy][last_call][spares]") {
  LastCall lastCall(rules(2, 2, 30s));
  CHECK_FALSE(lastCall.closes(2, 1, at(0ms)));  // a spare and one member; the other is alive
  CHECK_FALSE(lastCall.closes(3, 1, at(1s)));   // a third: still not the member away
  CHECK(lastCall.closes(3, 0, at(1100ms)));     // it came back: closes at once
  // One that stays away (alive, not rejoining) is waited for no longer than last call.
  LastCall stuck(rules(2, 2, 30s));
  CHECK_FALSE(stuck.closes(2, 1, at(0ms)));
  CHECK_FALSE(stuck.closes(2, 1, at(29s)));
  CHECK(stuck.closes(2, 1, at(30s)));
  // A spare never counts toward MIN on its own: below MIN nothing closes.
  LastCall below(rules(2, 2, 30s));
  CHECK_FALSE(below.closes(1, 0, at(60s)));
}

TEST_CASE("a round closes at MIN at once when every still-alive member of the last round is back",
          "[join_policy][last_call]") {
  LastCall lastCall(rules(2, 4, 30s));
  CHECK_FALSE(lastCall.closes(2, 1, at(0ms)));  // one of the last round is alive and not back yet
  CHECK(lastCall.closes(2, 0, at(1ms)));        // it is: a restart or a loss, no waiting
}

TEST_CASE("last call starts again when the joiners drop below MIN", "[join_policy][last_call]") {
  LastCall lastCall(rules(2, 4, 30s));
  CHECK_FALSE(lastCall.closes(2, std::nullopt, at(0ms)));
  CHECK_FALSE(lastCall.closes(1, std::nullopt, at(20s)));  // a joiner died
  CHECK_FALSE(lastCall.closes(2, std::nullopt, at(40s)));  // MIN again: 30 s from now
  CHECK_FALSE(lastCall.closes(2, std::nullopt, at(69s)));
  CHECK(lastCall.closes(2, std::nullopt, at(70s)));
}

TEST_CASE("a round's members are its first MAX live joiners, in join order", "[join_policy]") {
  CHECK(roundMembers({7, 3, 9}, {}, 4) == std::vector<std::int64_t>{7, 3, 9});
  CHECK(roundMembers({7, 3, 9, 1, 5}, {}, 4) == std::vector<std::int64_t>{7, 3, 9, 1});
}

TEST_CASE("the members of the last round coming back are preferred over spares and new nodes",
          "[join_policy][spares]") {
  // Spare 9 joined first; 3 and 7 were the last round's members.
  CHECK(roundMembers({9, 3, 7}, {7, 3}, 2) == std::vector<std::int64_t>{3, 7});
  // Member 5 was lost: the spare takes its place, after the members coming back.
  CHECK(roundMembers({9, 3}, {3, 5}, 2) == std::vector<std::int64_t>{3, 9});
  // Two spares for one place: the earlier joiner.
  CHECK(roundMembers({8, 9, 3}, {3, 5}, 2) == std::vector<std::int64_t>{3, 8});
}

TEST_CASE("a small job's joiner reads the list at each arrival and from MIN on at every pass",
          "[join_policy][joiner]") {
  JoinerPolicy policy(rules(3, 3), /*slot=*/1, at(0ms));
  CHECK(policy.readsCounter(at(0ms)));
  CHECK(policy.readsList(1, at(0ms)));  // its own arrival
  policy.listed(1);
  CHECK(policy.readsCounter(at(200ms)));
  CHECK_FALSE(policy.readsList(1, at(200ms)));  // nothing new below MIN, and not the slow pace yet
  CHECK(policy.pace() == kJoinPollInterval * 4);
  CHECK(policy.readsCounter(at(1200ms)));
  CHECK(policy.readsList(1, at(1200ms)));  // the slow pace: for its line and the losses check
  CHECK(policy.readsCounter(at(1250ms)));
  CHECK(policy.readsList(2, at(1250ms)));  // an arrival
  CHECK(policy.readsCounter(at(1300ms)));
  CHECK(policy.readsList(3, at(1300ms)));  // MIN: every pass
  CHECK(policy.readsCounter(at(1350ms)));
  CHECK(policy.readsList(3, at(1350ms)));
  CHECK(policy.pace() == kJoinPollInterval);
}

TEST_CASE(
    "a big job's joiner that can no longer decide reads the counter only at the slow pace and "
    "never the list",
    "[join_policy][joiner]") {
  // 100 nodes wanted: more than kNamedJoinersMax. This joiner has slot 5; MIN is 80.
  JoinerPolicy policy(rules(80, 100), /*slot=*/5, at(0ms));
  REQUIRE(policy.big());
  CHECK(policy.readsCounter(at(0ms)));
  // The latest joiner decides, but below MIN it reads the list only at the slow pace: every
  // joiner's arrival reading all who came before it would be O(N^2) for the job.
  CHECK_FALSE(policy.readsList(5, at(0ms)));
  CHECK(policy.readsCounter(at(50ms)));
  CHECK_FALSE(policy.readsList(6, at(50ms)));  // a later one came: a bystander from now on
  CHECK(policy.pace() == kJoinPollInterval * 20);
  CHECK(policy.mayLine(false));
  CHECK_FALSE(policy.readsCounter(at(1s)));  // no counter read between slow passes
  CHECK(policy.counted() == 6);
  CHECK(policy.readsCounter(at(10s)));         // the slow pace (when its line is due)
  CHECK_FALSE(policy.readsList(90, at(10s)));  // never the list, even past MIN
  policy.listed(std::nullopt);
  CHECK(policy.joined(std::nullopt) == 90 - 0);
}

TEST_CASE(
    "a big job's joiner whose slot reached MIN reads the list at every pass: it times last call",
    "[join_policy][joiner]") {
  JoinerPolicy policy(rules(80, 100), /*slot=*/80, at(0ms));
  CHECK(policy.readsCounter(at(0ms)));
  CHECK(policy.readsList(85, at(0ms)));
  CHECK(policy.readsCounter(at(50ms)));
  CHECK(policy.readsList(86, at(50ms)));
  CHECK(policy.pace() == kJoinPollInterval);
}

TEST_CASE("between list reads the joiners are the counter less those found dead",
          "[join_policy][joiner]") {
  JoinerPolicy policy(rules(3, 3), /*slot=*/1, at(0ms));
  CHECK(policy.readsCounter(at(0ms)));
  CHECK(policy.readsList(3, at(0ms)));
  policy.listed(2);  // one of the three died
  CHECK(policy.joined(2) == 2);
  CHECK(policy.readsCounter(at(50ms)));
  policy.readsList(3, at(50ms));
  CHECK(policy.joined(std::nullopt) == 2);
}

TEST_CASE("too few nodes remain after losses: said once, given up after last_call_timeout",
          "[join_policy][joiner]") {
  JoinerPolicy policy(rules(3, 3, 30s), /*slot=*/1, at(0ms));
  policy.remaining(std::nullopt);
  CHECK(policy.shortage(at(0ms)) == JoinerPolicy::Shortage::kNone);
  policy.remaining(2);
  CHECK(policy.shortage(at(1s)) == JoinerPolicy::Shortage::kBegins);
  CHECK(policy.shortage(at(30s)) == JoinerPolicy::Shortage::kWaits);
  CHECK(policy.shortage(at(31s)) == JoinerPolicy::Shortage::kOver);
  // A node came back meanwhile: the count starts again.
  JoinerPolicy saved(rules(3, 3, 30s), /*slot=*/1, at(0ms));
  saved.remaining(2);
  CHECK(saved.shortage(at(1s)) == JoinerPolicy::Shortage::kBegins);
  saved.remaining(3);
  CHECK(saved.shortage(at(20s)) == JoinerPolicy::Shortage::kNone);
  saved.remaining(2);
  CHECK(saved.shortage(at(40s)) == JoinerPolicy::Shortage::kBegins);
}

TEST_CASE("the waiting line's time left: the join budget's, then last call's once it runs",
          "[join_policy][joiner]") {
  const JoinBudget budget(600s, at(0ms));
  JoinerPolicy policy(rules(2, 4, 30s), /*slot=*/1, at(0ms));
  CHECK(policy.lineLeft(1, budget, at(10s)) == 590s);
  CHECK_FALSE(policy.lastCall().closes(2, std::nullopt, at(10s)));
  CHECK(policy.lineLeft(2, budget, at(15s)) == 25s);
}

}  // namespace
