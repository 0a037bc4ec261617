// Runs one of the user's hooks (--health-check, --pre-round-hook, --post-round-hook): the
// command through /bin/sh -c, as a hook of a CI system runs, in its own process group, with
// the node's facts in its environment; its output (stdout and stderr together) goes into the
// agent's log line by line, each line prefixed with the hook's option; at the timeout its whole
// group is killed. Blocking: the gate runs it on a thread of its own.
//
// Thread safety: runHook() may run on any thread; one call per hook at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

namespace ddprun::launcher {

// What a hook is told, in its environment (docs/health.md lists them).
inline constexpr const char* kEnvHookName = "DDPRUN_HOOK";          // the option that runs it
inline constexpr const char* kEnvHookRound = "DDPRUN_ROUND";        // the round (-1: first/current)
inline constexpr const char* kEnvHookRunId = "DDPRUN_RUN_ID";       // --rdzv-id
inline constexpr const char* kEnvHookHost = "DDPRUN_HOSTNAME";      // this node's host name
inline constexpr const char* kEnvHookAddress = "DDPRUN_NODE_ADDR";  // where the others reach it

struct HookRun {
  std::string name;     // "--health-check": the log's prefix and the verdict's check
  std::string command;  // run by /bin/sh -c
  std::vector<std::string> environment;  // NAME=VALUE, the whole environment
  std::chrono::milliseconds timeout{60000};
};

struct HookOutcome {
  enum class Kind { kExited, kTimedOut, kNotStarted, kCancelled };
  Kind kind = Kind::kExited;
  int code = 0;        // kExited: the exit code
  std::string detail;  // kNotStarted: why
  bool passed() const { return kind == Kind::kExited && code == 0; }
  // "exited with 3" (a shell's 128 + N for a signal N), "ran past its 60.0 s timeout and was
  // killed".
  std::string text(std::chrono::milliseconds timeout) const;
};

// Runs `hook` to its end, its timeout, or `cancelled` turning true (checked every 100 ms).
HookOutcome runHook(const HookRun& hook, const std::atomic<bool>& cancelled);

}  // namespace ddprun::launcher
