// The ddprun command line, its three stages put together:
//
//   1. splitArguments (given_values.h): argv -> the options given, up to the training script.
//   2. PET_<DEST> fallbacks for options the command line did not give, then every value
//      converted to its type (arguments.h).
//   3. buildConfig (here): semantic validation and resolution (nproc, endpoints, the entry point,
//      host names, files) into a LaunchConfig. Every failure is a one-line UsageError that names
//      where the value came from (the option as typed, or the PET_ variable) and how to fix it.
#include "cli/cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "cli/arguments.h"
#include "cli/entry_point.h"
#include "cli/given_values.h"
#include "cli/host_probes.h"
#include "cli/options.h"
#include "cli/rendezvous.h"
#include "cli/slurm.h"
#include "cli/ssh_launch_options.h"
#include "cli/value_parsers.h"
#include "core/line_pattern.h"
#include "ddprun/common/path_lookup.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using namespace cli_detail;
using common::printable;
using std::chrono::milliseconds;

milliseconds secondsToMilliseconds(double seconds) {
  return milliseconds(std::llround(seconds * 1000));
}

void checkNumber(const Arguments& arguments, std::string_view name, const char* rule,
                 std::string_view good, bool ok) {
  if (ok) return;
  const auto* given = arguments.given(name);
  throw UsageError(fmt::format("{}: {}; e.g. {}", label(*given), rule, example(*given, good)));
}

// A number of seconds where 0 means "no limit" (nothing); `current` when not given.
std::optional<milliseconds> optionalSeconds(const Arguments& arguments, std::string_view name,
                                            std::optional<milliseconds> current) {
  const auto seconds = arguments.value<double>(name);
  if (!seconds) return current;
  checkNumber(arguments, name, "must be a number of seconds >= 0 (0: no limit)", "60",
              std::isfinite(*seconds) && *seconds >= 0 && *seconds <= kMaxSeconds);
  if (*seconds == 0) return std::nullopt;
  return std::max(secondsToMilliseconds(*seconds), milliseconds(1));
}

// --shutdown-timeout, else $TORCH_ELASTIC_SHUTDOWN_TIMEOUT (as torchrun reads it), else 30 s.
milliseconds resolveShutdownTimeout(const Arguments& arguments, const Environment& environment) {
  if (const auto* given = arguments.given("shutdown-timeout")) {
    const double seconds = *arguments.value<double>("shutdown-timeout");
    if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxSeconds) {
      throw UsageError(
          fmt::format("{}: the shutdown timeout must be a number of seconds >= 0, e.g. {}",
                      label(*given), example(*given, "30")));
    }
    return secondsToMilliseconds(seconds);
  }
  if (const auto* value = lookup(environment, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
    const auto seconds = parseFiniteNumber(*value);
    if (!seconds || *seconds < 0 || *seconds > kMaxSeconds) {
      throw UsageError(fmt::format(
          "TORCH_ELASTIC_SHUTDOWN_TIMEOUT {} is not a number of seconds >= 0; set it to e.g. 30 "
          "or unset it",
          quote(*value)));
    }
    return secondsToMilliseconds(*seconds);
  }
  return std::chrono::seconds(30);
}

// A doubling wait, INITIAL[:CAP] (--restart-backoff, --health-cooldown): two numbers of seconds,
// 0 <= INITIAL <= CAP; the cap defaults to 16 x INITIAL.
std::pair<milliseconds, milliseconds> parseDoublingWait(const GivenValue& given,
                                                        std::string_view good) {
  const std::string_view text = trim(given.value);
  const auto colon = text.find(':');
  const auto initial = parseFiniteNumber(text.substr(0, colon));
  const bool hasCap = colon != std::string_view::npos;
  const double cap = hasCap ? parseFiniteNumber(text.substr(colon + 1)).value_or(-1) : 0;
  const bool ok = initial && *initial >= 0 && *initial <= kMaxSeconds &&
                  (!hasCap || (cap >= *initial && cap <= kMaxSeconds));
  if (!ok) {
    throw UsageError(
        fmt::format("{}: must be INITIAL or INITIAL:CAP, seconds with 0 <= INITIAL <= CAP; e.g. {}",
                    label(given), example(given, good)));
  }
  const milliseconds first = secondsToMilliseconds(*initial);
  return {first, hasCap ? secondsToMilliseconds(cap) : 16 * first};
}

// --restart-backoff, --max-no-progress-restarts, --max-node-failures, --progress-min-time,
// --no-restart-exit-code, --exit-codes.
void applyRestartPolicy(const Arguments& arguments, RestartPolicy& policy) {
  if (const auto* backoff = arguments.given("restart-backoff")) {
    std::tie(policy.backoffInitial, policy.backoffCap) = parseDoublingWait(*backoff, "10:120");
  }
  if (const auto restarts = arguments.value<int>("max-no-progress-restarts")) {
    checkNumber(arguments, "max-no-progress-restarts", "restarts cannot be negative", "3",
                *restarts >= 0);
    policy.maxNoProgressRestarts = *restarts;
  }
  if (const auto failures = arguments.value<int>("max-node-failures")) {
    checkNumber(arguments, "max-node-failures", "must be a count >= 0 (0: never)", "3",
                *failures >= 0);
    policy.maxNodeFailures = *failures;
  }
  if (const auto seconds = arguments.value<double>("progress-min-time")) {
    checkNumber(arguments, "progress-min-time",
                "must be a number of seconds >= 0 (0: only heartbeats and FileTimer requests)",
                "300", std::isfinite(*seconds) && *seconds >= 0 && *seconds <= kMaxSeconds);
    policy.progressMinTime = secondsToMilliseconds(*seconds);
  }
  if (const auto code = arguments.value<int>("no-restart-exit-code")) {
    checkNumber(arguments, "no-restart-exit-code", "an exit code must be in 1..255", "93",
                *code >= 1 && *code <= 255);
    policy.noRestartExitCode = *code;
  }
  if (const auto* scheme = arguments.given("exit-codes")) {
    checkChoice(*scheme);
    policy.exitCodes =
        scheme->value == "classes" ? ExitCodeScheme::kClasses : ExitCodeScheme::kRootCause;
  }
}

// The health gate and the round hooks: --health-check, --health-check-timeout,
// --health-cooldown, --health-min-free-mb, --pre-round-hook, --post-round-hook.
void applyHealth(const Arguments& arguments, HealthPolicy& health) {
  if (const auto* command = arguments.given("health-check")) health.checkCommand = command->value;
  if (const auto* command = arguments.given("pre-round-hook"))
    health.preRoundCommand = command->value;
  if (const auto* command = arguments.given("post-round-hook"))
    health.postRoundCommand = command->value;
  if (const auto seconds = arguments.value<double>("health-check-timeout")) {
    checkNumber(arguments, "health-check-timeout", "must be a number of seconds > 0", "60",
                std::isfinite(*seconds) && *seconds > 0 && *seconds <= kMaxSeconds);
    health.hookTimeout = std::max(secondsToMilliseconds(*seconds), milliseconds(1));
  }
  if (const auto* cooldown = arguments.given("health-cooldown")) {
    std::tie(health.cooldownInitial, health.cooldownCap) = parseDoublingWait(*cooldown, "30:480");
  }
  if (const auto megabytes = arguments.value<double>("health-min-free-mb")) {
    checkNumber(arguments, "health-min-free-mb", "must be a number of MiB >= 0 (0: not checked)",
                "16", std::isfinite(*megabytes) && *megabytes >= 0 && *megabytes <= 1e12);
    health.minFreeBytes = static_cast<std::uint64_t>(*megabytes * 1048576.0);
  }
}

// --max-restarts, --monitor-interval, the shutdown and hang timeouts, --signals-to-handle, and
// the restart policy's options.
void applyRestartAndHang(const Arguments& arguments, const Environment& environment,
                         LaunchConfig& config) {
  if (const auto restarts = arguments.value<int>("max-restarts")) {
    checkNumber(arguments, "max-restarts", "restarts cannot be negative", "3", *restarts >= 0);
    config.restart.maxRestarts = *restarts;
  }
  if (const auto interval = arguments.value<double>("monitor-interval")) {
    checkNumber(arguments, "monitor-interval", "must be a positive number of seconds", "0.1",
                std::isfinite(*interval) && *interval > 0 && *interval <= kMaxSeconds);
    config.restart.monitorInterval = *interval;
  }
  config.restart.shutdownTimeout = resolveShutdownTimeout(arguments, environment);
  config.hang.hangTimeout = optionalSeconds(arguments, "hang-timeout", config.hang.hangTimeout);
  config.hang.startupTimeout =
      optionalSeconds(arguments, "hang-startup-timeout", config.hang.startupTimeout);
  config.hang.exitTimeout = optionalSeconds(arguments, "exit-timeout", config.hang.exitTimeout);
  if (const auto budget = arguments.value<double>("hang-native-stack-budget")) {
    // Up to an hour: the hung worker's kill, and the group's restart, wait this long at most.
    checkNumber(arguments, "hang-native-stack-budget",
                "must be a number of seconds from 0 (no native stacks) to 3600", "2",
                std::isfinite(*budget) && *budget >= 0 && *budget <= 3600);
    config.hang.nativeStackBudget =
        *budget == 0 ? milliseconds(0) : std::max(secondsToMilliseconds(*budget), milliseconds(1));
  }
  if (const auto* signals = arguments.given("signals-to-handle")) {
    config.restart.signalsToHandle = parseSignals(*signals);
  }
  applyRestartPolicy(arguments, config.restart);
}

// --progress-pattern, --start-pattern, --fail-pattern: each compiles (LinePattern), or the one
// line naming the option and the fix; --start-timeout.
void applyLinePatterns(const Arguments& arguments, CommandLine& result) {
  HangPolicy& hang = result.config.hang;
  const auto pattern = [&](std::string_view name, std::string_view good) -> std::string {
    const auto* given = arguments.given(name);
    if (given == nullptr) return {};
    if (given->value.empty()) {
      throw UsageError(fmt::format(
          "{} is empty, which would match every line; give a POSIX extended regular expression "
          "(grep -E), e.g. {}, or leave it out",
          label(*given), example(*given, good)));
    }
    std::string error;
    if (!LinePattern::compile(given->value, error)) {
      throw UsageError(fmt::format(
          "{} is not a POSIX extended regular expression (grep -E): {}; e.g. {} (a literal "
          "( [ . * + ? | {{ or \\ is written with a \\ before it)",
          label(*given), error, example(*given, good)));
    }
    return given->value;
  };
  hang.progressPattern = pattern("progress-pattern", "'step [0-9]+'");
  hang.startPattern = pattern("start-pattern", "'training started'");
  hang.failPattern = pattern("fail-pattern", "'loss (nan|inf)'");
  if (!hang.progressPattern.empty() && !hang.hangTimeout) {
    result.warnings.push_back(fmt::format(
        "{}: without --hang-timeout a matching line counts as progress (the restart policy, "
        "ddprun status) but no worker is found hung for want of one; add e.g. --hang-timeout 300",
        label(*arguments.given("progress-pattern"))));
  }
  if (const auto seconds = arguments.value<double>("start-timeout")) {
    checkNumber(arguments, "start-timeout", "must be a number of seconds > 0", "120",
                std::isfinite(*seconds) && *seconds > 0 && *seconds <= kMaxSeconds);
    hang.startTimeout = std::max(secondsToMilliseconds(*seconds), milliseconds(1));
    if (hang.startPattern.empty()) {
      result.warnings.push_back(fmt::format(
          "{}: without --start-pattern there is no line to wait for; it changes nothing",
          label(*arguments.given("start-timeout"))));
    }
  }
}

// --node-rank, --master-port, --master-addr, --local-addr: checked here, used by
// resolveRendezvous.
void applyNodeAddress(const Arguments& arguments, LaunchConfig& config) {
  if (const auto rank = arguments.value<int>("node-rank")) {
    checkNumber(arguments, "node-rank", "a node rank cannot be negative", "0", *rank >= 0);
    config.rdzv.nodeRank = *rank;
  }
  if (const auto port = arguments.value<int>("master-port")) {
    checkNumber(arguments, "master-port", "a port must be in 0..65535", "29500",
                *port >= 0 && *port <= 65535);
    config.rdzv.masterPort = static_cast<std::uint16_t>(*port);
  }
  if (const auto* addr = arguments.given("master-addr")) {
    if (trim(addr->value).empty()) {
      throw UsageError(fmt::format("{} is empty; give the rank-0 node's address, e.g. {}",
                                   label(*addr), example(*addr, "node0")));
    }
    config.rdzv.masterAddr = std::string(trim(addr->value));
  }
  if (const auto* addr = arguments.given("local-addr")) {
    config.rdzv.localAddr = std::string(trim(addr->value));
  }
}

// --start-method, --event-log-handler, --role.
void applyWorkerSettings(const Arguments& arguments, CommandLine& result) {
  LaunchConfig& config = result.config;
  if (const auto* method = arguments.given("start-method")) {
    checkChoice(*method);
    config.entry.startMethod = method->value;
    if (method->value != "spawn") {
      result.warnings.push_back(fmt::format(
          "{}: ddprun starts every worker as a fresh process (as spawn does); {} changes nothing",
          label(*method), method->value));
    }
  }
  if (const auto* handler = arguments.given("event-log-handler")) {
    checkChoice(*handler);
    config.eventLogHandler = handler->value;
  }
  if (const auto* role = arguments.given("role")) config.role = role->value;
}

// -r, -t, --local-ranks-filter, the duplicate filters, --logs-specs.
void applyLogSettings(const Arguments& arguments, CommandLine& result) {
  LogSettings& logs = result.config.logs;
  if (const auto* redirects = arguments.given("redirects")) {
    logs.redirects = parseStreamSelection(*redirects);
  }
  if (const auto* tee = arguments.given("tee")) logs.tee = parseStreamSelection(*tee);
  if (const auto* filter = arguments.given("local-ranks-filter")) {
    logs.localRanksFilter = parseLocalRanksFilter(*filter);
    const int workers = result.config.nprocPerNode;
    if (logs.localRanksFilter && *logs.localRanksFilter->rbegin() >= workers) {
      result.warnings.push_back(
          fmt::format("{}: local rank {} does not exist with {} workers per node", label(*filter),
                      *logs.localRanksFilter->rbegin(), workers));
    }
  }
  if (const auto* filters = arguments.given("duplicate-stdout-filters")) {
    logs.duplicateStdoutFilters = parseDuplicateFilters(filters->value);
  }
  if (const auto* filters = arguments.given("duplicate-stderr-filters")) {
    logs.duplicateStderrFilters = parseDuplicateFilters(filters->value);
  }
  logs.time = arguments.flag("log-time");
  // torch registers its built-in DefaultLogsSpecs under the name "default" (the
  // torchrun.logs_specs entry point group); ddprun's log files follow that layout.
  const auto* specs = arguments.given("logs-specs");
  if (specs != nullptr && specs->value != "default") {
    throw UsageError(
        fmt::format("{} names a Python LogsSpecs plugin and ddprun has no Python plugin host; "
                    "drop it (or give default, torch's own) and use --log-dir, --redirects and "
                    "--tee",
                    label(*specs)));
  }
}

// --numa-binding: a known mode. The CPUs are planned by the agent on its own node
// (placement/numa_plan.h), not here: with --hosts this process is not on the workers' nodes.
void applyNumaBinding(const Arguments& arguments, LaunchConfig& config) {
  const auto* numa = arguments.given("numa-binding");
  if (numa == nullptr) return;
  checkChoice(*numa);
  for (NumaAffinity mode : {NumaAffinity::kNode, NumaAffinity::kSocket, NumaAffinity::kExclusive,
                            NumaAffinity::kCoreComplex}) {
    if (numa->value == numaAffinityName(mode)) config.numaBinding = mode;
  }
}

CommandLine buildConfig(const Arguments& arguments, int argc, const char* const* argv,
                        int scriptIndex, const Environment& environment) {
  CommandLine result;
  LaunchConfig& config = result.config;
  if (const auto* nnodes = arguments.given("nnodes")) {
    std::tie(config.rdzv.minNodes, config.rdzv.maxNodes) = parseNnodes(*nnodes);
  }
  if (const auto spares = arguments.value<int>("spares")) {
    checkNumber(arguments, "spares", "must be a count >= 0", "1", *spares >= 0);
    config.rdzv.spares = *spares;
  }
  if (const auto* nproc = arguments.given("nproc-per-node")) {
    config.nprocPerNodeSpec = nproc->value;
    config.nprocPerNode = resolveNprocPerNode(*nproc, environment);
  }
  applyRestartAndHang(arguments, environment, config);
  applyHealth(arguments, config.health);
  applyNodeAddress(arguments, config);
  applyLinePatterns(arguments, result);
  applyWorkerSettings(arguments, result);
  applyLogSettings(arguments, result);
  applyNumaBinding(arguments, config);
  config.virtualLocalRank = arguments.flag("virtual-local-rank");
  config.stopOnStdinEof = arguments.flag("stop-on-stdin-eof");

  // The checks below look at the file system and resolve names: after the pure ones, so that
  // a typo is reported before anything slower.
  resolveEntry(arguments, argc, argv, scriptIndex, environment, result);
  if (const auto* logDir = arguments.given("log-dir")) {
    checkLogDir(*logDir);
    config.logs.dir = logDir->value;
  }
  resolveRendezvous(arguments, result);
  if (const auto* fromStdin = arguments.given("token-from-stdin")) {
    config.tokenFromStdin = true;
    if (!config.rdzv.settings.tokenFile.empty()) {
      throw UsageError(
          fmt::format("{} and --rdzv-conf token_file both give the job's token; "
                      "give one of them",
                      printable(fromStdin->origin)));
    }
  }
  return result;
}

}  // namespace

CommandLine parseCommandLine(int argc, const char* const* argv,
                             const std::map<std::string, std::string>& environment) {
  SplitArguments split = splitArguments(argc, argv);
  if (split.options.contains("help")) {
    CommandLine result;
    result.helpRequested = true;
    result.helpText = helpText() + ddprunSubcommands().helpSection();
    return result;
  }
  if (split.options.contains("version")) {
    CommandLine result;
    result.versionRequested = true;
    return result;
  }
  addEnvironmentFallbacks(split, environment);
  if (wantsSshLaunch(split.options)) {
    return sshCommandLine(
        split.options, environment, [&](std::map<std::string_view, GivenValue> own) {
          return buildConfig(Arguments(std::move(own)), argc, argv, split.scriptIndex, environment);
        });
  }
  // Inside a Slurm step with no rendezvous options, the step's values stand in for them (slurm.h).
  std::vector<std::string> slurmNotes;
  const auto slurm = detectSlurmStep(split.options, environment, slurmNotes);
  if (slurm) addSlurmValues(*slurm, split.options);
  const Arguments arguments(std::move(split.options));
  CommandLine result = buildConfig(arguments, argc, argv, split.scriptIndex, environment);
  result.notes.insert(result.notes.end(), slurmNotes.begin(), slurmNotes.end());
  if (slurm) applySlurmStep(*slurm, result);
  return result;
}

std::string versionText() { return fmt::format("ddprun {}", DDPRUN_VERSION); }

}  // namespace ddprun::launcher
