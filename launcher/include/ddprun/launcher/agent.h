// The ddprun agent: one per node. It joins the job's rendezvous, starts the node's workers with
// torchrun's environment, monitors them, restarts the whole job when one fails, re-forms it when
// nodes join or leave, and ends with the job's exit code. docs/architecture.md walks through it.
#pragma once

#include <map>
#include <string>

#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

class Guardian;

// Runs the agent to the end of the job and returns its exit code (docs/errors.md, "Exit codes of
// ddprun"; launcher/src/core/exit_codes.cc is the one place that decides them, start-up
// problems included: one line on stderr and the bad-input code).
// `environment` is the agent's own (workers inherit it). `guardian` may be null.
// REQUIRES: called on the main thread (workers' death signal is tied to the forking thread).
int runAgent(const LaunchConfig& config, const std::map<std::string, std::string>& environment,
             Guardian* guardian);

}  // namespace ddprun::launcher
