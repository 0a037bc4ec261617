// The agent's decisions, through its seams: restart, re-form, join, node loss, signals and the
// exit barrier, with a fake process launcher, the in-process store and a manual clock. Several
// agents form one job in this process; nothing is spawned, no socket is opened, and time moves
// only when a test moves it. The real-binary tests (agent_test, multinode_test) stay.
#include "machine/agent_machine.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include "agent_fakes.h"
#include "core/exit_codes.h"
#include "core/stop_reason.h"
#include "ddprun/rendezvous/hash_store.h"
#include "log_capture.h"
#include "membership/membership_driver.h"
#include "solo_node.h"
#include "stores/store_backend.h"

namespace {

using namespace ddprun::launcher;
using ddprun::rendezvous::HashStore;
using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;
using State = AgentMachine::State;

LaunchConfig jobConfig(int minNodes, int maxNodes, int nproc, int maxRestarts = 0) {
  LaunchConfig config;
  config.nprocPerNode = nproc;
  config.rdzv.backend = RdzvBackend::kC10d;
  config.rdzv.minNodes = minNodes;
  config.rdzv.maxNodes = maxNodes;
  config.rdzv.runId = "unit";
  config.rdzv.settings.lastCallTimeout = 2s;
  config.rdzv.settings.joinTimeout = 60s;
  // Holds age on the manual clock while heartbeats renew them in real time: a long life keeps a
  // test's jumps in time from making live nodes look lost.
  config.rdzv.settings.keepAliveMaxAttempts = 1000;
  config.restart.maxRestarts = maxRestarts;
  config.restart.shutdownTimeout = 5s;
  config.entry.kind = EntryKind::kExecutable;
  config.entry.script = "/bin/true";
  config.entry.executable = "/bin/true";
  return config;
}

// One agent: the real machine and driver, fake processes, the shared in-process store.
struct Node {
  // `environment`: the agent's, that its workers inherit.
  Node(ManualEventLoop& loop, HashStore& store, LaunchConfig config, const std::string& address,
       bool hostsStore = false, std::map<std::string, std::string> environment = {})
      : config_(std::move(config)),
        loop_(loop),
        launcher(loop),
        output(loop),
        backend(store),
        driver(config_.rdzv, backend, self(address, config_.nprocPerNode), loop),
        evidence(loop),
        machine(config_, identity(address, hostsStore, std::move(environment)), loop, launcher,
                output, driver, stores, diagnostics(), [this](int code) { exitCode = code; }),
        recorder(machine) {
    launcher.childExited = [this] { machine.onChildExited(); };
    driver.attach(recorder);
  }
  ~Node() { driver.leave(/*hostsStore=*/false, /*storeEndsAlone=*/false, std::nullopt); }

  static NodeInfo self(const std::string& address, int nproc) {
    return fakeNodeInfo("host-" + address, address, nproc);
  }
  WorkerDiagnostics diagnostics() {
    WorkerDiagnostics seams;
    seams.heartbeats = &heartbeats;
    seams.evidence = &evidence;
    seams.oom = &oom;
    seams.activity = &activity;
    seams.stopRequests = &stopRequests;
    seams.event = [this](std::string line) { events.push_back(std::move(line)); };
    seams.health = &health;
    return seams;
  }
  AgentIdentity identity(const std::string& address, bool hostsStore,
                         std::map<std::string, std::string> environment) const {
    AgentIdentity id =
        fakeIdentity("host-" + address, address, hostsStore, "/tmp/ddprun-agent-machine-test");
    id.environment = std::move(environment);
    id.privateDir = "/fake/private";
    return id;
  }

  bool runningRound(int round) const { return runsRound(machine, round); }
  // The workers of the current round, as spawned.
  std::vector<FakeLauncher::Worker> workers() const {
    return launcher.latest(config_.nprocPerNode);
  }
  void allExit(int code) { launcher.latestExitWith(config_.nprocPerNode, code); }

  LaunchConfig config_;
  ManualEventLoop& loop_;
  FakeLauncher launcher;
  NullOutput output;
  FakeWorkerStores stores;
  SeverableStoreBackend backend;
  MembershipDriver driver;
  FakeHeartbeats heartbeats;
  FakeEvidence evidence;
  FakeOom oom;
  FakeActivity activity;
  FakeStopRequests stopRequests;
  FakeHealthGate health;
  std::vector<std::string> events;  // --event-log-handler console lines
  AgentMachine machine;
  EventRecorder recorder;  // what the driver told the machine
  std::optional<int> exitCode;
};

// The agents of one job, sharing an in-process store whose holds age on the manual clock.
struct Job {
  ManualEventLoop loop;
  HashStore store{[this] { return loop.now(); }};
  std::vector<std::unique_ptr<Node>> nodes;

  Node& add(const LaunchConfig& config, const std::string& address, bool hostsStore = false,
            std::map<std::string, std::string> environment = {}) {
    nodes.push_back(
        std::make_unique<Node>(loop, store, config, address, hostsStore, std::move(environment)));
    return *nodes.back();
  }
  // Starts every node added so far and waits until they all run round 0 together.
  bool startTogether() {
    for (auto& node : nodes) node->machine.start();
    return until([&] {
      return std::all_of(nodes.begin(), nodes.end(),
                         [](const auto& node) { return node->runningRound(0); });
    });
  }
  bool until(const std::function<bool()>& done,
             std::chrono::milliseconds patience = std::chrono::seconds(10)) {
    return loop.runUntil(done, patience);
  }
};

// The scenarios every rendezvous client must pass run once per client (TEMPLATE_TEST_CASE), each
// as a one-node job: MembershipDriver over the in-process store, and SoloRendezvous
// (--standalone, no store; solo_rendezvous_test.cc has what only it does).
struct OverStore {
  OverStore(int nproc, int maxRestarts)
      : node(job.add(jobConfig(1, 1, nproc, maxRestarts), kAddress)) {}
  bool until(const std::function<bool()>& done) { return job.until(done); }
  ManualEventLoop& loop() { return job.loop; }
  static constexpr const char* kAddress = "10.0.0.1";
  static constexpr const char* kHost = "host-10.0.0.1";
  Job job;
  Node& node;
};
struct Standalone {
  Standalone(int nproc, int maxRestarts) : node(standaloneConfig(nproc, maxRestarts)) {}
  bool until(const std::function<bool()>& done) { return node.until(done); }
  ManualEventLoop& loop() { return node.loop; }
  static constexpr const char* kAddress = "127.0.0.1";
  static constexpr const char* kHost = "host-solo";
  SoloNode node;
};
}  // namespace

TEMPLATE_TEST_CASE("one node: workers get their ranks, all exit 0, the agent exits 0",
                   "[agent][unit]", OverStore, Standalone) {
  TestType client(3, /*maxRestarts=*/0);
  auto& node = client.node;
  node.machine.start();
  REQUIRE(client.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  REQUIRE(workers.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(workers[i].environment.at("RANK") == std::to_string(i));
    CHECK(workers[i].environment.at("LOCAL_RANK") == std::to_string(i));
    CHECK(workers[i].environment.at("WORLD_SIZE") == "3");
    CHECK(workers[i].environment.at("TORCHELASTIC_RESTART_COUNT") == "0");
    CHECK(workers[i].environment.at("MASTER_ADDR") == TestType::kAddress);
  }
  node.allExit(0);
  // The exit barrier's count ends the run.
  REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
  CHECK(node.machine.ending()->kind == EndKind::kSucceeded);
  CHECK(node.recorder.seen == std::vector<std::string>{"formed 0", "stop 0 done"});
}

TEMPLATE_TEST_CASE("a failed worker restarts the whole group within --max-restarts",
                   "[agent][unit]", OverStore, Standalone) {
  TestType client(2, /*maxRestarts=*/2);
  auto& node = client.node;
  node.machine.start();
  REQUIRE(client.until([&] { return node.runningRound(0); }));
  const auto first = node.workers();
  node.launcher.exitWith(first[1].pid, 3);
  // Its peer is stopped (SIGTERM to its own process), then the group starts again as restart 1.
  REQUIRE(client.until([&] { return node.runningRound(1); }));
  CHECK(node.launcher.leaderSignals.front() == SIGTERM);
  CHECK(node.launcher.signals.empty());
  CHECK_FALSE(node.launcher.running(first[0].pid));
  const auto second = node.workers();
  CHECK(second[0].pid != first[0].pid);
  CHECK(second[0].environment.at("TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(second[0].environment.at("DDPRUN_GENERATION") == "1");
  CHECK(second[0].environment.at("MASTER_PORT") == "40002");  // a fresh workers' store
  CHECK(node.machine.round().history.restarts == 1);
  node.launcher.exitWith(second[0].pid, 4);
  REQUIRE(client.until([&] { return node.runningRound(2); }));
  CHECK(node.machine.round().history.restarts == 2);
  node.allExit(0);
  REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
  CHECK(node.recorder.seen == std::vector<std::string>{"formed 0", "stop 0 failure", "formed 1",
                                                       "stop 1 failure", "formed 2",
                                                       "stop 2 done"});
}

TEMPLATE_TEST_CASE("with the budget spent, the job fails with the root cause's exit code",
                   "[agent][unit]", OverStore, Standalone) {
  TestType client(2, /*maxRestarts=*/0);
  auto& node = client.node;
  node.machine.start();
  REQUIRE(client.until([&] { return node.runningRound(0); }));
  node.launcher.exitWith(node.workers()[1].pid, 7);
  REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 7);
  const Ending& ending = *node.machine.ending();
  CHECK(ending.kind == EndKind::kJobFailed);
  REQUIRE(ending.rootCause);
  CHECK(ending.rootCause->rank == 1);
  CHECK(ending.rootCause->exitCode == 7);
  CHECK(ending.rootCause->host == TestType::kHost);
  CHECK(node.launcher.spawned.size() == 2);  // no restart
}

TEMPLATE_TEST_CASE("a worker killed by a signal ends the job with 128 + the signal",
                   "[agent][unit]", OverStore, Standalone) {
  TestType client(1, /*maxRestarts=*/0);
  auto& node = client.node;
  node.machine.start();
  REQUIRE(client.until([&] { return node.runningRound(0); }));
  node.launcher.dieOf(node.workers()[0].pid, SIGSEGV);
  REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGSEGV);
}

TEST_CASE("workers that ignore SIGTERM are killed when the shutdown grace runs out",
          "[agent][unit]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2), "10.0.0.1");
  node.launcher.obeySignals = false;
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  node.launcher.exitWith(node.workers()[0].pid, 1);
  REQUIRE(job.until([&] { return job.store.check({"ddprun/unit/round/0/stop"}); }));
  CHECK(node.launcher.leaderSignals == std::vector<int>{SIGTERM});
  CHECK(node.launcher.signals.empty());
  job.loop.advance(4900ms);  // within the 5 s grace: nothing more
  CHECK(node.launcher.leaderSignals == std::vector<int>{SIGTERM});
  CHECK(node.launcher.signals.empty());
  CHECK_FALSE(node.exitCode.has_value());
  job.loop.advance(200ms);
  CHECK(node.launcher.signals == std::vector<int>{SIGKILL});  // every worker's whole tree
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 1);
}

TEST_CASE("each worker is started on the CPUs planned for its local rank (--numa-binding)",
          "[agent][unit]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 2, /*maxRestarts=*/1);
  config.numaBinding = NumaAffinity::kNode;
  config.workerCpus = {{0, 1, 64}, {2, 3}};
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  REQUIRE(workers.size() == 2);
  CHECK(workers[0].environment.at("LOCAL_RANK") == "0");
  CHECK(workers[0].cpus == std::vector<int>{0, 1, 64});
  CHECK(workers[1].cpus == std::vector<int>{2, 3});
  // Restarted workers keep them: a local rank keeps its GPU.
  node.launcher.exitWith(workers[0].pid, 1);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  const auto restarted = node.workers();
  REQUIRE(restarted.size() == 2);
  CHECK(restarted[0].cpus == std::vector<int>{0, 1, 64});
  CHECK(restarted[1].cpus == std::vector<int>{2, 3});
  node.allExit(0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
}

TEMPLATE_TEST_CASE("a worker that cannot be started is a failure with exit code 127",
                   "[agent][unit]", OverStore, Standalone) {
  TestType client(2, /*maxRestarts=*/1);
  auto& node = client.node;
  SECTION("a program exec cannot run (ENOENT) is the user's: no restart") {
    node.launcher.failingSpawns = {1};
    node.machine.start();
    REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
    CHECK(*node.exitCode == 127);
    CHECK(node.machine.round().history.restarts == 0);
    CHECK(node.machine.ending()->failureClass == FailureClass::kUser);
    CHECK(node.machine.ending()->rootCause->message.find("No such file") != std::string::npos);
    CHECK(exitCode(*node.machine.ending(), ExitCodeScheme::kClasses) == kExitUserError);
  }
  SECTION("a clone that fails with EAGAIN is the machine's: restarted, then 82 with classes") {
    node.launcher.failingSpawns = {1};
    node.launcher.spawnErrno = EAGAIN;
    node.launcher.spawnFailsInExec = false;
    node.machine.start();
    REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
    CHECK(*node.exitCode == 127);
    CHECK(node.machine.round().history.restarts == 1);  // the restart was spent on it too
    CHECK(node.machine.ending()->failureClass == FailureClass::kMachine);
    CHECK(node.machine.ending()->rootCause->startFault->error == EAGAIN);
    CHECK(exitCode(*node.machine.ending(), ExitCodeScheme::kClasses) == kExitMachineFault);
    CHECK(node.machine.snapshot().lastFailureClass == FailureClass::kMachine);
  }
}

TEMPLATE_TEST_CASE("SIGTERM to the agent stops the workers with it and exits 143", "[agent][unit]",
                   OverStore, Standalone) {
  TestType client(2, /*maxRestarts=*/0);
  auto& node = client.node;
  node.machine.start();
  REQUIRE(client.until([&] { return node.runningRound(0); }));
  node.machine.onSignal(SIGTERM);
  REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGTERM);
  // Forwarded to each worker's own process, not SIGKILL first, nor to their process groups.
  CHECK(node.launcher.leaderSignals.front() == SIGTERM);
  CHECK(node.launcher.signals.empty());
  if constexpr (std::is_same_v<TestType, OverStore>) {
    // The others are told this node left (not a failure: no restart is spent on it).
    const auto stop = StopReason::parse(client.job.store.get("ddprun/unit/round/0/stop"));
    REQUIRE(stop);
    CHECK(stop->kind == StopKind::kNodeLeft);
    CHECK(stop->signal == SIGTERM);
    CHECK(stop->groupRank == 0);
  }
}

TEST_CASE(
    "SIGTERM to the agent hosting the store ends the others instead of re-forming without "
    "their store",
    "[agent][unit]") {
  Job job;
  Node& host = job.add(jobConfig(1, 3, 1), "10.0.0.1", /*hostsStore=*/true);
  Node& other = job.add(jobConfig(1, 3, 1), "10.0.0.2");
  Node& third = job.add(jobConfig(1, 3, 1), "10.0.0.3");
  for (Node* node : {&host, &other, &third}) node->machine.start();
  REQUIRE(job.until(
      [&] { return host.runningRound(0) && other.runningRound(0) && third.runningRound(0); }));
  host.machine.onSignal(SIGTERM);
  REQUIRE(job.until([&] { return host.exitCode && other.exitCode && third.exitCode; }));
  CHECK(*host.exitCode == 128 + SIGTERM);
  CHECK(*other.exitCode == 1);
  CHECK(other.machine.ending()->kind == EndKind::kStoreLost);
  CHECK_THAT(other.machine.ending()->message, Catch::Contains("hosting the rendezvous store"));
  CHECK(other.launcher.spawned.size() == 1);  // no restart into a round without a store
  CHECK(third.launcher.spawned.size() == 1);
}

TEMPLATE_TEST_CASE("a second signal kills the workers at once", "[agent][unit]", OverStore,
                   Standalone) {
  TestType client(1, /*maxRestarts=*/0);
  auto& node = client.node;
  node.launcher.obeySignals = false;
  node.machine.start();
  REQUIRE(client.until([&] { return node.runningRound(0); }));
  node.machine.onSignal(SIGINT);
  CHECK(node.launcher.leaderSignals == std::vector<int>{SIGINT});
  CHECK(node.launcher.signals.empty());
  node.machine.onSignal(SIGINT);
  CHECK(node.launcher.signals == std::vector<int>{SIGKILL});
  REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGINT);
}

TEMPLATE_TEST_CASE(
    "a graceful stop: the stop file first, then the signal to each worker's own process, "
    "SIGKILL to every worker's tree only at the deadline",
    "[agent][unit][drain]", OverStore, Standalone) {
  TestType client(2, /*maxRestarts=*/0);
  auto& node = client.node;
  node.launcher.obeySignals = false;  // they take their time saving
  node.machine.start();
  REQUIRE(client.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  // One file for the attempt's workers, not there yet (the fake makes nothing before request()).
  CHECK(workers[0].environment.at("DDPRUN_STOP_FILE") == "/fake/stop-1");
  CHECK(workers[1].environment.at("DDPRUN_STOP_FILE") == "/fake/stop-1");
  CHECK(node.stopRequests.requests.empty());
  const auto signalledAt = client.loop().wallNow();
  node.machine.onSignal(SIGTERM);
  REQUIRE(node.stopRequests.requests.size() == 1);
  CHECK(node.stopRequests.requests[0].path == "/fake/stop-1");
  CHECK(node.stopRequests.requests[0].reason == "SIGTERM");
  CHECK(node.stopRequests.requests[0].deadline == signalledAt + 5s);  // --shutdown-timeout
  CHECK(node.launcher.leaderSignals == std::vector<int>{SIGTERM});
  CHECK(node.launcher.signals.empty());
  client.loop().advance(4999ms);
  CHECK(node.launcher.signals.empty());
  CHECK_FALSE(node.exitCode.has_value());
  client.loop().advance(1ms);
  CHECK(node.launcher.signals == std::vector<int>{SIGKILL});
  REQUIRE(client.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGTERM);
}

TEST_CASE(
    "a restart's workers get a fresh stop file: the last attempt's request stops none of them",
    "[agent][unit][drain]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2, /*maxRestarts=*/1), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  node.launcher.exitWith(node.workers()[1].pid, 3);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  // The peer's stop said why, in the first attempt's file; the new workers have another.
  REQUIRE(node.stopRequests.requests.size() == 1);
  CHECK(node.stopRequests.requests[0].path == "/fake/stop-1");
  CHECK(node.stopRequests.requests[0].reason == "failure");
  for (const auto& worker : node.workers())
    CHECK(worker.environment.at("DDPRUN_STOP_FILE") == "/fake/stop-2");
  node.allExit(0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
}

TEST_CASE(
    "stopping for a signal: what the workers left in their process groups (a wrapper's trainer) "
    "is waited for until the deadline, then killed",
    "[agent][unit][drain]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  // The leaders are wrapper scripts the signal ends; the trainers they started live on.
  node.launcher.leftBehind = {4242, 4243};
  SECTION("they finish in time: the agent ends then, nothing killed") {
    node.machine.onSignal(SIGTERM);
    job.loop.runPosted();  // the leaders' exits
    CHECK_FALSE(node.launcher.anyRunning());
    job.loop.advance(3s);
    CHECK(node.machine.state() == State::kStopping);
    CHECK_FALSE(node.exitCode.has_value());
    node.launcher.leftBehind.clear();
    node.machine.onChildExited();  // their exits come back to the subreaper: SIGCHLD
    REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
    CHECK(*node.exitCode == 128 + SIGTERM);
    CHECK(node.launcher.signals.empty());
  }
  SECTION("they are still there at the deadline: SIGKILL to every tree, and the agent ends") {
    node.machine.onSignal(SIGTERM);
    job.loop.runPosted();
    job.loop.advance(4999ms);
    CHECK(node.launcher.signals.empty());
    CHECK_FALSE(node.exitCode.has_value());
    job.loop.advance(1ms);
    CHECK(node.launcher.signals == std::vector<int>{SIGKILL});
    REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
    CHECK(*node.exitCode == 128 + SIGTERM);
  }
  SECTION("a second signal kills them at once") {
    node.machine.onSignal(SIGTERM);
    job.loop.runPosted();
    CHECK_FALSE(node.exitCode.has_value());
    node.machine.onSignal(SIGTERM);
    CHECK(node.launcher.signals == std::vector<int>{SIGKILL});
    REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
    CHECK(*node.exitCode == 128 + SIGTERM);
  }
}

TEST_CASE(
    "a restart does not wait for what the failed round's workers left behind: the stray sweep "
    "ends it",
    "[agent][unit][drain]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2, /*maxRestarts=*/1), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  node.launcher.leftBehind = {4242};  // a rank's DataLoader workers, say
  const int sweepsBefore = node.launcher.strayKills;
  node.launcher.exitWith(node.workers()[1].pid, 3);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  CHECK(node.launcher.strayKills > sweepsBefore);
  CHECK(node.launcher.leftBehind.empty());
  CHECK(node.launcher.signals.empty());
}

TEST_CASE("a signal while joining ends the agent without starting workers", "[agent][unit]") {
  Job job;
  Node& node = job.add(jobConfig(2, 2, 1), "10.0.0.1");  // waits for a second node
  node.machine.start();
  job.loop.runPosted();
  node.machine.onSignal(SIGTERM);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGTERM);
  CHECK(node.launcher.spawned.empty());
}

TEST_CASE("two nodes form one job: group ranks by address, global ranks follow", "[agent][unit]") {
  Job job;
  Node& b = job.add(jobConfig(2, 2, 2), "10.0.0.2");
  Node& a = job.add(jobConfig(2, 2, 3), "10.0.0.1");
  REQUIRE(job.startTogether());
  CHECK(a.machine.round().groupRank == 0);
  CHECK(b.machine.round().groupRank == 1);
  CHECK(a.workers()[0].environment.at("WORLD_SIZE") == "5");
  CHECK(b.workers()[0].environment.at("RANK") == "3");  // after a's 3 workers
  CHECK(b.workers()[1].environment.at("GROUP_RANK") == "1");
  // Both meet at the store node 0 hosts for the round.
  CHECK(b.workers()[0].environment.at("MASTER_ADDR") == "10.0.0.1");
  CHECK(b.workers()[0].environment.at("MASTER_PORT") ==
        a.workers()[0].environment.at("MASTER_PORT"));
}

TEST_CASE("a failure on one node restarts every node's workers, counted once", "[agent][unit]") {
  Job job;
  Node& a = job.add(jobConfig(2, 2, 1, /*maxRestarts=*/2), "10.0.0.1");
  Node& b = job.add(jobConfig(2, 2, 1, /*maxRestarts=*/2), "10.0.0.2");
  REQUIRE(job.startTogether());
  const pid_t bFirst = b.workers()[0].pid;
  a.launcher.exitWith(a.workers()[0].pid, 1);
  REQUIRE(job.until([&] { return a.runningRound(1) && b.runningRound(1); }));
  CHECK_FALSE(b.launcher.running(bFirst));  // b stopped its healthy worker too
  CHECK(a.machine.round().history.restarts == 1);
  CHECK(b.machine.round().history.restarts == 1);
  CHECK(b.workers()[0].environment.at("TORCHELASTIC_RESTART_COUNT") == "1");
}

TEST_CASE("a lost node re-forms the job without it and spends no restart", "[agent][unit]") {
  Job job;
  Node& a = job.add(jobConfig(1, 2, 1), "10.0.0.1");
  a.machine.start();
  job.add(jobConfig(1, 2, 1), "10.0.0.2").machine.start();
  REQUIRE(job.until([&] { return a.runningRound(0) && job.nodes[1]->runningRound(0); }));
  // Node b's agent vanishes (kill -9): its connections close, and the store writes its notice.
  job.nodes[1]->backend.sever();
  REQUIRE(job.until([&] { return a.runningRound(1); }));
  CHECK(a.machine.round().nodes == 1);
  CHECK(a.machine.round().history.restarts == 0);
  CHECK(a.workers()[0].environment.at("WORLD_SIZE") == "1");
  const auto stop = StopReason::parse(job.store.get("ddprun/unit/round/0/stop"));
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kNodeLost);
  CHECK(stop->groupRank == 1);  // messages name the group rank, not an internal id
}

TEST_CASE("a node that joins a running elastic job re-forms it with the newcomer",
          "[agent][unit]") {
  Job job;
  Node& a = job.add(jobConfig(1, 2, 1), "10.0.0.1");
  a.machine.start();
  // Alone, a waits last_call_timeout for more nodes, then runs with one.
  REQUIRE(job.until([&] {
    job.loop.advance(100ms);
    return a.runningRound(0);
  }));
  CHECK(a.machine.round().nodes == 1);
  Node& b = job.add(jobConfig(1, 2, 1), "10.0.0.2");
  b.machine.start();
  REQUIRE(job.until([&] { return a.runningRound(1) && b.runningRound(1); }));
  CHECK(a.machine.round().nodes == 2);
  CHECK(a.machine.round().history.restarts == 0);
  CHECK(b.workers()[0].environment.at("WORLD_SIZE") == "2");
}

TEST_CASE("exit barrier: a node whose workers are done waits for the others", "[agent][unit]") {
  Job job;
  Node& a = job.add(jobConfig(2, 2, 1), "10.0.0.1");
  Node& b = job.add(jobConfig(2, 2, 1), "10.0.0.2");
  REQUIRE(job.startTogether());
  a.allExit(0);
  REQUIRE(job.until([&] { return a.machine.state() == State::kLocalDone; }));
  CHECK_FALSE(job.until([&] { return a.exitCode.has_value(); }, 300ms));
  b.allExit(0);
  REQUIRE(job.until([&] { return a.exitCode && b.exitCode; }));
  CHECK(*a.exitCode == 0);
  CHECK(*b.exitCode == 0);
}

TEST_CASE("a spare agent of a full job is told the job finished without it, and exits 0",
          "[agent][unit]") {
  Job job;
  Node& a = job.add(jobConfig(2, 2, 1), "10.0.0.1");
  Node& b = job.add(jobConfig(2, 2, 1), "10.0.0.2");
  REQUIRE(job.startTogether());
  LogCapture log;
  Node& spare = job.add(jobConfig(2, 2, 1), "10.0.0.3");
  spare.machine.start();
  REQUIRE(job.until([&] { return log.text().find("waiting for a place") != std::string::npos; }));
  a.allExit(0);
  b.allExit(0);
  REQUIRE(job.until([&] { return a.exitCode && b.exitCode && spare.exitCode; }));
  CHECK(*spare.exitCode == 0);
  CHECK(spare.launcher.spawned.empty());
  CHECK_THAT(log.text(), Catch::Contains("the job finished"));
  CHECK_THAT(log.text(), !Catch::Contains("were lost"));
}

TEST_CASE(
    "a rerun with the same run id on the same store starts afresh, with no talk of lost "
    "nodes",
    "[agent][unit]") {
  Job job;
  for (int run = 0; run < 2; ++run) {
    LogCapture log;
    Node& a = job.add(jobConfig(2, 2, 1), fmt::format("10.0.{}.1", run));
    a.machine.start();
    REQUIRE(job.until([&] { return log.text().find("1 node(s) joined") != std::string::npos; }));
    Node& b = job.add(jobConfig(2, 2, 1), fmt::format("10.0.{}.2", run));
    b.machine.start();
    REQUIRE(job.until([&] {
      return a.machine.state() == State::kRunning && b.machine.state() == State::kRunning;
    }));
    CHECK(a.machine.round().history.restarts == 0);
    a.allExit(0);
    b.allExit(0);
    REQUIRE(job.until([&] { return a.exitCode && b.exitCode; }));
    CHECK(*a.exitCode == 0);
    CHECK_THAT(log.text(), !Catch::Contains("remain"));
  }
}

TEST_CASE("exit barrier: after its timeout a finished node leaves with 0", "[agent][unit]") {
  Job job;
  LaunchConfig config = jobConfig(2, 2, 1);
  config.rdzv.settings.exitBarrierTimeout = 30s;
  Node& a = job.add(config, "10.0.0.1");
  Node& b = job.add(config, "10.0.0.2");
  REQUIRE(job.startTogether());
  a.allExit(0);
  REQUIRE(job.until([&] { return a.machine.state() == State::kLocalDone; }));
  job.loop.advance(29s);
  job.loop.runPosted();
  CHECK_FALSE(a.exitCode.has_value());
  job.loop.advance(2s);
  REQUIRE(job.until([&] { return a.exitCode.has_value(); }));
  CHECK(*a.exitCode == 0);
  CHECK(b.machine.state() == State::kRunning);  // b's workers are left alone
}

TEST_CASE("a round that cannot form within join_timeout fails the agent with 1", "[agent][unit]") {
  Job job;
  LaunchConfig config = jobConfig(2, 2, 1);
  config.rdzv.settings.joinTimeout = 10s;
  Node& a = job.add(config, "10.0.0.1");
  a.machine.start();
  REQUIRE(job.until([&] {
    job.loop.advance(500ms);
    return a.exitCode.has_value();
  }));
  CHECK(*a.exitCode == 1);
  CHECK(a.machine.ending()->kind == EndKind::kRendezvousFailed);
  CHECK(a.machine.ending()->message.find("join_timeout") != std::string::npos);
  CHECK(a.launcher.spawned.empty());
}

TEST_CASE("the stop record: one serialisation, parsed back to the same typed value",
          "[agent][unit]") {
  WorkerFailure failure;
  failure.rank = 3;
  failure.localRank = 1;
  failure.groupRank = 1;
  failure.host = "b";
  failure.exitCode = 9;
  failure.message = "ValueError: boom";
  const auto parsed = StopReason::parse(StopReason::workerFailed(failure, 7).serialize());
  REQUIRE(parsed);
  CHECK(parsed->kind == StopKind::kWorkerFailed);
  CHECK(parsed->node == 7);
  CHECK(parsed->failure->rank == 3);
  CHECK(parsed->failure->message == "ValueError: boom");
  CHECK(parsed->costsRestart());
  CHECK(StopReason::parse(StopReason::nodeLost(2, 1, "b").serialize())->nodeText() == "node 1 (b)");
  CHECK_FALSE(StopReason::parse("{\"kind\":\"done\""));  // not JSON
  CHECK_FALSE(StopReason::parse("{\"kind\":\"exploded\"}"));
  CHECK_FALSE(StopReason::parse("{\"kind\":\"failure\"}"));  // a failure without its worker
  CHECK_THROWS_AS(StopReason::storeLost("x").serialize(), std::logic_error);
  RestartHistory two;
  two.restarts = 2;
  CHECK(historyAfter(two, *StopReason::parse(StopReason::nodeJoined(3, "c").serialize())) == two);
}

TEST_CASE("exit codes are decided in one place", "[agent][unit]") {
  WorkerFailure signalled;
  signalled.signal = SIGKILL;
  WorkerFailure exited;
  exited.exitCode = 5;
  CHECK(exitCode(Ending::succeeded()) == 0);
  CHECK(exitCode(Ending::jobFailed(exited, "")) == 5);
  CHECK(exitCode(Ending::jobFailed(signalled, "")) == 128 + SIGKILL);
  CHECK(exitCode(Ending::signalled(SIGTERM)) == 143);
  CHECK(exitCode(Ending::rendezvousFailed("")) == 1);
  CHECK(exitCode(Ending::storeLost("")) == 1);
  CHECK(exitCode(Ending::badInput("")) == 2);
}

TEST_CASE("a worker missing a module: the summary names the interpreter and PYTHON_EXEC, once",
          "[agent][unit]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 2);
  config.entry.kind = EntryKind::kPythonScript;
  config.entry.python = "/usr/local/bin/python3";
  config.entry.script = "/bin/true";
  Node& node = job.add(config, "10.0.0.1");
  // Only the root cause printed its traceback: the other worker was stopped before it could.
  const std::vector<std::string> traceback{
      "Traceback (most recent call last):", "  File \"train.py\", line 1, in <module>",
      "ModuleNotFoundError: No module named 'torch'"};
  node.output.stderrLines = {{0, traceback}, {1, {}}};
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  ddprun::test::CaptureStderr captured;
  node.launcher.exitWith(node.workers()[0].pid, 1);  // rank 0 first; rank 1 is then stopped
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  const std::string text = captured.text();
  CHECK_THAT(text, Catch::Contains("ddprun: hint: rank 0 failed with \"ModuleNotFoundError: "
                                   "No module named 'torch'\" under /usr/local/bin/python3 "
                                   "(the first python3 on PATH)"));
  CHECK_THAT(text, Catch::Contains("PYTHON_EXEC=/path/to/python"));
  CHECK(text.find("ddprun: hint:") == text.rfind("ddprun: hint:"));
}

TEST_CASE("missingModuleLine: from the root cause's stderr tail or error file message",
          "[agent][unit]") {
  WorkerFailure failure;
  failure.stderrTail = {"x", "ModuleNotFoundError: No module named 'torch'", "more"};
  CHECK(missingModuleLine(failure) == "ModuleNotFoundError: No module named 'torch'");
  failure.stderrTail = {"ValueError: boom"};
  CHECK_FALSE(missingModuleLine(failure));
  failure.message = "ModuleNotFoundError: No module named 'numpy'\nmore";
  CHECK(missingModuleLine(failure) == "ModuleNotFoundError: No module named 'numpy'");
  CHECK(interpreterHint("rank 1 failed with x", {"/usr/bin/python3", true})
            .find("under /usr/bin/python3 (set by PYTHON_EXEC)") != std::string::npos);
}

// --- hangs and unexplained deaths (docs/errors.md, "Hangs") ---

namespace {
LaunchConfig hangConfig(int nproc, int maxRestarts) {
  LaunchConfig config = jobConfig(1, 1, nproc, maxRestarts);
  config.hang.hangTimeout = 30s;
  config.hang.startupTimeout = 600s;
  return config;
}
}  // namespace

TEST_CASE(
    "a worker silent for --hang-timeout after reporting progress: stacks first, then "
    "SIGKILL, and the group restarts",
    "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(hangConfig(2, /*maxRestarts=*/1), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto first = node.workers();
  CHECK(first[0].environment.at("DDPRUN_HEARTBEAT_FILE") == "/fake/heartbeats/0");
  // Both report at once; then rank 0 goes on reporting and rank 1 stops.
  node.heartbeats.reports[0] = node.heartbeats.reports[1] = job.loop.wallNow();
  for (int step = 0; step < 5; ++step) {
    job.loop.advance(10s);
    // Only the first attempt's rank 0 reports: the restart (rendezvous threads) may already have
    // started the next attempt inside advance(), whose rank 0 has not reported yet.
    if (node.runningRound(0)) node.heartbeats.reports[0] = job.loop.wallNow();
  }
  // 50 s since rank 1's report: it was found hung at 30 s, its stacks taken, then killed.
  REQUIRE(node.evidence.requests == std::vector<pid_t>{first[1].pid});
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  REQUIRE_FALSE(node.launcher.processSignals.empty());
  CHECK(node.launcher.processSignals.front() == std::pair<pid_t, int>{first[1].pid, SIGKILL});
  CHECK(node.machine.round().history.restarts == 1);
  // The new attempt is judged afresh: rank 1 has not reported in it, which is no hang yet.
  job.loop.advance(60s);
  CHECK(node.evidence.requests.size() == 1);
  node.allExit(0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
}

TEST_CASE("a hung worker's failure says why it was stopped and where it was",
          "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(hangConfig(2, /*maxRestarts=*/0), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  node.heartbeats.reports[0] = node.heartbeats.reports[1] = job.loop.wallNow();
  ddprun::test::CaptureStderr captured;
  job.loop.advance(31s);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGKILL);
  const WorkerFailure& cause = *node.machine.ending()->rootCause;
  CHECK(cause.hang == HangKind::kNoProgress);
  const std::string text = captured.text();
  CHECK_THAT(text,
             Catch::Contains("hung      : no progress reported for 31.0 s (--hang-timeout 30); "
                             "killed with SIGKILL"));
  CHECK_THAT(text, Catch::Contains(fmt::format("in stuck_in_pid_{}", cause.pid)));
  CHECK_THAT(text, Catch::Contains(fmt::format("stacks_{}.txt", cause.pid)));
}

TEST_CASE(
    "a hung worker whose environment turns PyTorch's Flight Recorder on: its pipe is the "
    "agent's, asked before the kill, and the summary names the dump",
    "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(hangConfig(2, /*maxRestarts=*/0), "10.0.0.1", false,
                       {{"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"}});
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  const std::string attempt = "/tmp/ddprun-agent-machine-test/attempt_0";
  for (int rank : {0, 1}) {
    CHECK(workers[rank].environment.at("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") ==
          "/fake/private/nccl_pipe_rank_");
    CHECK(workers[rank].environment.at("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") ==
          fmt::format("{}/{}/nccl_trace_rank_", attempt, rank));
  }
  node.heartbeats.reports[0] = node.heartbeats.reports[1] = job.loop.wallNow();
  ddprun::test::CaptureStderr captured;
  job.loop.advance(31s);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  REQUIRE(node.evidence.flightRecorders.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const int rank = node.evidence.requests[i] == workers[0].pid ? 0 : 1;
    REQUIRE(node.evidence.flightRecorders[i].has_value());
    CHECK(node.evidence.flightRecorders[i]->pipe ==
          fmt::format("/fake/private/nccl_pipe_rank_{}.pipe", rank));
    CHECK(node.evidence.flightRecorders[i]->dump ==
          fmt::format("{}/{}/nccl_trace_rank_{}", attempt, rank, rank));
  }
  const WorkerFailure& cause = *node.machine.ending()->rootCause;
  CHECK(cause.flightRecorderDump ==
        fmt::format("{}/{}/nccl_trace_rank_{}", attempt, cause.localRank, cause.rank));
  CHECK_THAT(captured.text(), Catch::Contains("fr_dump   : " + cause.flightRecorderDump));
}

TEST_CASE(
    "the user's Flight Recorder pipe is kept and asked through, and without the recorder none is",
    "[agent][unit][hang]") {
  Job job;
  std::map<std::string, std::string> environment;
  SECTION("the user's pipe") {
    environment = {{"TORCH_NCCL_TRACE_BUFFER_SIZE", "10"},
                   {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "/home/me/pipe_"}};
  }
  SECTION("the recorder off") {}
  Node& node = job.add(hangConfig(1, /*maxRestarts=*/0), "10.0.0.1", false, environment);
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  node.heartbeats.reports[0] = job.loop.wallNow();
  job.loop.advance(31s);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  REQUIRE(node.evidence.flightRecorders.size() == 1);
  if (environment.empty()) {
    CHECK_FALSE(workers[0].environment.contains("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"));
    CHECK_FALSE(workers[0].environment.contains("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"));
    CHECK_FALSE(node.evidence.flightRecorders[0].has_value());
  } else {
    CHECK(workers[0].environment.at("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == "/home/me/pipe_");
    REQUIRE(node.evidence.flightRecorders[0].has_value());
    CHECK(node.evidence.flightRecorders[0]->pipe == "/home/me/pipe_0.pipe");
  }
}

TEST_CASE(
    "a --fail-pattern line: the worker's stacks, then SIGKILL, and the job stops, the user's "
    "failure, whatever restarts are left",
    "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(hangConfig(2, /*maxRestarts=*/3), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  ddprun::test::CaptureStderr captured;
  node.machine.onFailLine(1,
                          "wrote a line matching --fail-pattern 'loss nan': \"step 3 loss nan\"");
  CHECK(node.evidence.requests == std::vector<pid_t>{workers[1].pid});
  // Being stopped as failed, not hung: the snapshot says so and /healthz's rule stays healthy.
  const AgentSnapshot failing = node.machine.snapshot();
  CHECK(failing.workers[1].state == WorkerState::kFailed);
  CHECK(healthy(failing));
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(node.launcher.processSignals.front() == std::pair<pid_t, int>{workers[1].pid, SIGKILL});
  CHECK(node.machine.round().history.restarts == 0);
  CHECK(node.machine.ending()->failureClass == FailureClass::kUser);
  const WorkerFailure& cause = *node.machine.ending()->rootCause;
  CHECK(cause.hang == HangKind::kFailPattern);
  CHECK(cause.localRank == 1);
  const std::string text = captured.text();
  CHECK_THAT(text, Catch::Contains("failed    : wrote a line matching --fail-pattern 'loss nan': "
                                   "\"step 3 loss nan\"; killed with SIGKILL"));
  CHECK_THAT(text, Catch::Contains("user failure: a worker wrote a line matching --fail-pattern"));
  // A line of a worker that is gone, or of a rank that does not exist, changes nothing.
  node.machine.onFailLine(7, "x");
}

TEST_CASE(
    "ranks hung together are all recorded before any is killed: the first death would "
    "restart the group and stop the others unrecorded",
    "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(hangConfig(2, /*maxRestarts=*/1), "10.0.0.1");
  node.evidence.hold = true;
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  node.heartbeats.reports[0] = node.heartbeats.reports[1] = job.loop.wallNow();
  job.loop.advance(31s);
  REQUIRE(job.until([&] { return node.evidence.held.size() == 2; }));
  node.evidence.held[0]();  // rank 0's stacks are in, rank 1's are not: nobody is signalled yet
  job.loop.runPosted();
  CHECK(node.launcher.processSignals.empty());
  node.evidence.held[1]();
  job.loop.runPosted();
  REQUIRE(node.launcher.processSignals.size() == 2);
  CHECK(node.launcher.processSignals[0] == std::make_pair(workers[0].pid, SIGKILL));
  CHECK(node.launcher.processSignals[1] == std::make_pair(workers[1].pid, SIGKILL));
  REQUIRE(job.until([&] {
    return node.machine.state() == State::kRunning && node.machine.round().history.restarts == 1;
  }));
}

TEST_CASE("a worker that never reports is hung after --hang-startup-timeout, not before",
          "[agent][unit][hang]") {
  Job job;
  LaunchConfig config = hangConfig(1, 0);
  config.hang.startupTimeout = 120s;
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  job.loop.advance(119s);
  CHECK(node.evidence.requests.empty());
  job.loop.advance(1s);
  REQUIRE(node.evidence.requests.size() == 1);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(node.machine.ending()->rootCause->hang == HangKind::kNoFirstProgress);
}

TEST_CASE("without --hang-timeout a silent worker is never hung", "[agent][unit][hang]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 1);
  // The clock jumps a day with no renewal in between: a liveness timeout longer than that keeps
  // the fence (liveness, not hangs) out of this test.
  config.rdzv.settings.keepAliveMaxAttempts = 200000;
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  job.loop.advance(std::chrono::hours(24));
  CHECK(node.evidence.requests.empty());
  CHECK(node.machine.state() == State::kRunning);
}

TEST_CASE(
    "a straggler still running --exit-timeout after a peer exited 0 is hung at exit: no "
    "restart, whatever the budget",
    "[agent][unit][hang]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 3, /*maxRestarts=*/3);
  config.hang.exitTimeout = 60s;
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  // A rank that finishes its checkpoint within the allowance is no straggler.
  node.launcher.exitWith(workers[0].pid, 0);
  job.until([] { return true; });
  job.loop.advance(50s);
  node.launcher.exitWith(workers[1].pid, 0);
  job.until([] { return true; });
  CHECK(node.evidence.requests.empty());
  job.loop.advance(10s);
  REQUIRE(node.evidence.requests == std::vector<pid_t>{workers[2].pid});
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGKILL);
  CHECK(node.machine.ending()->rootCause->hang == HangKind::kAtExit);
  CHECK(node.launcher.spawned.size() == 3);  // no restart
}

TEST_CASE(
    "a straggler that works (rank 0's evaluation after its peers exited 0) outlives "
    "--exit-timeout, and the job exits 0",
    "[agent][unit][hang]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 3, /*maxRestarts=*/3);
  config.hang.exitTimeout = 60s;
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  node.launcher.exitWith(workers[1].pid, 0);
  node.launcher.exitWith(workers[2].pid, 0);
  job.until([] { return true; });
  // Rank 0 evaluates for five exit timeouts, at half a core, through a child of its own.
  for (int second = 0; second < 300; ++second) {
    node.activity.cpu[workers[0].pid] += 500ms;
    job.loop.advance(1s);
  }
  CHECK(node.evidence.requests.empty());
  node.launcher.exitWith(workers[0].pid, 0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
}

TEST_CASE(
    "Ctrl-Z stops every worker and every timeout of the agent, fg continues the workers, and "
    "the stopped time counts for no timeout",
    "[agent][unit][hang][job_control]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 3);
  config.hang.exitTimeout = 60s;
  config.hang.hangTimeout = 30s;
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  // Rank 1 reports progress, rank 2 exits 0, rank 0 waits quietly for something.
  node.heartbeats.reports[0] = node.heartbeats.reports[1] = job.loop.wallNow();
  node.launcher.exitWith(workers[2].pid, 0);
  job.until([] { return true; });
  job.loop.advance(20s);
  node.heartbeats.reports[1] = job.loop.wallNow();
  const double now = std::chrono::duration<double>(job.loop.wallNow().time_since_epoch()).count();
  node.machine.onFileTimerLine(fmt::format(
      R"({{"version": 1, "pid": {}, "scope_id": "step", "expiration_time": {}, "signal": 9}})",
      workers[1].pid, now + 5));

  node.machine.onSuspend(SIGTSTP);
  CHECK(node.machine.suspended());
  CHECK(node.launcher.signals == std::vector<int>{SIGSTOP});
  CHECK(node.launcher.stopped);
  // Stopped for ten minutes, ten exit timeouts (within the in-process store's hold lifetime,
  // which ages on this manual clock): nothing is hung.
  job.loop.advance(std::chrono::minutes(10));
  CHECK(node.evidence.requests.empty());
  CHECK(node.machine.state() == State::kRunning);

  node.machine.onResume();
  CHECK_FALSE(node.machine.suspended());
  CHECK(node.launcher.signals == std::vector<int>{SIGSTOP, SIGCONT});
  CHECK_FALSE(node.launcher.stopped);
  node.machine.onResume();  // a second SIGCONT (the shell's, after the agent continued): nothing
  CHECK(node.launcher.signals.size() == 2);
  // Rank 1's FileTimer had 5 s left when the job stopped: it has them again.
  job.loop.advance(4999ms);
  CHECK(node.evidence.requests.empty());
  job.loop.advance(1ms);
  REQUIRE(node.evidence.requests == std::vector<pid_t>{workers[1].pid});
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(node.machine.ending()->rootCause->hang == HangKind::kFileTimer);
}

TEST_CASE(
    "Ctrl-Z while the workers are being stopped: the shutdown grace waits for the job to "
    "continue",
    "[agent][unit][job_control]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  node.launcher.obeySignals = false;  // the workers take their time over SIGTERM
  node.machine.onSignal(SIGTERM);
  job.loop.advance(2s);
  node.machine.onSuspend(SIGTSTP);
  job.loop.advance(60s);
  CHECK(std::count(node.launcher.signals.begin(), node.launcher.signals.end(), SIGKILL) == 0);
  node.machine.onResume();
  job.loop.advance(2999ms);  // 5 s of grace: 2 before the stop, 3 after
  CHECK(std::count(node.launcher.signals.begin(), node.launcher.signals.end(), SIGKILL) == 0);
  job.loop.advance(1ms);
  CHECK(std::count(node.launcher.signals.begin(), node.launcher.signals.end(), SIGKILL) == 1);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 128 + SIGTERM);
}

TEST_CASE("a FileTimer that expires: the worker's stacks, then the signal it asked for",
          "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2, /*maxRestarts=*/1), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  const double now = std::chrono::duration<double>(job.loop.wallNow().time_since_epoch()).count();
  node.machine.onFileTimerLine(fmt::format(
      R"({{"version": 1, "pid": {}, "scope_id": "step", "expiration_time": {}, "signal": 9}})",
      workers[0].pid, now + 2));
  node.machine.onFileTimerLine(fmt::format(
      R"({{"version": 1, "pid": {}, "scope_id": "step", "expiration_time": {}, "signal": 15}})",
      workers[1].pid, now + 1));
  // Rank 1 releases its timer in time; rank 0 does not.
  node.machine.onFileTimerLine(fmt::format(
      R"({{"version": 1, "pid": {}, "scope_id": "step", "expiration_time": -1, "signal": 0}})",
      workers[1].pid));
  job.loop.advance(1999ms);
  CHECK(node.evidence.requests.empty());
  job.loop.advance(1ms);
  REQUIRE(node.evidence.requests == std::vector<pid_t>{workers[0].pid});
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  CHECK(node.launcher.processSignals.front() == std::pair<pid_t, int>{workers[0].pid, SIGKILL});
  node.allExit(0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
}

TEST_CASE("a SIGKILL the agent did not send, with the OOM killer's trace, is named out of memory",
          "[agent][unit][oom]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  node.oom.oomKilled.insert(workers[1].pid);
  ddprun::test::CaptureStderr captured;
  node.launcher.dieOf(workers[1].pid, SIGKILL);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(node.machine.ending()->rootCause->oom == "killed by the kernel's OOM killer (test)");
  CHECK_THAT(captured.text(),
             Catch::Contains("oom       : killed by the kernel's OOM killer (test)"));
  CHECK(node.oom.attempts == 1);
}

TEST_CASE(
    "the summary quotes a failed rank's stderr, and identical tracebacks once with their ranks",
    "[agent][unit]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 3), "10.0.0.1");
  const std::vector<std::string> boom{
      "Traceback (most recent call last):", "  File \"train.py\", line 3, in <module>",
      "RuntimeError: boom"};
  node.output.stderrLines = {{0, boom}, {1, boom}, {2, boom}};
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  node.allExit(1);
  ddprun::test::CaptureStderr captured;
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  const std::string text = captured.text();
  CHECK_THAT(text, Catch::Contains("RuntimeError: boom"));
  CHECK_THAT(text, Catch::Contains("(the same stderr lines from ranks 0, 1, 2)"));
  CHECK_THAT(text, Catch::Contains("stderr    : the same as rank 0's"));
  // Printed once, not three times.
  CHECK(text.find("RuntimeError: boom") == text.rfind("RuntimeError: boom"));
}

TEST_CASE(
    "event log on the console: a JSON line per worker start, exit and restart, with "
    "torchrun's names",
    "[agent][unit]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2, /*maxRestarts=*/1), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  node.launcher.exitWith(node.workers()[1].pid, 3);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  node.allExit(0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  std::vector<std::string> names;
  for (const std::string& line : node.events) {
    const auto event = nlohmann::json::parse(line);
    names.push_back(event.at("name").get<std::string>() + ":" +
                    event.at("metadata").value("global_rank", nlohmann::json(-1)).dump());
    CHECK(event.at("metadata").at("run_id") == "unit");
  }
  CHECK(names == std::vector<std::string>{
                     "torchelastic.worker.status.HEALTHY:0", "torchelastic.worker.status.HEALTHY:1",
                     "torchelastic.worker.status.FAILED:1", "ddprun.worker_group.restart:null",
                     "torchelastic.worker.status.HEALTHY:0", "torchelastic.worker.status.HEALTHY:1",
                     "torchelastic.worker.status.SUCCEEDED:0",
                     "torchelastic.worker.status.SUCCEEDED:1", "ddprun.incident:null"});
}

TEST_CASE("an incident's record: failed, detected, decided, running and first progress, in order",
          "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(hangConfig(2, /*maxRestarts=*/2), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto failedAt = job.loop.wallNow();
  node.heartbeats.reports[0] = node.heartbeats.reports[1] = failedAt;
  // Rank 1 goes silent: found hung at its last report + 31 s, killed, the job restarts.
  job.loop.advance(31s);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  job.loop.advance(2s);
  node.heartbeats.reports[0] = job.loop.wallNow();  // the first progress after the restart
  job.loop.advance(300ms);                          // the next look sees it
  const AgentSnapshot snapshot = node.machine.snapshot();
  REQUIRE(snapshot.incidents.size() == 1);
  const Incident& incident = snapshot.incidents[0];
  CHECK(incident.kind == IncidentKind::kHang);
  CHECK(incident.round == 0);
  CHECK(incident.failureClass == FailureClass::kWorker);
  CHECK(incident.outcome == IncidentOutcome::kRestarted);
  CHECK(incident.closed);
  const double failed = std::chrono::duration<double>(failedAt.time_since_epoch()).count();
  CHECK(incident.failedAt == Approx(failed));  // the last report: when the silence began
  CHECK(incident.detectedAt - incident.failedAt >= 30.0);
  REQUIRE(incident.decidedAt);
  REQUIRE(incident.runningAt);
  REQUIRE(incident.progressAt);
  CHECK(incident.failedAt <= incident.detectedAt);
  CHECK(incident.detectedAt <= *incident.decidedAt);
  CHECK(*incident.decidedAt <= *incident.runningAt);
  CHECK(*incident.runningAt < *incident.progressAt);
  CHECK(*incident.lostSeconds() == Approx(*incident.progressAt - failed));
  const JobMetrics& metrics = node.machine.metrics();
  CHECK(metrics.restarts.at(FailureClass::kWorker) == 1);
  CHECK(metrics.incidents.at({IncidentKind::kHang, FailureClass::kWorker}) == 1);
  CHECK(metrics.progress.count() == 1);
  CHECK(metrics.lost.count() == 1);
  CHECK(metrics.roundsFormed == 2);
  // The event carries the same record.
  const auto event = std::find_if(node.events.begin(), node.events.end(), [](const auto& line) {
    return line.find("ddprun.incident") != std::string::npos;
  });
  REQUIRE(event != node.events.end());
  const Incident told = incidentFromJson(nlohmann::json::parse(
      nlohmann::json::parse(*event).at("metadata").at("metadata").get<std::string>()));
  CHECK(told.kind == incident.kind);
  CHECK(told.rank == incident.rank);
  CHECK(told.progressAt == incident.progressAt);
}

// --- what is read from the store is checked (anyone who reaches the store can write it) ---

TEST_CASE(
    "a round's members are checked before any worker starts: forged, duplicated or "
    "rewritten node records are refused",
    "[agent][unit][store-records]") {
  NodeInfo self{
      .id = 2, .address = "10.0.0.2", .hostname = "b", .nproc = 2, .pid = 42, .staticRank = -1};
  NodeInfo other{
      .id = 1, .address = "10.0.0.1", .hostname = "a", .nproc = 2, .pid = 41, .staticRank = -1};
  CHECK_FALSE(roundMembersProblem({1, 2}, {other, self}, self, 2).has_value());
  // A record stored under one id that names another (a fake node taking a real one's place).
  NodeInfo impostor = other;
  impostor.id = 7;
  CHECK_THAT(*roundMembersProblem({1, 2}, {impostor, self}, self, 2),
             Catch::Contains("the record of node 1 says it is node 7"));
  CHECK_THAT(*roundMembersProblem({2, 2}, {self, self}, self, 2),
             Catch::Contains("a member twice"));
  // This node's own record rewritten (nproc 2 -> 1: a silently wrong world).
  NodeInfo rewritten = self;
  rewritten.nproc = 1;
  CHECK_THAT(*roundMembersProblem({1, 2}, {other, rewritten}, self, 2),
             Catch::Contains("own record (node 2) is not what it wrote"));
  NodeInfo greedy = other;
  greedy.nproc = kMaxNprocPerNode + 1;
  CHECK_THAT(*roundMembersProblem({1, 2}, {greedy, self}, self, 2),
             Catch::Contains("claims 65537 workers"));
  CHECK_THAT(*roundMembersProblem({1}, {other}, self, 2), Catch::Contains("not among the members"));
  CHECK_THAT(*roundMembersProblem({1, 2}, {other, self}, self, 1),
             Catch::Contains("allows 1 to 1"));
}

TEST_CASE("the round's worker store must be host:port on group rank 0's address",
          "[agent][unit][store-records]") {
  CHECK_FALSE(masterProblem("10.0.0.1:29500", "10.0.0.1").has_value());
  CHECK_FALSE(masterProblem("node0:29500", "").has_value());  // static: the --master-addr given
  CHECK_THAT(*masterProblem("6.6.6.6:29500", "10.0.0.1"),
             Catch::Contains("not on group rank 0's address"));
  CHECK_THAT(*masterProblem("10.0.0.1:0", "10.0.0.1"), Catch::Contains("no port in 1..65535"));
  CHECK_THAT(*masterProblem("10.0.0.1:http", "10.0.0.1"), Catch::Contains("no port"));
  CHECK_THAT(*masterProblem("10.0.0.1", "10.0.0.1"), Catch::Contains("is not host:port"));
}

TEST_CASE("a forged member slot ends the join with a clear error, not a crash",
          "[agent][unit][store-records]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 1), "10.0.0.1");
  // Before the agent joins, an outsider writes round 0's first member slot.
  auto outsider = job.store.connect();
  outsider->set("ddprun/unit/round/0/joined", "1");
  outsider->set("ddprun/unit/round/0/member/1", "not-a-node");
  ddprun::test::CaptureStderr captured;
  node.machine.start();
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 1);
  CHECK_THAT(captured.text(), Catch::Contains("holds \"not-a-node\", not a node id"));
}

// --- outside bytes in the log (docs/security.md, "On the node") ---

namespace {

// A whole line in the agent's log format, then what would retitle and clear the terminal: what
// whoever writes the store (anyone, without a token) puts in a host name or a text.
const std::string kForgedLine =
    "[2026-01-01 00:00:00.000] [ddprun] [info] every worker of every node exited 0";
const std::string kForged = "node-z\n" + kForgedLine + "\x1b]0;owned\x07\x1b[2J";
// kForged as the log shows it.
const std::string kForgedEscaped = "node-z\\n" + kForgedLine + "\\x1b]0;owned\\x07\\x1b[2J";

// No line of `text` starts with the forged one, and no byte in it is one a terminal acts on.
void checkNotForged(const std::string& text) {
  CHECK(std::none_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return c != '\n' && (byte < 0x20 || byte == 0x7f);
  }));
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    CHECK_FALSE(text.substr(start, end - start).starts_with(kForgedLine));
    start = end + 1;
  }
}

// The line of `text` that holds `marker` ("" when none).
std::string lineWith(const std::string& text, const std::string& marker) {
  const std::size_t at = text.find(marker);
  if (at == std::string::npos) return "";
  const std::size_t start = text.rfind('\n', at);
  const std::size_t begin = start == std::string::npos ? 0 : start + 1;
  return text.substr(begin, std::min(text.find('\n', at), text.size()) - begin);
}

}  // namespace

TEST_CASE("forged stop records reach the log and the last error line escaped, one line each",
          "[agent][unit][store-records]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 1, /*maxRestarts=*/1), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  auto outsider = job.store.connect();
  LogCapture log;
  ddprun::test::CaptureStderr captured;

  // Round 0: a node that never was "leaves" (a re-form, no restart spent).
  outsider->compareSet("ddprun/unit/round/0/stop", "",
                       StopReason::nodeLeft(99, 0, kForged, SIGTERM).serialize());
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  // Rounds 1 and 2: forged failures spend the restart, then fail the job with the forged code.
  WorkerFailure forged;
  forged.rank = 0;
  forged.groupRank = 0;
  forged.host = kForged;
  forged.exitCode = 42;
  forged.message = "boom\n" + kForged;
  forged.hang = HangKind::kFileTimer;
  forged.hangDetail = kForged;
  forged.oom = kForged;
  outsider->compareSet("ddprun/unit/round/1/stop", "",
                       StopReason::workerFailed(forged, 99).serialize());
  REQUIRE(job.until([&] { return node.runningRound(2); }));
  outsider->compareSet("ddprun/unit/round/2/stop", "",
                       StopReason::workerFailed(forged, 99).serialize());
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 42);  // what the attack makes of a job without a token

  const std::string logged = log.text();
  INFO(logged);
  CHECK_THAT(lineWith(logged, "left the job"),
             Catch::Contains("node 0 (" + kForgedEscaped + ") left the job"));
  CHECK_THAT(lineWith(logged, "restarting the job"),
             Catch::Contains("after rank 0 on " + kForgedEscaped + " failed: exitcode 42"));
  checkNotForged(logged);

  const std::string printed = captured.text();
  INFO(printed);
  CHECK_THAT(lineWith(printed, "ddprun: error: the job failed"),
             Catch::Contains("rank 0 on " + kForgedEscaped + ": hung: " + kForgedEscaped + "; " +
                             kForgedEscaped));
  CHECK_THAT(printed, Catch::Contains("  host      : " + kForgedEscaped + "\n"));
  // The summary keeps the message's lines (torchrun's layout), indented under its entry.
  CHECK_THAT(printed,
             Catch::Contains("  traceback : boom\n  node-z\n  " + kForgedLine + "\\x1b]0;owned"));
  checkNotForged(printed);
}

TEST_CASE("a forged round record's value is quoted escaped in the one-line error",
          "[agent][unit][store-records]") {
  CHECK(*masterProblem(kForged + ":1", "10.0.0.1") ==
        "\"" + kForgedEscaped + ":1\" is not on group rank 0's address 10.0.0.1");
  CHECK(*masterProblem("10.0.0.1:1", kForged) ==
        "\"10.0.0.1:1\" is not on group rank 0's address " + kForgedEscaped);
  // A long value is cut: the log holds a bounded part of whatever was written.
  const std::string longValue(100000, 'x');
  CHECK(masterProblem(longValue, "")->size() < 300);
  Job job;
  Node& node = job.add(jobConfig(1, 1, 1), "10.0.0.1");
  auto outsider = job.store.connect();
  outsider->set("ddprun/unit/round/0/joined", "1");
  outsider->set("ddprun/unit/round/0/member/1", kForged);
  ddprun::test::CaptureStderr captured;
  node.machine.start();
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 1);
  CHECK_THAT(captured.text(), Catch::Contains("holds \"" + kForgedEscaped + "\", not a node id"));
  checkNotForged(captured.text());
}

TEST_CASE(
    "a FileTimer naming a process outside the job's workers is refused: no signal, and "
    "one line for many refusals",
    "[agent][unit][hang]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2), "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  const auto workers = node.workers();
  const pid_t child = 5000;  // a process worker 0 started (torch's client names the asking process)
  node.launcher.descendants.insert(child);
  auto request = [&](pid_t pid, const std::string& scope, double in, int signal) {
    const double now = std::chrono::duration<double>(job.loop.wallNow().time_since_epoch()).count();
    node.machine.onFileTimerLine(fmt::format(
        R"({{"version": 1, "pid": {}, "scope_id": "{}", "expiration_time": {}, "signal": {}}})",
        pid, scope, now + in, signal));
  };
  LogCapture log;
  // Another user's process, the agent's own pid (any pid the worker likes), and the worker's child.
  request(4242, R"(s\u001b]0;owned\u0007\n[x)", 1, SIGKILL);
  request(4343, "agent", 1, SIGKILL);
  request(child, "child", 1, SIGTERM);
  job.loop.advance(1s);
  job.until([] { return true; });
  CHECK(node.launcher.processSignals == std::vector<std::pair<pid_t, int>>{{child, SIGTERM}});
  CHECK(node.machine.state() == State::kRunning);
  CHECK(node.evidence.requests.empty());
  std::string logged = log.text();
  INFO(logged);
  // The first refusal in full, its scope id escaped; the second only counted.
  CHECK_THAT(lineWith(logged, "not sending"),
             Catch::Contains(
                 "not sending SIGKILL to pid 4242: FileTimer \"s\\x1b]0;owned\\x07\\n[x\" names a "
                 "process that is neither a worker of this agent nor a descendant of one"));
  CHECK(logged.find("4343") == std::string::npos);
  CHECK_THAT(lineWith(logged, "process 5000"), Catch::Contains("sending it SIGTERM"));
  checkNotForged(logged);

  // A worker that keeps asking: counted, one line per minute at most.
  for (pid_t pid = 6000; pid < 6050; ++pid) request(pid, "flood", 1, SIGKILL);
  job.loop.advance(1s);
  job.until([] { return true; });
  CHECK(log.text() == logged);
  job.loop.advance(60s);
  job.until([] { return true; });
  const std::string counted = log.text().substr(logged.size());
  CHECK(std::count(counted.begin(), counted.end(), '\n') == 1);
  CHECK_THAT(counted,
             Catch::Contains(
                 "refused 51 more FileTimer signal(s) to processes outside this "
                 "agent's workers (pids 4343, 6000, 6001, 6002, 6003, 6004, 6005, 6006, ...)"));
  CHECK(node.launcher.processSignals.size() == 1);

  // The worker's own timer still works: the stacks, then the signal.
  request(workers[1].pid, "own", 1, SIGKILL);
  job.loop.advance(1s);
  REQUIRE(node.evidence.requests == std::vector<pid_t>{workers[1].pid});
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(node.machine.ending()->rootCause->hang == HangKind::kFileTimer);
}

TEST_CASE(
    "a node cut off from the store fences its workers at the fencing interval after its "
    "last acknowledged renewal, then rejoins as a new member, spending no restart, elastic or "
    "not",
    "[agent][unit][fencing]") {
  Job job;
  // 1:2 is elastic; 1:1 takes the node back as it would take a replacement.
  const int maxNodes = GENERATE(2, 1);
  const LaunchConfig config = jobConfig(1, maxNodes, 1);
  const auto fence = config.rdzv.settings.fencingInterval();
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  // Alone below MAX, round 0 closes after last_call_timeout: the clock moves on meanwhile.
  REQUIRE(job.until([&] {
    job.loop.advance(100ms);
    return node.runningRound(0);
  }));
  const std::int64_t firstId = node.driver.nodeId();
  const pid_t worker = node.workers()[0].pid;

  // The network to the store goes: renewals wait on it from now on.
  node.backend.silence();
  std::this_thread::sleep_for(50ms);
  const auto acknowledged = node.driver.livenessAcknowledgedAt();
  REQUIRE(acknowledged);
  // One moment before the fencing interval has passed since that send: the workers run.
  job.loop.advance(std::chrono::duration_cast<std::chrono::milliseconds>(*acknowledged + fence -
                                                                         job.loop.now()) -
                   1ms);
  CHECK(node.launcher.running(worker));
  CHECK(node.machine.state() == State::kRunning);
  // At it: killed at once (no grace), and the round is fenced off.
  job.loop.advance(1ms);
  REQUIRE(job.until([&] { return !node.launcher.running(worker); }));
  CHECK(node.launcher.signals.back() == SIGKILL);
  CHECK(std::count(node.launcher.signals.begin(), node.launcher.signals.end(), SIGTERM) == 0);
  CHECK(node.launcher.leaderSignals.empty());

  // The network heals: the renewal that waited is acknowledged, late, and changes nothing; the
  // node comes back as a new member in a new round, with no restart spent.
  node.backend.heal();
  REQUIRE(job.until(
      [&] { return node.machine.state() == State::kRunning && node.machine.round().number >= 1; }));
  CHECK(node.driver.nodeId() != firstId);
  CHECK(node.machine.round().history.restarts == 0);
  CHECK(node.workers()[0].environment.at("WORLD_SIZE") == "1");
  const auto stop = StopReason::parse(job.store.get("ddprun/unit/round/0/stop"));
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kNodeLost);  // the old member, as the store reported it
  CHECK(stop->node == firstId);
  node.allExit(0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 0);
}

TEST_CASE("a renewal acknowledged in time keeps the workers running past the fencing interval",
          "[agent][unit][fencing]") {
  Job job;
  LaunchConfig config = jobConfig(1, 2, 1);
  config.rdzv.settings.keepAliveInterval = 20ms;    // renewals every 20 ms of real time
  config.rdzv.settings.keepAliveMaxAttempts = 250;  // T = 5 s of the manual clock, F = 4.5 s
  Node& node = job.add(config, "10.0.0.1");
  node.machine.start();
  REQUIRE(job.until([&] {
    job.loop.advance(100ms);  // last_call_timeout passes: round 0 closes with this node alone
    return node.runningRound(0);
  }));
  const auto fence = config.rdzv.settings.fencingInterval();
  // Time moves on in steps under the fence, and each time the heartbeat renews (real time).
  for (int step = 0; step < 3; ++step) {
    const auto before = node.driver.livenessAcknowledgedAt();
    job.loop.advance(fence - 1s);
    REQUIRE(job.until([&] { return node.driver.livenessAcknowledgedAt() != before; }, 5s));
  }
  CHECK(node.runningRound(0));
  CHECK(node.launcher.signals.empty());
  CHECK(node.launcher.leaderSignals.empty());
}

TEST_CASE("the snapshot says what the agent is doing: round, restarts, workers, the last failure",
          "[agent][unit]") {
  Job job;
  Node& node = job.add(jobConfig(1, 1, 2, /*maxRestarts=*/1), "10.0.0.1");
  CHECK(node.machine.snapshot().round == -1);  // nothing formed yet
  node.machine.start();
  REQUIRE(job.until([&] { return node.runningRound(0); }));
  AgentSnapshot running = node.machine.snapshot();
  CHECK(running.phase == AgentPhase::kRunning);
  CHECK(running.round == node.machine.round().number);
  CHECK(running.restarts == 0);
  CHECK(running.maxRestarts == 1);
  CHECK(running.nodes == 1);
  CHECK(running.groupRank == 0);
  REQUIRE(running.workers.size() == 2);
  CHECK(running.workers[1].rank == 1);
  CHECK(running.workers[1].pid == node.workers()[1].pid);
  CHECK(running.workers[1].state == WorkerState::kRunning);
  CHECK_FALSE(running.lastFailure);
  CHECK(healthy(running));

  node.launcher.exitWith(node.workers()[1].pid, 3);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  const AgentSnapshot restarted = node.machine.snapshot();
  CHECK(restarted.restarts == 1);
  REQUIRE(restarted.lastFailure);
  CHECK(restarted.lastFailure->rank == 1);
  CHECK(restarted.lastFailure->exitCode == 3);
  CHECK(restarted.workers[0].state == WorkerState::kRunning);

  node.allExit(0);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  const AgentSnapshot ended = node.machine.snapshot();
  CHECK(ended.phase == AgentPhase::kFinished);
  CHECK(ended.workers[0].state == WorkerState::kSucceeded);
  CHECK(*ended.workers[0].exitCode == 0);
  CHECK_FALSE(healthy(ended));
}

namespace {

LaunchConfig backoffConfig(int minNodes, int maxNodes) {
  LaunchConfig config = jobConfig(minNodes, maxNodes, 1, /*maxRestarts=*/3);
  config.restart.backoffInitial = 10s;
  config.restart.backoffCap = 60s;
  return config;
}

}  // namespace

TEST_CASE("a restart waits its back-off on every node, and no node joins before it ends",
          "[agent][unit]") {
  Job job;
  Node& a = job.add(backoffConfig(2, 2), "10.0.0.1");
  Node& b = job.add(backoffConfig(2, 2), "10.0.0.2");
  REQUIRE(job.startTogether());
  a.launcher.exitWith(a.workers()[0].pid, 3);
  REQUIRE(
      job.until([&] { return a.machine.snapshot().restartAt && b.machine.snapshot().restartAt; }));
  // No progress before the first failure: n = 1, the wait is INITIAL.
  CHECK(*a.machine.snapshot().restartAt == Approx(a.machine.snapshot().updatedAt + 10));
  job.loop.advance(9900ms);
  job.loop.runPosted();
  CHECK_FALSE(job.store.check({"ddprun/unit/round/1/joined"}));
  CHECK(a.launcher.spawned.size() == 1);
  CHECK(b.launcher.spawned.size() == 1);
  job.loop.advance(200ms);
  REQUIRE(job.until([&] { return a.runningRound(1) && b.runningRound(1); }));
  CHECK_FALSE(a.machine.snapshot().restartAt);
  // A second failure in a row without progress (another exit code: not the same root cause)
  // waits twice as long.
  b.launcher.exitWith(b.workers()[0].pid, 4);
  // Both nodes must have started their wait before the clock moves, or one waits from later.
  REQUIRE(
      job.until([&] { return a.machine.snapshot().restartAt && b.machine.snapshot().restartAt; }));
  CHECK(*a.machine.snapshot().restartAt == Approx(a.machine.snapshot().updatedAt + 20));
  CHECK(a.machine.snapshot().lastFailureClass == FailureClass::kWorker);
  job.loop.advance(19900ms);
  job.loop.runPosted();
  CHECK_FALSE(job.store.check({"ddprun/unit/round/2/joined"}));
  job.loop.advance(200ms);
  REQUIRE(job.until([&] { return a.runningRound(2) && b.runningRound(2); }));
  // The restart event says the class and the wait.
  const auto restart = std::find_if(a.events.rbegin(), a.events.rend(), [](const std::string& e) {
    return e.find("ddprun.worker_group.restart") != std::string::npos;
  });
  REQUIRE(restart != a.events.rend());
  const auto metadata = nlohmann::json::parse(
      nlohmann::json::parse(*restart)["metadata"]["metadata"].get<std::string>());
  CHECK(metadata["failure_class"] == "worker");
  CHECK(metadata["backoff_s"] == 20.0);
  CHECK(metadata["progress"] == false);
}

TEST_CASE("progress before a failure (a heartbeat) makes the back-off INITIAL again",
          "[agent][unit]") {
  Job job;
  Node& node = job.add(backoffConfig(1, 1), "10.0.0.1");
  REQUIRE(job.startTogether());
  node.heartbeats.reports[0] = job.loop.wallNow();
  node.launcher.exitWith(node.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return node.machine.snapshot().restartAt.has_value(); }));
  CHECK(*node.machine.snapshot().restartAt == Approx(node.machine.snapshot().updatedAt + 10));
  const auto stop = StopReason::parse(job.store.get("ddprun/unit/round/0/stop"));
  REQUIRE(stop);
  CHECK(stop->failure->progress);  // the evidence travels in the stop record
}

TEST_CASE("a signal during the back-off ends the agent at once (83 with --exit-codes classes)",
          "[agent][unit]") {
  Job job;
  LaunchConfig config = backoffConfig(1, 1);
  config.restart.exitCodes = ExitCodeScheme::kClasses;
  Node& node = job.add(config, "10.0.0.1");
  REQUIRE(job.startTogether());
  node.launcher.exitWith(node.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return node.machine.snapshot().restartAt.has_value(); }));
  node.machine.onSignal(SIGTERM);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == kExitStopped);
  CHECK(node.machine.ending()->kind == EndKind::kSignalled);
  job.loop.advance(20s);  // the back-off's timer is gone with it
  job.loop.runPosted();
  CHECK(node.launcher.spawned.size() == 1);
}

TEST_CASE("the same failure twice without progress stops after 1 restart, the user's",
          "[agent][unit]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 1, /*maxRestarts=*/3);
  config.restart.exitCodes = ExitCodeScheme::kClasses;
  Node& node = job.add(config, "10.0.0.1");
  REQUIRE(job.startTogether());
  node.launcher.exitWith(node.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  node.launcher.exitWith(node.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == kExitUserError);
  CHECK(node.machine.ending()->failureClass == FailureClass::kUser);
  CHECK_THAT(node.machine.ending()->message,
             Catch::Contains("after 1 restart(s)") && Catch::Contains("user failure") &&
                 Catch::Contains("the same failure as the last one (exit 3)"));
  CHECK(node.machine.snapshot().lastFailureClass == FailureClass::kUser);
}

TEST_CASE(
    "a FileTimer request, or a round that ran --progress-min-time, is progress: the same failure "
    "again restarts",
    "[agent][unit]") {
  // Round 0 fails without progress; round 1 fails the same way after the evidence under test,
  // so it restarts; round 2 fails the same way with none (59 s: under the minimum), the user's.
  Job job;
  LaunchConfig config = jobConfig(1, 1, 1, /*maxRestarts=*/5);
  config.restart.exitCodes = ExitCodeScheme::kClasses;
  config.restart.progressMinTime = 60s;
  Node& node = job.add(config, "10.0.0.1");
  REQUIRE(job.startTogether());
  node.launcher.exitWith(node.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return node.runningRound(1); }));
  const auto progressOf = [&](int round) {
    const auto stop =
        StopReason::parse(job.store.get(fmt::format("ddprun/unit/round/{}/stop", round)));
    REQUIRE(stop);
    REQUIRE(stop->failure);
    return stop->failure->progress;
  };
  CHECK_FALSE(progressOf(0));
  SECTION("a FileTimer request") {
    const double now = std::chrono::duration<double>(job.loop.wallNow().time_since_epoch()).count();
    node.machine.onFileTimerLine(fmt::format(
        R"({{"version": 1, "pid": {}, "scope_id": "step", "expiration_time": {}, "signal": 9}})",
        node.workers()[0].pid, now + 600));
  }
  SECTION("--progress-min-time") { job.loop.advance(60s); }
  node.launcher.exitWith(node.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return node.runningRound(2); }));
  CHECK(progressOf(1));
  CHECK(node.machine.snapshot().lastFailureClass == FailureClass::kWorker);
  job.loop.advance(59s);
  node.launcher.exitWith(node.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK_FALSE(progressOf(2));
  CHECK(*node.exitCode == kExitUserError);
  CHECK_THAT(node.machine.ending()->message, Catch::Contains("after 2 restart(s)"));
}

TEST_CASE(
    "a worker exiting with --no-restart-exit-code stops the job at once, whatever budget is left",
    "[agent][unit]") {
  Job job;
  LaunchConfig config = jobConfig(1, 1, 2, /*maxRestarts=*/3);
  config.restart.noRestartExitCode = 93;
  Node& node = job.add(config, "10.0.0.1");
  REQUIRE(job.startTogether());
  node.launcher.exitWith(node.workers()[1].pid, 93);
  REQUIRE(job.until([&] { return node.exitCode.has_value(); }));
  CHECK(*node.exitCode == 93);  // --exit-codes root-cause: the code passed through
  CHECK(node.machine.ending()->failureClass == FailureClass::kUser);
  CHECK(node.launcher.spawned.size() == 2);  // no restart
}

namespace {

// An elastic job (MIN:MAX) whose third node (10.0.0.3) fails after progress each round: its
// workers touched their heartbeat before exiting 1.
LaunchConfig nodeRuleConfig(int minNodes, int maxNodes) {
  LaunchConfig config = jobConfig(minNodes, maxNodes, 1, /*maxRestarts=*/5);
  config.restart.exitCodes = ExitCodeScheme::kClasses;
  return config;
}

void failAfterProgress(Job& job, Node& node) {
  node.heartbeats.reports[0] = job.loop.wallNow();
  node.launcher.exitWith(node.workers()[0].pid, 1);
}

bool hasEvent(const Node& node, const std::string& name) {
  return std::any_of(node.events.begin(), node.events.end(),
                     [&](const std::string& line) { return line.find(name) != std::string::npos; });
}

}  // namespace

TEST_CASE("a node that was the root cause 3 times in a row leaves, and the others go on without it",
          "[agent][unit]") {
  LogCapture log;
  Job job;
  Node& a = job.add(nodeRuleConfig(1, 3), "10.0.0.1");
  Node& b = job.add(nodeRuleConfig(1, 3), "10.0.0.2");
  Node& c = job.add(nodeRuleConfig(1, 3), "10.0.0.3");
  REQUIRE(job.startTogether());
  for (int round = 1; round <= 2; ++round) {
    failAfterProgress(job, c);
    REQUIRE(job.until(
        [&] { return a.runningRound(round) && b.runningRound(round) && c.runningRound(round); }));
  }
  failAfterProgress(job, c);
  REQUIRE(job.until([&] { return c.exitCode.has_value(); }));
  CHECK(*c.exitCode == kExitMachineFault);
  CHECK(c.machine.ending()->failureClass == FailureClass::kMachine);
  CHECK(c.machine.ending()->rootCause->exitCode == 1);  // --exit-codes root-cause: 1
  CHECK_THAT(c.machine.ending()->message,
             Catch::Contains("left out of the job after 3 failure(s) in a row here"));
  const auto leftOut = c.machine.snapshot().leftOut;
  REQUIRE(leftOut);
  CHECK_THAT(*leftOut, Catch::Contains("node 2 (host-10.0.0.3) was the root cause of the last 3 "
                                       "failures in a row (--max-node-failures 3), the last: "
                                       "exit 1; it leaves the job"));
  CHECK(hasEvent(c, "ddprun.node.left_out"));
  CHECK_THAT(log.text(), Catch::Contains("this node is left out of the job: node 2"));
  // Its end gives up its hold (the wiring's leave, as agent.cc's): the others close round 3 with
  // the two of them, without waiting for last call (the manual clock stands still).
  c.driver.leave(/*hostsStore=*/false, /*storeEndsAlone=*/false, std::nullopt);
  REQUIRE(job.until([&] { return a.runningRound(3) && b.runningRound(3); }));
  CHECK(a.machine.round().nodes == 2);
  CHECK(b.workers()[0].environment.at("WORLD_SIZE") == "2");
  // The re-form costs no restart of its own: the third failure's is the one counted.
  CHECK(a.machine.round().history.restarts == 3);
  CHECK(hasEvent(a, "ddprun.node.left_out"));
  CHECK(c.launcher.spawned.size() == 3);  // no worker of round 3 on the left-out node
  a.allExit(0);
  b.allExit(0);
  REQUIRE(job.until([&] { return a.exitCode && b.exitCode; }));
  CHECK(*a.exitCode == 0);
  CHECK(*b.exitCode == 0);
}

TEST_CASE("a failing node is kept when leaving would drop the job below MIN, and says so",
          "[agent][unit]") {
  LogCapture log;
  Job job;
  Node& a = job.add(nodeRuleConfig(3, 4), "10.0.0.1");
  Node& b = job.add(nodeRuleConfig(3, 4), "10.0.0.2");
  Node& c = job.add(nodeRuleConfig(3, 4), "10.0.0.3");
  for (auto& node : job.nodes) node->machine.start();
  // Below MAX, round 0 closes after last call.
  REQUIRE(job.until([&] {
    job.loop.advance(100ms);
    return a.runningRound(0) && b.runningRound(0) && c.runningRound(0);
  }));
  for (int round = 1; round <= 3; ++round) {
    failAfterProgress(job, c);
    REQUIRE(job.until(
        [&] { return a.runningRound(round) && b.runningRound(round) && c.runningRound(round); }));
  }
  CHECK(a.machine.round().nodes == 3);
  CHECK_FALSE(c.exitCode);
  CHECK_THAT(log.text(),
             Catch::Contains("it stays in the job: without it 2 node(s) would be left, fewer "
                             "than the minimum of 3"));
}

TEST_CASE("a node that fails the health gate stays out, and the round forms without it at once",
          "[agent][unit][health]") {
  Job job;
  const LaunchConfig config = jobConfig(1, 2, 1, /*maxRestarts=*/3);
  Node& a = job.add(config, "10.0.0.1");
  Node& b = job.add(config, "10.0.0.2");
  REQUIRE(job.startTogether());
  CHECK(a.health.checkedRounds == std::vector<int>{-1});
  b.health.verdicts.push_back(HealthVerdict::fail("gpu 1", "NVML cannot reach it"));
  // A worker of `a` fails: both nodes stop, run the gate, and `b` fails it.
  const auto startedAt = job.loop.now();
  const auto bWorker = b.workers()[0].pid;
  a.launcher.exitWith(a.workers()[0].pid, 3);
  // Round 1 forms with `a` alone without the clock moving: nobody waits last_call_timeout.
  REQUIRE(job.until([&] { return a.runningRound(1); }));
  CHECK(job.loop.now() == startedAt);
  CHECK(a.machine.round().nodes == 1);
  CHECK(b.machine.state() == State::kJoining);
  CHECK(b.workers()[0].pid == bWorker);  // round 0's worker: none started since
  CHECK(b.health.checkedRounds == std::vector<int>{-1, 1});
  CHECK(a.health.afterRounds == std::vector<int>{0});  // the post-round hook ran once
  const AgentSnapshot out = b.machine.snapshot();
  CHECK(out.exclusions == 1);
  REQUIRE(out.lastExclusion);
  CHECK(*out.lastExclusion == "gpu 1: NVML cannot reach it");
  REQUIRE(out.healthRetryAt);
  CHECK(*out.healthRetryAt == Approx(out.updatedAt + 30.0));
  CHECK(out.lastFailureClass == FailureClass::kMachine);
  CHECK(toJson(out).at("exclusions") == 1);
  CHECK(toHealthJson(out).at("exclusions") == 1);
  REQUIRE_FALSE(b.events.empty());
  const auto event = nlohmann::json::parse(b.events.back());
  CHECK(event.at("name") == "ddprun.node.health_excluded");
}

TEST_CASE("the health cooldown doubles with each failure, and a node that passes joins again",
          "[agent][unit][health]") {
  Job job;
  const LaunchConfig config = jobConfig(1, 2, 1, /*maxRestarts=*/3);
  Node& a = job.add(config, "10.0.0.1");
  Node& b = job.add(config, "10.0.0.2");
  b.health.verdicts.push_back(HealthVerdict::fail("--health-check", "exited with 1"));
  b.health.verdicts.push_back(HealthVerdict::fail("--health-check", "exited with 1"));
  a.machine.start();
  b.machine.start();
  // `b` fails its first check and never joins: round 0 forms with `a` after last call.
  REQUIRE(job.until([&] { return b.machine.snapshot().exclusions == 1; }));
  REQUIRE(job.until([&] {
    job.loop.advance(100ms);
    return a.runningRound(0);
  }));
  CHECK(a.machine.round().nodes == 1);
  // The first cooldown is 30 s (the 100 ms steps above count toward it).
  const auto tried = [&] { return b.health.checkedRounds.size(); };
  const double firstRetry = *b.machine.snapshot().healthRetryAt;
  CHECK(firstRetry - b.machine.snapshot().updatedAt <= 30.0);
  REQUIRE(tried() == 1);
  job.loop.advance(std::chrono::milliseconds(
      std::lround((firstRetry - b.machine.snapshot().updatedAt) * 1000) - 100));
  CHECK(tried() == 1);
  job.loop.advance(100ms);
  REQUIRE(job.until([&] { return tried() == 2; }));
  // The second failure in a row: 60 s.
  const AgentSnapshot second = b.machine.snapshot();
  CHECK(second.exclusions == 2);
  REQUIRE(second.healthRetryAt);
  CHECK(*second.healthRetryAt - second.updatedAt == Approx(60.0));
  job.loop.advance(59s);
  CHECK(tried() == 2);
  job.loop.advance(1s);
  // The third check passes: `b` joins as a new member and the job re-forms with both nodes.
  REQUIRE(job.until([&] { return a.runningRound(1) && b.runningRound(1); }));
  CHECK(a.machine.round().nodes == 2);
  const AgentSnapshot back = b.machine.snapshot();
  CHECK(back.exclusions == 2);
  CHECK_FALSE(back.healthRetryAt);
  CHECK(a.machine.snapshot().exclusions == 0);
}

namespace {

LaunchConfig withSpares(LaunchConfig config, int spares) {
  config.rdzv.spares = spares;
  return config;
}

// A 2:2 job with one spare (--spares 1): `a` and `b` run round 0, the spare waits for a place.
struct SpareJob {
  explicit SpareJob(const LaunchConfig& config)
      : a(job.add(withSpares(config, 1), "10.0.0.1")),
        b(job.add(withSpares(config, 1), "10.0.0.2")) {
    REQUIRE(job.startTogether());
    spare = &job.add(withSpares(config, 1), "10.0.0.3");
    spare->machine.start();
    REQUIRE(job.until([&] { return spare->machine.snapshot().spare; }));
  }
  Job job;
  Node& a;
  Node& b;
  Node* spare = nullptr;
};

}  // namespace

TEST_CASE("a spare waits warm with no workers, and takes a lost node's place at once",
          "[agent][unit][spares]") {
  LogCapture log;
  SpareJob spares(jobConfig(2, 2, 1));
  Job& job = spares.job;
  Node& spare = *spares.spare;
  CHECK_THAT(log.text(),
             Catch::Contains("spare: waiting for a place (1 spare wanted, the job runs 2 nodes)"));
  CHECK(spare.launcher.spawned.empty());
  const AgentSnapshot waiting = spare.machine.snapshot();
  CHECK(waiting.phase == AgentPhase::kJoining);
  CHECK(waiting.sparesWanted == 1);
  CHECK_FALSE(spares.a.machine.snapshot().spare);
  const auto before = job.loop.now();
  spares.b.backend.sever();  // kill -9 of b's agent
  REQUIRE(job.until([&] { return spares.a.runningRound(1) && spare.runningRound(1); }));
  // No last call, no shrinking: the clock did not move, and the round has MAX nodes.
  CHECK(job.loop.now() == before);
  CHECK(spares.a.machine.round().nodes == 2);
  CHECK(spare.machine.round().nodes == 2);
  CHECK(spare.workers()[0].environment.at("WORLD_SIZE") == "2");
  CHECK(spares.a.machine.round().history.restarts == 0);
  CHECK_FALSE(spare.machine.snapshot().spare);
  spares.a.allExit(0);
  spare.allExit(0);
  REQUIRE(job.until([&] { return spares.a.exitCode && spare.exitCode; }));
  CHECK(*spares.a.exitCode == 0);
  CHECK(*spare.exitCode == 0);
}

TEST_CASE("on a restart, the members coming back keep their places ahead of a spare",
          "[agent][unit][spares]") {
  SpareJob spares(backoffConfig(2, 2));
  Job& job = spares.job;
  Node& spare = *spares.spare;
  // A worker fails: a and b wait their back-off; the spare, with none to wait, takes slot 1 of
  // round 1 first, and a's arrival makes MAX joiners while b is still away.
  spares.a.launcher.exitWith(spares.a.workers()[0].pid, 3);
  REQUIRE(job.until([&] { return job.store.check({"ddprun/unit/round/1/member/1"}); }));
  REQUIRE(job.until([&] {
    return spares.a.machine.snapshot().restartAt && spares.b.machine.snapshot().restartAt;
  }));
  // b comes back late: its calls wait on the network (it is alive all the while).
  spares.b.backend.silence();
  job.loop.advance(10100ms);
  REQUIRE(job.until([&] { return job.store.check({"ddprun/unit/round/1/member/2"}); }));
  // MAX joiners, one of them the spare, with b away: the round waits for b.
  CHECK_FALSE(job.until([&] { return job.store.check({"ddprun/unit/round/1/closed"}); }, 300ms));
  spares.b.backend.heal();
  REQUIRE(job.until([&] { return spares.a.runningRound(1) && spares.b.runningRound(1); }));
  CHECK(spares.a.machine.round().nodes == 2);
  CHECK(spares.a.machine.round().history.restarts == 1);
  // The spare is back to waiting, its workers never started.
  REQUIRE(job.until([&] { return spare.machine.snapshot().spare; }));
  CHECK(spare.launcher.spawned.empty());
  CHECK(job.store.get("ddprun/unit/round/1/member/1") == std::to_string(spare.driver.nodeId()));
  spares.a.allExit(0);
  spares.b.allExit(0);
  REQUIRE(job.until([&] { return spares.a.exitCode && spares.b.exitCode && spare.exitCode; }));
  CHECK(*spare.exitCode == 0);
}

// NVIDIA/nvidia-resiliency-ext#348: with one spare over MAX, a node lost as a restart round
// closes ended the whole job. Here the round closes with the spare in the lost node's place, and
// a loss just after the close re-forms again: the job goes on and finishes 0.
TEST_CASE("a node lost as a round with a spare closes: the job goes on and finishes 0",
          "[agent][unit][spares]") {
  SpareJob spares(backoffConfig(2, 2));
  Job& job = spares.job;
  Node& spare = *spares.spare;
  SECTION("lost while the round forms, the spare in it already") {
    spares.a.launcher.exitWith(spares.a.workers()[0].pid, 3);
    REQUIRE(job.until([&] { return job.store.check({"ddprun/unit/round/1/member/1"}); }));
    // Both nodes must have started their back-off before the clock moves.
    REQUIRE(job.until([&] {
      return spares.a.machine.snapshot().restartAt && spares.b.machine.snapshot().restartAt;
    }));
    spares.b.backend.sever();
    job.loop.advance(10100ms);
    REQUIRE(job.until([&] { return spares.a.runningRound(1) && spare.runningRound(1); }));
    CHECK(spare.machine.round().nodes == 2);
  }
  SECTION("lost the moment the round closed, before its workers ran long") {
    spares.a.launcher.exitWith(spares.a.workers()[0].pid, 3);
    REQUIRE(job.until([&] {
      return spares.a.machine.snapshot().restartAt && spares.b.machine.snapshot().restartAt;
    }));
    job.loop.advance(10100ms);
    REQUIRE(job.until([&] { return job.store.check({"ddprun/unit/round/1/closed"}); }));
    spares.b.backend.sever();
    REQUIRE(job.until([&] { return spares.a.runningRound(2) && spare.runningRound(2); }));
    CHECK(spare.machine.round().nodes == 2);
  }
  CHECK(spare.workers()[0].environment.at("WORLD_SIZE") == "2");
  spares.a.allExit(0);
  spare.allExit(0);
  REQUIRE(job.until([&] { return spares.a.exitCode && spare.exitCode; }));
  CHECK(*spares.a.exitCode == 0);
  CHECK(*spare.exitCode == 0);
}
