#include "hosts/ssh_command.h"

#include <fmt/format.h>

#include "core/cuda_visible_devices.h"

namespace ddprun::launcher::hosts {

std::string shellQuote(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

bool isVariableName(std::string_view name) {
  if (name.empty() || (name.front() >= '0' && name.front() <= '9')) return false;
  for (const char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::map<std::string, std::string> forwardedEnvironment(
    const std::map<std::string, std::string>& environment, const std::vector<std::string>& names) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : environment) {
    if (!isVariableName(name)) continue;
    if (name.starts_with("NCCL_") || name.starts_with("PYTHON") || name == kCudaVisibleDevices) {
      out[name] = value;
    }
  }
  for (const auto& name : names) {
    if (!isVariableName(name)) continue;
    if (const auto it = environment.find(name); it != environment.end()) out[name] = it->second;
  }
  return out;
}

std::string remoteCommand(const SshLaunch& launch, std::size_t index) {
  const RemoteAgent& agent = launch.agents.at(index);
  std::string command = "cd " + shellQuote(launch.remoteDirectory) + " &&";
  // The variables are the shell's exports, not `env NAME=value` words: env takes every word
  // holding '=' for an assignment, ddprun's path too (/opt/x=y/ddprun). A name is checked
  // (isVariableName) and written bare, its value quoted.
  std::map<std::string, std::string> environment = launch.environment;
  if (agent.cudaVisibleDevices) environment[kCudaVisibleDevices] = *agent.cudaVisibleDevices;
  std::string exports;
  for (const auto& [name, value] : environment) {
    if (isVariableName(name)) exports += " " + name + "=" + shellQuote(value);
  }
  if (!exports.empty()) command += " export" + exports + " &&";
  command += " exec";
  std::vector<std::string> own = {
      launch.remoteProgram,
      "--stop-on-stdin-eof",
      fmt::format("--nnodes={}", launch.agents.size()),
      "--nproc-per-node=" + agent.nprocPerNode,
      "--rdzv-backend=c10d",
      "--rdzv-endpoint=" + launch.rdzvEndpoint,
      "--rdzv-id=" + launch.runId,
  };
  // The token itself comes on stdin, written by the driver (ssh_driver.h): never a word here.
  if (launch.token) own.emplace_back("--token-from-stdin");
  for (const auto& word : own) command += " " + shellQuote(word);
  for (const auto& word : launch.agentArguments) command += " " + shellQuote(word);
  return command;
}

std::vector<std::string> sshArgv(const SshLaunch& launch, std::size_t index) {
  std::vector<std::string> argv = {launch.sshProgram};
  argv.insert(argv.end(), launch.sshOptions.begin(), launch.sshOptions.end());
  for (const std::string& option :
       {std::string("BatchMode=yes"),
        fmt::format("ConnectTimeout={}", launch.connectTimeout.count()),
        std::string("ServerAliveInterval=5"), std::string("ServerAliveCountMax=3")}) {
    argv.push_back("-o");
    argv.push_back(option);
  }
  // -T: no terminal on the host (the agent's stdin is the driver's pipe, see ssh_driver.h).
  argv.push_back("-T");
  argv.push_back("--");
  argv.push_back(launch.agents.at(index).host);
  argv.push_back(remoteCommand(launch, index));
  return argv;
}

}  // namespace ddprun::launcher::hosts
