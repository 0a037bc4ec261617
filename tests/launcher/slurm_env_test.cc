// Inside a Slurm step with no rendezvous options, the step's environment becomes the rendezvous
// (cli/slurm.h): which values are read, which options turn it off, and the errors for a step with
// several tasks on a node, a job without a step, and variables that are not Slurm's.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/slurm.h"
#include "ports.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

using ddprun::launcher::CommandLine;
using ddprun::launcher::parseCommandLine;
using ddprun::launcher::RdzvBackend;
using ddprun::launcher::UsageError;
using ddprun::launcher::cli_detail::slurmStorePort;
namespace fs = std::filesystem;
using Environment = std::map<std::string, std::string>;

namespace {

// A training script to name (the command line checks that it exists), in a directory removed
// when the test process exits: each test case is a process of its own under CTest.
const std::string& script() {
  static const ddprun::test::TempDir dir;
  static const std::string path = [] {
    REQUIRE(!dir.path.empty());
    const std::string file = dir.path + "/train.py";
    std::ofstream(file) << "print('hi')\n";
    return file;
  }();
  return path;
}

// What srun sets for the task on node `nodeId` of a 2-node step, one task per node.
Environment srunEnvironment(int nodeId) {
  return {
      {"PATH", "/usr/bin:/bin"},
      {"SLURM_JOB_ID", "12345"},
      {"SLURM_JOBID", "12345"},
      {"SLURM_STEP_ID", "3"},
      {"SLURM_STEPID", "3"},
      {"SLURM_NNODES", "8"},  // the allocation's: never the world
      {"SLURM_JOB_NUM_NODES", "8"},
      {"SLURM_JOB_NODELIST", "127.0.0.[1-8]"},
      {"SLURM_STEP_NUM_NODES", "2"},
      {"SLURM_STEP_NODELIST", "127.0.0.[1-2]"},
      {"SLURM_STEP_NUM_TASKS", "2"},
      {"SLURM_NTASKS", "2"},
      {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
      {"SLURM_TASKS_PER_NODE", "4(x8)"},
      {"SLURM_NODEID", std::to_string(nodeId)},
      {"SLURM_PROCID", std::to_string(nodeId)},
      {"SLURM_LOCALID", "0"},
      {"SLURMD_NODENAME", nodeId == 0 ? "127.0.0.1" : "127.0.0.2"},
  };
}

CommandLine parse(std::vector<std::string> options, const Environment& environment) {
  std::vector<const char*> argv = {"ddprun"};
  for (const auto& option : options) argv.push_back(option.c_str());
  argv.push_back(script().c_str());
  return parseCommandLine(static_cast<int>(argv.size()), argv.data(), environment);
}

std::string errorOf(std::vector<std::string> options, const Environment& environment) {
  try {
    parse(std::move(options), environment);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("slurm: the store port is 20000 + 10 * (job % 1000) + step % 10") {
  CHECK(slurmStorePort(12345, 0) == 23450);
  CHECK(slurmStorePort(12345, 3) == 23453);
  CHECK(slurmStorePort(999, 9) == 29999);
  CHECK(slurmStorePort(1000, 10) == 20000);
}

TEST_CASE("slurm: node 1 of a 2-node step with no rendezvous options joins the step's store") {
  const CommandLine result = parse({"--nproc-per-node", "2"}, srunEnvironment(1));
  const auto& rdzv = result.config.rdzv;
  CHECK(rdzv.backend == RdzvBackend::kC10d);
  CHECK(rdzv.minNodes == 2);  // SLURM_STEP_NUM_NODES, not SLURM_NNODES (8)
  CHECK(rdzv.maxNodes == 2);
  CHECK(rdzv.nodeRank == 1);
  CHECK(rdzv.host == "127.0.0.1");  // the first host of the step
  CHECK(rdzv.port == 23453);
  CHECK(rdzv.runId == "slurm-12345.3");
  CHECK(rdzv.settings.isHost == false);
  CHECK(rdzv.localAddr == "127.0.0.2");  // its own entry, an IP literal
  CHECK_THAT(rdzv.endpointSource, Catch::Contains("DDPRUN_SLURM_PORT"));
  REQUIRE(result.notes.size() == 1);
  CHECK(result.notes[0] ==
        "Slurm step 12345.3: node 1 of 2, store on 127.0.0.1:23453 (the first host of "
        "SLURM_STEP_NODELIST '127.0.0.[1-2]', hosted by node 0; port from the job and step ids), "
        "run id slurm-12345.3");
  CHECK(result.config.nprocPerNode == 2);
}

TEST_CASE("slurm: node 0 hosts the store") {
  const CommandLine result = parse({}, srunEnvironment(0));
  CHECK(result.config.rdzv.settings.isHost == true);
  CHECK(result.config.rdzv.localAddr == "127.0.0.1");
}

TEST_CASE("slurm: a host name in the node list is left to route detection, not advertised") {
  Environment environment = srunEnvironment(1);
  environment["SLURM_STEP_NODELIST"] = "127.0.0.1,localhost";
  const CommandLine result = parse({}, environment);
  CHECK(result.config.rdzv.host == "127.0.0.1");
  CHECK(result.config.rdzv.localAddr.empty());
}

TEST_CASE("slurm: --rdzv-conf and --local-addr combine with the step's values and win") {
  const CommandLine result = parse(
      {"--rdzv-conf", "is_host=0,join_timeout=30", "--local-addr", "10.0.0.7"}, srunEnvironment(0));
  CHECK(result.config.rdzv.settings.isHost == false);
  CHECK(result.config.rdzv.settings.joinTimeout == std::chrono::seconds(30));
  CHECK(result.config.rdzv.localAddr == "10.0.0.7");
  CHECK(result.config.rdzv.runId == "slurm-12345.3");
}

TEST_CASE("slurm: any rendezvous option, on the command line or as PET_, turns Slurm off whole") {
  struct Case {
    std::vector<std::string> options;
    const char* variable;  // PET_ form ("" = none)
    const char* value;
  };
  const std::vector<Case> cases = {
      {{"--nnodes", "2"}, "PET_NNODES", "2"},
      {{"--node-rank", "0"}, "PET_NODE_RANK", "0"},
      {{"--rdzv-backend", "c10d"}, "PET_RDZV_BACKEND", "c10d"},
      {{"--rdzv-endpoint", "127.0.0.1:29400"}, "PET_RDZV_ENDPOINT", "127.0.0.1:29400"},
      {{"--rdzv-id", "mine"}, "PET_RDZV_ID", "mine"},
      {{"--master-addr", "127.0.0.1"}, "PET_MASTER_ADDR", "127.0.0.1"},
      {{"--master-port", "29501"}, "PET_MASTER_PORT", "29501"},
      {{"--standalone"}, "PET_STANDALONE", "1"},
  };
  for (const auto& c : cases) {
    INFO(c.options[0]);
    const CommandLine byOption = parse(c.options, srunEnvironment(1));
    CHECK(byOption.config.rdzv.runId != "slurm-12345.3");
    CHECK(byOption.config.rdzv.endpointSource.empty());
    REQUIRE(byOption.notes.size() == 1);
    CHECK_THAT(byOption.notes[0], Catch::Contains("not read, as " + c.options[0] + " is given"));
    Environment environment = srunEnvironment(1);
    environment[c.variable] = c.value;
    const CommandLine byVariable = parse({}, environment);
    CHECK(byVariable.config.rdzv.runId != "slurm-12345.3");
    REQUIRE(byVariable.notes.size() == 1);
    CHECK_THAT(byVariable.notes[0], Catch::Contains(c.variable));
  }
}

TEST_CASE("slurm: more than one task of the step on a node is an error naming srun") {
  struct Case {
    const char* variable;
    const char* value;
  };
  for (const auto& c : std::vector<Case>{{"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                         {"SLURM_STEP_TASKS_PER_NODE", "1,2"},
                                         {"SLURM_STEP_NUM_TASKS", "4"},
                                         {"SLURM_LOCALID", "1"}}) {
    INFO(c.variable << "=" << c.value);
    Environment environment = srunEnvironment(0);
    environment[c.variable] = c.value;
    const std::string error = errorOf({}, environment);
    CHECK_THAT(error, Catch::Contains("more than one task on a node"));
    CHECK_THAT(error, Catch::Contains("srun --ntasks-per-node=1 ddprun"));
    CHECK_THAT(error, Catch::Contains(c.variable));
  }
  Environment onlyNtasks = srunEnvironment(0);
  onlyNtasks.erase("SLURM_STEP_NUM_TASKS");
  onlyNtasks["SLURM_NTASKS"] = "4";
  CHECK_THAT(errorOf({}, onlyNtasks), Catch::Contains("SLURM_NTASKS=4"));
}

TEST_CASE("slurm: a job without a step (the batch script, salloc) is explained, not guessed at") {
  Environment batch = srunEnvironment(0);
  batch.erase("SLURM_STEP_ID");
  batch.erase("SLURM_STEPID");
  const std::string error = errorOf({"--nproc-per-node", "2"}, batch);
  CHECK_THAT(error, Catch::Contains("outside a job step (SLURM_STEP_ID is not set"));
  CHECK_THAT(error, Catch::Contains("srun --ntasks-per-node=1 ddprun"));
  batch["SLURM_STEP_ID"] = "4294967294";  // the batch step's id
  CHECK_THAT(errorOf({}, batch), Catch::Contains("SLURM_STEP_ID=4294967294, not a task step"));
  // With the options given it is the user's job: no error.
  CHECK(parse({"--standalone"}, batch).config.rdzv.standalone);
}

TEST_CASE("slurm: outside Slurm nothing changes") {
  Environment environment = srunEnvironment(0);
  for (auto it = environment.begin(); it != environment.end();) {
    it = it->first.starts_with("SLURM") ? environment.erase(it) : std::next(it);
  }
  const CommandLine result = parse({}, environment);
  CHECK(result.config.rdzv.runId == "none");
  CHECK(result.config.rdzv.backend == RdzvBackend::kStatic);
  CHECK(result.notes.empty());
}

TEST_CASE("slurm: DDPRUN_SLURM_PORT chooses the port, a bad one is an error") {
  Environment environment = srunEnvironment(1);
  environment["DDPRUN_SLURM_PORT"] = "29411";
  const CommandLine result = parse({}, environment);
  CHECK(result.config.rdzv.port == 29411);
  CHECK_THAT(result.notes.at(0), Catch::Contains("port from DDPRUN_SLURM_PORT"));
  for (const char* bad : {"0", "70000", "abc", ""}) {
    environment["DDPRUN_SLURM_PORT"] = bad;
    CHECK_THAT(errorOf({}, environment), Catch::Contains("DDPRUN_SLURM_PORT"));
  }
}

TEST_CASE("slurm: variables that are not what Slurm writes are errors naming the variable") {
  struct Case {
    const char* variable;
    const char* value;  // nullptr: unset
    const char* says;
  };
  const std::vector<Case> cases = {
      {"SLURM_STEP_NUM_NODES", nullptr, "SLURM_STEP_NUM_NODES (unset) is not a node count"},
      {"SLURM_STEP_NUM_NODES", "0", "a node count in 1..65536"},
      {"SLURM_NODEID", "2", "a node id below SLURM_STEP_NUM_NODES=2"},
      {"SLURM_NODEID", "x", "SLURM_NODEID 'x' is not a node id"},
      {"SLURM_STEP_NODELIST", nullptr, "SLURM_STEP_NODELIST (unset)"},
      {"SLURM_STEP_NODELIST", "127.0.0.[2-1]", "runs backwards"},
      {"SLURM_STEP_NODELIST", "127.0.0.[1-3]", "names 3 hosts but SLURM_STEP_NUM_NODES is 2"},
      {"SLURM_JOB_ID", "12x", "SLURM_JOB_ID '12x' is not a Slurm job id"},
      {"SLURM_STEP_TASKS_PER_NODE", "one", "SLURM_STEP_TASKS_PER_NODE 'one'"},
  };
  for (const auto& c : cases) {
    INFO(c.variable << "=" << (c.value ? c.value : "(unset)"));
    Environment environment = srunEnvironment(1);
    if (c.value == nullptr) {
      environment.erase(c.variable);
    } else {
      environment[c.variable] = c.value;
    }
    CHECK_THAT(errorOf({}, environment), Catch::Contains(c.says));
  }
}

TEST_CASE(
    "slurm: a hostlist bomb in SLURM_STEP_NODELIST is refused at once by the ddprun binary, "
    "within a 64 MiB address space") {
  using namespace std::chrono_literals;
  // 126 KB of bracket groups (an environment variable holds at most 128 KiB): their product is
  // astronomically over the cap. Each group used to be expanded before the product was checked:
  // 1 GiB and 17 s for 9 KB, and out of memory at this size.
  std::string bomb = "n";
  while (bomb.size() < 126'000) bomb += "[0-65534]";
  std::vector<std::string> environment;
  for (const auto& [name, value] : srunEnvironment(0)) environment.push_back(name + "=" + value);
  environment.push_back("SLURM_STEP_NODELIST=" + bomb);
  std::vector<std::string> argv = {DDPRUN_BIN, "--nproc-per-node", "1", "--no-python", "/bin/true"};
#if !defined(__SANITIZE_ADDRESS__)
  // The cap: 64 MiB of address space, which ddprun itself fits in (the same command with a
  // readable list reaches its rendezvous under it, below); AddressSanitizer's shadow memory
  // alone is terabytes of address space, so an instrumented build runs it without the cap.
  argv.insert(argv.begin(), {"prlimit", "--as=67108864", "--"});
#else
  WARN("built with AddressSanitizer: run without the 64 MiB address-space cap");
#endif
  const auto started = std::chrono::steady_clock::now();
  ddprun::test::Subprocess ddprun(argv, environment);
  INFO(ddprun.describe(2000));
  REQUIRE(ddprun::test::exitsWith(ddprun, 2, 20s));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  WARN("a 126 KB SLURM_STEP_NODELIST bomb: ddprun exited 2 after " << took * 1000 << " ms");
  CHECK(took < 10.0);  // a hang guard: it is the work before the refusal that is bounded
  const std::string errors = ddprun.errors();
  CHECK(errors.find('\n') == errors.size() - 1);  // one line
  CHECK_THAT(errors, Catch::StartsWith("ddprun: error: SLURM_STEP_NODELIST: ") &&
                         Catch::Contains("it is not a Slurm host list ddprun can read"));
  CHECK(errors.size() < 800);

#if !defined(__SANITIZE_ADDRESS__)
  // Under the same cap, with a list it can read, ddprun goes on past the command line: node 0
  // hosts the step's store and waits for node 1, which never comes (stopped here).
  environment.back() = "SLURM_STEP_NODELIST=127.0.0.[1-2]";
  environment.push_back("DDPRUN_SLURM_PORT=" + std::to_string(ddprun::test::freePort()));
  ddprun::test::Subprocess capped(argv, environment);
  INFO(capped.describe(2000));
  CHECK(capped.waitForError("waiting for 1 more node", 20000ms));
#endif
}
