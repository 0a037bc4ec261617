#include "cli/slurm.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "cli/options.h"
#include "cli/slurm_hostlist.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printablePrefix;

// Slurm's step ids above this are not task steps: the batch script (0xfffffffe), the extern
// step (0xfffffffc), the interactive step of salloc (0xfffffffa), pending (0xfffffffd).
constexpr std::uint64_t kLastTaskStep = 0xfffffff0;

constexpr const char* kSrun = "srun --ntasks-per-node=1 ddprun ...";

// The first of `names` that is set, and its name.
std::pair<const std::string*, std::string> firstSet(const Environment& environment,
                                                    std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const auto* value = lookup(environment, name)) return {value, name};
  }
  return {nullptr, *names.begin()};
}

// A Slurm number: digits only (Slurm writes them so).
std::optional<std::uint64_t> slurmNumber(const std::string& value) {
  const std::string_view text = trim(value);
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::uint64_t number = 0;
  for (const char c : text) number = number * 10 + static_cast<std::uint64_t>(c - '0');
  return number;
}

[[noreturn]] void badVariable(const std::string& name, const std::string* value,
                              std::string_view what) {
  throw UsageError(
      fmt::format("{} {} is not {}; ddprun reads the Slurm step from it: run ddprun as `{}` in an "
                  "unmodified Slurm step, or give the rendezvous options yourself (--nnodes, "
                  "--rdzv-endpoint, ...)",
                  name, value == nullptr ? std::string("(unset)") : quote(*value), what, kSrun));
}

// A Slurm variable that must hold a number.
std::uint64_t numberOf(const Environment& environment, std::initializer_list<const char*> names,
                       std::string_view what) {
  const auto [value, name] = firstSet(environment, names);
  const auto number = value == nullptr ? std::nullopt : slurmNumber(*value);
  if (!number) badVariable(name, value, what);
  return *number;
}

// SLURM_STEP_TASKS_PER_NODE, "2(x3),1": the largest count of tasks on one node, or nothing for
// text that is not in that form.
std::optional<std::uint64_t> mostTasksOnANode(std::string_view text) {
  std::uint64_t most = 0;
  for (const auto piece : split(text, ',')) {
    const std::string_view entry = trim(piece);
    const std::size_t paren = entry.find('(');
    const auto count = slurmNumber(std::string(entry.substr(0, paren)));
    if (!count) return std::nullopt;
    if (paren != std::string_view::npos) {
      const std::string_view repeat = entry.substr(paren);
      if (repeat.size() < 4 || !repeat.starts_with("(x") || !repeat.ends_with(")") ||
          !slurmNumber(std::string(repeat.substr(2, repeat.size() - 3)))) {
        return std::nullopt;
      }
    }
    most = std::max(most, *count);
  }
  return most;
}

// Two or more tasks of the step on one node would be two agents each starting the node's workers:
// a double job on one GPU set. Every task of such a step must see it, not only the second one, so
// the step-wide counts are read first.
void checkOneTaskPerNode(const Environment& environment, const std::string& stepName, int nodes) {
  const auto why = [&](const std::string& seen) {
    return UsageError(fmt::format(
        "Slurm step {} runs more than one task on a node ({}): ddprun is one agent per node that "
        "starts the node's --nproc-per-node workers itself; run `{}`",
        stepName, seen, kSrun));
  };
  const auto [tasks, tasksName] =
      firstSet(environment, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  if (tasks != nullptr) {
    const auto count = slurmNumber(*tasks);
    if (count && *count > static_cast<std::uint64_t>(nodes)) {
      throw why(fmt::format("{}={} on SLURM_STEP_NUM_NODES={}", tasksName, printablePrefix(*tasks),
                            nodes));
    }
  }
  if (const auto* perNode = lookup(environment, "SLURM_STEP_TASKS_PER_NODE")) {
    const auto most = mostTasksOnANode(*perNode);
    if (!most)
      badVariable("SLURM_STEP_TASKS_PER_NODE", perNode, "a Slurm task count such as 1(x2)");
    if (*most > 1)
      throw why(fmt::format("SLURM_STEP_TASKS_PER_NODE={}", printablePrefix(*perNode)));
  }
  if (const auto* local = lookup(environment, "SLURM_LOCALID")) {
    const auto id = slurmNumber(*local);
    if (id && *id != 0) throw why(fmt::format("SLURM_LOCALID={}", printablePrefix(*local)));
  }
}

// A node list in a message: quoted, escaped, and no longer than a line should be (a list of
// thousands of hosts written out is possible).
std::string shownList(std::string_view list) {
  return "'" + printablePrefix(list) + (list.size() > common::kShownBytes ? "...'" : "'");
}

bool isIpLiteral(const std::string& host) {
  unsigned char buffer[16];
  return ::inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

}  // namespace

std::uint16_t slurmStorePort(std::uint64_t jobId, std::uint64_t stepId) {
  return static_cast<std::uint16_t>(20000 + 10 * (jobId % 1000) + stepId % 10);
}

const std::vector<const char*>& slurmOverridingOptions() {
  static const std::vector<const char*> names = {"nnodes",        "node-rank", "rdzv-backend",
                                                 "rdzv-endpoint", "rdzv-id",   "master-addr",
                                                 "master-port",   "standalone"};
  return names;
}

std::optional<SlurmStep> detectSlurmStep(const std::map<std::string_view, GivenValue>& given,
                                         const Environment& environment,
                                         std::vector<std::string>& notes) {
  const auto [job, jobName] = firstSet(environment, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (job == nullptr) return std::nullopt;
  const auto [step, stepVariable] = firstSet(environment, {"SLURM_STEP_ID", "SLURM_STEPID"});
  // No step, or one that is not a number, reads as no task step (a plain integer, not an
  // optional: GCC 12 sees the optional as maybe uninitialized below).
  std::uint64_t stepId = std::numeric_limits<std::uint64_t>::max();
  if (step != nullptr) stepId = slurmNumber(*step).value_or(stepId);
  const bool taskStep = stepId < kLastTaskStep;
  for (const char* name : slurmOverridingOptions()) {
    const auto it = given.find(optionNamed(name).name);
    if (it == given.end()) continue;
    if (taskStep) {
      notes.push_back(fmt::format(
          "Slurm step {}.{}: not read, as {} is given (ddprun takes the rendezvous from Slurm "
          "only when no rendezvous option is given; docs/slurm.md)",
          printablePrefix(*job), printablePrefix(*step), printablePrefix(it->second.origin)));
    }
    return std::nullopt;
  }
  const std::uint64_t jobId = numberOf(environment, {jobName.c_str()}, "a Slurm job id");
  if (!taskStep) {
    throw UsageError(fmt::format(
        "ddprun runs in Slurm job {} but outside a job step ({}: the batch script or an salloc "
        "shell), where nothing says which nodes take part; start one ddprun per node with `{}` "
        "(e.g. in the sbatch script), or give the rendezvous options yourself (--standalone for "
        "one node)",
        jobId,
        step == nullptr
            ? std::string("SLURM_STEP_ID is not set")
            : fmt::format("{}={}, not a task step", stepVariable, printablePrefix(*step)),
        kSrun));
  }
  SlurmStep result;
  result.jobId = std::to_string(jobId);
  result.stepId = std::to_string(stepId);
  const std::string stepName = result.jobId + "." + result.stepId;

  const std::uint64_t nodes = numberOf(environment, {"SLURM_STEP_NUM_NODES"}, "a node count");
  if (nodes == 0 || nodes > kMaxHosts) {
    badVariable("SLURM_STEP_NUM_NODES", lookup(environment, "SLURM_STEP_NUM_NODES"),
                fmt::format("a node count in 1..{}", kMaxHosts));
  }
  result.nodes = static_cast<int>(nodes);
  checkOneTaskPerNode(environment, stepName, result.nodes);
  const std::uint64_t nodeId = numberOf(environment, {"SLURM_NODEID"}, "a node id");
  if (nodeId >= nodes) {
    badVariable("SLURM_NODEID", lookup(environment, "SLURM_NODEID"),
                fmt::format("a node id below SLURM_STEP_NUM_NODES={}", nodes));
  }
  result.nodeId = static_cast<int>(nodeId);

  const auto* nodelist = lookup(environment, "SLURM_STEP_NODELIST");
  if (nodelist == nullptr) badVariable("SLURM_STEP_NODELIST", nodelist, "a Slurm host list");
  result.nodelist = *nodelist;
  try {
    result.hosts = expandSlurmHostlist(*nodelist);
  } catch (const SlurmHostlistError& error) {
    throw UsageError(
        fmt::format("SLURM_STEP_NODELIST: {}; it is not a Slurm host list ddprun "
                    "can read (docs/slurm.md): give the rendezvous options yourself",
                    error.what()));
  }
  if (result.hosts.size() != nodes) {
    throw UsageError(fmt::format(
        "SLURM_STEP_NODELIST {} names {} hosts but SLURM_STEP_NUM_NODES is {}; the Slurm "
        "environment was changed: run ddprun as `{}` in an unmodified step",
        shownList(*nodelist), result.hosts.size(), nodes, kSrun));
  }

  if (const auto* port = lookup(environment, "DDPRUN_SLURM_PORT")) {
    const auto parsed = parsePort(trim(*port));
    if (!parsed || *parsed == 0) {
      throw UsageError(
          fmt::format("DDPRUN_SLURM_PORT {} is not a port in 1..65535; give the "
                      "same free port on every node, e.g. DDPRUN_SLURM_PORT=29400",
                      quote(*port)));
    }
    result.port = *parsed;
    result.portOverridden = true;
  } else {
    result.port = slurmStorePort(jobId, stepId);
  }
  return result;
}

void addSlurmValues(const SlurmStep& step, std::map<std::string_view, GivenValue>& given) {
  const auto add = [&](const char* name, std::string value, const char* origin) {
    const OptionSpec& spec = optionNamed(name);
    given.insert_or_assign(spec.name, GivenValue{&spec, std::move(value), origin, true});
  };
  add("nnodes", std::to_string(step.nodes), "SLURM_STEP_NUM_NODES");
  add("node-rank", std::to_string(step.nodeId), "SLURM_NODEID");
  add("rdzv-backend", "c10d", "SLURM_STEP_ID");
  const std::string& host = step.storeHost();
  const bool ipv6 = host.find(':') != std::string::npos;
  add("rdzv-endpoint",
      ipv6 ? fmt::format("[{}]:{}", host, step.port) : fmt::format("{}:{}", host, step.port),
      "SLURM_STEP_NODELIST");
  add("rdzv-id", step.runId(), "SLURM_JOB_ID");
}

void applySlurmStep(const SlurmStep& step, CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  if (!rdzv.settings.isHost) rdzv.settings.isHost = step.nodeId == 0;
  const std::string& self = step.hosts[static_cast<std::size_t>(step.nodeId)];
  if (rdzv.localAddr.empty() && isIpLiteral(self)) rdzv.localAddr = self;
  rdzv.endpointSource =
      step.portOverridden
          ? std::string(
                "comes from DDPRUN_SLURM_PORT; set it to another free port, the same on "
                "every node")
          : fmt::format(
                "is derived from Slurm job {} step {}; set DDPRUN_SLURM_PORT to a free port, "
                "the same on every node",
                step.jobId, step.stepId);
  result.notes.push_back(fmt::format(
      "Slurm step {}.{}: node {} of {}, store on {}:{} (the first host of SLURM_STEP_NODELIST "
      "{}, hosted by node 0; port {}), run id {}",
      step.jobId, step.stepId, step.nodeId, step.nodes, printablePrefix(step.storeHost()),
      rdzv.port, shownList(step.nodelist),
      step.portOverridden ? "from DDPRUN_SLURM_PORT" : "from the job and step ids",
      printablePrefix(rdzv.runId)));
}

}  // namespace ddprun::launcher::cli_detail
