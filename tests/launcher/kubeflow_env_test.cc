// Kubernetes, no flags: the environments Kubeflow's operators give a pod, as their sources write
// them, -> the LaunchConfig ddprun builds from them alone (`ddprun train.py` as the container's
// command), and their bad values -> one UsageError line naming the variable (exit 2).
//
//   training-operator v1 PyTorchJob (pkg/controller.v1/pytorch/envvar.go, master.go, elastic.go):
//     every pod: PYTHONUNBUFFERED=0; with a Master replica: MASTER_ADDR=<job>-master-0 (some
//     versions: localhost in the master pod itself, whose store then listens everywhere),
//     MASTER_PORT, WORLD_SIZE (all replicas), RANK (master 0, worker i -> i+1), and the PET_
//     values the operator derives from them (PET_MASTER_ADDR/PORT, PET_NNODES, PET_NODE_RANK,
//     PET_NPROC_PER_NODE); with an elasticPolicy: PET_RDZV_ENDPOINT=<job>-worker-0:<port>,
//     PET_RDZV_BACKEND (c10d unless given), PET_NNODES (MIN:MAX, or the worker replicas),
//     PET_MAX_RESTARTS, PET_NPROC_PER_NODE (PET_N_PROC_PER_NODE up to v1.5), PET_RDZV_ID,
//     PET_RDZV_CONF=k=v,k=v and PET_STANDALONE="" (empty: on).
//   Trainer v2 TrainJob (pkg/runtime/framework/plugins/torch/torch.go): PET_NNODES=numNodes,
//     PET_NPROC_PER_NODE=auto|cpu|gpu|N, PET_NODE_RANK=the Job's completion index,
//     PET_MASTER_ADDR=<job>-node-0-0.<job> (JobSet's headless service), PET_MASTER_PORT=29400.
//
// The pods' service names do not resolve here, as they may not yet inside a pod that just
// started: each is a warning, and the agent waits for the name (membership_test).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "temp_dir.h"

using ddprun::launcher::CommandLine;
using ddprun::launcher::LaunchConfig;
using ddprun::launcher::parseCommandLine;
using ddprun::launcher::RdzvBackend;
using ddprun::launcher::UsageError;
namespace fs = std::filesystem;

namespace {

using Environment = std::map<std::string, std::string>;

// A training script and a python3 on PATH, as a container image has them.
struct Image {
  ddprun::test::TempDir dir;
  fs::path root = dir.path;
  Image() {
    ddprun::test::writeFile(root / "bin" / "python3", "#!/bin/sh\nexit 0\n", 0755);
    ddprun::test::writeFile(root / "train.py", "print('hi')\n");
  }
  std::string script() const { return (root / "train.py").string(); }
  Environment environment(const Environment& pod) const {
    Environment all = pod;
    all["PATH"] = (root / "bin").string();
    return all;
  }
};

const Image& image() {
  static const Image instance;
  return instance;
}

CommandLine parsePod(const Environment& pod) {
  const std::string script = image().script();
  const char* argv[] = {"ddprun", script.c_str()};
  return parseCommandLine(2, argv, image().environment(pod));
}

std::string usageError(const Environment& pod) {
  try {
    parsePod(pod);
  } catch (const UsageError& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("no UsageError for this environment");
  return {};
}

Environment with(Environment pod, const std::string& name, const std::string& value) {
  pod[name] = value;
  return pod;
}

// What a pod's environment must come to.
struct Expected {
  RdzvBackend backend;
  int minNodes;
  int maxNodes;
  int nodeRank;
  std::string host;
  std::uint16_t port;
  std::string runId;
  int nproc;  // 0: auto/cpu, resolved on this machine (at least 1)
  int maxRestarts = 0;
  bool standalone = false;
};

struct Case {
  const char* name;
  Environment pod;
  Expected expected;
  int unresolvedWarnings;  // the service names that do not resolve here
};

// PyTorchJob "job" with one Master and one Worker replica, port 23456, nprocPerNode 2.
Environment pytorchJobPod(int rank) {
  return {{"PYTHONUNBUFFERED", "0"},
          {"MASTER_ADDR", "job-master-0"},
          {"MASTER_PORT", "23456"},
          {"WORLD_SIZE", "2"},
          {"RANK", std::to_string(rank)},
          {"PET_MASTER_ADDR", "job-master-0"},
          {"PET_MASTER_PORT", "23456"},
          {"PET_NNODES", "2"},
          {"PET_NODE_RANK", std::to_string(rank)},
          {"PET_NPROC_PER_NODE", "2"}};
}

// PyTorchJob "elastic" with an elasticPolicy (min 1, max 3 replicas, maxRestarts 3, rdzvId,
// rdzvConf) on worker port 23456: every worker pod gets the same.
Environment elasticPod() {
  return {
      {"PYTHONUNBUFFERED", "0"},      {"PET_RDZV_ENDPOINT", "elastic-worker-0:23456"},
      {"PET_RDZV_BACKEND", "c10d"},   {"PET_NNODES", "1:3"},
      {"PET_MAX_RESTARTS", "3"},      {"PET_NPROC_PER_NODE", "4"},
      {"PET_RDZV_ID", "elastic-run"}, {"PET_RDZV_CONF", "join_timeout=900,last_call_timeout=5"}};
}

// TrainJob "tj" with numNodes 2: node index `rank`.
Environment trainJobPod(int rank, const std::string& nproc) {
  return {{"PET_NNODES", "2"},
          {"PET_NPROC_PER_NODE", nproc},
          {"PET_NODE_RANK", std::to_string(rank)},
          {"PET_MASTER_ADDR", "tj-node-0-0.tj"},
          {"PET_MASTER_PORT", "29400"}};
}

}  // namespace

TEST_CASE("the environments Kubeflow's operators give a pod -> the launch config", "[kubeflow]") {
  Environment oldOperator = elasticPod();
  oldOperator.erase("PET_NPROC_PER_NODE");
  oldOperator["PET_N_PROC_PER_NODE"] = "4";
  Environment standalone = {{"PET_RDZV_ENDPOINT", "solo-worker-0:23456"},
                            {"PET_RDZV_BACKEND", "c10d"},
                            {"PET_NNODES", "1"},
                            {"PET_NPROC_PER_NODE", "2"},
                            {"PET_STANDALONE", ""}};
  const std::vector<Case> cases = {
      {"PyTorchJob master pod",
       pytorchJobPod(0),
       {RdzvBackend::kStatic, 2, 2, 0, "job-master-0", 23456, "none", 2},
       1},
      {"PyTorchJob master pod, given localhost for itself (some training-operator versions)",
       with(with(pytorchJobPod(0), "MASTER_ADDR", "localhost"), "PET_MASTER_ADDR", "localhost"),
       {RdzvBackend::kStatic, 2, 2, 0, "localhost", 23456, "none", 2},
       0},
      {"PyTorchJob worker pod",
       pytorchJobPod(1),
       {RdzvBackend::kStatic, 2, 2, 1, "job-master-0", 23456, "none", 2},
       1},
      {"PyTorchJob elastic worker pod",
       elasticPod(),
       {RdzvBackend::kC10d, 1, 3, 0, "elastic-worker-0", 23456, "elastic-run", 4, 3},
       1},
      {"PyTorchJob elastic pod of training-operator <= v1.5 (PET_N_PROC_PER_NODE)",
       oldOperator,
       {RdzvBackend::kC10d, 1, 3, 0, "elastic-worker-0", 23456, "elastic-run", 4, 3},
       1},
      {"PyTorchJob elastic standalone pod (PET_STANDALONE=\"\")",
       standalone,
       {RdzvBackend::kC10d, 1, 1, 0, "127.0.0.1", 0, "", 2, 0, true},
       0},
      {"TrainJob node 0, numProcPerNode 8",
       trainJobPod(0, "8"),
       {RdzvBackend::kStatic, 2, 2, 0, "tj-node-0-0.tj", 29400, "none", 8},
       1},
      {"TrainJob node 1, numProcPerNode 8",
       trainJobPod(1, "8"),
       {RdzvBackend::kStatic, 2, 2, 1, "tj-node-0-0.tj", 29400, "none", 8},
       1},
      {"TrainJob node 1, numProcPerNode auto",
       trainJobPod(1, "auto"),
       {RdzvBackend::kStatic, 2, 2, 1, "tj-node-0-0.tj", 29400, "none", 0},
       1},
      {"TrainJob node 0, numProcPerNode cpu",
       trainJobPod(0, "cpu"),
       {RdzvBackend::kStatic, 2, 2, 0, "tj-node-0-0.tj", 29400, "none", 0},
       1},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const CommandLine line = parsePod(c.pod);
    const LaunchConfig& config = line.config;
    CHECK(config.rdzv.backend == c.expected.backend);
    CHECK(config.rdzv.minNodes == c.expected.minNodes);
    CHECK(config.rdzv.maxNodes == c.expected.maxNodes);
    CHECK(config.rdzv.nodeRank == c.expected.nodeRank);
    CHECK(config.rdzv.host == c.expected.host);
    CHECK(config.rdzv.port == c.expected.port);
    CHECK(config.rdzv.standalone == c.expected.standalone);
    if (!c.expected.standalone) CHECK(config.rdzv.runId == c.expected.runId);
    if (c.expected.nproc > 0) {
      CHECK(config.nprocPerNode == c.expected.nproc);
    } else {
      CHECK(config.nprocPerNode >= 1);
    }
    CHECK(config.restart.maxRestarts == c.expected.maxRestarts);
    int unresolved = 0;
    for (const auto& warning : line.warnings) {
      INFO(warning);
      CHECK(warning.find('\n') == std::string::npos);
      if (warning.find("does not resolve yet") != std::string::npos) ++unresolved;
    }
    CHECK(unresolved == c.unresolvedWarnings);
  }
}

TEST_CASE("Kubeflow: PET_RDZV_CONF's keys reach the settings, and the command line wins",
          "[kubeflow]") {
  const LaunchConfig config = parsePod(elasticPod()).config;
  CHECK(config.rdzv.settings.joinTimeout == std::chrono::seconds(900));
  CHECK(config.rdzv.settings.lastCallTimeout == std::chrono::seconds(5));
  // Both spellings of the nproc variable: the current one wins.
  CHECK(parsePod(with(elasticPod(), "PET_N_PROC_PER_NODE", "7")).config.nprocPerNode == 4);
  const std::string script = image().script();
  const char* argv[] = {"ddprun", "--nnodes", "2", "--node-rank", "1", script.c_str()};
  const LaunchConfig given =
      parseCommandLine(6, argv, image().environment(trainJobPod(0, "8"))).config;
  CHECK(given.rdzv.nodeRank == 1);
  CHECK(given.rdzv.maxNodes == 2);
}

TEST_CASE("Kubeflow: a bad PET_ value is one line naming the variable and the fix", "[kubeflow]") {
  struct Bad {
    Environment pod;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {with(trainJobPod(0, "8"), "PET_NNODES", "2:1"), "PET_NNODES '2:1'"},
      {with(trainJobPod(0, "8"), "PET_NNODES", "two"), "PET_NNODES 'two'"},
      {with(trainJobPod(0, "8"), "PET_NNODES", ""), "PET_NNODES ''"},
      {with(trainJobPod(0, "8"), "PET_NPROC_PER_NODE", "many"), "PET_NPROC_PER_NODE 'many'"},
      {with(trainJobPod(0, "8"), "PET_NPROC_PER_NODE", "0"), "PET_NPROC_PER_NODE '0'"},
      {with(trainJobPod(0, "8"), "PET_NODE_RANK", "2"), "PET_NODE_RANK '2' is outside"},
      {with(trainJobPod(0, "8"), "PET_NODE_RANK", "-1"), "PET_NODE_RANK '-1'"},
      {with(trainJobPod(0, "8"), "PET_MASTER_PORT", "http"), "PET_MASTER_PORT 'http'"},
      {with(trainJobPod(0, "8"), "PET_MASTER_PORT", "70000"), "PET_MASTER_PORT '70000'"},
      {with(trainJobPod(0, "8"), "PET_MASTER_ADDR", ""), "PET_MASTER_ADDR ''"},
      {with(elasticPod(), "PET_RDZV_CONF", "join_timeout"),
       "PET_RDZV_CONF: key 'join_timeout' has no value"},
      {with(elasticPod(), "PET_RDZV_CONF", "join_timeout=soon"), "PET_RDZV_CONF"},
      {with(elasticPod(), "PET_RDZV_BACKEND", "etcd-v4"), "PET_RDZV_BACKEND 'etcd-v4'"},
      {with(elasticPod(), "PET_RDZV_ENDPOINT", "elastic-worker-0:99999"), "PET_RDZV_ENDPOINT"},
      {with(elasticPod(), "PET_MAX_RESTARTS", "-1"), "PET_MAX_RESTARTS '-1'"},
      {with(elasticPod(), "PET_N_PROC_PER_NODE", "x"), ""},  // PET_NPROC_PER_NODE wins: fine
      {with(with(elasticPod(), "PET_NPROC_PER_NODE", ""), "PET_N_PROC_PER_NODE", "x"),
       "PET_NPROC_PER_NODE ''"},
      {with(with(elasticPod(), "PET_STANDALONE", "maybe"), "PET_NNODES", "1"),
       "PET_STANDALONE 'maybe'"},
      {with(elasticPod(), "PET_STANDALONE", ""), "single-node"},
  };
  for (const Bad& b : bad) {
    if (b.says.empty()) {
      CHECK_NOTHROW(parsePod(b.pod));
      continue;
    }
    INFO(b.says);
    CHECK_THAT(usageError(b.pod), Catch::Contains(b.says));
  }
  // PET_NPROC_PER_NODE=gpu where no NVIDIA GPU is visible.
  if (!fs::exists("/proc/driver/nvidia/gpus")) {
    CHECK_THAT(usageError(trainJobPod(0, "gpu")),
               Catch::Contains("PET_NPROC_PER_NODE 'gpu'") && Catch::Contains("no NVIDIA GPU"));
  }
}
