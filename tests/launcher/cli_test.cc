// The ddprun command line: torchrun 2.x options and defaults, PET_ fallbacks, pass-through of
// script arguments, entry-point detection, and one-line UsageErrors for every bad input.
#include "cli/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/host_probes.h"
#include "cli/options.h"
#include "cli/rendezvous_options.h"
#include "core/cuda_visible_devices.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

using ddprun::launcher::CommandLine;
using ddprun::launcher::EntryKind;
using ddprun::launcher::ExitCodeScheme;
using ddprun::launcher::LaunchConfig;
using ddprun::launcher::NumaAffinity;
using ddprun::launcher::parseCommandLine;
using ddprun::launcher::RdzvBackend;
using ddprun::launcher::StdStreams;
using ddprun::launcher::StreamSelection;
using ddprun::launcher::UsageError;
using ddprun::test::TempDir;
using ddprun::test::writeFile;
namespace fs = std::filesystem;

namespace {

using Environment = std::map<std::string, std::string>;

// Files the tests point ddprun at, created once under a fresh temporary directory:
//   bin/python3, bin/mytool   executables found through PATH=bin (bin/pytool: a Python one)
//   nopython/                 a PATH without python3
//   train.py (0644), exec.py (0755), tool (0755 shell script), data.txt (0644),
//   finetune (0755, #!/usr/bin/env python3), program (0755, an ELF header)
//   pkg/__main__.py, emptydir/
struct Sandbox {
  TempDir dir;
  fs::path root = dir.path;
  fs::path bin = root / "bin";

  Sandbox() {
    fs::create_directories(bin);
    fs::create_directories(root / "nopython");
    fs::create_directories(root / "pkg");
    fs::create_directories(root / "emptydir");
    const std::string shell = "#!/bin/sh\nexit 0\n";
    writeFile(bin / "python3", shell, 0755);
    writeFile(bin / "mytool", shell, 0755);
    writeFile(bin / "pytool", "#!/usr/bin/env python3\nprint('hi')\n", 0755);
    writeFile(root / "finetune", "#!/usr/bin/env python3\nprint('hi')\n", 0755);
    writeFile(root / "program",
              std::string("\x7f"
                          "ELF\x02\x01\x01",
                          7),
              0755);
    writeFile(root / "train.py", "print('hi')\n", 0644);
    writeFile(root / "exec.py", "#!/usr/bin/env python3\n", 0755);
    writeFile(root / "tool", shell, 0755);
    writeFile(root / "data.txt", "print('hi')\n", 0644);
    writeFile(root / "pkg" / "__main__.py", "\n", 0644);
  }

  std::string path(const std::string& name) const { return (root / name).string(); }
  std::string python() const { return (bin / "python3").string(); }
  Environment environment() const { return {{"PATH", bin.string()}}; }
};

const Sandbox& sandbox() {
  static const Sandbox instance;
  return instance;
}

std::string script() { return sandbox().path("train.py"); }

CommandLine parse(const std::vector<std::string>& args,
                  const Environment& environment = sandbox().environment()) {
  std::vector<const char*> argv{"ddprun"};
  for (const auto& arg : args) argv.push_back(arg.c_str());
  return parseCommandLine(static_cast<int>(argv.size()), argv.data(), environment);
}

LaunchConfig config(const std::vector<std::string>& args,
                    const Environment& environment = sandbox().environment()) {
  return parse(args, environment).config;
}

// The UsageError message for args; fails the test when there is none or it spans lines.
std::string usageError(const std::vector<std::string>& args,
                       const Environment& environment = sandbox().environment()) {
  try {
    parse(args, environment);
  } catch (const UsageError& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK(message.find('\n') == std::string::npos);
    CHECK_FALSE(message.empty());
    return message;
  }
  FAIL("no UsageError for: " << Catch::Detail::stringify(args));
  return {};
}

Environment with(Environment environment, const std::string& name, const std::string& value) {
  environment[name] = value;
  return environment;
}

// Runs a test body in another working directory (for bare script names).
class WorkingDirectory {
 public:
  explicit WorkingDirectory(const fs::path& directory) : previous_(fs::current_path()) {
    fs::current_path(directory);
  }
  ~WorkingDirectory() { fs::current_path(previous_); }
  WorkingDirectory(const WorkingDirectory&) = delete;
  WorkingDirectory& operator=(const WorkingDirectory&) = delete;

 private:
  fs::path previous_;
};

int onlineCpus() { return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)); }

}  // namespace

// ------------------------------------------------------------------------------------------------

TEST_CASE("defaults are torchrun 2.x's", "[cli]") {
  const CommandLine line = parse({script()});
  const LaunchConfig& c = line.config;
  CHECK_FALSE(line.helpRequested);
  CHECK_FALSE(line.versionRequested);
  CHECK(line.warnings.empty());
  CHECK(c.rdzv.minNodes == 1);
  CHECK(c.rdzv.maxNodes == 1);
  CHECK(c.nprocPerNode == 1);
  CHECK(c.nprocPerNodeSpec == "1");
  CHECK(c.rdzv.backend == RdzvBackend::kStatic);
  CHECK(c.rdzv.endpoint.empty());
  CHECK(c.rdzv.host == "127.0.0.1");  // static: --master-addr:--master-port
  CHECK(c.rdzv.port == 29500);
  CHECK(c.rdzv.runId == "none");
  ddprun::launcher::RendezvousSettings staticDefaults;
  staticDefaults.joinTimeout = std::chrono::seconds(900);  // torchrun's static `timeout`
  CHECK(c.rdzv.settings == staticDefaults);
  CHECK_FALSE(c.rdzv.standalone);
  CHECK(c.restart.maxRestarts == 0);
  CHECK(c.restart.monitorInterval == Approx(0.1));
  CHECK(c.restart.shutdownTimeout == std::chrono::seconds(30));
  CHECK(c.restart.signalsToHandle == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(c.entry.kind == EntryKind::kPythonScript);
  CHECK(c.entry.python == sandbox().python());
  CHECK(c.entry.script == script());
  CHECK(c.entry.args.empty());
  CHECK(c.role == "default");
  CHECK(c.entry.startMethod == "spawn");
  CHECK(c.eventLogHandler == "null");
  CHECK(c.numaBinding == NumaAffinity::kNone);
  CHECK_FALSE(c.virtualLocalRank);
  CHECK(c.rdzv.nodeRank == 0);
  CHECK(c.rdzv.masterAddr == "127.0.0.1");
  CHECK_FALSE(c.rdzv.masterPort.has_value());
  CHECK(c.rdzv.localAddr.empty());
  CHECK(c.logs.dir.empty());
  CHECK(c.logs.redirects == StreamSelection{});
  CHECK(c.logs.tee == StreamSelection{});
  CHECK_FALSE(c.logs.localRanksFilter.has_value());
  CHECK(c.logs.duplicateStdoutFilters.empty());
  CHECK(c.logs.duplicateStderrFilters.empty());
}

namespace {

// One value option: its dashed name, a valid value, and how that value shows in the config.
struct ValueCase {
  std::string name;
  std::string value;
  std::function<bool(const LaunchConfig&)> applied;
  std::vector<std::string> context = {};  // other options the value needs
};

std::vector<std::string> argsFor(const ValueCase& option, std::vector<std::string> tail) {
  std::vector<std::string> args = option.context;
  args.insert(args.end(), tail.begin(), tail.end());
  return args;
}

std::vector<ValueCase> valueCases() {
  return {
      {"nnodes", "2:3",
       [](const LaunchConfig& c) { return c.rdzv.minNodes == 2 && c.rdzv.maxNodes == 3; }},
      {"nproc-per-node", "3", [](const LaunchConfig& c) { return c.nprocPerNode == 3; }},
      {"rdzv-backend", "c10d",
       [](const LaunchConfig& c) { return c.rdzv.backend == RdzvBackend::kC10d; }},
      {"rdzv-endpoint", "127.0.0.1:1234",
       [](const LaunchConfig& c) { return c.rdzv.host == "127.0.0.1" && c.rdzv.port == 1234; }},
      {"rdzv-id", "job7", [](const LaunchConfig& c) { return c.rdzv.runId == "job7"; }},
      {"rdzv-conf", "join_timeout=5",
       [](const LaunchConfig& c) {
         return c.rdzv.settings.joinTimeout == std::chrono::seconds(5);
       }},
      {"max-restarts", "4", [](const LaunchConfig& c) { return c.restart.maxRestarts == 4; }},
      {"restart-backoff", "2.5:40",
       [](const LaunchConfig& c) {
         return c.restart.backoffInitial == std::chrono::milliseconds(2500) &&
                c.restart.backoffCap == std::chrono::seconds(40);
       }},
      {"max-no-progress-restarts", "5",
       [](const LaunchConfig& c) { return c.restart.maxNoProgressRestarts == 5; }},
      {"max-node-failures", "0",
       [](const LaunchConfig& c) { return c.restart.maxNodeFailures == 0; }},
      {"spares",
       "2",
       [](const LaunchConfig& c) { return c.rdzv.spares == 2; },
       {"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1234"}},
      {"progress-min-time", "60",
       [](const LaunchConfig& c) { return c.restart.progressMinTime == std::chrono::seconds(60); }},
      {"no-restart-exit-code", "93",
       [](const LaunchConfig& c) { return c.restart.noRestartExitCode == 93; }},
      {"exit-codes", "classes",
       [](const LaunchConfig& c) { return c.restart.exitCodes == ExitCodeScheme::kClasses; }},
      {"monitor-interval", "0.5",
       [](const LaunchConfig& c) { return c.restart.monitorInterval == 0.5; }},
      {"start-method", "fork", [](const LaunchConfig& c) { return c.entry.startMethod == "fork"; }},
      {"event-log-handler", "console",
       [](const LaunchConfig& c) { return c.eventLogHandler == "console"; }},
      {"role", "trainer", [](const LaunchConfig& c) { return c.role == "trainer"; }},
      {"log-dir", sandbox().path("logs"),
       [](const LaunchConfig& c) { return c.logs.dir == sandbox().path("logs"); }},
      {"redirects", "3",
       [](const LaunchConfig& c) {
         return c.logs.redirects.all == StdStreams{true, true};
       }},
      {"tee", "1",
       [](const LaunchConfig& c) {
         return c.logs.tee.all == StdStreams{true, false};
       }},
      {"local-ranks-filter", "0",
       [](const LaunchConfig& c) { return c.logs.localRanksFilter == std::set<int>{0}; }},
      {"duplicate-stdout-filters", "loss",
       [](const LaunchConfig& c) {
         return c.logs.duplicateStdoutFilters == std::vector<std::string>{"loss"};
       }},
      {"duplicate-stderr-filters", "NCCL",
       [](const LaunchConfig& c) {
         return c.logs.duplicateStderrFilters == std::vector<std::string>{"NCCL"};
       }},
      {"node-rank",
       "1",
       [](const LaunchConfig& c) { return c.rdzv.nodeRank == 1; },
       {"--nnodes", "2"}},
      {"master-addr", "localhost",
       [](const LaunchConfig& c) { return c.rdzv.masterAddr == "localhost"; }},
      {"master-port", "1234",
       [](const LaunchConfig& c) { return c.rdzv.masterPort == 1234 && c.rdzv.port == 1234; }},
      {"local-addr", "node7", [](const LaunchConfig& c) { return c.rdzv.localAddr == "node7"; }},
      {"signals-to-handle", "SIGUSR1",
       [](const LaunchConfig& c) {
         return c.restart.signalsToHandle == std::vector<int>{SIGUSR1};
       }},
      {"shutdown-timeout", "2.5",
       [](const LaunchConfig& c) {
         return c.restart.shutdownTimeout == std::chrono::milliseconds(2500);
       }},
      {"hang-timeout", "30",
       [](const LaunchConfig& c) {
         return c.hang.hangTimeout == std::chrono::milliseconds(30000);
       }},
      {"hang-startup-timeout", "120",
       [](const LaunchConfig& c) {
         return c.hang.startupTimeout == std::chrono::milliseconds(120000);
       }},
      {"exit-timeout", "0.5",
       [](const LaunchConfig& c) { return c.hang.exitTimeout == std::chrono::milliseconds(500); }},
      {"hang-native-stack-budget", "1.5",
       [](const LaunchConfig& c) {
         return c.hang.nativeStackBudget == std::chrono::milliseconds(1500);
       }},
      {"progress-pattern", "step [0-9]+",
       [](const LaunchConfig& c) { return c.hang.progressPattern == "step [0-9]+"; }},
      {"start-pattern", "^training",
       [](const LaunchConfig& c) { return c.hang.startPattern == "^training"; }},
      {"start-timeout", "120",
       [](const LaunchConfig& c) {
         return c.hang.startTimeout == std::chrono::milliseconds(120000);
       }},
      {"fail-pattern", "loss (nan|inf)",
       [](const LaunchConfig& c) { return c.hang.failPattern == "loss (nan|inf)"; }},
  };
}

std::string underscored(std::string name) {
  for (auto& c : name) c = c == '-' ? '_' : c;
  return name;
}

std::string environmentName(const std::string& name) {
  std::string out = "PET_";
  for (const char c : underscored(name)) out += static_cast<char>(std::toupper(c));
  return out;
}

}  // namespace

TEST_CASE("every value option works in both spellings, as --opt value and --opt=value", "[cli]") {
  for (const auto& option : valueCases()) {
    for (const auto& spelling : {option.name, underscored(option.name)}) {
      INFO("--" << spelling << " " << option.value);
      CHECK(option.applied(config(argsFor(option, {"--" + spelling, option.value, script()}))));
      CHECK(option.applied(
          config(argsFor(option, {"--" + spelling + "=" + option.value, script()}))));
    }
  }
}

TEST_CASE("every value option falls back to its PET_ variable, the command line wins", "[cli]") {
  for (const auto& option : valueCases()) {
    const std::string variable = environmentName(option.name);
    INFO(variable << "=" << option.value);
    const Environment environment = with(sandbox().environment(), variable, option.value);
    CHECK(option.applied(config(argsFor(option, {script()}), environment)));
    CHECK_FALSE(option.applied(config(argsFor(option, {script()}))));
  }
  const Environment three = with(sandbox().environment(), "PET_NPROC_PER_NODE", "3");
  CHECK(config({"--nproc-per-node", "1", script()}, three).nprocPerNode == 1);
  CHECK(config({"--nproc_per_node=2", script()}, three).nprocPerNode == 2);
  CHECK(config({script()}, three).nprocPerNode == 3);
  // A bad PET_ value is never looked at when the command line gives the option.
  const Environment bad = with(sandbox().environment(), "PET_MAX_RESTARTS", "lots");
  CHECK(config({"--max-restarts", "2", script()}, bad).restart.maxRestarts == 2);
}

TEST_CASE("option --logs-specs and --numa-binding have no PET_ fallback", "[cli]") {
  Environment environment = sandbox().environment();
  environment["PET_LOGS_SPECS"] = "custom";
  environment["PET_NUMA_BINDING"] = "bogus";
  CHECK(config({script()}, environment).numaBinding == NumaAffinity::kNone);
}

TEST_CASE("flags in both spellings and short forms", "[cli]") {
  CHECK(config({"-m", "pkg.train"}).entry.kind == EntryKind::kPythonModule);
  CHECK(config({"--module", "pkg.train"}).entry.kind == EntryKind::kPythonModule);
  CHECK(config({"--no-python", sandbox().path("tool")}).entry.kind == EntryKind::kExecutable);
  CHECK(config({"--no_python", sandbox().path("tool")}).entry.kind == EntryKind::kExecutable);
  CHECK(config({"--run-path", script()}).entry.kind == EntryKind::kRunPath);
  CHECK(config({"--run_path", script()}).entry.kind == EntryKind::kRunPath);
  CHECK(config({"--virtual-local-rank", script()}).virtualLocalRank);
  CHECK(config({"--virtual_local_rank", script()}).virtualLocalRank);
  CHECK(config({"--standalone", script()}).rdzv.standalone);
  CHECK(config({"-r", "2", script()}).logs.redirects.all == StdStreams{false, true});
  CHECK(config({"-r2", script()}).logs.redirects.all == StdStreams{false, true});
  CHECK(config({"-r=2", script()}).logs.redirects.all == StdStreams{false, true});
  CHECK(config({"-t", "3", script()}).logs.tee.all == StdStreams{true, true});
  CHECK(parse({"-h"}).helpRequested);
}

TEST_CASE("boolean PET_ variables accept 1/0/true/false/yes/no and empty (true)", "[cli]") {
  for (const std::string value : {"", "1", "true", "TRUE", "Yes", " 1 "}) {
    INFO("PET_STANDALONE='" << value << "'");
    CHECK(
        config({script()}, with(sandbox().environment(), "PET_STANDALONE", value)).rdzv.standalone);
    CHECK(config({script()}, with(sandbox().environment(), "PET_VIRTUAL_LOCAL_RANK", value))
              .virtualLocalRank);
  }
  for (const std::string value : {"0", "false", "No", "NO"}) {
    INFO("PET_STANDALONE='" << value << "'");
    CHECK_FALSE(
        config({script()}, with(sandbox().environment(), "PET_STANDALONE", value)).rdzv.standalone);
  }
  // The command line turns a flag on whatever PET_ says.
  CHECK(config({"--standalone", script()}, with(sandbox().environment(), "PET_STANDALONE", "0"))
            .rdzv.standalone);
  CHECK(config({"pkg.train"}, with(sandbox().environment(), "PET_MODULE", "")).entry.kind ==
        EntryKind::kPythonModule);
  CHECK(config({sandbox().path("tool")}, with(sandbox().environment(), "PET_NO_PYTHON", "yes"))
            .entry.kind == EntryKind::kExecutable);
  CHECK(config({script()}, with(sandbox().environment(), "PET_RUN_PATH", "true")).entry.kind ==
        EntryKind::kRunPath);

  for (const std::string variable : {"PET_STANDALONE", "PET_MODULE", "PET_NO_PYTHON",
                                     "PET_RUN_PATH", "PET_VIRTUAL_LOCAL_RANK"}) {
    const std::string message =
        usageError({script()}, with(sandbox().environment(), variable, "maybe"));
    CHECK_THAT(message, Catch::Contains(variable) && Catch::Contains("not a boolean"));
  }
}

TEST_CASE("everything from the training script on is passed through untouched", "[cli]") {
  const std::vector<std::string> args = {
      "--nproc-per-node", "9", "-m", "x", "--lr=3", "--", "-h", "--nproc", "--standalone=1", ""};
  std::vector<std::string> argv = {"--nproc-per-node", "2", script()};
  argv.insert(argv.end(), args.begin(), args.end());
  const LaunchConfig c = config(argv);
  CHECK(c.nprocPerNode == 2);
  CHECK(c.entry.kind == EntryKind::kPythonScript);
  CHECK(c.entry.script == script());
  CHECK(c.entry.args == args);
}

TEST_CASE("the start method is accepted, and fork or forkserver say they change nothing", "[cli]") {
  CHECK(parse({"--start-method", "spawn", script()}).warnings.empty());
  const CommandLine fork = parse({"--start-method", "fork", script()});
  REQUIRE(fork.warnings.size() == 1);
  CHECK_THAT(fork.warnings[0], Catch::Contains("fresh process"));
}

TEST_CASE("a -- right after the script is dropped, as torchrun's argparse does", "[cli]") {
  // torchrun 1.13 and 2.6: `train.py -- --lr 0.1` gives the script ['--lr', '0.1'].
  CHECK(config({script(), "--", "--lr", "0.1"}).entry.args ==
        std::vector<std::string>{"--lr", "0.1"});
  // A later -- is the script's own.
  CHECK(config({script(), "a", "--", "b"}).entry.args == std::vector<std::string>{"a", "--", "b"});
  CHECK(config({script(), "--", "--"}).entry.args == std::vector<std::string>{"--"});
}

TEST_CASE("a bare -- ends ddprun's options", "[cli]") {
  const LaunchConfig c = config({"--nproc-per-node", "2", "--", script(), "--", "--nnodes", "5"});
  CHECK(c.nprocPerNode == 2);
  CHECK(c.entry.script == script());
  CHECK(c.entry.args == std::vector<std::string>{"--", "--nnodes", "5"});
  CHECK(config({"--", script()}).entry.args.empty());
  CHECK_THAT(usageError({"--nnodes", "1", "--"}), Catch::Contains("missing the training script"));
}

TEST_CASE("the last of a repeated option wins, as with argparse", "[cli]") {
  CHECK(config({"--nproc-per-node", "2", "--nproc_per_node", "3", script()}).nprocPerNode == 3);
}

TEST_CASE("unknown options are errors with a suggestion for a near miss", "[cli]") {
  CHECK_THAT(usageError({"--nproc-per-nodes", "2", script()}),
             Catch::Contains("unknown option --nproc-per-nodes") &&
                 Catch::Contains("did you mean --nproc-per-node?"));
  CHECK_THAT(usageError({"--max_restars", "2", script()}),
             Catch::Contains("did you mean --max_restarts?"));
  CHECK_THAT(usageError({"--monitr-interval=0.1", script()}),
             Catch::Contains("unknown option --monitr-interval; did you mean --monitor-interval?"));
  CHECK_THAT(usageError({"--zzzzzzzz", script()}),
             Catch::Contains("unknown option --zzzzzzzz; see ddprun --help"));
  CHECK_THAT(usageError({"-x", script()}), Catch::Contains("unknown option -x"));
  // A prefix in a mix of the two spellings is a prefix of neither, as with argparse.
  CHECK_THAT(usageError({"--nproc_per-node", "2", script()}),
             Catch::Contains("unknown option --nproc_per-node"));
}

namespace {

// A long option shortened to a prefix: what it is typed as, and what it must set.
struct PrefixCase {
  std::vector<std::string> args;  // before the script
  std::function<bool(const LaunchConfig&)> applied;
};

}  // namespace

TEST_CASE("long options may be shortened to a unique prefix in either spelling, as argparse allows",
          "[cli][prefix]") {
  const auto redirectsBoth = [](const LaunchConfig& c) {
    return c.logs.redirects.all == StdStreams{true, true};
  };
  const auto twoWorkers = [](const LaunchConfig& c) { return c.nprocPerNode == 2; };
  const auto executable = [](const LaunchConfig& c) {
    return c.entry.kind == EntryKind::kExecutable;
  };
  // torchrun 1.13 runs each of these (PyTorch's own launcher tests use --redirect=3 and friends).
  const std::vector<PrefixCase> cases = {
      {{"--redirect=3"}, redirectsBoth},
      {{"--redirect", "3"}, redirectsBoth},
      {{"--redi=3"}, redirectsBoth},
      {{"--nproc_per=2"}, twoWorkers},
      {{"--nproc_per", "2"}, twoWorkers},
      {{"--nproc-per=2"}, twoWorkers},
      {{"--nproc-per", "2"}, twoWorkers},
      {{"--no_py"}, executable},
      {{"--no-py"}, executable},
      {{"--max_restart", "3"}, [](const LaunchConfig& c) { return c.restart.maxRestarts == 3; }},
      {{"--monitor_int=0.5"},
       [](const LaunchConfig& c) { return c.restart.monitorInterval == 0.5; }},
      {{"--stand"}, [](const LaunchConfig& c) { return c.rdzv.standalone; }},
      {{"--rdzv_b", "c10d"},
       [](const LaunchConfig& c) { return c.rdzv.backend == RdzvBackend::kC10d; }},
      {{"--virtual-l"}, [](const LaunchConfig& c) { return c.virtualLocalRank; }},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back(sandbox().path("finetune"));  // Python, and executable for --no-py
    INFO(Catch::Detail::stringify(args));
    CHECK(c.applied(config(args)));
  }
  CHECK(parse({"--he"}).helpRequested);
  CHECK(parse({"--vers"}).versionRequested);
  // Messages name the option as typed.
  CHECK_THAT(usageError({"--nproc_per", "abc", script()}), Catch::Contains("--nproc_per 'abc'"));
  CHECK_THAT(usageError({"--stand=1", script()}), Catch::Contains("--stand takes no value"));
}

TEST_CASE("an ambiguous prefix is a usage error listing the candidates, in the spelling typed",
          "[cli][prefix]") {
  // Each spelling is an option string of its own to argparse, so a prefix of both spellings of
  // one option is ambiguous too. torchrun 2.6: "ambiguous option: --nproc could match
  // --nproc-per-node, --nproc_per_node" (torchrun 1.13, with one spelling, takes it).
  CHECK(usageError({"--nproc", "2", script()}) ==
        "ambiguous option: --nproc could match --nproc-per-node, --nproc_per_node; write more of "
        "the option's name");
  CHECK_THAT(
      usageError({"--n", "2", script()}),
      Catch::Contains("ambiguous option: --n could match --nnodes, --nproc-per-node, "
                      "--nproc_per_node, --no-python, --no_python, --node-rank, --node_rank, "
                      "--numa-binding, --numa_binding;"));
  CHECK_THAT(usageError({"--rdzv-=x", script()}),
             Catch::Contains("ambiguous option: --rdzv- could match --rdzv-backend, "
                             "--rdzv-endpoint, --rdzv-id, --rdzv-conf;"));
  CHECK_THAT(usageError({"--master_", "x", script()}),
             Catch::Contains("--master_ could match --master_addr, --master_port;"));
  CHECK_THAT(
      usageError({"--log", "x", script()}),
      Catch::Contains("--log could match --log-dir, --log_dir, --logs-specs, --logs_specs;"));
  CHECK_THAT(usageError({"--monitor=1", script()}),
             Catch::Contains("--monitor could match --monitor-interval, --monitor_interval;"));
  CHECK_THAT(usageError({"--hang", "1", script()}),
             Catch::Contains("--hang could match --hang-timeout, --hang_timeout, "
                             "--hang-startup-timeout"));
}

TEST_CASE("a prefix that fits one of torchrun's options means it, beside ddprun's own options",
          "[cli][prefix]") {
  // torchrun's abbreviations keep their meaning: --max_ is --max_restarts beside
  // --max_no_progress_restarts and --max_node_failures, --re is --redirects beside
  // --restart-backoff.
  CHECK(config({"--max_", "3", script()}).restart.maxRestarts == 3);
  CHECK(config({"--re", "3", script()}).logs.redirects != LaunchConfig{}.logs.redirects);
  // ddprun's own options still take a prefix that fits none of torchrun's.
  CHECK(config({"--max-no-p", "5", script()}).restart.maxNoProgressRestarts == 5);
  CHECK(config({"--restart-b", "2", script()}).restart.backoffInitial == std::chrono::seconds(2));
}

TEST_CASE("the ddprun binary: an ambiguous prefix is one error line and exit code 2",
          "[cli][prefix]") {
  using namespace std::chrono_literals;
  ddprun::test::Subprocess ddprun({DDPRUN_BIN, "--nproc", "2", script()});
  REQUIRE(ddprun::test::exitsWith(ddprun, 2, 30s));
  CHECK(ddprun.output().empty());
  CHECK(ddprun.errors() ==
        "ddprun: error: ambiguous option: --nproc could match --nproc-per-node, "
        "--nproc_per_node; write more of the option's name\n");
}

TEST_CASE("an exact spelling wins over prefixes, and PET_ variables are exact names only",
          "[cli][prefix]") {
  using ddprun::launcher::cli_detail::matchLongOption;
  using ddprun::launcher::cli_detail::OptionSpec;
  // No real option's name is a prefix of another's (yet), so a table of the test's own.
  const OptionSpec table[] = {{.name = "tee"}, {.name = "tee-all"}, {.name = "log-dir"}};
  CHECK(matchLongOption("tee", table).option == &table[0]);
  CHECK(matchLongOption("tee-", table).option == &table[1]);
  CHECK(matchLongOption("tee_a", table).option == &table[1]);
  CHECK(matchLongOption("te", table).option == nullptr);
  CHECK(matchLongOption("te", table).candidates.size() == 3);  // tee, tee-all, tee_all
  CHECK(matchLongOption("log_dir", table).option == &table[2]);
  CHECK(matchLongOption("", table).option == nullptr);
  CHECK(matchLongOption("x", table).candidates.empty());

  Environment environment = sandbox().environment();
  environment["PET_NPROC"] = "3";
  environment["PET_NPROC_PER"] = "3";
  environment["PET_REDIRECT"] = "3";
  const LaunchConfig c = config({script()}, environment);
  CHECK(c.nprocPerNode == 1);
  CHECK(c.logs.redirects == StreamSelection{});
}

TEST_CASE("prefixes are read only before the training script", "[cli][prefix]") {
  const std::vector<std::string> scriptArgs = {"--n", "2",       "--redirect=3", "--nproc_per",
                                               "4",   "--no_py", "--rdzv"};
  std::vector<std::string> args = {"--nproc_per", "2", script()};
  args.insert(args.end(), scriptArgs.begin(), scriptArgs.end());
  const LaunchConfig c = config(args);
  CHECK(c.nprocPerNode == 2);
  CHECK(c.entry.kind == EntryKind::kPythonScript);
  CHECK(c.logs.redirects == StreamSelection{});
  CHECK(c.entry.args == scriptArgs);
}

TEST_CASE("option syntax errors", "[cli]") {
  CHECK_THAT(usageError({"--nnodes"}), Catch::Contains("--nnodes needs a value"));
  CHECK_THAT(usageError({"-r"}), Catch::Contains("-r needs a value"));
  CHECK_THAT(usageError({"--log-dir", "--nproc-per-node", "2", script()}),
             Catch::Contains("--log-dir needs a value") && Catch::Contains("--log-dir=VALUE"));
  CHECK_THAT(usageError({"--standalone=1", script()}),
             Catch::Contains("--standalone takes no value"));
  CHECK_THAT(usageError({"-mh", script()}), Catch::Contains("-m takes no value"));
  // A negative number is a value, as in argparse; it is then refused for what it is.
  CHECK_THAT(usageError({"--max-restarts", "-1", script()}), Catch::Contains("cannot be negative"));
  // An empty value given with '=' stays empty.
  CHECK(config({"--rdzv-endpoint=", "--rdzv-backend=c10d", script()}).rdzv.host == "localhost");
}

TEST_CASE("the training script is required", "[cli]") {
  CHECK_THAT(usageError({}),
             Catch::Contains("missing the training script: ddprun [options] script.py [args]"));
  CHECK_THAT(usageError({"--nproc-per-node", "2"}), Catch::Contains("missing the training script"));
  CHECK_THAT(usageError({""}), Catch::Contains("empty"));
}

TEST_CASE("option --nnodes: N or MIN:MAX with 0 < MIN <= MAX", "[cli]") {
  CHECK(config({"--nnodes", "2", "--node-rank", "1", script()}).rdzv.maxNodes == 2);
  const LaunchConfig elastic = config(
      {"--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1", script()});
  CHECK(elastic.rdzv.minNodes == 1);
  CHECK(elastic.rdzv.maxNodes == 4);
  for (const std::string bad : {"abc", "", "0", "1:", ":2", "-1", "1:2:3", "0:2", "1.5", "2:x"}) {
    INFO("--nnodes '" << bad << "'");
    CHECK_THAT(usageError({"--nnodes", bad, script()}),
               Catch::Contains("--nnodes '" + bad + "'") && Catch::Contains("MIN:MAX"));
  }
  CHECK(usageError({"--nnodes", "3:2", script()}) ==
        "--nnodes '3:2': MIN (3) is larger than MAX (2); use --nnodes MIN:MAX with MIN <= MAX");
  CHECK_THAT(usageError({"--nnodes=2:1", script()}),
             Catch::Contains("MIN (2) is larger than MAX (1)"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_NNODES", "2:1")),
             Catch::Contains("PET_NNODES '2:1'") && Catch::Contains("PET_NNODES=MIN:MAX"));
  // Static rendezvous cannot be elastic: it waits for MAX nodes, which is worth a warning.
  const CommandLine staticRange = parse({"--nnodes", "1:2", script()});
  REQUIRE(staticRange.warnings.size() == 1);
  CHECK_THAT(staticRange.warnings[0], Catch::Contains("exactly 2 nodes"));
}

TEST_CASE("the restart policy's options: defaults, and each bad value one line", "[cli]") {
  const LaunchConfig defaults = config({script()});
  CHECK(defaults.restart.backoffInitial == std::chrono::milliseconds(0));
  CHECK(defaults.restart.maxNoProgressRestarts == 3);
  CHECK(defaults.restart.maxNodeFailures == 3);
  CHECK(defaults.restart.progressMinTime == std::chrono::seconds(300));
  CHECK_FALSE(defaults.restart.noRestartExitCode);
  CHECK(defaults.restart.exitCodes == ExitCodeScheme::kRootCause);
  // INITIAL alone: the cap is 16 x INITIAL.
  CHECK(config({"--restart-backoff", "5", script()}).restart.backoffCap ==
        std::chrono::seconds(80));
  for (const char* bad : {"-1", "x", "5:2", "5:", ":5", "1:2:3", "nan"}) {
    INFO(bad);
    CHECK_THAT(
        usageError({"--restart-backoff", bad, script()}),
        Catch::Contains("INITIAL or INITIAL:CAP") && Catch::Contains("--restart-backoff 10:120"));
  }
  CHECK_THAT(usageError({"--max-no-progress-restarts", "-1", script()}),
             Catch::Contains("cannot be negative"));
  CHECK_THAT(usageError({"--progress-min-time", "-3", script()}), Catch::Contains(">= 0"));
  CHECK_THAT(usageError({"--max-node-failures", "-1", script()}),
             Catch::Contains("count >= 0") && Catch::Contains("--max-node-failures 3"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_MAX_NODE_FAILURES", "x")),
             Catch::Contains("PET_MAX_NODE_FAILURES"));
  CHECK(defaults.rdzv.spares == 0);
  CHECK_THAT(usageError({"--spares", "-1", script()}),
             Catch::Contains("count >= 0") && Catch::Contains("--spares 1"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_SPARES", "x")),
             Catch::Contains("PET_SPARES"));
  CHECK_THAT(usageError({"--spares", "1", "--standalone", script()}),
             Catch::Contains("spares need a job whose nodes meet in a store") &&
                 Catch::Contains("--standalone job"));
  CHECK_THAT(usageError({"--nnodes", "2", "--spares", "1", "--rdzv-backend", "static",
                         "--master-addr", "127.0.0.1", "--master-port", "29500", script()}),
             Catch::Contains("a static job has no seat for one"));
  CHECK_THAT(usageError({"--no-restart-exit-code", "0", script()}),
             Catch::Contains("1..255") && Catch::Contains("--no-restart-exit-code 93"));
  CHECK_THAT(usageError({"--no-restart-exit-code", "256", script()}), Catch::Contains("1..255"));
  CHECK_THAT(usageError({"--exit-codes", "scheduler", script()}),
             Catch::Contains("root-cause") && Catch::Contains("classes"));
}

TEST_CASE("option --max-restarts, --node-rank, --master-port must be integers in range", "[cli]") {
  CHECK_THAT(usageError({"--max-restarts", "-2", script()}),
             Catch::Contains("--max-restarts '-2'") && Catch::Contains("negative"));
  CHECK_THAT(usageError({"--max-restarts", "abc", script()}),
             Catch::Contains("--max-restarts 'abc' is not a whole number"));
  CHECK_THAT(usageError({"--max-restarts", "1.5", script()}),
             Catch::Contains("not a whole number"));
  CHECK_THAT(usageError({"--max-restarts", "99999999999", script()}),
             Catch::Contains("not a whole number"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_MAX_RESTARTS", "")),
             Catch::Contains("PET_MAX_RESTARTS ''") && Catch::Contains("PET_MAX_RESTARTS=1"));
  CHECK(config({"--max-restarts", " 3 ", script()}).restart.maxRestarts == 3);

  CHECK_THAT(usageError({"--node-rank", "x", script()}),
             Catch::Contains("--node-rank 'x' is not a whole number"));
  CHECK_THAT(usageError({"--node-rank", "-1", script()}), Catch::Contains("negative"));
  CHECK_THAT(usageError({"--nnodes", "2", "--node-rank", "2", script()}),
             Catch::Contains("--node-rank '2' is outside 0..1"));
  CHECK_THAT(usageError({"--node-rank", "1", script()}), Catch::Contains("outside 0..0"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_NODE_RANK", "3")),
             Catch::Contains("PET_NODE_RANK '3' is outside"));
  // c10d assigns group ranks itself and ignores --node-rank, as torchrun does.
  CHECK(config({"--rdzv-backend", "c10d", "--node-rank", "5", script()}).rdzv.nodeRank == 5);

  CHECK_THAT(usageError({"--master-port", "70000", script()}), Catch::Contains("0..65535"));
  CHECK_THAT(usageError({"--master-port", "http", script()}),
             Catch::Contains("--master-port 'http' is not a whole number"));
}

TEST_CASE("option --monitor-interval must be a positive number", "[cli]") {
  CHECK_THAT(usageError({"--monitor-interval", "0", script()}), Catch::Contains("positive"));
  CHECK_THAT(usageError({"--monitor-interval", "nan", script()}),
             Catch::Contains("--monitor-interval"));
  CHECK_THAT(usageError({"--monitor-interval", "fast", script()}), Catch::Contains("not a number"));
}

TEST_CASE("option --nproc-per-node: integer >= 1, cpu, gpu, auto, xpu", "[cli]") {
  for (const std::string bad : {"0", "-1", "abc", "2.5", "", "GPU", "1e3"}) {
    INFO("--nproc-per-node '" << bad << "'");
    CHECK_THAT(usageError({"--nproc-per-node", bad, script()}),
               Catch::Contains("--nproc-per-node '" + bad + "'"));
  }
  CHECK_THAT(usageError({"--nproc-per-node", "abc", script()}),
             Catch::Contains("auto, cpu, gpu, xpu"));
  const LaunchConfig cpu = config({"--nproc-per-node", "cpu", script()});
  CHECK(cpu.nprocPerNode == onlineCpus());
  CHECK(cpu.nprocPerNodeSpec == "cpu");

  // CUDA_VISIBLE_DEVICES="" hides every GPU, whether this machine has any or not.
  const Environment noGpu = with(sandbox().environment(), "CUDA_VISIBLE_DEVICES", "");
  CHECK_THAT(usageError({"--nproc-per-node", "gpu", script()}, noGpu),
             Catch::Contains("--nproc-per-node 'gpu': no NVIDIA GPU is visible") &&
                 Catch::Contains("give a number of workers instead"));
  CHECK(config({"--nproc-per-node", "auto", script()}, noGpu).nprocPerNode == onlineCpus());
  CHECK(config({"--nproc_per_node=auto", script()}, noGpu).nprocPerNodeSpec == "auto");
  // xpu is a known value: Intel GPUs if the machine has any, else a clear error.
  std::string xpuError;
  int xpus = 0;
  try {
    xpus = config({"--nproc-per-node", "xpu", script()}).nprocPerNode;
  } catch (const UsageError& error) {
    xpuError = error.what();
  }
  if (xpuError.empty()) {
    CHECK(xpus >= 1);
  } else {
    CHECK_THAT(xpuError, Catch::Contains("--nproc-per-node 'xpu': no Intel XPU is visible"));
  }
  // Without the mask: the GPUs the driver lists, if any.
  if (!fs::exists("/proc/driver/nvidia/gpus")) {
    CHECK_THAT(usageError({"--nproc-per-node", "gpu", script()}), Catch::Contains("no NVIDIA GPU"));
  } else {
    CHECK(config({"--nproc-per-node", "gpu", script()}).nprocPerNode >= 1);
  }
}

TEST_CASE("CUDA_VISIBLE_DEVICES is read like the CUDA runtime does", "[cli]") {
  using ddprun::launcher::cli_detail::visibleGpuCount;
  CHECK(visibleGpuCount(4, std::nullopt) == 4);
  CHECK(visibleGpuCount(0, std::nullopt) == 0);
  CHECK(visibleGpuCount(4, "") == 0);
  CHECK(visibleGpuCount(4, "0,2") == 2);
  CHECK(visibleGpuCount(4, " 3 , 1 ") == 2);
  CHECK(visibleGpuCount(4, "1,7,2") == 1);  // stops at the first invalid index
  CHECK(visibleGpuCount(4, "-1") == 0);
  CHECK(visibleGpuCount(4, "0,0,1") == 1);  // a repeated index is invalid
  CHECK(visibleGpuCount(2, "GPU-aaa,GPU-bbb,GPU-ccc") == 2);
  CHECK(visibleGpuCount(4, "MIG-xyz") == 1);
  CHECK(visibleGpuCount(0, "0") == 0);
  // The one reader behind it (NUMA binding uses it too): which devices, in the mask's order.
  using ddprun::launcher::visibleDevices;
  const auto devices = visibleDevices(" 3 ,GPU-aaa, 1,9,2", 4);
  REQUIRE(devices.size() == 3);
  CHECK(devices[0].index == 3);
  CHECK(devices[1].index == -1);
  CHECK(devices[1].uuid == "GPU-aaa");
  CHECK(devices[2].index == 1);
  CHECK(visibleDevices("0,,1", 4).size() == 1);  // an empty entry is invalid
}

TEST_CASE("option --rdzv-backend: static, c10d or etcd, and nothing else", "[cli]") {
  CHECK_THAT(usageError({"--rdzv-backend", "zookeeper", script()}),
             Catch::Contains("--rdzv-backend 'zookeeper' is not a rendezvous backend") &&
                 Catch::Contains("static, c10d or etcd"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_RDZV_BACKEND", "etcd-v4")),
             Catch::Contains("PET_RDZV_BACKEND 'etcd-v4'"));
}

TEST_CASE("option --rdzv-backend etcd: etcd, etcd-v2 and etcd-v3 are one backend on etcd's v3 API",
          "[cli][etcd]") {
  for (const std::string name : {"etcd", "etcd-v2", "etcd-v3"}) {
    INFO(name);
    const CommandLine line = parse({"--rdzv-backend", name, "--rdzv-endpoint", "127.0.0.1:2379",
                                    "--rdzv-id", "job", script()});
    CHECK(line.config.rdzv.backend == RdzvBackend::kEtcd);
    CHECK(line.config.rdzv.runId == "job");
    CHECK(line.warnings.empty());
    // torchrun's two names: one note, that ddprun speaks v3 (etcd 3.4 turned v2 off).
    if (name == "etcd-v3") {
      CHECK(line.notes.empty());
    } else {
      REQUIRE(line.notes.size() == 1);
      CHECK_THAT(line.notes[0], Catch::Contains("--rdzv-backend '" + name + "'") &&
                                    Catch::Contains("ddprun speaks etcd's v3 API") &&
                                    Catch::Contains("etcd 3.4 turns off"));
    }
  }
  CHECK(config({script()}, with(sandbox().environment(), "PET_RDZV_BACKEND", "etcd-v2"))
            .rdzv.backend == RdzvBackend::kEtcd);
}

TEST_CASE(
    "option --rdzv-endpoint with etcd: members host:port[,...], port 2379, http:// or https://",
    "[cli][etcd]") {
  using Scheme = ddprun::rendezvous::etcd::EtcdEndpoint::Scheme;
  const auto etcd = [](const std::string& endpoint, const std::string& conf = "") {
    std::vector<std::string> args = {"--rdzv-backend", "etcd", "--rdzv-endpoint", endpoint};
    if (!conf.empty()) args.insert(args.end(), {"--rdzv-conf", conf});
    args.push_back(script());
    return parse(args);
  };
  const CommandLine three = etcd("127.0.0.1,localhost:2380,https://[::1]:3000");
  const auto& members = three.config.rdzv.etcdEndpoints;
  REQUIRE(members.size() == 3);
  CHECK(members[0].text() == "http://127.0.0.1:2379");
  CHECK(members[1].text() == "http://localhost:2380");
  CHECK(members[2].text() == "https://[::1]:3000");
  // This node's address is looked up toward the first member.
  CHECK(three.config.rdzv.host == "127.0.0.1");
  CHECK(three.config.rdzv.port == 2379);
  // No endpoint: a member on this host, as torch's etcd backends default to.
  const LaunchConfig local = config({"--rdzv-backend", "etcd", script()});
  REQUIRE(local.rdzv.etcdEndpoints.size() == 1);
  CHECK(local.rdzv.etcdEndpoints[0].text() == "http://localhost:2379");
  // protocol=https (torch's key) for the entries that name no scheme.
  const auto https =
      etcd("127.0.0.1:1,http://127.0.0.1:2", "protocol=HTTPS").config.rdzv.etcdEndpoints;
  CHECK(https.at(0).scheme == Scheme::kHttps);
  CHECK(https.at(1).scheme == Scheme::kHttp);
  CHECK(etcd("127.0.0.1", "protocol=http").config.rdzv.etcdEndpoints.at(0).scheme == Scheme::kHttp);

  // A bad entry: one line naming it (the client's parser's words), exit 2.
  const auto error = [](const std::string& endpoint) {
    return usageError({"--rdzv-backend", "etcd", "--rdzv-endpoint", endpoint, script()});
  };
  CHECK_THAT(error("127.0.0.1:70000"), Catch::Contains("--rdzv-endpoint '127.0.0.1:70000'"));
  CHECK_THAT(error("ftp://127.0.0.1"), Catch::Contains("--rdzv-endpoint 'ftp://127.0.0.1'"));
  CHECK_THAT(error("127.0.0.1,,127.0.0.2"), Catch::Contains("--rdzv-endpoint"));
  CHECK_THAT(error("127.0.0.1,no-such-host.invalid"), Catch::Contains("no-such-host.invalid"));
  // Several nodes and every member on this host: their address toward etcd is loopback.
  const auto loopback = parse({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint",
                               "localhost,127.0.0.2", script()});
  REQUIRE(loopback.warnings.size() == 1);
  CHECK_THAT(loopback.warnings[0], Catch::Contains("every etcd member is on this host") &&
                                       Catch::Contains("give --local-addr"));
  CHECK(parse({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1",
               "--local-addr", "10.0.0.1", script()})
            .warnings.empty());
  // The static backend's options mean nothing here.
  const CommandLine master = parse({"--rdzv-backend", "etcd", "--master-port", "1234", script()});
  REQUIRE(master.warnings.size() == 1);
  CHECK_THAT(master.warnings[0], Catch::Contains("--master-port '1234' is only used by the static "
                                                 "backend; with etcd give its members"));
}

TEST_CASE("option --rdzv-conf with etcd: torch's etcd keys (both backends' spellings) are read",
          "[cli][etcd][rdzv-conf]") {
  using std::chrono::milliseconds;
  const auto etcd = [](const std::string& conf) {
    return parse({"--rdzv-backend", "etcd", "--rdzv-endpoint", "https://127.0.0.1", "--rdzv-conf",
                  conf, script()});
  };
  const CommandLine legacy = etcd(
      "cacert=/ca.pem,cert=/c.pem,key=/k.pem,etcd_prefix=/torchelastic/p2p,"
      "timeout=70,last_call_timeout=3");
  CHECK(legacy.warnings.empty());
  const auto& l = legacy.config.rdzv.settings;
  CHECK(l.etcdCaCert == "/ca.pem");
  CHECK(l.etcdCert == "/c.pem");
  CHECK(l.etcdKey == "/k.pem");
  CHECK(l.etcdPrefix == "/torchelastic/p2p");
  CHECK(l.joinTimeout == milliseconds(70000));  // the legacy backend's `timeout`
  CHECK(l.lastCallTimeout == milliseconds(3000));
  const auto& v2 =
      etcd("ca_cert=/ca.pem,ssl_cert=/c.pem,ssl_cert_key=/k.pem,read_timeout=7,protocol=https")
          .config.rdzv.settings;
  CHECK(v2.etcdCaCert == "/ca.pem");
  CHECK(v2.etcdCert == "/c.pem");
  CHECK(v2.etcdKey == "/k.pem");
  CHECK(v2.readTimeout == milliseconds(7000));
  CHECK(v2.etcdHttps == true);
  // Without `timeout`, join_timeout's default (torch's legacy etcd default is 600 s too); with
  // both, join_timeout.
  CHECK(etcd("last_call_timeout=3").config.rdzv.settings.joinTimeout == milliseconds(600000));
  CHECK(etcd("timeout=70,join_timeout=9").config.rdzv.settings.joinTimeout == milliseconds(9000));
  // The workers' store is still an agent's: the job's token and TLS files protect it.
  CHECK(etcd("token_file=/t").config.rdzv.settings.tokenFile == "/t");

  const auto error = [](const std::string& conf) {
    return usageError({"--rdzv-backend", "etcd", "--rdzv-conf", conf, script()});
  };
  CHECK_THAT(error("protocol=ftp"), Catch::Contains("protocol=ftp is not http or https"));
  CHECK_THAT(
      error("cacert=/a,ca_cert=/b"),
      Catch::Contains("cacert and ca_cert name the same file, given as '/a' and '/b'; give one"));
  CHECK_THAT(error("cert=/c.pem"),
             Catch::Contains("needs its key: give both cert=PATH and key=PATH"));
  CHECK_THAT(error("etcd_prefix=/a b"), Catch::Contains("etcd_prefix '/a b' has a space"));
  CHECK_THAT(error("timeout=x"), Catch::Contains("'timeout=x' is not a positive number"));
  // The same file under both spellings is fine.
  CHECK(etcd("cacert=/a,ca_cert=/a").warnings.empty());
  // Certificates with members that are all http://: said, not used.
  const CommandLine plain = parse({"--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1",
                                   "--rdzv-conf", "cacert=/ca.pem", script()});
  REQUIRE(plain.warnings.size() == 1);
  CHECK_THAT(plain.warnings[0], Catch::Contains("etcd's certificate files are not used"));
}

TEST_CASE(
    "option --rdzv-conf with etcd: username and password_file (ddprun's own): a password on "
    "the command line, or one of the pair alone, refused",
    "[cli][etcd][rdzv-conf]") {
  const std::vector<std::string> base = {"--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1",
                                         "--rdzv-conf"};
  const auto with = [&](const std::string& conf) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {conf, script()});
    return args;
  };
  // Taken as given: the file is read (and its mode checked) by the agent when it starts.
  const CommandLine line = parse(with("username=alice,password_file=/run/secrets/etcd-pw"));
  CHECK(line.warnings.empty());
  CHECK(line.config.rdzv.settings.etcdUser == "alice");
  CHECK(line.config.rdzv.settings.etcdPasswordFile == "/run/secrets/etcd-pw");

  // password=: refused, its value not repeated, password_file named as the fix.
  const std::string onCommandLine = usageError(with("username=alice,password=hunter2"));
  CHECK_THAT(onCommandLine,
             Catch::Contains("password= would show the etcd password to every user") &&
                 Catch::Contains("give password_file=PATH"));
  CHECK_THAT(onCommandLine, !Catch::Contains("hunter2"));
  CHECK_THAT(usageError(with("username=alice")),
             Catch::Contains("username is given without password_file") &&
                 Catch::Contains("username=NAME,password_file=PATH"));
  CHECK_THAT(usageError(with("password_file=/p")),
             Catch::Contains("password_file is given without username"));

  // Other backends read none of them: warned about (a password's value not repeated either).
  const CommandLine c10d =
      parse({"--rdzv-backend", "c10d", "--rdzv-conf", "username=alice,password=hunter2", script()});
  REQUIRE(c10d.warnings.size() == 2);
  CHECK_THAT(c10d.warnings[0], Catch::Contains("username is not read by the c10d backend"));
  CHECK_THAT(c10d.warnings[1], Catch::Contains("password is not read by the c10d backend") &&
                                   Catch::Contains("password_file=PATH"));
  CHECK_THAT(c10d.warnings[0] + c10d.warnings[1], !Catch::Contains("hunter2"));
}

TEST_CASE("option --rdzv-endpoint parsing: host, host:port, IPv6 in brackets", "[cli]") {
  const auto endpoint = [](const std::string& value) {
    return config({"--rdzv-backend", "c10d", "--rdzv-endpoint", value, script()});
  };
  CHECK(endpoint("127.0.0.1:1234").rdzv.host == "127.0.0.1");
  CHECK(endpoint("127.0.0.1:1234").rdzv.port == 1234);
  CHECK(endpoint("127.0.0.1:1234").rdzv.endpoint == "127.0.0.1:1234");
  CHECK(endpoint("localhost").rdzv.port == 29400);
  CHECK(endpoint("localhost").rdzv.host == "localhost");
  CHECK(endpoint("[::1]:5000").rdzv.host == "::1");
  CHECK(endpoint("[::1]:5000").rdzv.port == 5000);
  CHECK(endpoint("[::1]").rdzv.port == 29400);
  CHECK(endpoint("[fe80::1]:0").rdzv.port == 0);
  CHECK(endpoint("127.0.0.1:65535").rdzv.port == 65535);

  const auto error = [](const std::string& value) {
    return usageError({"--rdzv-backend", "c10d", "--rdzv-endpoint", value, script()});
  };
  CHECK_THAT(error("::1:5000"),
             Catch::Contains("needs brackets") && Catch::Contains("[::1]:29400"));
  CHECK_THAT(error("localhost:"), Catch::Contains("port '' is not a number in 0..65535"));
  CHECK_THAT(error("localhost:70000"), Catch::Contains("0..65535"));
  CHECK_THAT(error("localhost:-1"), Catch::Contains("0..65535"));
  CHECK_THAT(error("localhost:http"), Catch::Contains("port 'http'"));
  CHECK_THAT(error(":29400"), Catch::Contains("the host is missing"));
  CHECK_THAT(error("[::1"), Catch::Contains("no ']'"));
  CHECK_THAT(error("[::1]5000"), Catch::Contains("after ']'"));
  CHECK_THAT(error("[]:5000"), Catch::Contains("the host is missing"));
  // A name that does not resolve yet is waited for by the agent (a Kubernetes service name
  // appears seconds after its pod): a warning naming where it came from, not an error.
  const CommandLine late =
      parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "no-such-host.invalid:29400", script()});
  CHECK(late.config.rdzv.host == "no-such-host.invalid");
  REQUIRE(late.warnings.size() == 1);
  CHECK(late.warnings[0].starts_with(
      "host 'no-such-host.invalid' in --rdzv-endpoint does not resolve yet; the agent waits"));
  const CommandLine fromPet =
      parse({"--rdzv-backend", "c10d", script()},
            with(sandbox().environment(), "PET_RDZV_ENDPOINT", "no-such-host.invalid"));
  REQUIRE(fromPet.warnings.size() == 1);
  CHECK_THAT(fromPet.warnings[0], Catch::Contains("'no-such-host.invalid' in PET_RDZV_ENDPOINT"));
}

TEST_CASE("c10d without an endpoint is localhost:29400, --master-addr then warns", "[cli]") {
  const CommandLine line = parse({"--rdzv-backend", "c10d", script()});
  CHECK(line.config.rdzv.host == "localhost");
  CHECK(line.config.rdzv.port == 29400);
  CHECK(line.warnings.empty());
  const CommandLine master =
      parse({"--rdzv-backend", "c10d", "--master-addr", "127.0.0.2", script()});
  REQUIRE(master.warnings.size() == 1);
  CHECK_THAT(master.warnings[0],
             Catch::Contains("--master-addr '127.0.0.2' is only used by the static backend"));
  CHECK(parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:5", "--master-addr",
               "127.0.0.2", script()})
            .warnings.empty());
  const CommandLine multi = parse({"--rdzv-backend", "c10d", "--nnodes", "2", script()});
  REQUIRE(multi.warnings.size() == 1);
  CHECK_THAT(multi.warnings[0], Catch::Contains("localhost:29400"));
}

TEST_CASE("static rendezvous: the endpoint is --master-addr:--master-port unless given", "[cli]") {
  const LaunchConfig defaults = config({script()});
  CHECK(defaults.rdzv.host == "127.0.0.1");
  CHECK(defaults.rdzv.port == 29500);
  const LaunchConfig master =
      config({"--master-addr", "localhost", "--master-port", "1234", script()});
  CHECK(master.rdzv.host == "localhost");
  CHECK(master.rdzv.port == 1234);
  CHECK(master.rdzv.masterPort == 1234);
  const LaunchConfig endpoint = config({"--rdzv-endpoint", "127.0.0.2:777", script()});
  CHECK(endpoint.rdzv.host == "127.0.0.2");
  CHECK(endpoint.rdzv.port == 777);
  CHECK(config({"--rdzv-endpoint", "127.0.0.2", script()}).rdzv.port == 29500);
  CHECK(config({"--master-addr", "[::1]", script()}).rdzv.host == "::1");
  const CommandLine late = parse({"--master-addr", "no-such-host.invalid", script()});
  CHECK(late.config.rdzv.host == "no-such-host.invalid");
  REQUIRE(late.warnings.size() == 1);
  CHECK_THAT(late.warnings[0],
             Catch::Contains("'no-such-host.invalid' in --master-addr does not resolve yet"));
  CHECK_THAT(usageError({"--master_addr=", script()}),
             Catch::Contains("--master_addr '' is empty"));
}

TEST_CASE("option --rdzv-conf: k=v pairs, stripped, checked, unknown keys warn", "[cli]") {
  const auto conf = [](const std::string& value) {
    return parse({"--rdzv-backend", "c10d", "--rdzv-conf", value, script()});
  };
  const CommandLine good = conf(
      " join_timeout = 5 , last_call_timeout=2.5,keep_alive_max_attempt=3,is_host=YES,"
      "store_type=TCP,use_libuv=1,exit_barrier_timeout=30,read_timeout=60,"
      "close_timeout=1,heartbeat_timeout=5,keep_alive_interval=5,");
  CHECK(good.warnings.empty());
  // Typed: durations in milliseconds, the boolean as a boolean, nothing left as text.
  using std::chrono::milliseconds;
  const auto& c = good.config.rdzv.settings;
  CHECK(c.joinTimeout == milliseconds(5000));
  CHECK(c.lastCallTimeout == milliseconds(2500));
  CHECK(c.keepAliveMaxAttempts == 3);
  CHECK(c.isHost == true);
  CHECK(c.exitBarrierTimeout == milliseconds(30000));
  CHECK(c.readTimeout == milliseconds(60000));
  CHECK(c.closeTimeout == milliseconds(1000));
  CHECK(c.heartbeatTimeout == milliseconds(5000));
  CHECK(c.keepAliveInterval == milliseconds(5000));
  CHECK(c.holdTimeToLive() == milliseconds(15000));
  CHECK(conf("is_host=0").config.rdzv.settings.isHost == false);
  CHECK_FALSE(conf("").config.rdzv.settings.isHost.has_value());
  CHECK(conf("").config.rdzv.settings == ddprun::launcher::RendezvousSettings{});
  // The static backend's `timeout` is its join timeout, unless join_timeout is given.
  const auto staticConf = [](const std::string& value) {
    return parse({"--rdzv-conf", value, script()}).config.rdzv.settings.joinTimeout;
  };
  CHECK(staticConf("timeout=70") == milliseconds(70000));
  CHECK(staticConf("timeout=70,join_timeout=9") == milliseconds(9000));
  CHECK(staticConf("close_timeout=3") == milliseconds(900000));
  // c10d does not read `timeout` (nor does torch's): it is ignored with a warning.
  const CommandLine c10dTimeout = conf("timeout=70");
  CHECK(c10dTimeout.config.rdzv.settings.joinTimeout == milliseconds(600000));
  REQUIRE(c10dTimeout.warnings.size() == 1);
  CHECK_THAT(c10dTimeout.warnings[0],
             Catch::Contains("timeout is not read by the c10d backend; ignored (c10d's join "
                             "timeout is join_timeout)"));

  const CommandLine unknown = conf("join_timout=5,join_timeout=7");
  REQUIRE(unknown.warnings.size() == 1);
  CHECK_THAT(unknown.warnings[0], Catch::Contains("unknown key 'join_timout' ignored"));
  ddprun::launcher::RendezvousSettings onlyJoin;
  onlyJoin.joinTimeout = std::chrono::seconds(7);
  CHECK(unknown.config.rdzv.settings == onlyJoin);

  const auto error = [](const std::string& value) {
    return usageError({"--rdzv-backend", "c10d", "--rdzv-conf", value, script()});
  };
  CHECK_THAT(error("join_timeout"), Catch::Contains("key 'join_timeout' has no value"));
  CHECK_THAT(error("join_timeout= "), Catch::Contains("has no value"));
  CHECK_THAT(error("=5"), Catch::Contains("has no key"));
  CHECK_THAT(error("join_timeout=abc"),
             Catch::Contains("'join_timeout=abc' is not a positive number"));
  CHECK_THAT(error("join_timeout=0"), Catch::Contains("not a positive number"));
  CHECK_THAT(error("read_timeout=-1"), Catch::Contains("not a positive number"));
  CHECK_THAT(error("keep_alive_max_attempt=2.5"), Catch::Contains("not a whole number"));
  // The fence (docs/architecture.md, "Liveness and fencing") must leave the heartbeat a renewal:
  // 1 s x 1 makes a 0.5 s fencing interval, shorter than one keep-alive interval.
  CHECK_THAT(error("keep_alive_max_attempt=1"),
             Catch::Contains("keep_alive_interval=1 s x keep_alive_max_attempt=1") &&
                 Catch::Contains("after 0.5 s without an acknowledged renewal") &&
                 Catch::Contains("raise keep_alive_max_attempt (e.g. to 2)"));
  CHECK_THAT(error("keep_alive_interval=0.2,keep_alive_max_attempt=3"),
             Catch::Contains("raise keep_alive_max_attempt (e.g. to 4)"));
  CHECK_THAT(error("is_host=maybe"), Catch::Contains("not a boolean"));
  CHECK_THAT(error("store_type=file"), Catch::Contains("store_type=file") &&
                                           Catch::Contains("not supported by ddprun") &&
                                           Catch::Contains("store_type=tcp"));
  CHECK_THAT(error("store_type=redis"), Catch::Contains("unknown store_type 'redis'"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_RDZV_CONF", "x")),
             Catch::Contains("PET_RDZV_CONF: key 'x' has no value"));
}

TEST_CASE("option --rdzv-conf: PyTorch's launcher test with the quotes inside the argument runs",
          "[cli][rdzv-conf]") {
  // test_launch_elastic in PyTorch's test/distributed/launcher/run_test.py passes the quotes on
  // to argparse: the first key is 'join_timeout and the last value 5'. torchrun 1.13 and 2.6 run
  // it (c10d reads neither key), so ddprun does too: warned, never exit 2.
  const std::vector<std::string> upstream = {
      "--nnodes=1:2",
      "--nproc-per-node=4",
      "--rdzv-backend=c10d",
      "--rdzv-endpoint=localhost:29511",
      "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",
      "--rdzv-id=1234",
      "--monitor-interval=1",
      "--start-method=spawn",
      script(),
      "--touch-file-dir=/tmp/x"};
  const CommandLine line = parse(upstream);
  const auto& settings = line.config.rdzv.settings;
  CHECK(settings.lastCallTimeout == std::chrono::seconds(1));
  CHECK(settings.joinTimeout == std::chrono::seconds(600));  // as torchrun: the key has a quote
  CHECK(line.config.nprocPerNode == 4);
  REQUIRE(line.warnings.size() == 3);  // the quotes, 'join_timeout, timeout
  CHECK_THAT(line.warnings[0], Catch::Contains("is wrapped in quotes that no shell removed") &&
                                   Catch::Contains("drop them"));
  CHECK_THAT(line.warnings[1], Catch::Contains("unknown key ''join_timeout' ignored"));
  CHECK_THAT(line.warnings[2], Catch::Contains("timeout is not read by the c10d backend"));

  // Double quotes alike; a value that only contains quotes is not wrapped.
  CHECK_THAT(parse({"--rdzv-backend", "c10d", "--rdzv-conf", "\"last_call_timeout=1\"", script()})
                 .warnings.front(),
             Catch::Contains("wrapped in quotes"));
  CHECK_THAT(
      parse({"--rdzv-backend", "c10d", "--rdzv-conf", "x='1',y=\"2\"", script()}).warnings.front(),
      Catch::Contains("unknown key 'x'"));

  // The static backend reads `timeout`: 5' is refused, as torchrun fails on int("5'"), and the
  // message names the quotes.
  CHECK_THAT(usageError({"--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", script()}),
             Catch::Contains("its value is wrapped in quotes no shell removed: drop them") &&
                 Catch::Contains("'timeout=5'' is not a positive number of seconds"));
}

namespace {

// One --rdzv-conf entry under one backend: read (and checked) or ignored with a warning.
struct BackendKeyCase {
  std::string backend;
  std::string entry;
  std::string outcome;  // "ok", "warn: TEXT" (ignored) or "error: TEXT" (exit 2)
};

// Each case's --rdzv-conf entry under its backend has its outcome: no warning, one warning, or
// the usage error.
void checkBackendKeyCases(const std::vector<BackendKeyCase>& cases) {
  for (const auto& c : cases) {
    INFO("--rdzv-backend " << c.backend << " --rdzv-conf " << c.entry << " -> " << c.outcome);
    const std::vector<std::string> args = {"--rdzv-backend", c.backend, "--rdzv-conf", c.entry,
                                           script()};
    if (c.outcome.starts_with("error: ")) {
      CHECK_THAT(usageError(args), Catch::Contains(c.outcome.substr(7)));
      continue;
    }
    const CommandLine line = parse(args);
    if (c.outcome == "ok") {
      CHECK(line.warnings.empty());
    } else {
      REQUIRE(line.warnings.size() == 1);
      CHECK_THAT(line.warnings[0], Catch::Contains(c.outcome.substr(6)));
    }
  }
}

}  // namespace

TEST_CASE("option --rdzv-conf: keys the backend reads are strict, others warn once and are ignored",
          "[cli][rdzv-conf]") {
  const std::vector<BackendKeyCase> cases = {
      // `timeout`: the static backend's join timeout; c10d reads join_timeout instead.
      {"static", "timeout=70", "ok"},
      {"static", "timeout=abc", "error: 'timeout=abc' is not a positive number of seconds"},
      {"c10d", "timeout=70", "warn: timeout is not read by the c10d backend"},
      {"c10d", "timeout=abc", "warn: timeout is not read by the c10d backend"},
      // is_host: c10d's; with static, node rank 0 hosts the store.
      {"c10d", "is_host=1", "ok"},
      {"c10d", "is_host=maybe", "error: 'is_host=maybe' is not a boolean"},
      {"static", "is_host=1", "warn: is_host is not read by the static backend"},
      {"static", "is_host=maybe", "warn: node rank 0 hosts the store"},
      // Keys both read stay strict under either.
      {"static", "join_timeout=x", "error: 'join_timeout=x' is not a positive number"},
      {"c10d", "join_timeout=x", "error: 'join_timeout=x' is not a positive number"},
      {"static", "keep_alive_max_attempt=0", "error: is not a whole number >= 1"},
      {"c10d", "read_timeout=-1", "error: is not a positive number"},
      {"static", "store_type=file", "error: store_type=file"},
      // Unknown keys: any value.
      {"c10d", "join_timout=abc'", "warn: unknown key 'join_timout' ignored"},
      {"static", "'x=\"", "warn: unknown key ''x' ignored"},
      // A missing key or value is an error whatever the key, as in torchrun.
      {"c10d", "timeout=", "error: key 'timeout' has no value"},
      {"static", "is_host", "error: key 'is_host' has no value"},
  };
  checkBackendKeyCases(cases);
  // Ignored means ignored: no value of an unread key reaches the settings.
  using std::chrono::milliseconds;
  CHECK(config({"--rdzv-backend", "c10d", "--rdzv-conf", "timeout=70", script()})
            .rdzv.settings.joinTimeout == milliseconds(600000));
  CHECK_FALSE(config({"--rdzv-conf", "is_host=1", script()}).rdzv.settings.isHost.has_value());
  // --standalone is c10d: `timeout` is not read there either.
  CHECK_THAT(parse({"--standalone", "--rdzv-conf", "timeout=x", script()}).warnings.at(0),
             Catch::Contains("not read by the c10d backend"));
  // Each ignored key is warned about once.
  const CommandLine repeated =
      parse({"--rdzv-backend", "c10d", "--rdzv-conf",
             "timeout=1,nope=1,timeout=2,nope=2,join_timeout=3", script()});
  CHECK(repeated.warnings.size() == 2);
  CHECK(repeated.config.rdzv.settings.joinTimeout == milliseconds(3000));
}

TEST_CASE(
    "option --rdzv-conf: token_file and the TLS files are paths, TLS only with the token and "
    "both of its files",
    "[cli]") {
  const auto conf = [](const std::string& value) {
    return parse({"--rdzv-backend", "c10d", "--rdzv-conf", value, script()}).config.rdzv.settings;
  };
  const auto all = conf("token_file=/t,tls_cert=/c.pem,tls_key=/k.pem,tls_ca=/ca.pem");
  CHECK(all.tokenFile == "/t");
  CHECK(all.tlsCert == "/c.pem");
  CHECK(all.tlsKey == "/k.pem");
  CHECK(all.tlsCa == "/ca.pem");
  CHECK(conf("token_file=/t").tlsCert.empty());
  const auto error = [](const std::string& value) {
    return usageError({"--rdzv-backend", "c10d", "--rdzv-conf", value, script()});
  };
  CHECK_THAT(error("tls_cert=/c.pem,tls_key=/k.pem"),
             Catch::Contains("TLS needs the job's token too; add token_file=PATH"));
  CHECK_THAT(error("token_file=/t,tls_cert=/c.pem"),
             Catch::Contains("give every agent both tls_cert=PATH and tls_key=PATH"));
  CHECK_THAT(error("token_file=/t,tls_ca=/ca.pem"),
             Catch::Contains("both tls_cert=PATH and tls_key"));
}

TEST_CASE("option --standalone: c10d on 127.0.0.1:0 with a random run id, single node only",
          "[cli]") {
  const CommandLine line = parse({"--standalone", "--nproc-per-node", "2", script()});
  const LaunchConfig& c = line.config;
  CHECK(c.rdzv.standalone);
  CHECK(c.rdzv.backend == RdzvBackend::kC10d);
  CHECK(c.rdzv.host == "127.0.0.1");
  CHECK(c.rdzv.port == 0);
  CHECK(c.rdzv.runId.size() == 16);
  CHECK(c.rdzv.runId.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(c.rdzv.runId != config({"--standalone", script()}).rdzv.runId);
  CHECK(line.warnings.empty());

  // Other rendezvous settings are ignored, with a warning; --rdzv-conf still applies.
  const CommandLine ignoring =
      parse({"--standalone", "--rdzv-backend", "zookeeper", "--rdzv-endpoint", "nowhere.invalid:1",
             "--rdzv-id", "job", "--rdzv-conf", "join_timeout=5", script()});
  CHECK(ignoring.warnings.size() == 3);
  CHECK_THAT(ignoring.warnings[0], Catch::Contains("--standalone ignores"));
  CHECK(ignoring.config.rdzv.host == "127.0.0.1");
  CHECK(ignoring.config.rdzv.runId != "job");
  CHECK(ignoring.config.rdzv.settings.joinTimeout == std::chrono::seconds(5));

  CHECK_THAT(usageError({"--standalone", "--nnodes", "2", script()}),
             Catch::Contains("--standalone is single-node"));
  CHECK_THAT(usageError({"--standalone", "--nnodes", "1:2", script()}),
             Catch::Contains("single-node"));

  // Kubeflow's elastic env: PET_STANDALONE="" means on.
  Environment kubeflow = sandbox().environment();
  kubeflow["PET_STANDALONE"] = "";
  kubeflow["PET_NPROC_PER_NODE"] = "2";
  const LaunchConfig fromEnvironment = config({script()}, kubeflow);
  CHECK(fromEnvironment.rdzv.standalone);
  // torchrun reads PET_ flags with int(): any integer, 0 off and others on.
  CHECK(config({script()}, with(sandbox().environment(), "PET_STANDALONE", "2")).rdzv.standalone);
  CHECK_FALSE(
      config({script()}, with(sandbox().environment(), "PET_STANDALONE", "0")).rdzv.standalone);
  CHECK(fromEnvironment.rdzv.port == 0);
  CHECK(fromEnvironment.nprocPerNode == 2);
}

TEST_CASE("entry kind: what runs, and how", "[cli]") {
  const Sandbox& box = sandbox();
  SECTION(".py files run under Python, executable or not") {
    CHECK(config({box.path("train.py")}).entry.kind == EntryKind::kPythonScript);
    CHECK(config({box.path("exec.py")}).entry.kind == EntryKind::kPythonScript);
    CHECK(config({box.path("exec.py")}).entry.python == box.python());
  }
  SECTION("an executable Python script without .py runs under $PYTHON_EXEC, not its shebang") {
    const LaunchConfig c = config({box.path("finetune"), "--x"});
    CHECK(c.entry.kind == EntryKind::kPythonScript);
    CHECK(c.entry.python == box.python());
    CHECK(c.entry.script == box.path("finetune"));
  }
  SECTION("an executable that is not Python is for --no-python, as with torchrun") {
    CHECK_THAT(usageError({box.path("tool"), "--x"}),
               Catch::Contains("is a script for /bin/sh") &&
                   Catch::Contains("run it with --no-python") && !Catch::Contains("chmod"));
    CHECK_THAT(usageError({box.path("program")}),
               Catch::Contains("is a program") && Catch::Contains("run it with --no-python"));
    const LaunchConfig c = config({"--no-python", box.path("tool"), "--x"});
    CHECK(c.entry.kind == EntryKind::kExecutable);
    CHECK(c.entry.executable == box.path("tool"));
    CHECK(c.entry.python.empty());
  }
  SECTION("a non-executable file that is not .py runs under Python, as with torchrun") {
    CHECK(config({box.path("data.txt")}).entry.kind == EntryKind::kPythonScript);
  }
  SECTION("a directory with __main__.py runs under Python; one without is an error") {
    CHECK(config({box.path("pkg")}).entry.kind == EntryKind::kPythonScript);
    CHECK_THAT(usageError({box.path("emptydir")}), Catch::Contains("without __main__.py"));
  }
  SECTION("a bare name found on PATH: a Python script runs under Python from there") {
    const LaunchConfig c = config({"pytool"});
    CHECK(c.entry.kind == EntryKind::kPythonScript);
    CHECK(c.entry.script == (box.bin / "pytool").string());
    CHECK_THAT(usageError({"mytool"}),
               Catch::Contains("found on PATH as") && Catch::Contains("run it with --no-python"));
    CHECK(config({"--no-python", "mytool"}).entry.executable == (box.bin / "mytool").string());
  }
  SECTION("bare names in the working directory are files there, kept as given") {
    const WorkingDirectory cwd(box.root);
    CHECK_THAT(usageError({"tool"}), Catch::Contains("'tool' is a script for /bin/sh"));
    const LaunchConfig tool = config({"--no-python", "./tool"});
    CHECK(tool.entry.kind == EntryKind::kExecutable);
    CHECK(tool.entry.executable == "./tool");
    CHECK(tool.entry.script == "./tool");
    const LaunchConfig train = config({"train.py"});
    CHECK(train.entry.kind == EntryKind::kPythonScript);
    CHECK(train.entry.script == "train.py");
    CHECK(config({"data.txt"}).entry.kind == EntryKind::kPythonScript);
    CHECK(config({"pkg"}).entry.kind == EntryKind::kPythonScript);
    CHECK_THAT(usageError({"--no-python", "tool"}), Catch::Contains("write ./tool"));
    CHECK_THAT(usageError({"--no-python", "data.txt"}),
               Catch::Contains("not executable; chmod +x it and write ./data.txt"));
    CHECK(config({"--no-python", "./tool"}).entry.executable == "./tool");
  }
  SECTION("-m runs a module without looking for a file") {
    const LaunchConfig c = config({"-m", "no.such.module", "--lr", "1"});
    CHECK(c.entry.kind == EntryKind::kPythonModule);
    CHECK(c.entry.script == "no.such.module");
    CHECK(c.entry.args == std::vector<std::string>{"--lr", "1"});
    CHECK(c.entry.python == box.python());
  }
  SECTION("--no-python: executables only, PATH lookup like execvp") {
    CHECK(config({"--no-python", box.path("tool")}).entry.executable == box.path("tool"));
    CHECK(config({"--no-python", "mytool"}).entry.executable == (box.bin / "mytool").string());
    CHECK_THAT(usageError({"--no-python", box.path("data.txt")}),
               Catch::Contains("is not executable; chmod +x it or drop --no-python"));
    CHECK_THAT(usageError({"--no-python", "no-such-tool"}), Catch::Contains("not found on PATH"));
    CHECK_THAT(usageError({"--no-python", box.path("missing")}), Catch::Contains("does not exist"));
    CHECK_THAT(usageError({"--no-python", box.path("emptydir")}),
               Catch::Contains("is a directory"));
    // No Python needed to run an executable.
    const Environment bare{{"PATH", box.path("nopython")}};
    CHECK(config({"--no-python", box.path("tool")}, bare).entry.kind == EntryKind::kExecutable);
    CHECK_THAT(usageError({box.path("tool")}, bare), Catch::Contains("--no-python"));
  }
  SECTION("-m with --no-python is an error") {
    CHECK_THAT(usageError({"-m", "--no-python", "mod"}),
               Catch::Contains("-m and --no-python cannot be used together"));
    CHECK_THAT(usageError({"--no-python", "mod"}, with(box.environment(), "PET_MODULE", "1")),
               Catch::Contains("PET_MODULE and --no-python"));
  }
  SECTION("--run-path needs Python and an existing path; it wins over --no-python") {
    const CommandLine line = parse({"--run-path", "--no-python", script()});
    CHECK(line.config.entry.kind == EntryKind::kRunPath);
    CHECK(line.config.entry.python == box.python());
    REQUIRE(line.warnings.size() == 1);
    CHECK_THAT(line.warnings[0], Catch::Contains("--no-python is ignored with --run-path"));
    CHECK_THAT(usageError({"--run-path", box.path("missing.py")}),
               Catch::Contains("does not exist"));
  }
  SECTION("a script that does not exist") {
    CHECK_THAT(usageError({box.path("missing.py")}),
               Catch::Contains("training script '" + box.path("missing.py") + "' does not exist"));
    CHECK_THAT(usageError({"no-such-command"}), Catch::Contains("is not a command on PATH"));
  }
  SECTION("the Python interpreter: PYTHON_EXEC, else python3 on PATH") {
    CHECK(
        config({script()}, with(box.environment(), "PYTHON_EXEC", box.path("tool"))).entry.python ==
        box.path("tool"));
    CHECK(config({script()}, with(box.environment(), "PYTHON_EXEC", "mytool")).entry.python ==
          (box.bin / "mytool").string());
    CHECK_THAT(usageError({script()}, with(box.environment(), "PYTHON_EXEC", box.path("data.txt"))),
               Catch::Contains("PYTHON_EXEC") && Catch::Contains("is not an executable file"));
    CHECK_THAT(
        usageError({script()}, with(box.environment(), "PYTHON_EXEC", "/nonexistent/python")),
        Catch::Contains("PYTHON_EXEC '/nonexistent/python'"));
    CHECK_THAT(usageError({script()}, with(box.environment(), "PYTHON_EXEC", "nopython9")),
               Catch::Contains("not found on PATH"));
    const Environment bare{{"PATH", box.path("nopython")}};
    CHECK_THAT(usageError({script()}, bare), Catch::Contains("no python3 on PATH"));
    CHECK_THAT(usageError({"-m", "mod"}, bare), Catch::Contains("no python3 on PATH"));
    CHECK_THAT(usageError({"--run-path", script()}, bare), Catch::Contains("no python3 on PATH"));
    // A relative PATH entry still gives an absolute interpreter path.
    const WorkingDirectory cwd(box.root);
    CHECK(config({script()}, {{"PATH", "bin"}}).entry.python == box.python());
    // Taken from PATH, it is said at start (#41); given, or for a program, it is not.
    CHECK_THAT(parse({script()}, box.environment()).interpreterNote,
               Catch::Contains("the workers run under " + box.python() +
                               ", the first python3 on PATH; PYTHON_EXEC=/path/to/python"));
    CHECK(parse({script()}, with(box.environment(), "PYTHON_EXEC", box.path("tool")))
              .interpreterNote.empty());
    CHECK(parse({"--no-python", box.path("tool")}, box.environment()).interpreterNote.empty());
  }
}

TEST_CASE("option --shutdown-timeout: command line, PET_, TORCH_ELASTIC_SHUTDOWN_TIMEOUT, 30 s",
          "[cli]") {
  using std::chrono::milliseconds;
  Environment environment = with(sandbox().environment(), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "5");
  CHECK(config({script()}, environment).restart.shutdownTimeout == milliseconds(5000));
  environment["PET_SHUTDOWN_TIMEOUT"] = "2.5";
  CHECK(config({script()}, environment).restart.shutdownTimeout == milliseconds(2500));
  CHECK(config({"--shutdown-timeout", "0.25", script()}, environment).restart.shutdownTimeout ==
        milliseconds(250));
  CHECK(config({"--shutdown-timeout=0", script()}).restart.shutdownTimeout == milliseconds(0));
  CHECK_THAT(usageError({"--shutdown-timeout", "-1", script()}),
             Catch::Contains("--shutdown-timeout '-1'") && Catch::Contains(">= 0"));
  CHECK_THAT(usageError({"--shutdown-timeout", "soon", script()}), Catch::Contains("not a number"));
  CHECK_THAT(usageError({"--shutdown-timeout", "inf", script()}), Catch::Contains(">= 0"));
  CHECK_THAT(
      usageError({script()}, with(sandbox().environment(), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "x")),
      Catch::Contains("TORCH_ELASTIC_SHUTDOWN_TIMEOUT 'x'"));
}

TEST_CASE("hang options: off, 10 min and 5 min by default, 0 is no limit, bad values are exit 2",
          "[cli]") {
  using std::chrono::milliseconds;
  const LaunchConfig defaults = config({script()});
  CHECK_FALSE(defaults.hang.hangTimeout.has_value());
  CHECK(defaults.hang.startupTimeout == milliseconds(600000));
  CHECK(defaults.hang.exitTimeout == milliseconds(300000));
  const LaunchConfig unlimited =
      config({"--hang-timeout", "0", "--hang-startup-timeout", "0", "--exit-timeout=0", script()});
  CHECK_FALSE(unlimited.hang.hangTimeout.has_value());
  CHECK_FALSE(unlimited.hang.startupTimeout.has_value());
  CHECK_FALSE(unlimited.hang.exitTimeout.has_value());
  CHECK(
      config({script()}, with(sandbox().environment(), "PET_HANG_TIMEOUT", "7")).hang.hangTimeout ==
      milliseconds(7000));
  CHECK_THAT(
      usageError({"--hang-timeout", "-1", script()}),
      Catch::Contains("--hang-timeout '-1'") && Catch::Contains("seconds >= 0 (0: no limit)"));
  CHECK_THAT(usageError({"--exit-timeout", "later", script()}), Catch::Contains("not a number"));
  CHECK_THAT(usageError({"--hang-startup-timeout", "nan", script()}), Catch::Contains(">= 0"));
}

TEST_CASE("option --hang-native-stack-budget: 0.4 s by default, 0 is none, bad values are exit 2",
          "[cli]") {
  using std::chrono::milliseconds;
  CHECK(config({script()}).hang.nativeStackBudget == milliseconds(400));
  CHECK(config({"--hang-native-stack-budget", "0", script()}).hang.nativeStackBudget ==
        milliseconds(0));
  CHECK(config({"--hang-native-stack-budget=2", script()}).hang.nativeStackBudget ==
        milliseconds(2000));
  // Below a millisecond is still a budget, not "none".
  CHECK(config({"--hang-native-stack-budget", "0.0001", script()}).hang.nativeStackBudget ==
        milliseconds(1));
  CHECK(config({script()}, with(sandbox().environment(), "PET_HANG_NATIVE_STACK_BUDGET", "0"))
            .hang.nativeStackBudget == milliseconds(0));
  for (const char* bad : {"-1", "nan", "inf", "3601"}) {
    INFO(bad);
    CHECK_THAT(usageError({"--hang-native-stack-budget", bad, script()}),
               Catch::Contains("--hang-native-stack-budget '" + std::string(bad) + "'") &&
                   Catch::Contains("from 0 (no native stacks) to 3600"));
  }
  CHECK_THAT(usageError({"--hang-native-stack-budget", "soon", script()}),
             Catch::Contains("not a number"));
  CHECK_THAT(
      usageError({script()}, with(sandbox().environment(), "PET_HANG_NATIVE_STACK_BUDGET", "-2")),
      Catch::Contains("PET_HANG_NATIVE_STACK_BUDGET"));
}

TEST_CASE("option --signals-to-handle: names with or without SIG, stored as numbers", "[cli]") {
  const auto signals = [](const std::string& value) {
    return config({"--signals-to-handle", value, script()}).restart.signalsToHandle;
  };
  CHECK(signals("SIGTERM,SIGUSR1") == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK(signals("TERM") == std::vector<int>{SIGTERM});
  CHECK(signals(" usr2 , SIGINT,SIGINT") == std::vector<int>{SIGUSR2, SIGINT});
  CHECK_THAT(usageError({"--signals-to-handle", "SIGTERM,SIGFOO", script()}),
             Catch::Contains("unknown signal 'SIGFOO'"));
  CHECK_THAT(usageError({"--signals-to-handle", "", script()}), Catch::Contains("unknown signal"));
  CHECK_THAT(usageError({"--signals-to-handle", "SIGKILL", script()}),
             Catch::Contains("cannot be caught"));
}

TEST_CASE("option -r/--redirects and -t/--tee: 0-3 or per-rank maps", "[cli]") {
  const StreamSelection all = config({"-r", "3", script()}).logs.redirects;
  CHECK_FALSE(all.perRankGiven);
  CHECK(all.forRank(5) == StdStreams{true, true});
  CHECK(config({"--redirects", "0", script()}).logs.redirects.forRank(0) == StdStreams{});

  const StreamSelection map = config({"--tee", "0:1,1:3, 12:2", script()}).logs.tee;
  CHECK(map.perRankGiven);
  CHECK(map.forRank(0) == StdStreams{true, false});
  CHECK(map.forRank(1) == StdStreams{true, true});
  CHECK(map.forRank(12) == StdStreams{false, true});  // multi-digit ranks, unlike torchrun
  CHECK(map.forRank(2) == StdStreams{});
  CHECK(config({"-r", "0:3", script()}).logs.redirects.perRank.size() == 1);

  for (const std::string bad : {"4", "a", "0:4", "0:1,", "", "1:", ":1", "0:1,0:2", "0:1;1:2"}) {
    INFO("--redirects '" << bad << "'");
    CHECK_THAT(usageError({"--redirects", bad, script()}),
               Catch::Contains("--redirects '" + bad + "'"));
  }
  CHECK_THAT(usageError({"--redirects=-1:2", script()}), Catch::Contains("--redirects '-1:2'"));
  CHECK_THAT(usageError({"-t", "9", script()}), Catch::Contains("-t '9' is not 0-3"));
  CHECK_THAT(usageError({"-r", "0:1,0:2", script()}), Catch::Contains("listed twice"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_TEE", "x")),
             Catch::Contains("PET_TEE 'x'"));
}

TEST_CASE("option --local-ranks-filter: comma list of local ranks", "[cli]") {
  CHECK(config({"--nproc-per-node", "3", "--local-ranks-filter", "0,2", script()})
            .logs.localRanksFilter == std::set<int>{0, 2});
  CHECK_FALSE(config({"--local-ranks-filter", "", script()}).logs.localRanksFilter.has_value());
  for (const std::string bad : {"a", "-1", "0,,1", "1.5", "0,"}) {
    CHECK_THAT(usageError({"--local-ranks-filter", bad, script()}),
               Catch::Contains("--local-ranks-filter '" + bad + "'") && Catch::Contains("e.g."));
  }
  const CommandLine beyond =
      parse({"--nproc-per-node", "2", "--local-ranks-filter", "0,5", script()});
  REQUIRE(beyond.warnings.size() == 1);
  CHECK_THAT(beyond.warnings[0], Catch::Contains("local rank 5 does not exist with 2 workers"));
}

TEST_CASE("option --duplicate-stdout/stderr-filters: comma list with ,, for a literal comma",
          "[cli]") {
  const LaunchConfig c = config(
      {"--duplicate-stdout-filters", "a,,b,c,,", "--duplicate_stderr_filters", "x", script()});
  CHECK(c.logs.duplicateStdoutFilters == std::vector<std::string>{"a,b", "c,"});
  CHECK(c.logs.duplicateStderrFilters == std::vector<std::string>{"x"});
}

TEST_CASE("option --log-dir must be, or be creatable as, a writable directory", "[cli]") {
  const Sandbox& box = sandbox();
  CHECK(config({"--log-dir", box.root.string(), script()}).logs.dir == box.root.string());
  CHECK(config({"--log-dir", box.path("new/deeper"), script()}).logs.dir == box.path("new/deeper"));
  CHECK_FALSE(fs::exists(box.path("new")));  // checked, not created
  CHECK_THAT(usageError({"--log-dir", box.path("data.txt"), script()}),
             Catch::Contains("exists but is not a directory"));
  CHECK_THAT(usageError({"--log-dir", box.path("data.txt/sub"), script()}),
             Catch::Contains("cannot be created"));
  if (::geteuid() != 0) {  // root may write anywhere
    const fs::path locked = box.root / "locked";
    fs::create_directories(locked);
    ::chmod(locked.c_str(), 0555);
    CHECK_THAT(usageError({"--log-dir", locked.string(), script()}),
               Catch::Contains("not writable"));
    ::chmod(locked.c_str(), 0755);
  }
}

TEST_CASE("option --logs-specs: default (torch's built-in log specs) is accepted, a plugin is not",
          "[cli]") {
  // torch registers DefaultLogsSpecs as the entry point "default"; it is what ddprun does.
  const std::vector<std::vector<std::string>> accepted = {
      {"--logs-specs", "default"}, {"--logs_specs=default"}, {"--logs-spec", "default"}};
  for (const auto& args : accepted) {
    INFO(Catch::Detail::stringify(args));
    std::vector<std::string> withScript = args;
    withScript.push_back(script());
    const CommandLine line = parse(withScript);
    CHECK(line.warnings.empty());
    CHECK(line.config.logs.dir.empty());
  }
  for (const std::string plugin : {"custom", "Default", " default", ""}) {
    INFO("--logs-specs '" << plugin << "'");
    CHECK_THAT(usageError({"--logs-specs", plugin, script()}),
               Catch::Contains("--logs-specs '" + plugin + "'") &&
                   Catch::Contains("no Python plugin host") && Catch::Contains("give default"));
  }
  CHECK_THAT(usageError({"--logs_specs=custom", script()}), Catch::Contains("--logs_specs"));
}

TEST_CASE("option --numa-binding: a known mode, and no numactl needed", "[cli]") {
  const Environment noNumactl{{"PATH", sandbox().bin.string()}};
  CHECK(config({"--numa-binding", "node", script()}, noNumactl).numaBinding == NumaAffinity::kNode);
  CHECK(config({"--numa-binding", "socket", script()}, noNumactl).numaBinding ==
        NumaAffinity::kSocket);
  CHECK(config({"--numa-binding", "exclusive", script()}, noNumactl).numaBinding ==
        NumaAffinity::kExclusive);
  CHECK(config({"--numa-binding=core-complex", script()}, noNumactl).numaBinding ==
        NumaAffinity::kCoreComplex);
  CHECK_THAT(usageError({"--numa_binding", "cores", script()}, noNumactl),
             Catch::Contains(
                 "--numa_binding 'cores' is not one of node, socket, exclusive, core-complex"));
}

// The table's choices are what shell completion offers (cli/completion.h): each one must parse.
TEST_CASE("every choice in the option table is a value the command line takes", "[cli]") {
  Environment environment = sandbox().environment();
  environment["PATH"] = sandbox().bin.string() + ":" + sandbox().path("numabin");
  int choices = 0;
  for (const auto& spec : ddprun::launcher::cli_detail::options()) {
    for (const std::string_view choice : spec.choices) {
      INFO("--" << spec.name << " " << choice);
      CHECK_NOTHROW(
          parse({"--" + std::string(spec.name), std::string(choice), script()}, environment));
      ++choices;
    }
  }
  CHECK(choices >= 12);  // backends, start methods, event log handlers, logs specs, NUMA modes
}

TEST_CASE("option --start-method and --event-log-handler take fixed choices", "[cli]") {
  CHECK(config({"--start-method", "forkserver", script()}).entry.startMethod == "forkserver");
  CHECK_THAT(usageError({"--start-method", "thread", script()}),
             Catch::Contains("--start-method 'thread' is not one of spawn, fork, forkserver"));
  CHECK(config({"--event_log_handler", "dynamic_rendezvous", script()}).eventLogHandler ==
        "dynamic_rendezvous");
  CHECK_THAT(usageError({"--event-log-handler", "file", script()}),
             Catch::Contains("null, console, dynamic_rendezvous"));
}

TEST_CASE("user text in errors is escaped so that a message stays one line", "[cli]") {
  CHECK_THAT(usageError({"--nnodes", "1\n2", script()}), Catch::Contains("'1\\n2'"));
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_STANDALONE", "a\nb")),
             Catch::Contains("'a\\nb'"));
}

TEST_CASE("option --help lists every option in both spellings, --version", "[cli]") {
  const CommandLine help = parse({"--help"});
  CHECK(help.helpRequested);
  CHECK(parse({"--nproc-per-node", "2", "-h"}).helpRequested);  // no script needed
  const std::string& text = help.helpText;
  CHECK_THAT(text, Catch::StartsWith("usage: ddprun"));
  CHECK_THAT(text, Catch::Contains("-h, --help"));
  CHECK_THAT(text, Catch::Contains("-m, --module"));
  CHECK_THAT(text, Catch::Contains("-r REDIRECTS, --redirects REDIRECTS"));
  CHECK_THAT(text, Catch::Contains("-t TEE, --tee TEE"));
  CHECK_THAT(text,
             Catch::Contains("--nproc-per-node NPROC_PER_NODE, --nproc_per_node NPROC_PER_NODE"));
  CHECK_THAT(text, Catch::Contains("--standalone"));
  CHECK_THAT(text, Catch::Contains("[env PET_NPROC_PER_NODE]"));
  for (const std::string name : {"nnodes",
                                 "nproc-per-node",
                                 "rdzv-backend",
                                 "rdzv-endpoint",
                                 "rdzv-id",
                                 "rdzv-conf",
                                 "standalone",
                                 "max-restarts",
                                 "monitor-interval",
                                 "start-method",
                                 "event-log-handler",
                                 "role",
                                 "module",
                                 "no-python",
                                 "run-path",
                                 "log-dir",
                                 "redirects",
                                 "tee",
                                 "local-ranks-filter",
                                 "duplicate-stdout-filters",
                                 "duplicate-stderr-filters",
                                 "node-rank",
                                 "master-addr",
                                 "master-port",
                                 "local-addr",
                                 "logs-specs",
                                 "numa-binding",
                                 "signals-to-handle",
                                 "shutdown-timeout",
                                 "virtual-local-rank",
                                 "version"}) {
    CHECK_THAT(text, Catch::Contains("--" + name));
    CHECK_THAT(text, Catch::Contains("--" + underscored(name)));
  }

  const CommandLine version = parse({"--version"});
  CHECK(version.versionRequested);
  CHECK_FALSE(version.helpRequested);
  CHECK_THAT(ddprun::launcher::versionText(), Catch::StartsWith("ddprun "));
}

// ------------------------------------------------------------------------------------------------
// Subcommands ahead of torchrun's grammar (cli/subcommands.h)

namespace {

using ddprun::launcher::Subcommand;
using ddprun::launcher::Subcommands;

// A table with the subcommands a test needs; each records the arguments it ran with.
struct TestSubcommands {
  Subcommands table;
  std::vector<std::string> ranWith;

  explicit TestSubcommands(const std::vector<std::string>& names) {
    for (const auto& name : names) {
      table.add({name, "a test subcommand",
                 [this](const std::vector<std::string>& args, const Environment&) {
                   ranWith = args;
                   return 7;
                 }});
    }
  }

  // The name of the subcommand `args` select, or "" for a training job.
  std::string selected(const std::vector<std::string>& args) const {
    std::vector<const char*> argv{"ddprun"};
    for (const auto& arg : args) argv.push_back(arg.c_str());
    const Subcommand* subcommand = table.select(static_cast<int>(argv.size()), argv.data());
    return subcommand == nullptr ? "" : subcommand->name;
  }
};

}  // namespace

TEST_CASE("subcommands: only a first argument that is exactly a subcommand's name selects it",
          "[cli][subcommands]") {
  const TestSubcommands commands({"status", "launch-hosts"});
  struct Case {
    std::vector<std::string> args;
    std::string selected;  // "" = a training job, parsed by torchrun's grammar
  };
  const std::vector<Case> cases = {
      {{"status"}, "status"},
      {{"status", "--json", "job7"}, "status"},
      {{"launch-hosts", "--", "x"}, "launch-hosts"},
      // A script named like a subcommand: as a path, after --, after any option.
      {{"./status"}, ""},
      {{"/work/status"}, ""},
      {{"--", "status"}, ""},
      {{"--nproc-per-node", "2", "status"}, ""},
      {{"--standalone", "status"}, ""},
      // Never a prefix, another case, a .py file, or a later argument.
      {{"stat"}, ""},
      {{"Status"}, ""},
      {{"status.py"}, ""},
      {{"train.py", "status"}, ""},
      {{}, ""},
  };
  for (const auto& c : cases) {
    INFO(Catch::Detail::stringify(c.args));
    CHECK(commands.selected(c.args) == c.selected);
  }
}

TEST_CASE("subcommands: the selected one runs with the arguments after its name, untouched",
          "[cli][subcommands]") {
  TestSubcommands commands({"status"});
  const std::vector<const char*> argv{"ddprun", "status", "--nproc-per-node", "", "-m"};
  const Subcommand* status = commands.table.select(static_cast<int>(argv.size()), argv.data());
  REQUIRE(status != nullptr);
  const auto args =
      ddprun::launcher::subcommandArguments(static_cast<int>(argv.size()), argv.data());
  CHECK(args == std::vector<std::string>{"--nproc-per-node", "", "-m"});
  CHECK(status->run(args, {}) == 7);
  CHECK(commands.ranWith == args);
}

TEST_CASE("subcommands: a name that could be a training script cannot be added",
          "[cli][subcommands]") {
  for (const std::string bad : {"", "status.py", "a/b", "./status", "-s", "--status", "Status",
                                "2status", "sta tus", "status_all"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(ddprun::launcher::isSubcommandName(bad));
    Subcommands table;
    CHECK_THROWS_AS(table.add({bad, "x", {}}), std::invalid_argument);
  }
  for (const std::string good : {"status", "launch-hosts", "s3"}) {
    CHECK(ddprun::launcher::isSubcommandName(good));
  }
  Subcommands table;
  table.add({"status", "x", {}});
  CHECK_THROWS_AS(table.add({"status", "again", {}}), std::invalid_argument);
}

TEST_CASE("subcommands: ddprun's own table, its --help section, and a file of the same name",
          "[cli][subcommands]") {
  const Subcommands& own = ddprun::launcher::ddprunSubcommands();
  for (const auto& subcommand : own.all()) {
    CHECK(ddprun::launcher::isSubcommandName(subcommand.name));
    CHECK(subcommand.run);
  }
  // --help lists them after the options, or says nothing of subcommands while there are none.
  const std::string help = parse({"--help"}).helpText;
  CHECK((help.find("subcommands") != std::string::npos) == !own.empty());

  const TestSubcommands commands({"tool", "status"});
  CHECK_THAT(commands.table.helpSection(), Catch::Contains("  tool ") &&
                                               Catch::Contains("a test subcommand") &&
                                               Catch::Contains("./NAME or after --"));
  CHECK(Subcommands().helpSection().empty());

  // The sandbox has an executable `tool`: `ddprun tool` is the subcommand, with a note; the file
  // still runs as ./tool or after --.
  const WorkingDirectory cwd(sandbox().root);
  const std::vector<const char*> argv{"ddprun", "tool"};
  const Subcommand& tool = *commands.table.select(2, argv.data());
  CHECK_THAT(ddprun::launcher::shadowedFileNote(tool),
             Catch::Contains("'tool' is ddprun's subcommand") &&
                 Catch::Contains("ddprun [options] ./tool"));
  CHECK(ddprun::launcher::shadowedFileNote(commands.table.all()[1]).empty());  // no file `status`
  CHECK(commands.selected({"./tool"}).empty());
  CHECK(config({"--no-python", "./tool"}).entry.executable == "./tool");
  CHECK(commands.selected({"--", "tool"}).empty());
  // After "--" it is the training script: the file, which is for --no-python.
  CHECK_THAT(usageError({"--", "tool"}), Catch::Contains("'tool' is a script for /bin/sh"));
}

TEST_CASE("option --rdzv-conf: each backend's own keys, the others' warned about",
          "[cli][etcd][rdzv-conf]") {
  const std::vector<BackendKeyCase> cases = {
      {"etcd", "is_host=1",
       "warn: is_host is not read by the etcd backend; ignored (only c10d's "
       "agents choose whether to host the rendezvous store"},
      {"etcd", "join_timeout=x", "error: 'join_timeout=x' is not a positive number"},
      {"etcd", "keep_alive_interval=2", "ok"},
      {"etcd", "close_timeout=2", "ok"},
      {"c10d", "cacert=/ca.pem",
       "warn: cacert is not read by the c10d backend; ignored (it is for "
       "--rdzv-backend etcd)"},
      {"static", "etcd_prefix=/x", "warn: etcd_prefix is not read by the static backend"},
      {"c10d", "protocol=ftp", "warn: protocol is not read by the c10d backend"},
  };
  checkBackendKeyCases(cases);
}

// --- Run ids are names, not paths (issue 34) ---

TEST_CASE(
    "option --rdzv-id: a name of 1..128 safe characters on every backend, from every source: "
    "torch's, Slurm's, Kubeflow's and UUID ids stay valid",
    "[cli][run-id]") {
  const std::vector<std::string> valid = {"none",
                                          "job1",
                                          "slurm-12345.0",
                                          "ssh-0123456789abcdef",
                                          "pytorchjob-mnist-master-0",
                                          "123e4567-e89b-12d3-a456-426614174000",
                                          "A_b.c-d",
                                          "a..",
                                          "7",
                                          std::string(128, 'x')};
  for (const std::string& id : valid) {
    INFO("run id '" << id << "'");
    for (const std::string backend : {"static", "c10d", "etcd"}) {
      CHECK(config({"--rdzv-backend", backend, "--rdzv-id", id, script()}).rdzv.runId == id);
    }
    CHECK(config({script()}, with(sandbox().environment(), "PET_RDZV_ID", id)).rdzv.runId == id);
  }
  // torch's default.
  CHECK(config({script()}).rdzv.runId == "none");

  const std::string rule = "a run id is 1..128 of A-Z a-z 0-9 . _ - (not starting with . or -)";
  // id -> how the line shows it
  const std::vector<std::pair<std::string, std::string>> invalid = {
      {"P/x", "'P/x'"},
      {"", "''"},
      {".", "'.'"},
      {"..", "'..'"},
      {"-job", "'-job'"},
      {".job", "'.job'"},
      {"a b", "'a b'"},
      {"job\\x", "'job\\x'"},
      {"j\xc3\xa9", "'j\xc3\xa9'"},
      {"job\x1b]0;x\x07", "'job\\x1b]0;x\\x07'"},
      {std::string(129, 'x'), ""}};
  for (const auto& [id, shown] : invalid) {
    INFO("run id '" << id << "'");
    for (const std::string backend : {"static", "c10d", "etcd"}) {
      const std::string line = usageError({"--rdzv-backend", backend, "--rdzv-id=" + id, script()});
      CHECK_THAT(line, Catch::StartsWith("--rdzv-id " + shown) &&
                           Catch::EndsWith(": " + rule + "; e.g. --rdzv-id job1"));
    }
    CHECK(usageError({script()}, with(sandbox().environment(), "PET_RDZV_ID", id)) ==
          "PET_RDZV_ID " + (shown.empty() ? "'" + id + "'" : shown) + ": " + rule +
              "; e.g. PET_RDZV_ID=job1");
  }
  // A long id is shown cut, bounded and escaped: 9,000 bytes on c10d used to be a misleading "not
  // an int".
  std::string huge(9000, 'a');
  huge[300] = '\x1b';
  const std::string line = usageError({"--rdzv-backend", "c10d", "--rdzv-id", huge, script()});
  CHECK(line == "--rdzv-id '" + std::string(200, 'a') + "...' (9000 bytes): " + rule +
                    "; e.g. --rdzv-id job1");
  // ddprun status reads the same options by the same rules.
  CHECK_THROWS_WITH(
      ddprun::launcher::parseRendezvousOptions("ddprun status", {"--rdzv-id", "P/x"}, {}),
      "--rdzv-id 'P/x': " + rule + "; e.g. --rdzv-id job1");
  CHECK(ddprun::launcher::parseRendezvousOptions("ddprun status", {"--rdzv-id", "P.x"}, {})
            .config.rdzv.runId == "P.x");
}

TEST_CASE(
    "the ddprun binary and ddprun status: a bad run id is exit 2 with one line, no control "
    "byte reaches stderr",
    "[cli][run-id]") {
  using namespace std::chrono_literals;
  const std::string rule = "a run id is 1..128 of A-Z a-z 0-9 . _ - (not starting with . or -)";
  for (const std::string& id :
       {std::string("job\x1b]0;owned\x07"), std::string(9000, '7'), std::string("P/x")}) {
    for (const bool status : {false, true}) {
      std::vector<std::string> argv = {DDPRUN_BIN};
      if (status) argv.push_back("status");
      argv.insert(argv.end(),
                  {"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-id", id});
      if (!status) argv.insert(argv.end(), {"--no-python", "/bin/true"});
      ddprun::test::Subprocess ddprun(argv);
      INFO(ddprun.describe());
      REQUIRE(ddprun::test::exitsWith(ddprun, 2, 30s));
      const std::string errors = ddprun.errors();
      CHECK(errors.find('\n') == errors.size() - 1);
      CHECK_THAT(errors, Catch::StartsWith("ddprun") && Catch::Contains(rule));
      CHECK(errors.find_first_of("\x1b\x07") == std::string::npos);
      CHECK(errors.size() < 600);
    }
  }
}

TEST_CASE(
    "option --rdzv-endpoint: a user name or password is refused on every backend and never "
    "repeated in any message",
    "[cli][endpoint]") {
  const std::string secret = "S3cr3tPw";
  // etcd: one line saying to use username= and password_file=, the URL shown with "***".
  CHECK(usageError({"--rdzv-backend", "etcd", "--rdzv-endpoint",
                    "http://alice:" + secret + "@etcd-0:2379", script()}) ==
        "--rdzv-endpoint 'http://***@etcd-0:2379': etcd endpoint 'http://***@etcd-0:2379': a user "
        "name or password does not "
        "go in "
        "the endpoint; give the user as username=NAME and its password in a file only you can read "
        "as "
        "password_file=PATH in --rdzv-conf");
  CHECK(usageError({script()},
                   with(with(sandbox().environment(), "PET_RDZV_BACKEND", "etcd"),
                        "PET_RDZV_ENDPOINT", "etcd-1,https://alice:" + secret + "@etcd-0")) ==
        "PET_RDZV_ENDPOINT '***@etcd-0': etcd endpoint 'https://***@etcd-0': a user name or "
        "password does not "
        "go in "
        "the endpoint; give the user as username=NAME and its password in a file only you can read "
        "as "
        "password_file=PATH in --rdzv-conf");
  // c10d and static take HOST:PORT: the same refusal, the value shown the same way.
  for (const std::string backend : {"c10d", "static"}) {
    const std::string line = usageError({"--rdzv-backend", backend, "--rdzv-endpoint",
                                         "http://alice:" + secret + "@node0:29400", script()});
    CHECK_THAT(
        line, Catch::StartsWith("--rdzv-endpoint 'http://***@node0:29400': a user name or password "
                                "does not go in the address"));
    CHECK(line.find(secret) == std::string::npos);
    CHECK(usageError({"--rdzv-backend", backend, "--rdzv-endpoint", "alice:" + secret + "@node0",
                      script()})
              .find(secret) == std::string::npos);
  }
  // Where the endpoint is only ignored, the warning does not repeat it either.
  const CommandLine standalone = parse(
      {"--standalone", "--rdzv-endpoint", "http://alice:" + secret + "@node0:29400", script()});
  REQUIRE(standalone.warnings.size() == 1);
  CHECK_THAT(standalone.warnings[0], Catch::Contains("'http://***@node0:29400'"));
  CHECK(standalone.warnings[0].find(secret) == std::string::npos);
}

TEST_CASE("option --nproc-per-node: at most the workers a node record may claim", "[cli][nproc]") {
  using ddprun::launcher::kMaxNprocPerNode;
  CHECK(kMaxNprocPerNode == 65536);
  CHECK(config({"--nproc-per-node", std::to_string(kMaxNprocPerNode), script()}).nprocPerNode ==
        kMaxNprocPerNode);
  for (const std::string count : {"65537", "1000000", "0"}) {
    CHECK(usageError({"--nproc-per-node", count, script()}) ==
          "--nproc-per-node '" + count +
              "': the number of workers per node must be between 1 and 65536, "
              "e.g. --nproc-per-node 2");
  }
  CHECK(usageError({script()}, with(sandbox().environment(), "PET_NPROC_PER_NODE", "1000000")) ==
        "PET_NPROC_PER_NODE '1000000': the number of workers per node must be between 1 and 65536, "
        "e.g. "
        "PET_NPROC_PER_NODE=2");
}

TEST_CASE(
    "option --rdzv-conf: every duration key has a range: below 1 ms or above it is exit 2 with the "
    "range",
    "[cli][rdzv-conf]") {
  using std::chrono::milliseconds;
  const auto error = [](const std::string& value) {
    return usageError({"--rdzv-backend", "etcd", "--rdzv-conf", value, script()});
  };
  for (const std::string key :
       {"join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout", "timeout",
        "read_timeout", "exit_barrier_timeout"}) {
    INFO(key);
    CHECK(error(key + "=0.0009") == "--rdzv-conf: '" + key + "=0.0009' is outside " + key +
                                        "'s range, 0.001 to 1000000000 seconds; e.g. " + key +
                                        "=60");
    CHECK_THAT(error(key + "=1e10"), Catch::Contains("is outside " + key + "'s range"));
    CHECK_THAT(error(key + "=1e300"), Catch::Contains("is outside " + key + "'s range"));
  }
  CHECK(error("keep_alive_interval=0.0001") ==
        "--rdzv-conf: 'keep_alive_interval=0.0001' is outside keep_alive_interval's range, 0.001 "
        "to 3600 "
        "seconds; e.g. keep_alive_interval=1");
  CHECK_THAT(error("keep_alive_interval=3601"), Catch::Contains("0.001 to 3600 seconds"));
  // The least of each: 1 ms, never 0.
  const auto settings =
      config({"--rdzv-backend", "c10d", "--rdzv-conf",
              "keep_alive_interval=0.001,keep_alive_max_attempt=1000,join_timeout=0.0015,"
              "read_timeout=1e9",
              script()})
          .rdzv.settings;
  CHECK(settings.keepAliveInterval == milliseconds(1));
  CHECK(settings.joinTimeout == milliseconds(1));
  CHECK(settings.readTimeout == milliseconds(1'000'000'000'000));
}

TEST_CASE(
    "the ddprun binary and ddprun status: keep_alive_interval below 1 ms is exit 2, not SIGFPE",
    "[cli][rdzv-conf]") {
  using namespace std::chrono_literals;
  for (const bool status : {false, true}) {
    std::vector<std::string> argv = {DDPRUN_BIN};
    if (status) argv.push_back("status");
    argv.insert(argv.end(), {"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1",
                             "--rdzv-id", "job", "--rdzv-conf", "keep_alive_interval=0.0001"});
    if (!status) argv.insert(argv.end(), {"--no-python", "/bin/true"});
    ddprun::test::Subprocess ddprun(argv);
    INFO(ddprun.describe());
    REQUIRE(ddprun::test::exitsWith(ddprun, 2, 30s));
    CHECK_THAT(ddprun.errors(),
               Catch::Contains("'keep_alive_interval=0.0001' is outside keep_alive_interval's "
                               "range, 0.001 to 3600 seconds"));
  }
}

TEST_CASE("options of the health gate: the hooks, the timeout, the cooldown, the free space",
          "[cli]") {
  const LaunchConfig defaults = config({script()});
  CHECK(defaults.health.checkCommand.empty());
  CHECK(defaults.health.hookTimeout == std::chrono::seconds(60));
  CHECK(defaults.health.cooldownInitial == std::chrono::seconds(30));
  CHECK(defaults.health.cooldownCap == std::chrono::seconds(480));
  CHECK(defaults.health.minFreeBytes == 16u << 20);
  const LaunchConfig given =
      config({"--health-check", "test -e /ok", "--health-check-timeout", "2.5", "--health-cooldown",
              "5", "--pre-round-hook", "echo pre", "--post_round_hook", "echo post",
              "--health-min-free-mb", "0", script()});
  CHECK(given.health.checkCommand == "test -e /ok");
  CHECK(given.health.hookTimeout == std::chrono::milliseconds(2500));
  CHECK(given.health.cooldownInitial == std::chrono::seconds(5));
  CHECK(given.health.cooldownCap == std::chrono::seconds(80));  // 16 x INITIAL
  CHECK(given.health.preRoundCommand == "echo pre");
  CHECK(given.health.postRoundCommand == "echo post");
  CHECK(given.health.minFreeBytes == 0);
  CHECK(config({"--health-cooldown", "1:4", script()}).health.cooldownCap ==
        std::chrono::seconds(4));
  CHECK(config({script()}, with(sandbox().environment(), "PET_HEALTH_CHECK", "true"))
            .health.checkCommand == "true");
  CHECK_THAT(usageError({"--health-cooldown", "10:5", script()}),
             Catch::Contains("--health-cooldown '10:5': must be INITIAL or INITIAL:CAP") &&
                 Catch::Contains("30:480"));
  CHECK_THAT(usageError({"--health-check-timeout", "0", script()}),
             Catch::Contains("must be a number of seconds > 0"));
  CHECK_THAT(usageError({"--health-min-free-mb", "-1", script()}),
             Catch::Contains("must be a number of MiB >= 0"));
}

TEST_CASE("option --progress-pattern, --start-pattern, --fail-pattern: a bad regex is exit 2",
          "[cli]") {
  const LaunchConfig none = config({script()});
  CHECK_FALSE(none.hang.anyLinePattern());
  CHECK(none.hang.startTimeout == std::chrono::minutes(10));
  CHECK_FALSE(none.logs.time);
  for (const char* option : {"--progress-pattern", "--start-pattern", "--fail-pattern"}) {
    INFO(option);
    CHECK_THAT(usageError({option, "loss (nan", script()}),
               Catch::Contains(std::string(option) + " 'loss (nan' is not a POSIX extended "
                                                     "regular expression") &&
                   Catch::Contains("e.g. " + std::string(option) + " '"));
    CHECK_THAT(usageError({option, "", script()}), Catch::Contains("is empty"));
  }
  CHECK_THAT(usageError({script()}, with(sandbox().environment(), "PET_FAIL_PATTERN", "[nan")),
             Catch::Contains("PET_FAIL_PATTERN '[nan' is not a POSIX extended") &&
                 Catch::Contains("e.g. PET_FAIL_PATTERN='loss (nan|inf)'"));
  CHECK_THAT(usageError({"--start-timeout", "0", script()}),
             Catch::Contains("--start-timeout '0': must be a number of seconds > 0"));
  const CommandLine alone = parse({"--start-timeout", "5", script()});
  REQUIRE(alone.warnings.size() == 1);
  CHECK_THAT(alone.warnings[0], Catch::Contains("without --start-pattern"));
  const CommandLine alone2 = parse({"--progress-pattern", "step", script()});
  REQUIRE(alone2.warnings.size() == 1);
  CHECK_THAT(alone2.warnings[0], Catch::Contains("without --hang-timeout"));
  CHECK(parse({"--progress-pattern", "step", "--hang-timeout", "60", script()}).warnings.empty());
  CHECK(config({"--log-time", script()}).logs.time);
  CHECK(config({script()}, with(sandbox().environment(), "PET_LOG_TIME", "1")).logs.time);
}
