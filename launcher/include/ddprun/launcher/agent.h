// The ddprun agent: one per node. It joins the job's rendezvous, starts the node's workers with
// torchrun's environment, watches them, restarts the whole job when one fails, re-forms it when
// nodes join or leave, and ends with the job's exit code. docs/architecture.md walks through it.
#pragma once

#include <map>
#include <string>

#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

class Guardian;

// How the agent's log lines look (spdlog's pattern).
inline constexpr const char* kLogPattern = "[%Y-%m-%d %H:%M:%S.%e] [ddprun] [%l] %v";

// Runs the agent to the end of the job and returns its exit code:
//   0            every worker of every node exited 0
//   the root cause's exit code, or 128+signal when a worker was killed by one (a deliberate
//                improvement over torchrun's constant 1)
//   128+signal   the agent itself was stopped by a handled signal (SIGINT, SIGTERM, ...)
//   1            the rendezvous failed (timeout, too few nodes, lost store)
//   2            bad input found late (e.g. the port to host the store on is taken)
// `environment` is the agent's own (workers inherit it). `guardian` may be null.
// REQUIRES: called on the main thread (workers' death signal is tied to the forking thread).
int runAgent(const LaunchConfig& config, const std::map<std::string, std::string>& environment,
             Guardian* guardian);

}  // namespace ddprun::launcher
