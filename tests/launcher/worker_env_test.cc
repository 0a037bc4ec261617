// The worker's environment and command line (process/worker_env.h) against torchrun's contract
// (shared/reference/torchrun-contract.md §2.1-2.2, docs/env_contract.md), without torch and
// without starting anything: every variable torchrun sets, for several placements, restarts and
// entry kinds, and what is inherited. The names are written out as torch spells them (not
// through worker_env_names.h) so that a renamed constant shows up here as a broken contract.
// env_compare.py still compares real workers with torchrun 1.13's side by side.
#include "process/worker_env.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/launcher/launch_config.h"
#include "temp_dir.h"

namespace {

using namespace ddprun::launcher;
using ddprun::test::TempDir;
using Environment = std::map<std::string, std::string>;

// The entries as NAME -> value. Each name must appear once: with two entries of one name, glibc's
// getenv and Python's os.environ take the first, and the value meant is easily the other.
Environment asMap(const std::vector<std::string>& entries) {
  Environment environment;
  for (const std::string& entry : entries) {
    const auto equals = entry.find('=');
    REQUIRE(equals != std::string::npos);
    INFO("entry: " << entry);
    CHECK(environment.emplace(entry.substr(0, equals), entry.substr(equals + 1)).second);
  }
  return environment;
}

// What the agent's environment typically holds, including values that must arrive byte for byte.
Environment callerEnvironment() {
  return {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
          {"HOME", "/home/user"},
          {"MARKER", "a b 'c' \"d\" $e \t\n ünï"},
          {"EMPTY", ""},
          {"WITH_EQUALS", "a=b=c"}};
}

LaunchConfig configFor(int nproc) {
  LaunchConfig config;
  config.nprocPerNode = nproc;
  config.rdzv.runId = "job-42";
  config.entry.kind = EntryKind::kPythonScript;
  config.entry.python = "/usr/bin/python3";
  config.entry.script = "train.py";
  return config;
}

RoundEnvironment roundFor(int restartCount = 0, int generation = 0) {
  return {.masterAddr = "10.1.2.3",
          .masterPort = 29512,
          .restartCount = restartCount,
          .generation = generation,
          .runId = "job-42",
          .agentMarker = "4242-0123456789abcdef"};
}

const char* const kErrorFile = "/tmp/ddprun-job-42-4242/attempt_0/0/error.json";

// Every variable the contract has the launcher set on every worker (OMP_NUM_THREADS,
// CUDA_VISIBLE_DEVICES and DDPRUN_AGENT depend on the configuration and are tested apart).
const std::set<std::string> kAlwaysSet = {"RANK",
                                          "LOCAL_RANK",
                                          "GROUP_RANK",
                                          "ROLE_RANK",
                                          "ROLE_NAME",
                                          "LOCAL_WORLD_SIZE",
                                          "WORLD_SIZE",
                                          "GROUP_WORLD_SIZE",
                                          "ROLE_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "TORCHELASTIC_MAX_RESTARTS",
                                          "TORCHELASTIC_RUN_ID",
                                          "TORCHELASTIC_USE_AGENT_STORE",
                                          "TORCHELASTIC_ERROR_FILE",
                                          "TORCHELASTIC_SIGNALS_TO_HANDLE",
                                          "NCCL_ASYNC_ERROR_HANDLING",
                                          "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                          "DDPRUN_GENERATION"};

// One worker's place, from the job's shape: the rank arithmetic torchrun does (base rank =
// cumulative nproc in group-rank order, every node the same nproc).
struct Shape {
  int nodes;
  int nproc;
  int groupRank;
  int localRank;
};
WorkerPlacement placementOf(const Shape& shape) {
  return {.localRank = shape.localRank,
          .rank = shape.groupRank * shape.nproc + shape.localRank,
          .worldSize = shape.nodes * shape.nproc,
          .localWorldSize = shape.nproc,
          .groupRank = shape.groupRank,
          .groupWorldSize = shape.nodes};
}

void makeExecutable(const std::string& path) { ddprun::test::writeFile(path, "#!/bin/sh\n", 0755); }

TEST_CASE("every worker gets torchrun's rank variables for its place in the job", "[worker_env]") {
  const Shape shape =
      GENERATE(Shape{1, 1, 0, 0}, Shape{1, 2, 0, 1}, Shape{2, 2, 1, 0}, Shape{2, 2, 1, 1},
               Shape{3, 1, 2, 0}, Shape{4, 8, 3, 7}, Shape{16, 8, 9, 5});
  INFO(shape.nodes << " nodes x " << shape.nproc << " workers, group rank " << shape.groupRank
                   << ", local rank " << shape.localRank);
  const LaunchConfig config = configFor(shape.nproc);
  const Environment env = asMap(
      workerEnvironment(callerEnvironment(), config, placementOf(shape), roundFor(), kErrorFile));

  const int rank = shape.groupRank * shape.nproc + shape.localRank;
  const int world = shape.nodes * shape.nproc;
  CHECK(env.at("RANK") == std::to_string(rank));
  CHECK(env.at("LOCAL_RANK") == std::to_string(shape.localRank));
  CHECK(env.at("GROUP_RANK") == std::to_string(shape.groupRank));
  CHECK(env.at("LOCAL_WORLD_SIZE") == std::to_string(shape.nproc));
  CHECK(env.at("WORLD_SIZE") == std::to_string(world));
  CHECK(env.at("GROUP_WORLD_SIZE") == std::to_string(shape.nodes));
  // torchrun has one role: its rank and size are the job's.
  CHECK(env.at("ROLE_NAME") == "default");
  CHECK(env.at("ROLE_RANK") == std::to_string(rank));
  CHECK(env.at("ROLE_WORLD_SIZE") == std::to_string(world));
  // Where the workers meet, the same for every rank of the round.
  CHECK(env.at("MASTER_ADDR") == "10.1.2.3");
  CHECK(env.at("MASTER_PORT") == "29512");
  CHECK(env.at("TORCHELASTIC_RUN_ID") == "job-42");
  // Workers are clients of the store an agent hosts (torch >= 2.5; env:// reads the exact "True").
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  CHECK(env.at("TORCHELASTIC_ERROR_FILE") == kErrorFile);
  CHECK(env.at("DDPRUN_AGENT") == "4242-0123456789abcdef");
}

TEST_CASE("restart counts and rounds reach the workers as the round says", "[worker_env]") {
  struct Row {
    int restartCount;
    int maxRestarts;
    int generation;
  };
  // A membership change re-forms the job without costing a restart: the generation moves on
  // while the restart count stays.
  const Row row = GENERATE(Row{0, 0, 0}, Row{0, 3, 0}, Row{1, 3, 1}, Row{1, 3, 4}, Row{3, 3, 7});
  INFO("restart " << row.restartCount << " of " << row.maxRestarts << ", round " << row.generation);
  LaunchConfig config = configFor(2);
  config.restart.maxRestarts = row.maxRestarts;
  const Environment env =
      asMap(workerEnvironment(callerEnvironment(), config, placementOf({2, 2, 1, 1}),
                              roundFor(row.restartCount, row.generation), kErrorFile));
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == std::to_string(row.restartCount));
  CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == std::to_string(row.maxRestarts));
  CHECK(env.at("DDPRUN_GENERATION") == std::to_string(row.generation));
}

TEST_CASE(
    "the caller's environment is inherited whole, and only the contract's variables are added",
    "[worker_env]") {
  const Environment caller = callerEnvironment();
  SECTION("one worker per node: no OMP_NUM_THREADS") {
    const Environment env = asMap(
        workerEnvironment(caller, configFor(1), placementOf({1, 1, 0, 0}), roundFor(), kErrorFile));
    std::set<std::string> expected = kAlwaysSet;
    expected.insert("DDPRUN_AGENT");
    for (const auto& [name, value] : caller) {
      expected.insert(name);
      INFO(name);
      CHECK(env.at(name) == value);  // byte for byte: spaces, quotes, '$', tab, newline, '=', ""
    }
    std::set<std::string> names;
    for (const auto& [name, value] : env) names.insert(name);
    CHECK(names == expected);
  }
  SECTION("an agent without a marker adds no DDPRUN_AGENT") {
    RoundEnvironment round = roundFor();
    round.agentMarker.clear();
    const Environment env = asMap(
        workerEnvironment(caller, configFor(1), placementOf({1, 1, 0, 0}), round, kErrorFile));
    CHECK(env.count("DDPRUN_AGENT") == 0);
  }
}

TEST_CASE("the launcher's variables replace what the caller had under the same names",
          "[worker_env]") {
  // A job started from inside another job's worker (or a shell that exported them): the outer
  // job's values must not reach the inner workers.
  Environment caller = callerEnvironment();
  for (const std::string& name : kAlwaysSet) caller[name] = "outer-" + name;
  caller.erase(
      "NCCL_ASYNC_ERROR_HANDLING");  // a user's own settings of these are kept: tested apart
  caller.erase("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  caller["DDPRUN_AGENT"] = "1-outer";
  const Environment env = asMap(workerEnvironment(caller, configFor(1), placementOf({2, 1, 1, 0}),
                                                  roundFor(2, 3), kErrorFile));
  CHECK(env.at("RANK") == "1");
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.at("WORLD_SIZE") == "2");
  CHECK(env.at("MASTER_ADDR") == "10.1.2.3");
  CHECK(env.at("MASTER_PORT") == "29512");
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(env.at("TORCHELASTIC_RUN_ID") == "job-42");
  CHECK(env.at("TORCHELASTIC_ERROR_FILE") == kErrorFile);
  CHECK(env.at("DDPRUN_GENERATION") == "3");
  // The inner agent's guardian must find the inner workers by its own marker.
  CHECK(env.at("DDPRUN_AGENT") == "4242-0123456789abcdef");
  for (const auto& [name, value] : env) {
    INFO(name << "=" << value);
    CHECK(value.rfind("outer-", 0) == std::string::npos);
  }
}

TEST_CASE("NCCL async error handling: both names, 1 unless the caller set them", "[worker_env]") {
  // torch 1.13 reads NCCL_ASYNC_ERROR_HANDLING, 2.x TORCH_NCCL_ASYNC_ERROR_HANDLING; each launcher
  // sets its name to os.getenv(name, "1"), so a value the caller set (even "") is kept.
  struct Row {
    std::optional<std::string> oldName;  // NCCL_ASYNC_ERROR_HANDLING in the caller's environment
    std::optional<std::string> newName;  // TORCH_NCCL_ASYNC_ERROR_HANDLING
    std::string expectOld;
    std::string expectNew;
  };
  const Row row =
      GENERATE(Row{std::nullopt, std::nullopt, "1", "1"}, Row{"0", std::nullopt, "0", "1"},
               Row{std::nullopt, "3", "1", "3"}, Row{"2", "0", "2", "0"}, Row{"", "", "", ""});
  Environment caller = callerEnvironment();
  if (row.oldName) caller["NCCL_ASYNC_ERROR_HANDLING"] = *row.oldName;
  if (row.newName) caller["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = *row.newName;
  INFO("caller: old " << row.oldName.value_or("<unset>") << ", new "
                      << row.newName.value_or("<unset>"));
  const Environment env = asMap(
      workerEnvironment(caller, configFor(2), placementOf({1, 2, 0, 0}), roundFor(), kErrorFile));
  CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == row.expectOld);
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == row.expectNew);
}

TEST_CASE("OMP_NUM_THREADS is 1 only with several workers per node and none set by the caller",
          "[worker_env]") {
  struct Row {
    int nproc;
    std::optional<std::string> inherited;
    std::optional<std::string> expected;  // nothing: absent
    bool warns;
  };
  const Row row =
      GENERATE(Row{1, std::nullopt, std::nullopt, false}, Row{2, std::nullopt, "1", true},
               Row{8, std::nullopt, "1", true}, Row{2, "4", "4", false}, Row{1, "4", "4", false},
               // torchrun tests `"OMP_NUM_THREADS" not in os.environ`: an empty value is set.
               Row{2, "", "", false});
  INFO(row.nproc << " per node, caller's OMP_NUM_THREADS " << row.inherited.value_or("<unset>"));
  Environment caller = callerEnvironment();
  if (row.inherited) caller["OMP_NUM_THREADS"] = *row.inherited;
  const LaunchConfig config = configFor(row.nproc);
  const Environment env = asMap(
      workerEnvironment(caller, config, placementOf({1, row.nproc, 0, 0}), roundFor(), kErrorFile));
  if (row.expected) {
    CHECK(env.at("OMP_NUM_THREADS") == *row.expected);
  } else {
    CHECK(env.count("OMP_NUM_THREADS") == 0);
  }
  // The agent prints torchrun's notice exactly when it sets the variable.
  CHECK(setsOmpNumThreads(caller, config) == row.warns);
}

TEST_CASE("the OMP_NUM_THREADS notice is torchrun's text", "[worker_env]") {
  // Scripts and log scrapers match on it; torch/distributed/run.py prints it with %s = 1.
  CHECK(
      ompNumThreadsWarning() ==
      "\n*****************************************\n"
      "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
      "your system being overloaded, please further tune the variable for optimal performance in "
      "your application as needed. \n"
      "*****************************************");
}

TEST_CASE("TORCHELASTIC_SIGNALS_TO_HANDLE names the signals the agent forwards", "[worker_env]") {
  LaunchConfig config = configFor(1);
  SECTION("the default, as torchrun >= 2.9") {
    const Environment env =
        asMap(workerEnvironment({}, config, placementOf({1, 1, 0, 0}), roundFor(), kErrorFile));
    CHECK(env.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  }
  SECTION("--signals-to-handle SIGUSR1,SIGTERM") {
    config.restart.signalsToHandle = {SIGUSR1, SIGTERM};
    const Environment env =
        asMap(workerEnvironment({}, config, placementOf({1, 1, 0, 0}), roundFor(), kErrorFile));
    CHECK(env.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGUSR1,SIGTERM");
  }
}

TEST_CASE("the error file and role are passed as given", "[worker_env]") {
  LaunchConfig config = configFor(1);
  config.role = "trainer";
  // torchrun sets an empty TORCHELASTIC_ERROR_FILE when its log dir is /dev/null.
  const std::string errorFile =
      GENERATE(as<std::string>{}, "", "/logs/run_abc123/attempt_3/7/error.json");
  const Environment env =
      asMap(workerEnvironment({}, config, placementOf({1, 1, 0, 0}), roundFor(), errorFile));
  CHECK(env.at("TORCHELASTIC_ERROR_FILE") == errorFile);
  CHECK(env.at("ROLE_NAME") == "trainer");
}

TEST_CASE("CUDA_VISIBLE_DEVICES is inherited unchanged, or one device with --virtual-local-rank",
          "[worker_env]") {
  LaunchConfig config = configFor(4);
  Environment caller = callerEnvironment();
  SECTION("without --virtual-local-rank torchrun never assigns GPUs") {
    const Environment unset =
        asMap(workerEnvironment(caller, config, placementOf({1, 4, 0, 2}), roundFor(), kErrorFile));
    CHECK(unset.count("CUDA_VISIBLE_DEVICES") == 0);
    CHECK(unset.at("LOCAL_RANK") == "2");
    caller["CUDA_VISIBLE_DEVICES"] = "3,5,6,7";
    const Environment set =
        asMap(workerEnvironment(caller, config, placementOf({1, 4, 0, 2}), roundFor(), kErrorFile));
    CHECK(set.at("CUDA_VISIBLE_DEVICES") == "3,5,6,7");
  }
  SECTION("--virtual-local-rank: LOCAL_RANK 0 and the worker's own device") {
    config.virtualLocalRank = true;
    struct Row {
      std::optional<std::string> callerDevices;
      int localRank;
      std::string expected;
    };
    // The local rank picks a device from the caller's list (indices or UUIDs), else it is the
    // index.
    const Row row =
        GENERATE(Row{std::nullopt, 0, "0"}, Row{std::nullopt, 3, "3"}, Row{"3,5,6,7", 0, "3"},
                 Row{"3,5,6,7", 1, "5"}, Row{"3,5,6,7", 3, "7"},
                 Row{"GPU-aaaa,GPU-bbbb", 1, "GPU-bbbb"}, Row{"MIG-1,MIG-2", 0, "MIG-1"});
    INFO("caller's CUDA_VISIBLE_DEVICES " << row.callerDevices.value_or("<unset>")
                                          << ", local rank " << row.localRank);
    if (row.callerDevices) caller["CUDA_VISIBLE_DEVICES"] = *row.callerDevices;
    const Environment env = asMap(workerEnvironment(
        caller, config, placementOf({2, 4, 1, row.localRank}), roundFor(), kErrorFile));
    CHECK(env.at("LOCAL_RANK") == "0");
    CHECK(env.at("CUDA_VISIBLE_DEVICES") == row.expected);
    // The global rank is still the worker's own.
    CHECK(env.at("RANK") == std::to_string(4 + row.localRank));
    CHECK(env.at("LOCAL_WORLD_SIZE") == "4");
  }
}

TEST_CASE("the command line of each entry kind is torchrun's", "[worker_env]") {
  LaunchConfig config = configFor(2);
  config.entry.python = "/opt/venv/bin/python";
  config.entry.args = {"--lr", "0.1", "two words", "", "--nproc-per-node", "9"};
  const WorkerPlacement placement = placementOf({1, 2, 0, 1});

  SECTION("a script: $PYTHON_EXEC -u script args") {
    config.entry.script = "train.py";
    const WorkerCommand command = workerCommand(config, placement, callerEnvironment());
    CHECK(command.path == "/opt/venv/bin/python");
    CHECK(command.argv == std::vector<std::string>{"/opt/venv/bin/python", "-u", "train.py", "--lr",
                                                   "0.1", "two words", "", "--nproc-per-node",
                                                   "9"});
  }
  SECTION("-m: $PYTHON_EXEC -u -m module args") {
    config.entry.kind = EntryKind::kPythonModule;
    config.entry.script = "pkg.train";
    const WorkerCommand command = workerCommand(config, placement, callerEnvironment());
    CHECK(command.path == "/opt/venv/bin/python");
    CHECK(command.argv == std::vector<std::string>{"/opt/venv/bin/python", "-u", "-m", "pkg.train",
                                                   "--lr", "0.1", "two words", "",
                                                   "--nproc-per-node", "9"});
  }
  SECTION(
      "--run-path: the interpreter runs the script through runpy, which sees itself as argv[0]") {
    config.entry.kind = EntryKind::kRunPath;
    config.entry.script = "/abs/train.py";
    const WorkerCommand command = workerCommand(config, placement, callerEnvironment());
    CHECK(command.path == "/opt/venv/bin/python");
    REQUIRE(command.argv.size() == 5 + config.entry.args.size());
    CHECK(command.argv[0] == "/opt/venv/bin/python");
    CHECK(command.argv[1] == "-u");
    CHECK(command.argv[2] == "-c");
    CHECK_THAT(command.argv[3],
               Catch::Contains("runpy.run_path(sys.argv[0], run_name='__main__')") &&
                   Catch::Contains("TORCHELASTIC_ERROR_FILE"));
    CHECK(command.argv[4] == "/abs/train.py");
    CHECK(std::vector<std::string>(command.argv.begin() + 5, command.argv.end()) ==
          config.entry.args);
  }
  SECTION("--no-python: the resolved file is exec'd, argv[0] is the script as given") {
    config.entry.kind = EntryKind::kExecutable;
    config.entry.script = "trainer";
    config.entry.executable = "/usr/local/bin/trainer";
    const WorkerCommand command = workerCommand(config, placement, callerEnvironment());
    CHECK(command.path == "/usr/local/bin/trainer");
    CHECK(command.argv == std::vector<std::string>{"trainer", "--lr", "0.1", "two words", "",
                                                   "--nproc-per-node", "9"});
  }
  SECTION("--no-python with nothing resolved yet: a bare name is looked up on the caller's PATH") {
    TempDir dir;
    makeExecutable(dir.path + "/trainer");
    config.entry.kind = EntryKind::kExecutable;
    config.entry.script = "trainer";
    const Environment caller = {{"PATH", "/nonexistent:" + dir.path}};
    const WorkerCommand command = workerCommand(config, placement, caller);
    CHECK(command.path == dir.path + "/trainer");
    CHECK(command.argv.front() == "trainer");
    config.entry.script = "no-such-trainer";
    CHECK_THROWS_WITH(workerCommand(config, placement, caller), "no-such-trainer: not found");
  }
}

TEST_CASE("${local_rank} in the arguments becomes the worker's local rank, as string.Template does",
          "[worker_env]") {
  struct Row {
    std::string argument;
    std::string expected;  // for local rank 3
  };
  const Row row =
      GENERATE(Row{"--ckpt=/ckpt/${local_rank}", "--ckpt=/ckpt/3"}, Row{"$local_rank", "3"},
               Row{"a${local_rank}b$local_rank", "a3b3"}, Row{"$$local_rank", "$local_rank"},
               Row{"$$", "$"}, Row{"$local_rankX", "$local_rankX"}, Row{"${rank}", "${rank}"},
               Row{"$HOME", "$HOME"}, Row{"cost$", "cost$"}, Row{"${local_rank", "${local_rank"});
  INFO("argument " << row.argument);
  LaunchConfig config = configFor(4);
  config.entry.args = {row.argument};
  // The local rank is the real one even with --virtual-local-rank (torch substitutes before
  // LOCAL_RANK is virtualised): per-rank paths stay distinct.
  config.virtualLocalRank = GENERATE(false, true);
  SECTION("in a script's arguments") {
    const WorkerCommand command = workerCommand(config, placementOf({1, 4, 0, 3}), {});
    CHECK(command.argv.back() == row.expected);
  }
  SECTION("in an executable's arguments, never in the program itself") {
    config.entry.kind = EntryKind::kExecutable;
    config.entry.script = "./run_${local_rank}";
    config.entry.executable = "./run_${local_rank}";
    const WorkerCommand command = workerCommand(config, placementOf({1, 4, 0, 3}), {});
    CHECK(command.path == "./run_${local_rank}");
    CHECK(command.argv.front() == "./run_${local_rank}");
    CHECK(command.argv.back() == row.expected);
  }
}

TEST_CASE("the script itself goes through the substitution too, as torchrun's cmd_args do",
          "[worker_env]") {
  LaunchConfig config = configFor(2);
  config.entry.script = "train_${local_rank}.py";
  CHECK(workerCommand(config, placementOf({1, 2, 0, 1}), {}).argv[2] == "train_1.py");
  config.entry.kind = EntryKind::kPythonModule;
  config.entry.script = "pkg.rank$local_rank";
  CHECK(workerCommand(config, placementOf({1, 2, 0, 0}), {}).argv[3] == "pkg.rank0");
}

TEST_CASE("NUMA binding leaves the command as it is: the CPUs are set in the child",
          "[worker_env]") {
  LaunchConfig config = configFor(2);
  config.entry.args = {"--x"};
  config.numaBinding = NumaAffinity::kNode;
  config.workerCpus = {{0}, {1}};
  const WorkerCommand command = workerCommand(config, placementOf({1, 2, 0, 0}), {});
  CHECK(command.path == "/usr/bin/python3");
  CHECK(command.argv == std::vector<std::string>{"/usr/bin/python3", "-u", "train.py", "--x"});
}

}  // namespace

TEST_CASE("the heartbeat file replaces an inherited one (ddprun inside a ddprun worker)",
          "[worker_env]") {
  // asMap fails on a second entry of one name: the worker would read the outer agent's file and
  // be found hung by this one.
  const Environment caller{{"DDPRUN_HEARTBEAT_FILE", "/tmp/outer-agent/heartbeats/0"}};
  SECTION("this agent monitors progress: its file, once") {
    const Environment env =
        asMap(workerEnvironment(caller, configFor(1), placementOf({1, 1, 0, 0}), roundFor(),
                                kErrorFile, "/tmp/inner-agent/heartbeats/0"));
    CHECK(env.at("DDPRUN_HEARTBEAT_FILE") == "/tmp/inner-agent/heartbeats/0");
  }
  SECTION("no file of its own: the inherited entry is left as it was") {
    const Environment env = asMap(
        workerEnvironment(caller, configFor(1), placementOf({1, 1, 0, 0}), roundFor(), kErrorFile));
    CHECK(env.at("DDPRUN_HEARTBEAT_FILE") == "/tmp/outer-agent/heartbeats/0");
  }
}

TEST_CASE("the stop file replaces an inherited one (ddprun inside a ddprun worker)",
          "[worker_env]") {
  // The outer agent's request would otherwise stop the inner job's workers, and this agent's own
  // would never reach them (getenv takes the first entry).
  const Environment caller{{"DDPRUN_STOP_FILE", "/tmp/outer-agent/stop-3"}};
  SECTION("this agent has one: its file, once") {
    const Environment env = asMap(
        workerEnvironment(caller, configFor(1), placementOf({1, 1, 0, 0}), roundFor(), kErrorFile,
                          "/tmp/inner-agent/heartbeat-0", "/tmp/inner-agent/stop-1"));
    CHECK(env.at("DDPRUN_STOP_FILE") == "/tmp/inner-agent/stop-1");
  }
  SECTION("none of its own: the inherited entry is left as it was") {
    const Environment env = asMap(
        workerEnvironment(caller, configFor(1), placementOf({1, 1, 0, 0}), roundFor(), kErrorFile));
    CHECK(env.at("DDPRUN_STOP_FILE") == "/tmp/outer-agent/stop-3");
  }
}
