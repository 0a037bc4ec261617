// Starting the debugger that prints a hung worker's native stacks (eu-stack or gdb:
// nativeStackCommand), and ending it. The debugger gets its own process group (to kill it and
// anything it starts at once), /dev/null for stdin, and one pipe for its stdout and stderr.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace ddprun::launcher::evidence {

struct SpawnedDebugger {
  pid_t pid = -1;
  int output = -1;  // read end of its stdout + stderr
};

// Starts `debugger` (a name searched in PATH, or a path) on `target`; nothing, with `why` set
// to startFailureText()'s line, when it cannot be started.
std::optional<SpawnedDebugger> spawnDebugger(const std::string& debugger, pid_t target,
                                             std::string& why);

// Ends the debugger `pid` and returns its wait status (nothing when unknown): first waits a
// little for it to exit when `waitFirst`, then kills its process group if it still runs.
std::optional<int> endDebugger(pid_t pid, bool waitFirst);

}  // namespace ddprun::launcher::evidence
