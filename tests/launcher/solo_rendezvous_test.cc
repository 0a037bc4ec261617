// A --standalone job's rounds through SoloRendezvous: the real AgentMachine with the fake seams
// (tests/launcher/agent_fakes.h) and no store at all, so every round here is formed without a
// word to one. The outcomes the machine acts on are those MembershipDriver gives a one-node job
// (agent_machine_test.cc has the same cases over the in-process store).
#include <signal.h>

#include <chrono>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent_fakes.h"
#include "core/exit_codes.h"
#include "core/stop_reason.h"
#include "machine/agent_machine.h"
#include "membership/solo_rendezvous.h"

namespace {

using namespace ddprun::launcher;
using namespace ddprun::test;
using namespace std::chrono_literals;
using State = AgentMachine::State;

LaunchConfig standaloneConfig(int nproc, int maxRestarts = 0) {
  LaunchConfig config;
  config.nprocPerNode = nproc;
  config.rdzv.standalone = true;
  config.rdzv.backend = RdzvBackend::kC10d;
  config.rdzv.minNodes = 1;
  config.rdzv.maxNodes = 1;
  config.rdzv.runId = "solo";
  config.restart.maxRestarts = maxRestarts;
  config.restart.shutdownTimeout = 5s;
  config.entry.kind = EntryKind::kExecutable;
  config.entry.script = "/bin/true";
  config.entry.executable = "/bin/true";
  return config;
}

// Records every outcome the client gives, in order, before handing it to the machine.
struct Recorder final : RendezvousEvents {
  explicit Recorder(RendezvousEvents& next) : next_(next) {}
  void onRoundFormed(Round round) override {
    seen.push_back("formed " + std::to_string(round.number));
    next_.onRoundFormed(std::move(round));
  }
  void onRendezvousFailed(const RendezvousFailure& failure) override {
    seen.push_back("failed");
    next_.onRendezvousFailed(failure);
  }
  void onStop(int round, StopReason stop) override {
    seen.push_back(std::string("stop ") + std::to_string(round) + " " + stopKindName(stop.kind));
    next_.onStop(round, std::move(stop));
  }
  void onStoreLost(const StoreLoss& loss) override {
    seen.push_back("store lost");
    next_.onStoreLost(loss);
  }
  std::vector<std::string> seen;

 private:
  RendezvousEvents& next_;
};

// One standalone agent: the real machine and the solo client, fake processes, no store.
struct SoloNode {
  explicit SoloNode(LaunchConfig config)
      : config_(std::move(config)),
        launcher(loop),
        output(loop),
        solo(self(config_.nprocPerNode), loop, "127.0.0.1:29400"),
        evidence(loop),
        machine(config_, identity(), loop, launcher, output, solo, stores, diagnostics(),
                [this](int code) { exitCode = code; }),
        recorder(machine) {
    launcher.childExited = [this] { machine.onChildExited(); };
    solo.attach(recorder);
  }

  static NodeInfo self(int nproc) { return fakeNodeInfo("host-solo", "127.0.0.1", nproc); }
  WorkerDiagnostics diagnostics() {
    WorkerDiagnostics seams;
    seams.heartbeats = &heartbeats;
    seams.evidence = &evidence;
    seams.oom = &oom;
    seams.activity = &activity;
    return seams;
  }
  AgentIdentity identity() const {
    return fakeIdentity("host-solo", "127.0.0.1", /*hostsStore=*/true, "/tmp/ddprun-solo-rendezvous-test");
  }
  bool runningRound(int round) const { return runsRound(machine, round); }
  std::vector<FakeLauncher::Worker> workers() const { return launcher.latest(config_.nprocPerNode); }
  void allExit(int code) { launcher.latestExitWith(config_.nprocPerNode, code); }
  bool until(const std::function<bool()>& done) { return loop.runUntil(done, std::chrono::seconds(5)); }

  LaunchConfig config_;
  ManualEventLoop loop;
  FakeLauncher launcher;
  NullOutput output;
  FakeWorkerStores stores;
  SoloRendezvous solo;
  FakeHeartbeats heartbeats;
  FakeEvidence evidence;
  FakeOom oom;
  FakeActivity activity;
  AgentMachine machine;
  Recorder recorder;
  std::optional<int> exitCode;
};

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
  CHECK(round.restartCount == 0);
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

TEST_CASE("standalone: every worker exits 0, the exit barrier's count ends the run with 0",
          "[agent][unit][solo]") {
  SoloNode node(standaloneConfig(2));
  node.machine.start();
  REQUIRE(node.until([&] { return node.runningRound(0); }));
  node.allExit(0);
  REQUIRE(node.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
  CHECK(node.machine.ending()->kind == EndKind::kSucceeded);
  CHECK(node.recorder.seen == std::vector<std::string>{"formed 0", "stop 0 done"});
}

TEST_CASE("standalone: a failed worker restarts the group as round r+1, restart 1",
          "[agent][unit][solo]") {
  SoloNode node(standaloneConfig(2, /*maxRestarts=*/2));
  node.machine.start();
  REQUIRE(node.until([&] { return node.runningRound(0); }));
  const auto first = node.workers();
  node.launcher.exitWith(first[1].pid, 3);
  REQUIRE(node.until([&] { return node.runningRound(1); }));
  CHECK(node.launcher.signals.front() == SIGTERM);  // its peer stopped first
  CHECK_FALSE(node.launcher.running(first[0].pid));
  const auto second = node.workers();
  CHECK(second[0].pid != first[0].pid);
  CHECK(second[0].environment.at("TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(second[0].environment.at("DDPRUN_GENERATION") == "1");
  CHECK(second[0].environment.at("MASTER_PORT") == "40002");  // a fresh workers' store
  CHECK(node.machine.round().restartCount == 1);
  node.launcher.exitWith(second[0].pid, 4);
  REQUIRE(node.until([&] { return node.runningRound(2); }));
  CHECK(node.machine.round().restartCount == 2);
  node.allExit(0);
  REQUIRE(node.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
  CHECK(node.recorder.seen == std::vector<std::string>{"formed 0", "stop 0 failure", "formed 1",
                                                       "stop 1 failure", "formed 2", "stop 2 done"});
}

TEST_CASE("standalone: with the budget spent, the root cause's exit code and its failure as the "
          "store would have kept it", "[agent][unit][solo]") {
  SoloNode node(standaloneConfig(2, /*maxRestarts=*/0));
  node.machine.start();
  REQUIRE(node.until([&] { return node.runningRound(0); }));
  node.launcher.exitWith(node.workers()[1].pid, 7);
  REQUIRE(node.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 7);
  const Ending& ending = *node.machine.ending();
  CHECK(ending.kind == EndKind::kJobFailed);
  REQUIRE(ending.rootCause);
  CHECK(ending.rootCause->rank == 1);
  CHECK(ending.rootCause->exitCode == 7);
  CHECK(ending.rootCause->host == "host-solo");
  CHECK(node.launcher.spawned.size() == 2);  // no restart
}

TEST_CASE("standalone: a signal stops the workers and ends the agent with 128 + the signal",
          "[agent][unit][solo]") {
  SoloNode node(standaloneConfig(2));
  node.machine.start();
  REQUIRE(node.until([&] { return node.runningRound(0); }));
  node.machine.onSignal(SIGTERM);
  REQUIRE(node.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGTERM);
  CHECK(node.launcher.signals.front() == SIGTERM);
}

TEST_CASE("standalone: no liveness to renew, so a job longer than any fencing interval is never "
          "fenced", "[agent][unit][solo]") {
  SoloNode node(standaloneConfig(1));
  node.machine.start();
  REQUIRE(node.until([&] { return node.runningRound(0); }));
  CHECK_FALSE(node.solo.livenessAcknowledgedAt());
  node.loop.advance(node.config_.rdzv.settings.holdTimeToLive() * 10);
  CHECK(node.runningRound(0));
  CHECK(node.launcher.signals.empty());
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
  solo.markDone(0, 1);  // too late: the round stopped already
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
