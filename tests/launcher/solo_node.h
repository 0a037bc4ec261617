// One --standalone agent for the machine's tests: the real AgentMachine with the fake seams
// (agent_fakes.h) and SoloRendezvous as its rendezvous client, so every round is formed without
// a word to a store.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent_fakes.h"
#include "machine/agent_machine.h"
#include "membership/solo_rendezvous.h"

namespace ddprun::test {

// A one-node standalone job of `nproc` workers per node.
inline launcher::LaunchConfig standaloneConfig(int nproc, int maxRestarts = 0) {
  launcher::LaunchConfig config;
  config.nprocPerNode = nproc;
  config.rdzv.standalone = true;
  config.rdzv.backend = launcher::RdzvBackend::kC10d;
  config.rdzv.minNodes = 1;
  config.rdzv.maxNodes = 1;
  config.rdzv.runId = "solo";
  config.restart.maxRestarts = maxRestarts;
  config.restart.shutdownTimeout = std::chrono::seconds(5);
  config.entry.kind = launcher::EntryKind::kExecutable;
  config.entry.script = "/bin/true";
  config.entry.executable = "/bin/true";
  return config;
}

// One standalone agent: the real machine and the solo client, fake processes, no store.
struct SoloNode {
  explicit SoloNode(launcher::LaunchConfig config)
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

  static launcher::NodeInfo self(int nproc) {
    return fakeNodeInfo("host-solo", "127.0.0.1", nproc);
  }
  launcher::WorkerDiagnostics diagnostics() {
    launcher::WorkerDiagnostics seams;
    seams.heartbeats = &heartbeats;
    seams.evidence = &evidence;
    seams.oom = &oom;
    seams.activity = &activity;
    seams.stopRequests = &stopRequests;
    return seams;
  }
  launcher::AgentIdentity identity() const {
    return fakeIdentity("host-solo", "127.0.0.1", /*hostsStore=*/true,
                        "/tmp/ddprun-solo-rendezvous-test");
  }
  bool runningRound(int round) const { return runsRound(machine, round); }
  std::vector<FakeLauncher::Worker> workers() const {
    return launcher.latest(config_.nprocPerNode);
  }
  void allExit(int code) { launcher.latestExitWith(config_.nprocPerNode, code); }
  bool until(const std::function<bool()>& done) {
    return loop.runUntil(done, std::chrono::seconds(5));
  }

  launcher::LaunchConfig config_;
  ManualEventLoop loop;
  FakeLauncher launcher;
  NullOutput output;
  FakeWorkerStores stores;
  launcher::SoloRendezvous solo;
  FakeHeartbeats heartbeats;
  FakeEvidence evidence;
  FakeOom oom;
  FakeActivity activity;
  FakeStopRequests stopRequests;
  launcher::AgentMachine machine;
  EventRecorder recorder;
  std::optional<int> exitCode;
};

}  // namespace ddprun::test
