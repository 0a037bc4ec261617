#include "worker_env.h"

#include <dirent.h>
#include <string.h>

#include <cctype>

#include <stdexcept>

#include <fmt/format.h>

#include "process_group.h"

namespace ddprun::launcher {
namespace {

// Runs the script the way runpy.run_path does for torchrun's --run-path (a function entrypoint
// in torchrun; a plain interpreter here): the script sees its own path as sys.argv[0].
constexpr const char* kRunPathBootstrap =
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";

std::string lookup(const std::map<std::string, std::string>& environment, const std::string& name,
                   const std::string& fallback) {
  auto it = environment.find(name);
  return it == environment.end() ? fallback : it->second;
}

int numaNodeCount() {
  int count = 0;
  if (DIR* nodes = ::opendir("/sys/devices/system/node")) {
    while (dirent* entry = ::readdir(nodes)) {
      if (std::strncmp(entry->d_name, "node", 4) == 0 && entry->d_name[4] >= '0' &&
          entry->d_name[4] <= '9') {
        ++count;
      }
    }
    ::closedir(nodes);
  }
  return count > 0 ? count : 1;
}

bool identifierStart(char c) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)); }
bool identifierChar(char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); }

}  // namespace

std::string substituteLocalRank(const std::string& argument, int localRank) {
  // Python's string.Template(argument).safe_substitute(local_rank=...), which torchrun applies
  // to every argument: "$$" is "$", "$local_rank" and "${local_rank}" are the rank, anything else
  // stays as written.
  const std::string rank = std::to_string(localRank);
  std::string out;
  for (std::size_t i = 0; i < argument.size(); ++i) {
    if (argument[i] != '$' || i + 1 == argument.size()) {
      out += argument[i];
      continue;
    }
    const char next = argument[i + 1];
    if (next == '$') {
      out += '$';
      ++i;
    } else if (next == '{') {
      const std::size_t close = argument.find('}', i + 2);
      const std::string name =
          close == std::string::npos ? std::string() : argument.substr(i + 2, close - i - 2);
      if (name == "local_rank") {
        out += rank;
        i = close;
      } else {
        out += '$';
      }
    } else if (identifierStart(next)) {
      std::size_t end = i + 1;
      while (end < argument.size() && identifierChar(argument[end])) ++end;
      if (argument.compare(i + 1, end - i - 1, "local_rank") == 0) {
        out += rank;
        i = end - 1;
      } else {
        out += '$';
      }
    } else {
      out += '$';
    }
  }
  return out;
}

bool setsOmpNumThreads(const std::map<std::string, std::string>& inherited,
                       const LaunchConfig& config) {
  return config.nprocPerNode > 1 && !inherited.contains("OMP_NUM_THREADS");
}

std::string ompNumThreadsWarning() {
  return "\n*****************************************\n"
         "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
         "avoid your system being overloaded, please further tune the variable for optimal "
         "performance in your application as needed. \n"
         "*****************************************";
}

std::string signalNames(const std::vector<int>& signals) {
  std::string out;
  for (int sig : signals) {
    if (!out.empty()) out += ',';
    const char* abbrev = ::sigabbrev_np(sig);
    out += abbrev ? fmt::format("SIG{}", abbrev) : std::to_string(sig);
  }
  return out;
}

std::vector<std::string> workerEnvironment(const std::map<std::string, std::string>& inherited,
                                           const LaunchConfig& config,
                                           const WorkerPlacement& placement,
                                           const RoundEnvironment& round,
                                           const std::string& errorFile) {
  std::map<std::string, std::string> env = inherited;
  const std::string localRank =
      std::to_string(config.virtualLocalRank ? 0 : placement.localRank);
  env["LOCAL_RANK"] = localRank;
  env["RANK"] = std::to_string(placement.rank);
  env["GROUP_RANK"] = std::to_string(placement.groupRank);
  env["ROLE_RANK"] = std::to_string(placement.rank);
  env["ROLE_NAME"] = config.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(placement.localWorldSize);
  env["WORLD_SIZE"] = std::to_string(placement.worldSize);
  env["GROUP_WORLD_SIZE"] = std::to_string(placement.groupWorldSize);
  env["ROLE_WORLD_SIZE"] = std::to_string(placement.worldSize);
  env["MASTER_ADDR"] = round.masterAddr;
  env["MASTER_PORT"] = std::to_string(round.masterPort);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(round.restartCount);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(config.maxRestarts);
  env["TORCHELASTIC_RUN_ID"] = round.runId;
  // Workers connect to the agents' store as clients instead of rank 0 hosting one.
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_ERROR_FILE"] = errorFile;
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = signalNames(config.signalsToHandle);
  // Both names: torch 1.13 reads the first, 2.x the second. A value the user set is kept.
  env["NCCL_ASYNC_ERROR_HANDLING"] = lookup(inherited, "NCCL_ASYNC_ERROR_HANDLING", "1");
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = lookup(inherited, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (setsOmpNumThreads(inherited, config)) env["OMP_NUM_THREADS"] = "1";
  // ddprun's own: a job-global, monotonic round number (torch's restart count is not enough to
  // tell rounds apart: a membership change re-forms the job without a restart).
  env["DDPRUN_GENERATION"] = std::to_string(round.generation);
  // ddprun's own: inherited by every descendant, whatever session it makes, so the guardian can
  // find them all if the agent is killed where no cgroup can hold them (Guardian in
  // process_group.h).
  if (!round.agentToken.empty()) env[kAgentTokenVariable] = round.agentToken;
  if (config.virtualLocalRank) {
    // Each worker sees only its own device, as LOCAL_RANK 0.
    std::string device = std::to_string(placement.localRank);
    if (auto visible = inherited.find("CUDA_VISIBLE_DEVICES"); visible != inherited.end()) {
      std::vector<std::string> devices;
      std::size_t start = 0;
      while (start <= visible->second.size()) {
        const std::size_t comma = visible->second.find(',', start);
        devices.push_back(visible->second.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (placement.localRank < static_cast<int>(devices.size())) device = devices[placement.localRank];
    }
    env["CUDA_VISIBLE_DEVICES"] = device;
  }
  std::vector<std::string> entries;
  entries.reserve(env.size());
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  return entries;
}

WorkerCommand workerCommand(const LaunchConfig& config, const WorkerPlacement& placement,
                            const std::map<std::string, std::string>& inherited) {
  WorkerCommand command;
  switch (config.entryKind) {
    case EntryKind::kPythonScript:
      command.path = config.python;
      command.argv = {config.python, "-u", config.trainingScript};
      break;
    case EntryKind::kPythonModule:
      command.path = config.python;
      command.argv = {config.python, "-u", "-m", config.trainingScript};
      break;
    case EntryKind::kRunPath:
      command.path = config.python;
      command.argv = {config.python, "-u", "-c", kRunPathBootstrap, config.trainingScript};
      break;
    case EntryKind::kExecutable: {
      std::string path = config.executable;  // resolved by the command line parser
      if (path.empty()) {
        auto found = findExecutable(config.trainingScript, lookup(inherited, "PATH", "/usr/bin:/bin"));
        if (!found) throw std::runtime_error(fmt::format("{}: not found", config.trainingScript));
        path = *found;
      }
      command.path = path;
      command.argv = {config.trainingScript};
      break;
    }
  }
  command.argv.insert(command.argv.end(), config.trainingScriptArgs.begin(),
                      config.trainingScriptArgs.end());
  // torchrun expands ${local_rank} in everything after the interpreter (the script included).
  for (std::size_t i = 1; i < command.argv.size(); ++i) {
    command.argv[i] = substituteLocalRank(command.argv[i], placement.localRank);
  }
  if (!config.numaBinding.empty()) {
    // Spread the workers over the NUMA nodes in order, and keep each one's memory there.
    auto numactl = findExecutable("numactl", lookup(inherited, "PATH", "/usr/bin:/bin"));
    if (!numactl) throw std::runtime_error("--numa-binding needs numactl on PATH");
    const int node = placement.localRank * numaNodeCount() / std::max(1, placement.localWorldSize);
    std::vector<std::string> wrapped = {*numactl, fmt::format("--cpunodebind={}", node),
                                        fmt::format("--membind={}", node)};
    if (config.numaBinding != "node" && config.numaBinding != "exclusive") {
      wrapped[2] = fmt::format("--preferred={}", node);
    }
    wrapped.insert(wrapped.end(), command.argv.begin(), command.argv.end());
    command.path = *numactl;
    command.argv = std::move(wrapped);
  }
  return command;
}

}  // namespace ddprun::launcher
