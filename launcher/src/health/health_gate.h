// HealthGate: the seam through which the agent's machine asks whether this node may join the
// next round, and runs the hooks around a round. The real gate (node_health_gate.h) runs the
// built-in checks (each visible GPU through NVML, free space: nvml_checks.h, free_space.h) and
// the user's hooks (hook_runner.h); the machine's unit tests give a fake.
//
//   before each join:  the built-in checks, --health-check, then --pre-round-hook; the first
//                      failure is the verdict (the node stays out of the round: agent_machine.h)
//   after a round:     --post-round-hook once the round's workers have ended (never fatal)
//
// Thread safety: every method is called on the event loop's thread, and every callback is made
// there.
#pragma once

#include <functional>
#include <string>

namespace ddprun::launcher {

// What the gate found. A failure names the check ("gpu 1", "free space", "--health-check",
// "--pre-round-hook") and why, in one line (escaped: it may quote a hook's exit).
struct HealthVerdict {
  bool passed = true;
  std::string check;
  std::string reason;

  static HealthVerdict pass() { return {}; }
  static HealthVerdict fail(std::string check, std::string reason) {
    return {false, std::move(check), std::move(reason)};
  }
};

class HealthGate {
 public:
  virtual ~HealthGate() = default;
  // Checks this node before it joins round `round` (-1: the job's first or current round).
  // `done` is called once, on the loop, unless cancel() came first.
  virtual void check(int round, std::function<void(HealthVerdict)> done) = 0;
  // Round `round`'s workers have ended: the post-round hook, if any. `done` is called once, on
  // the loop (at once when there is no hook), unless cancel() came first.
  virtual void afterRound(int round, std::function<void()> done) = 0;
  // The agent ends: a hook still running is killed, and no callback is made.
  virtual void cancel() = 0;
};

}  // namespace ddprun::launcher
