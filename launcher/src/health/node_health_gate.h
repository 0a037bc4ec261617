// NodeHealthGate: the real HealthGate (health_gate.h). Before each join it runs, in order and
// stopping at the first failure: the GPU checks (nvml_checks.h), the free-space check
// (free_space.h), --health-check, then --pre-round-hook; after a round, --post-round-hook. All of
// it runs on a thread of its own (a hook may take up to --health-check-timeout), and the verdict
// is posted to the loop.
//
// Thread safety: as HealthGate; builtIn() on one thread at a time, never while a check runs.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/event_loop.h"
#include "ddprun/launcher/launch_config.h"
#include "health/free_space.h"
#include "health/health_gate.h"
#include "health/nvml_checks.h"

namespace ddprun::launcher {

// What the gate knows of this node.
struct NodeHealthFacts {
  std::string hostname;
  std::string address;
  std::string runId;
  std::string agentMarker;  // DDPRUN_AGENT of this agent's workers
  std::string logDir;       // --log-dir ("" = none)
  std::string tmpDir;       // TMPDIR ("" = /tmp)
  std::optional<std::string> cudaVisibleDevices;
  std::map<std::string, std::string> environment;  // the agent's; the hooks get it and theirs
};

class NodeHealthGate final : public HealthGate {
 public:
  // `policy` and `loop` must outlive the gate.
  NodeHealthGate(const HealthPolicy& policy, NodeHealthFacts facts, EventLoop& loop,
                 std::string nvmlLibrary = "libnvidia-ml.so.1");
  ~NodeHealthGate() override;

  void check(int round, std::function<void(HealthVerdict)> done) override;
  void afterRound(int round, std::function<void()> done) override;
  void cancel() override;

  // The built-in checks alone (GPUs, free space), on the calling thread: what check() runs before
  // the hooks, and what ddprun-health-gate-bench times (tests/bench).
  std::optional<HealthVerdict> builtIn();

 private:
  // Runs `work` on the gate's thread (the previous work has ended by then).
  void onThread(std::function<void()> work);
  std::vector<std::string> hookEnvironment(const std::string& name, int round) const;
  // Runs the hook `name` (`command`, "" = none): its failure as a verdict, nothing when it passed.
  std::optional<HealthVerdict> runGateHook(const std::string& name, const std::string& command,
                                           int round);

  const HealthPolicy& policy_;
  NodeHealthFacts facts_;
  EventLoop& loop_;
  NvmlChecks nvml_;
  std::vector<FreeSpacePlace> places_;
  std::thread thread_;
  std::atomic<bool> cancelled_{false};
  // Turned false by cancel(): a verdict posted before that is dropped on the loop.
  std::shared_ptr<bool> live_ = std::make_shared<bool>(true);
};

}  // namespace ddprun::launcher
