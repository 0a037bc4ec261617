// `ddprun detach [--] CMD [ARGS...]`: a worker starts CMD so that it outlives the job, on purpose
// (an uploader finishing a checkpoint, a TensorBoard server). ddprun kills everything else a
// worker leaves behind (process/posix_launcher.h); torchrun kills nothing that left the worker.
//
// What it does, in order (docs/env_contract.md, "Keeping a process after the job"):
//   1. resolves CMD on PATH (not found: one line, exit 127, as a shell);
//   2. forks: the parent waits only until CMD has been exec'd (or failed to be), then exits 0, so
//      a worker that runs it in the foreground knows CMD is out of the job when it returns;
//   3. the child leaves the worker's session and process group (setsid), and the agent's worker
//      cgroup for the agent's own where there is one (cgroup v2), so neither the group's signal
//      nor the cgroup's kill reaches it;
//   4. its environment loses DDPRUN_AGENT (the guardian's sweep looks for it) and gains
//      DDPRUN_DETACHED=<that value> (core/kept_process.h), which the agent's stray sweep spares;
//   5. stdin, stdout and stderr that are the job's (a pipe, a socket, a FIFO, a terminal, or
//      closed) become /dev/null: the worker's pipes close when the job ends, and a write to a
//      closed pipe would kill CMD with SIGPIPE. A redirection to a file is kept; a line on stderr
//      says so when output is dropped;
//   6. execs CMD with ARGS untouched.
//
// Thread safety: runDetach forks; main calls it before any thread exists.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli/subcommands.h"

namespace ddprun::launcher {

// What `ddprun detach ARGS...` asks for.
struct DetachRequest {
  bool help = false;                 // -h / --help before CMD
  std::vector<std::string> command;  // CMD and its arguments, untouched; empty only with help
};

// Options end at the first argument that is not one, or after "--"; everything from CMD on is
// CMD's, even "--help". Throws UsageError (cli.h) for an unknown option or a missing/empty CMD.
DetachRequest parseDetachArguments(const std::vector<std::string>& args);

// Exit codes of `ddprun detach` other than 0 and the bad-input code (docs/errors.md, "Exit codes
// of ddprun detach"): the shell's for a command that cannot run, and 1 when CMD could not be
// taken out of the job (it was not started).
inline constexpr int kDetachFailed = 1;
inline constexpr int kCommandNotExecutable = 126;
inline constexpr int kCommandNotFound = 127;

// The text of `ddprun detach --help`.
std::string detachHelpText();

// The subcommand's row for ddprunSubcommands().
Subcommand detachSubcommand();

}  // namespace ddprun::launcher
