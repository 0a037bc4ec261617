// A --standalone job's rounds through SoloRendezvous: the real AgentMachine with the fake seams
// (tests/launcher/agent_fakes.h) and no store at all, so every round here is formed without a
// word to one. What only the solo client does is here; the machine's scenarios that every
// rendezvous client must pass run against it in agent_machine_test.cc.
#include "membership/solo_rendezvous.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "agent_fakes.h"
#include "core/exit_codes.h"
#include "core/stop_reason.h"
#include "machine/agent_machine.h"
#include "solo_node.h"

namespace {

using namespace ddprun::launcher;
using namespace ddprun::test;
using namespace std::chrono_literals;
using State = AgentMachine::State;

}  // namespace

TEST_CASE("standalone: a round forms on the loop, alone, without a store", "[agent][unit][solo]") {
  SoloNode node(standaloneConfig(3));
  CHECK(node.solo.nodeId() == -1);  // as the driver's: no id before the rendezvous
  node.machine.start();
  // Never inside the call: the round reaches the machine from the loop.
  CHECK(node.machine.state() == State::kJoining);
  CHECK(node.launcher.spawned.empty());
  node.loop.runPosted();
  REQUIRE(node.runningRound(0));
  CHECK(node.solo.nodeId() == SoloRendezvous::kNodeId);
  const Round& round = node.machine.round();
  CHECK(round.groupRank == 0);
  CHECK(round.nodes == 1);
  CHECK(round.address == "127.0.0.1");
  CHECK(round.worldSize == 3);
  CHECK(round.baseRank == 0);
  CHECK(round.history.restarts == 0);
  CHECK(round.hostsWorkerStore);
  CHECK(node.stores.hosted == 40001);  // a workers' store of the round's own
  const auto workers = node.workers();
  REQUIRE(workers.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(workers[i].environment.at("RANK") == std::to_string(i));
    CHECK(workers[i].environment.at("WORLD_SIZE") == "3");
    CHECK(workers[i].environment.at("GROUP_RANK") == "0");
    CHECK(workers[i].environment.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(workers[i].environment.at("MASTER_PORT") == "40001");
    CHECK(workers[i].environment.at("TORCHELASTIC_RESTART_COUNT") == "0");
  }
}

TEST_CASE(
    "standalone: no liveness to renew, so a job longer than any fencing interval is never "
    "fenced",
    "[agent][unit][solo]") {
  SoloNode node(standaloneConfig(1));
  node.machine.start();
  REQUIRE(node.until([&] { return node.runningRound(0); }));
  CHECK_FALSE(node.solo.livenessAcknowledgedAt());
  node.loop.advance(node.config_.rdzv.settings.holdTimeToLive() * 10);
  CHECK(node.runningRound(0));
  CHECK(node.launcher.signals.empty());
  CHECK(node.launcher.leaderSignals.empty());
  node.allExit(0);
  REQUIRE(node.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
}

TEST_CASE("standalone: the first stop of a round holds, and a past round takes none",
          "[agent][unit][solo]") {
  ManualEventLoop loop;
  struct Events final : RendezvousEvents {
    void onRoundFormed(Round round) override { rounds.push_back(round.number); }
    void onRendezvousFailed(const RendezvousFailure&) override {}
    void onStop(int round, StopReason stop) override { stops.emplace_back(round, stop.kind); }
    void onStoreLost(const StoreLoss&) override {}
    std::vector<int> rounds;
    std::vector<std::pair<int, StopKind>> stops;
  } events;
  SoloRendezvous solo(SoloNode::self(1), loop, "127.0.0.1:1");
  solo.attach(events);
  solo.join(-1);
  loop.runPosted();
  solo.announce(0, StopReason::nodeLeft(1, 0, "h", SIGTERM, true));
  solo.markDone(0, 1);          // too late: the round stopped already
  CHECK(events.stops.empty());  // nobody watches yet
  solo.watch(0);
  CHECK(events.stops.empty());  // posted, not delivered inside the call
  loop.runPosted();
  CHECK(events.stops == std::vector<std::pair<int, StopKind>>{{0, StopKind::kNodeLeft}});
  solo.join(1);
  solo.announce(0, StopReason::done());  // round 0 is over
  solo.watch(1);
  loop.runPosted();
  CHECK(events.rounds == std::vector<int>{0, 1});
  CHECK(events.stops.size() == 1);
}
