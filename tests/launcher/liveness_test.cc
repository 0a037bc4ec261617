// Liveness (membership/liveness.h): the fencing clock, whose alive keys a member watches, how a
// failed renewal is told apart (answered or silent), and what arming a round and abandoning do to
// the store. The in-process store; the heartbeat thread is started but never ticks (a keep-alive
// interval of an hour): every renewal here is one the test makes happen.
#include "membership/liveness.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent_fakes.h"
#include "core/stop_reason.h"
#include "ddprun/rendezvous/hash_store.h"

namespace {

using namespace ddprun::launcher;
using namespace std::chrono_literals;
using ddprun::rendezvous::HashStore;
using TimePoint = std::chrono::steady_clock::time_point;

TimePoint at(std::chrono::milliseconds t) { return TimePoint(1'000'000ms + t); }

NodeInfo node(std::int64_t id, const std::string& address) {
  NodeInfo info;
  info.id = id;
  info.address = address;
  info.hostname = "host-" + address;
  info.nproc = 2;
  info.pid = 1000;
  return info;
}

TEST_CASE("the fencing clock keeps the latest acknowledged send, and a fence never moves back",
          "[liveness][fencing]") {
  FencingClock clock;
  CHECK_FALSE(clock.acknowledgedAt());
  clock.acknowledged(at(2s));
  clock.acknowledged(at(1s));  // an older renewal acknowledged late: the time stays
  CHECK(clock.acknowledgedAt() == at(2s));
  clock.acknowledged(at(3s));
  CHECK(clock.acknowledgedAt() == at(3s));
  CHECK_FALSE(clock.anyFenced());
  clock.fence(4);
  clock.fence(2);
  CHECK(clock.fenced(4));
  CHECK(clock.fenced(0));
  CHECK_FALSE(clock.fenced(5));
}

TEST_CASE("a member watches every other member in a small job, its ring neighbours in a big one",
          "[liveness][peers]") {
  ArmedRound small;
  small.round = 3;
  small.groupRank = 1;
  small.nodes = 3;
  small.members = {node(10, "10.0.0.1"), node(11, "10.0.0.2"), node(12, "10.0.0.3")};
  small.next = {{2, 12, "host-10.0.0.3"}, {0, 10, "host-10.0.0.1"}};
  const auto peers = peersToWatch(small, 11, kSeatNeighbours);
  REQUIRE(peers.size() == 2);
  CHECK(peers[0].id == 10);
  CHECK(peers[0].groupRank == 0);
  CHECK(peers[1].id == 12);
  CHECK(peers[1].groupRank == 2);

  ArmedRound big = small;
  big.nodes = kNamedJoinersMax + 1;
  big.members.clear();
  CHECK(peersToWatch(big, 11, kSeatNeighbours).size() == 2);
  const auto next = peersToWatch(big, 11, 1);
  REQUIRE(next.size() == 1);
  CHECK(next[0].id == 12);
  // A one-node round: nobody to watch.
  ArmedRound alone;
  alone.nodes = 1;
  alone.members = {node(10, "10.0.0.1")};
  CHECK(peersToWatch(alone, 10, kSeatNeighbours).empty());
}

TEST_CASE(
    "a renewal that failed before its timeout was answered, and one that waited it out met silence",
    "[liveness]") {
  CHECK(answeredBeforeTimeout(10ms, 5000ms));
  CHECK_FALSE(answeredBeforeTimeout(4900ms, 5000ms));
}

TEST_CASE("an armed member that vanishes is reported lost to its round by the store",
          "[liveness][store]") {
  HashStore store;
  ddprun::test::SeverableStoreBackend backend(store);
  const MembershipKeys keys("live");
  RendezvousSettings settings;
  settings.keepAliveInterval = std::chrono::hours(1);
  TimePoint now = at(0ms);
  Liveness liveness(keys, settings, [&] { return now; });
  liveness.connect(backend.connect(1s, 1s), 1s);
  const NodeInfo self = node(4, "10.0.0.4");
  liveness.start(self);
  CHECK(liveness.acknowledgedAt() == at(0ms));
  CHECK(store.check({keys.alive(4)}));

  now = at(5s);
  ArmedRound round;
  round.round = 2;
  round.groupRank = 1;
  round.nodes = 2;
  round.members = {node(3, "10.0.0.3"), self};
  liveness.arm(round);
  CHECK(liveness.acknowledgedAt() == at(5s));  // arming renews at once
  REQUIRE(liveness.armed(2));
  CHECK(liveness.armed(2)->groupRank == 1);
  CHECK_FALSE(liveness.armed(1));

  liveness.abandon();  // no release: to the store, the node vanished
  const auto stop = StopReason::parse(store.get(keys.stop(2)));
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kNodeLost);
  CHECK(stop->node == 4);
  CHECK_FALSE(liveness.lost());
}

}  // namespace
