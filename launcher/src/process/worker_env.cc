#include "process/worker_env.h"

#include <fmt/format.h>

#include <stdexcept>

#include "ddprun/common/path_lookup.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/common/template.h"
#include "ddprun/common/worker_env_names.h"

namespace ddprun::launcher {
namespace {

// Runs the script the way runpy.run_path does for torchrun's --run-path (a function entrypoint
// in torchrun; a plain interpreter here): the script sees its own path as sys.argv[0]. torchrun
// wraps that entrypoint in @record, so an uncaught exception lands in TORCHELASTIC_ERROR_FILE in
// @record's schema, and the failure summary shows it: so does this.
constexpr const char* kRunPathBootstrap =
    "import json, os, runpy, sys, time, traceback\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "except SystemExit:\n"
    "    raise\n"
    "except BaseException as e:\n"
    "    path = os.environ.get('TORCHELASTIC_ERROR_FILE')\n"
    "    if path:\n"
    "        try:\n"
    "            with open(path, 'w') as f:\n"
    "                json.dump({'message': {'message': f'{type(e).__name__}: {e}', 'extraInfo': {\n"
    "                    'py_callstack': traceback.format_exc(), 'timestamp': "
    "str(int(time.time()))}}}, f)\n"
    "        except OSError:\n"
    "            pass\n"
    "    raise\n";

std::string lookup(const std::map<std::string, std::string>& environment, const std::string& name,
                   const std::string& fallback) {
  auto it = environment.find(name);
  return it == environment.end() ? fallback : it->second;
}

}  // namespace

bool setsOmpNumThreads(const std::map<std::string, std::string>& inherited,
                       const LaunchConfig& config) {
  return config.nprocPerNode > 1 && !inherited.contains(common::kEnvOmpNumThreads);
}

std::string ompNumThreadsWarning() {
  return "\n*****************************************\n"
         "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
         "avoid your system being overloaded, please further tune the variable for optimal "
         "performance in your application as needed. \n"
         "*****************************************";
}

std::vector<std::string> workerEnvironment(
    const std::map<std::string, std::string>& inherited, const LaunchConfig& config,
    const WorkerPlacement& placement, const RoundEnvironment& round, const std::string& errorFile,
    const std::string& heartbeatFile, const std::string& stopFile,
    const std::map<std::string, std::string>& added) {
  std::map<std::string, std::string> env = inherited;
  const std::string localRank = std::to_string(config.virtualLocalRank ? 0 : placement.localRank);
  env[common::kEnvLocalRank] = localRank;
  env[common::kEnvRank] = std::to_string(placement.rank);
  env[common::kEnvGroupRank] = std::to_string(placement.groupRank);
  env[common::kEnvRoleRank] = std::to_string(placement.rank);
  env[common::kEnvRoleName] = config.role;
  env[common::kEnvLocalWorldSize] = std::to_string(placement.localWorldSize);
  env[common::kEnvWorldSize] = std::to_string(placement.worldSize);
  env[common::kEnvGroupWorldSize] = std::to_string(placement.groupWorldSize);
  env[common::kEnvRoleWorldSize] = std::to_string(placement.worldSize);
  env[common::kEnvMasterAddr] = round.masterAddr;
  env[common::kEnvMasterPort] = std::to_string(round.masterPort);
  env[common::kEnvTorchelasticRestartCount] = std::to_string(round.restartCount);
  env[common::kEnvTorchelasticMaxRestarts] = std::to_string(config.restart.maxRestarts);
  env[common::kEnvTorchelasticRunId] = round.runId;
  // Workers connect to the agents' store as clients instead of rank 0 hosting one.
  env[common::kEnvTorchelasticUseAgentStore] = common::kAgentStoreEnabled;
  env[common::kEnvTorchelasticErrorFile] = errorFile;
  // Replaced, never added beside an inherited one (ddprun inside a ddprun worker): getenv and
  // os.environ take the first entry, which would report to the outer agent's file.
  if (!heartbeatFile.empty()) env[common::kEnvDdprunHeartbeatFile] = heartbeatFile;
  if (!stopFile.empty()) env[common::kEnvDdprunStopFile] = stopFile;
  env[common::kEnvTorchelasticSignalsToHandle] =
      common::signalNames(config.restart.signalsToHandle);
  // Both names: torch 1.13 reads the first, 2.x the second. A value the user set is kept.
  for (const char* name :
       {common::kEnvNcclAsyncErrorHandling, common::kEnvTorchNcclAsyncErrorHandling}) {
    env[name] = lookup(inherited, name, "1");
  }
  if (setsOmpNumThreads(inherited, config)) env[common::kEnvOmpNumThreads] = "1";
  // ddprun's own: a job-global, monotonic round number (torch's restart count is not enough to
  // tell rounds apart: a membership change re-forms the job without a restart).
  env[common::kEnvDdprunGeneration] = std::to_string(round.generation);
  // ddprun's own: inherited by every descendant, whatever session it makes, so the guardian can
  // find them all if the agent is killed where no cgroup can hold them (Guardian in
  // guardian.h).
  if (!round.agentMarker.empty()) env[common::kEnvDdprunAgent] = round.agentMarker;
  if (config.virtualLocalRank) {
    // Each worker sees only its own device, as LOCAL_RANK 0.
    std::string device = std::to_string(placement.localRank);
    if (auto visible = inherited.find(common::kEnvCudaVisibleDevices); visible != inherited.end()) {
      std::vector<std::string> devices;
      std::size_t start = 0;
      while (start <= visible->second.size()) {
        const std::size_t comma = visible->second.find(',', start);
        devices.push_back(visible->second.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (placement.localRank < static_cast<int>(devices.size()))
        device = devices[placement.localRank];
    }
    env[common::kEnvCudaVisibleDevices] = device;
  }
  for (const auto& [name, value] : added) env[name] = value;
  std::vector<std::string> entries;
  entries.reserve(env.size());
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  return entries;
}

WorkerCommand workerCommand(const LaunchConfig& config, const WorkerPlacement& placement,
                            const std::map<std::string, std::string>& inherited) {
  WorkerCommand command;
  switch (config.entry.kind) {
    case EntryKind::kPythonScript:
      command.path = config.entry.python;
      command.argv = {config.entry.python, "-u", config.entry.script};
      break;
    case EntryKind::kPythonModule:
      command.path = config.entry.python;
      command.argv = {config.entry.python, "-u", "-m", config.entry.script};
      break;
    case EntryKind::kRunPath:
      command.path = config.entry.python;
      command.argv = {config.entry.python, "-u", "-c", kRunPathBootstrap, config.entry.script};
      break;
    case EntryKind::kExecutable: {
      std::string path = config.entry.executable;  // resolved by the command line parser
      if (path.empty()) {
        auto found = common::findExecutable(config.entry.script, inherited);
        if (!found) throw std::runtime_error(fmt::format("{}: not found", config.entry.script));
        path = *found;
      }
      command.path = path;
      command.argv = {config.entry.script};
      break;
    }
  }
  command.argv.insert(command.argv.end(), config.entry.args.begin(), config.entry.args.end());
  // torchrun expands ${local_rank} in everything after the interpreter (the script included).
  // Python's string.Template(argument).safe_substitute(local_rank=...): "$$" is "$", every
  // other name stays as written.
  const std::map<std::string, std::string> values = {
      {"local_rank", std::to_string(placement.localRank)}};
  for (std::size_t i = 1; i < command.argv.size(); ++i) {
    command.argv[i] = common::safeSubstitute(command.argv[i], values);
  }
  return command;
}

}  // namespace ddprun::launcher
