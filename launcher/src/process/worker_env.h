// What each worker is started with: torchrun 2.x's environment contract (docs/env_contract.md)
// and its command line. Pure functions of the launch configuration and the worker's place in
// the job, so the contract can be tested without starting anything.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ddprun/common/worker_env_names.h"
#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

// One worker's place in the job.
struct WorkerPlacement {
  int localRank = 0;
  int rank = 0;
  int worldSize = 1;
  int localWorldSize = 1;
  int groupRank = 0;
  int groupWorldSize = 1;
};

// What every worker of one rendezvous round shares.
struct RoundEnvironment {
  std::string masterAddr;  // the store the workers rendezvous through (hosted by an agent)
  std::uint16_t masterPort = 0;
  int restartCount = 0;  // failure restarts of the whole job so far
  int generation = 0;    // rendezvous round: grows on every re-form, restarts included
  std::string runId;
  std::string agentMarker;  // DDPRUN_AGENT: marks this agent's workers and what they start
};

// The complete environment ("NAME=value" entries, each name once) of one worker: `inherited` (the
// agent's environment) with the contract's variables added or replaced, and the worker's own
// files: its error file, its progress heartbeat file when the agent monitors progress and the
// attempt's stop-request file (DDPRUN_STOP_FILE; "" = none: an inherited entry is then left as it
// was); `added` last (the Flight Recorder's paths: hang/flight_recorder.h).
std::vector<std::string> workerEnvironment(
    const std::map<std::string, std::string>& inherited, const LaunchConfig& config,
    const WorkerPlacement& placement, const RoundEnvironment& round, const std::string& errorFile,
    const std::string& heartbeatFile = {}, const std::string& stopFile = {},
    const std::map<std::string, std::string>& added = {});

// The program to exec (an absolute path) and its argv.
struct WorkerCommand {
  std::string path;
  std::vector<std::string> argv;
};
WorkerCommand workerCommand(const LaunchConfig& config, const WorkerPlacement& placement,
                            const std::map<std::string, std::string>& inherited);

// torchrun's notice when it sets OMP_NUM_THREADS=1 for the workers.
std::string ompNumThreadsWarning();
// Whether the workers get OMP_NUM_THREADS=1 (unset in the agent and more than one per node).
bool setsOmpNumThreads(const std::map<std::string, std::string>& inherited,
                       const LaunchConfig& config);

}  // namespace ddprun::launcher
