#include "cli/ssh_launch_options.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <set>
#include <system_error>

#include "cli/options.h"
#include "cli/value_parsers.h"
#include "core/file_text.h"
#include "ddprun/common/path_lookup.h"
#include "ddprun/common/random_id.h"
#include "ddprun/common/text.h"
#include "hosts/host_list.h"
#include "hosts/ssh_command.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printable;

// The driver's own options: the hosts' agents never see them.
constexpr std::array<std::string_view, 7> kDriverOptions = {
    "hosts", "hostfile", "include", "exclude", "forward-env", "ssh-options", "ssh-ddprun"};
// The rendezvous the driver decides for every agent: given values are checked, then replaced.
constexpr std::array<std::string_view, 9> kRendezvousOptions = {
    "nnodes",    "rdzv-backend", "rdzv-endpoint", "rdzv-id",   "standalone",
    "node-rank", "master-addr",  "master-port",   "local-addr"};

// The token a launch makes when the user gives none: 32 bytes, as `openssl rand -hex 32`.
constexpr std::size_t kTokenBytes = 32;

// A hostfile is the user's; bounded all the same (a hostfile of a megabyte is a wrong file).
constexpr std::size_t kHostfileLimit = 1 << 20;

template <std::size_t N>
bool among(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const GivenValue* find(const std::map<std::string_view, GivenValue>& given, std::string_view name) {
  const auto it = given.find(name);
  return it == given.end() ? nullptr : &it->second;
}

std::vector<hosts::ListedHost> listedHosts(const std::map<std::string_view, GivenValue>& given) {
  const GivenValue* list = find(given, "hosts");
  const GivenValue* file = find(given, "hostfile");
  if (list != nullptr && file != nullptr) {
    throw UsageError(fmt::format("{} and {} both name the hosts; give one of them",
                                 printable(list->origin), printable(file->origin)));
  }
  if (list != nullptr) return hosts::parseHostList(list->value, list->origin);
  std::string why;
  const auto text = readFileText(file->value, &why, kHostfileLimit + 1);
  if (!text) {
    throw UsageError(fmt::format("{} {}: cannot read it ({}); give a file of 'HOST slots=N' lines",
                                 printable(file->origin), quote(file->value), printable(why)));
  }
  if (text->size() > kHostfileLimit) {
    throw UsageError(fmt::format("{} {}: larger than 1 MiB, not a hostfile",
                                 printable(file->origin), quote(file->value)));
  }
  return hosts::parseHostfile(*text, file->value);
}

std::vector<hosts::SelectedHost> selectedHosts(
    const std::map<std::string_view, GivenValue>& given) {
  const auto listed = listedHosts(given);
  const GivenValue* include = find(given, "include");
  const GivenValue* exclude = find(given, "exclude");
  if (include != nullptr && exclude != nullptr) {
    throw UsageError(fmt::format("{} and {} cannot be used together (as with DeepSpeed); give one",
                                 printable(include->origin), printable(exclude->origin)));
  }
  if (include != nullptr) {
    return hosts::selectHosts(listed, hosts::SelectionKind::kInclude, include->value,
                              include->origin);
  }
  if (exclude != nullptr) {
    return hosts::selectHosts(listed, hosts::SelectionKind::kExclude, exclude->value,
                              exclude->origin);
  }
  return hosts::allHosts(listed);
}

// The rendezvous options a launch over ssh cannot take, and the checks of those it can.
void checkRendezvousOptions(const std::map<std::string_view, GivenValue>& given,
                            std::size_t hostCount) {
  for (const std::string_view name : {"standalone", "node-rank"}) {
    if (const GivenValue* value = find(given, name)) {
      throw UsageError(
          fmt::format("{} does not go with --hosts/--hostfile (every host joins one "
                      "c10d rendezvous and gets its rank there); drop it",
                      printable(value->origin)));
    }
  }
  // One value for every host would give them all one address.
  if (const GivenValue* value = find(given, "local-addr")) {
    throw UsageError(
        fmt::format("{} does not go with --hosts/--hostfile (it would be every "
                    "host's address); drop it: each host's agent finds its own",
                    printable(value->origin)));
  }
  if (const GivenValue* backend = find(given, "rdzv-backend");
      backend && backend->value != "c10d") {
    throw UsageError(
        fmt::format("{}: a launch over ssh uses the c10d backend, hosted by the "
                    "first host; drop it or give {}",
                    label(*backend), example(*backend, "c10d")));
  }
  if (const GivenValue* nnodes = find(given, "nnodes")) {
    const auto [low, high] = parseNnodes(*nnodes);
    if (low != high || static_cast<std::size_t>(low) != hostCount) {
      throw UsageError(
          fmt::format("{}: with --hosts/--hostfile the number of nodes is the number "
                      "of hosts ({}); drop it",
                      label(*nnodes), hostCount));
    }
  }
  if (const GivenValue* port = find(given, "master-port")) {
    if (!parsePort(port->value)) {
      throw UsageError(fmt::format("{}: a port must be in 0..65535, e.g. {}", label(*port),
                                   example(*port, "29400")));
    }
  }
}

// HOST:PORT for a host name or address (an IPv6 address in brackets).
std::string endpointOf(std::string_view host, std::string_view port) {
  if (host.find(':') != std::string_view::npos && !host.starts_with('[')) {
    return fmt::format("[{}]:{}", host, port);
  }
  return fmt::format("{}:{}", host, port);
}

std::string rendezvousEndpoint(const std::map<std::string_view, GivenValue>& given,
                               const std::string& firstHost) {
  if (const GivenValue* endpoint = find(given, "rdzv-endpoint"))
    return std::string(trim(endpoint->value));
  const GivenValue* port = find(given, "master-port");
  const std::string portText =
      port != nullptr ? std::string(trim(port->value)) : std::to_string(kDefaultC10dPort);
  if (const GivenValue* addr = find(given, "master-addr"))
    return endpointOf(trim(addr->value), portText);
  return endpointOf(firstHost, portText);
}

// The ssh options as words ("-i key -o Port=2222").
std::vector<std::string> sshOptionWords(std::string_view text) {
  const auto words = hosts::blankSeparatedWords(text);
  return {words.begin(), words.end()};
}

std::vector<std::string> forwardedNames(const std::map<std::string_view, GivenValue>& given) {
  std::vector<std::string> names;
  const GivenValue* list = find(given, "forward-env");
  if (list == nullptr) return names;
  for (const std::string_view name : split(list->value, ',')) {
    if (!hosts::isVariableName(trim(name))) {
      throw UsageError(fmt::format("{}: {} is not a variable name; give NAME,NAME..., e.g. {}",
                                   label(*list), quote(name),
                                   example(*list, "WANDB_API_KEY,HF_HOME")));
    }
    names.emplace_back(trim(name));
  }
  return names;
}

// ddprun's path here, the default for the hosts.
std::string ownPath() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error)
    throw UsageError("cannot tell ddprun's own path (/proc/self/exe); give --ssh-ddprun PATH");
  return path.string();
}

// The job's own options, for every agent: each as --name=value, so that no value is ever read as
// an option, then "--" and the script with its arguments untouched.
std::vector<std::string> agentArguments(const std::map<std::string_view, GivenValue>& given,
                                        const EntryPoint& entry) {
  std::vector<std::string> words;
  for (const auto& [name, value] : given) {
    if (isDriverOption(name) || among(kRendezvousOptions, name) || name == "nproc-per-node")
      continue;
    if (value.spec->kind == ValueKind::kFlag) {
      words.push_back(fmt::format("--{}", name));
    } else {
      words.push_back(fmt::format("--{}={}", name, value.value));
    }
  }
  words.emplace_back("--");
  words.push_back(entry.script);
  words.insert(words.end(), entry.args.begin(), entry.args.end());
  return words;
}

// The number a host runs: --nproc-per-node as given (resolved on each host), else the slots
// --include/--exclude chose, else the hostfile's slots, else 1.
std::string workersOf(const GivenValue* nproc, const hosts::SelectedHost& host) {
  if (nproc != nullptr) return std::string(trim(nproc->value));
  if (host.devices) return std::to_string(host.devices->size());
  if (host.slots > 0) return std::to_string(host.slots);
  return "1";
}

}  // namespace

bool isDriverOption(std::string_view name) { return among(kDriverOptions, name); }

bool wantsSshLaunch(const std::map<std::string_view, GivenValue>& given) {
  if (given.contains("hosts") || given.contains("hostfile")) return true;
  for (const std::string_view name : kDriverOptions) {
    if (const GivenValue* value = find(given, name)) {
      throw UsageError(
          fmt::format("{} belongs to a launch over ssh; give --hosts or --hostfile "
                      "too, or drop it",
                      printable(value->origin)));
    }
  }
  return false;
}

CommandLine sshCommandLine(
    const std::map<std::string_view, GivenValue>& given, const Environment& environment,
    const std::function<CommandLine(std::map<std::string_view, GivenValue>)>& validate) {
  for (const std::string_view name : {"stop-on-stdin-eof", "token-from-stdin"}) {
    if (const GivenValue* internal = find(given, name)) {
      throw UsageError(fmt::format("{} is set by --hosts on each host's agent; drop it",
                                   printable(internal->origin)));
    }
  }
  std::vector<hosts::SelectedHost> selected;
  try {
    selected = selectedHosts(given);
  } catch (const hosts::HostListError& error) {
    throw UsageError(error.what());  // already one line naming the place and the fix
  }
  checkRendezvousOptions(given, selected.size());

  // The job's options, checked as for one node; nproc words (gpu, auto, ...) are resolved on each
  // host, where the GPUs are, so only a number is checked here.
  std::map<std::string_view, GivenValue> own;
  for (const auto& [name, value] : given) {
    if (isDriverOption(name) || among(kRendezvousOptions, name)) continue;
    if (name == "nproc-per-node" && !parseWholeNumber(value.value)) continue;
    own.emplace(name, value);
  }
  CommandLine result = validate(std::move(own));

  hosts::SshLaunch launch;
  const GivenValue* nproc = find(given, "nproc-per-node");
  for (const auto& host : selected) {
    hosts::RemoteAgent agent{host.name, workersOf(nproc, host), std::nullopt};
    if (host.devices) {
      std::string devices;
      for (const int device : *host.devices)
        devices += (devices.empty() ? "" : ",") + std::to_string(device);
      agent.cudaVisibleDevices = devices;
    }
    launch.agents.push_back(std::move(agent));
  }
  launch.rdzvEndpoint = rendezvousEndpoint(given, selected.front().name);
  const GivenValue* id = find(given, "rdzv-id");
  launch.runId = id != nullptr ? parseRunId(*id) : "ssh-" + common::randomHexId();
  launch.agentArguments = agentArguments(given, result.config.entry);
  launch.exitCodes = result.config.restart.exitCodes;
  launch.environment = hosts::forwardedEnvironment(environment, forwardedNames(given));
  // Secure by default: without the user's token file (which each host's agent then reads, as
  // given), a token made here, which only the agents get (over their ssh sessions' stdin).
  if (result.config.rdzv.settings.tokenFile.empty()) {
    try {
      launch.token = common::randomHexSecret(kTokenBytes);
    } catch (const std::system_error& error) {
      throw UsageError(
          fmt::format("cannot make the job's token ({}); give one with --rdzv-conf "
                      "token_file=PATH",
                      error.what()));
    }
  }

  const auto ssh = common::findExecutable("ssh", environment);
  if (!ssh) {
    throw UsageError(
        "--hosts/--hostfile start the hosts' agents with OpenSSH's client, and ssh is "
        "not on PATH; install it (apt-get install openssh-client)");
  }
  launch.sshProgram = *ssh;
  if (const GivenValue* options = find(given, "ssh-options")) {
    launch.sshOptions = sshOptionWords(options->value);
  } else if (const auto* fromEnvironment = lookup(environment, "DDPRUN_SSH_OPTIONS")) {
    launch.sshOptions = sshOptionWords(*fromEnvironment);
  }
  if (const GivenValue* program = find(given, "ssh-ddprun")) {
    launch.remoteProgram = program->value;
  } else if (const auto* fromEnvironment = lookup(environment, "DDPRUN_REMOTE_BIN")) {
    launch.remoteProgram = *fromEnvironment;
  } else {
    launch.remoteProgram = ownPath();
  }
  std::error_code error;
  launch.remoteDirectory = std::filesystem::current_path(error).string();
  if (error)
    throw UsageError("cannot tell the working directory, which the hosts' agents start in");
  launch.stopGrace = result.config.restart.shutdownTimeout + std::chrono::seconds(15);
  result.sshLaunch = std::move(launch);
  return result;
}

}  // namespace ddprun::launcher::cli_detail
