#include "health/node_health_gate.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/common/text.h"
#include "health/hook_runner.h"

namespace ddprun::launcher {

NodeHealthGate::NodeHealthGate(const HealthPolicy& policy, NodeHealthFacts facts, EventLoop& loop,
                               std::string nvmlLibrary)
    : policy_(policy),
      facts_(std::move(facts)),
      loop_(loop),
      nvml_(std::move(nvmlLibrary)),
      places_(freeSpacePlaces(facts_.logDir, facts_.tmpDir)) {}

NodeHealthGate::~NodeHealthGate() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

void NodeHealthGate::cancel() {
  cancelled_.store(true);
  *live_ = false;
}

std::optional<HealthVerdict> NodeHealthGate::builtIn() {
  if (auto sick = nvml_.check(facts_.cudaVisibleDevices, facts_.agentMarker)) return sick;
  return checkFreeSpace(places_, policy_.minFreeBytes);
}

void NodeHealthGate::onThread(std::function<void()> work) {
  if (thread_.joinable()) thread_.join();
  thread_ = std::thread(std::move(work));
}

std::vector<std::string> NodeHealthGate::hookEnvironment(const std::string& name, int round) const {
  std::map<std::string, std::string> values = facts_.environment;
  values[kEnvHookName] = name;
  values[kEnvHookRound] = std::to_string(round);
  values[kEnvHookRunId] = facts_.runId;
  values[kEnvHookHost] = facts_.hostname;
  values[kEnvHookAddress] = facts_.address;
  std::vector<std::string> environment;
  environment.reserve(values.size());
  for (const auto& [key, value] : values) environment.push_back(key + "=" + value);
  return environment;
}

std::optional<HealthVerdict> NodeHealthGate::runGateHook(const std::string& name,
                                                         const std::string& command, int round) {
  if (command.empty()) return std::nullopt;
  const HookRun run{name, command, hookEnvironment(name, round), policy_.hookTimeout};
  const HookOutcome outcome = runHook(run, cancelled_);
  if (outcome.passed()) return std::nullopt;
  return HealthVerdict::fail(name, common::printable(outcome.text(policy_.hookTimeout)));
}

void NodeHealthGate::check(int round, std::function<void(HealthVerdict)> done) {
  if (policy_.checkCommand.empty() && policy_.preRoundCommand.empty()) {
    // The built-in checks alone take well under a millisecond: on the loop, so that an agent
    // without hooks has no more threads than it had without the gate.
    std::optional<HealthVerdict> failed = builtIn();
    HealthVerdict verdict = failed ? std::move(*failed) : HealthVerdict::pass();
    loop_.post([done = std::move(done), live = live_, verdict = std::move(verdict)] {
      if (*live) done(verdict);
    });
    return;
  }
  onThread([this, round, done = std::move(done), live = live_] {
    std::optional<HealthVerdict> failed = builtIn();
    if (!failed) failed = runGateHook("--health-check", policy_.checkCommand, round);
    if (!failed) failed = runGateHook("--pre-round-hook", policy_.preRoundCommand, round);
    HealthVerdict verdict = failed ? std::move(*failed) : HealthVerdict::pass();
    loop_.post([done, live, verdict = std::move(verdict)] {
      if (*live) done(verdict);
    });
  });
}

void NodeHealthGate::afterRound(int round, std::function<void()> done) {
  if (policy_.postRoundCommand.empty()) {
    done();
    return;
  }
  onThread([this, round, done = std::move(done), live = live_] {
    const HookRun run{"--post-round-hook", policy_.postRoundCommand,
                      hookEnvironment("--post-round-hook", round), policy_.hookTimeout};
    const HookOutcome outcome = runHook(run, cancelled_);
    const std::string said = outcome.text(policy_.hookTimeout);
    loop_.post([done, live, said, passed = outcome.passed()] {
      if (!*live) return;
      if (passed) {
        spdlog::info("--post-round-hook {}", said);
      } else {
        spdlog::warn("--post-round-hook {} (never fatal)", common::printable(said));
      }
      done();
    });
  });
}

}  // namespace ddprun::launcher
