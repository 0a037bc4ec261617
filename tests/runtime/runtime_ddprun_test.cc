// The worker runtime under the real ddprun: C++ workers with no Python, 2 and 4 ranks on Gloo.
// Every job pins DDPRUN_BACKEND=gloo: `auto` would pick NCCL on a GPU host (the GPU test is
// tests/runtime/gpu_test.sh).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "job_helpers.h"
#include "ports.h"
#include "subprocess.h"
#include "temp_dir.h"

using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::vector<double> readNumbers(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> values;
  for (double v; in >> v;) values.push_back(v);
  return values;
}

}  // namespace

TEST_CASE("every collective, op and data type is exact under ddprun (gloo, 2, 3 and 4 ranks)") {
  // 3: Gloo's bcube all_reduce (small messages) on a world that is not a power of two.
  for (int ranks : {2, 3, 4}) {
    TempDir dir;
    Subprocess job(ddprunCommand(ranks, {"--no-python", RUNTIME_COLLECTIVES_CHECK}),
                   {"DDPRUN_CHECK_DIR=" + dir.path, "DDPRUN_BACKEND=gloo", "DDPRUN_TIMEOUT=60"});
    const auto status = job.wait(240s);
    INFO(job.output() << job.errors());
    REQUIRE(status == 0);
    CHECK(countMatches(job.output(), R"(rank \d+: \d+ checks passed \(backend gloo, world )" +
                                         std::to_string(ranks) + "\\)") == ranks);
  }
}

TEST_CASE("the data-parallel example ends with the weights of a single full-batch process") {
  TempDir dir;
  Subprocess reference(
      {EXAMPLE_DP_TRAINER, "--reference", "--steps", "60", "--out", dir.path + "/reference.txt"});
  REQUIRE(reference.wait(120s) == 0);
  const auto expected = readNumbers(dir.path + "/reference.txt");
  REQUIRE(expected.size() > 100);
  for (int ranks : {1, 2, 4}) {
    const std::string out = fmt::format("{}/weights{}.txt", dir.path, ranks);
    Subprocess job(
        ddprunCommand(ranks, {"--no-python", EXAMPLE_DP_TRAINER, "--steps", "60", "--out", out}),
        {"DDPRUN_BACKEND=gloo"});
    const auto status = job.wait(180s);
    INFO(job.output() << job.errors());
    REQUIRE(status == 0);
    // One worker's output passes through untouched (as under torchrun); several are prefixed.
    CHECK(countMatches(job.output(),
                       ranks == 1 ? R"((^|\n)step 60 loss)" : R"(\[default0\]:step 60 loss)") == 1);
    const auto weights = readNumbers(out);
    REQUIRE(weights.size() == expected.size());
    double worst = 0;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      worst = std::max(worst,
                       std::abs(weights[i] - expected[i]) / std::max(1.0, std::abs(expected[i])));
    }
    INFO(ranks << " ranks: largest relative difference " << worst);
    CHECK(worst < 1e-10);  // only the summation order differs
  }
}

TEST_CASE(
    "a rank killed mid-loop: its peers error out within the timeout, the group restarts and "
    "ends with the right checksum (2 and 4 ranks)") {
  for (int world : {2, 4}) {
    // The workers ignore the agent's SIGTERM and the grace before its SIGKILL (30 s) is longer
    // than DDPRUN_TIMEOUT (10 s), so the agent cannot stop a survivor before it fails by itself.
    Subprocess job(
        ddprunCommand(world, {"--max-restarts", "1", "--shutdown-timeout", "30", "--no-python",
                              RUNTIME_RESILIENCE_WORKER, "--ignore-sigterm", "--iterations", "60",
                              "--fault", "kill", "--fault-rank", "1", "--fault-at", "20"}),
        {"DDPRUN_BACKEND=gloo", "DDPRUN_TIMEOUT=10"});
    const auto status = job.wait(120s);
    const std::string errors = job.errors();
    INFO(world << " ranks: " << job.output() << errors);
    REQUIRE(status == 0);
    CHECK(countMatches(errors, "injecting 'kill'") == 1);
    // Every other rank reported the broken connection itself, well within the 10 s timeout.
    std::set<int> failed;
    const std::regex failure(
        R"(rank (\d+): collective failed: gloo all_reduce failed on rank \1 of )" +
        std::to_string(world) + R"( after (\d+) ms)");
    for (auto it = std::sregex_iterator(errors.begin(), errors.end(), failure);
         it != std::sregex_iterator(); ++it) {
      failed.insert(std::stoi((*it)[1]));
      CHECK(std::stoi((*it)[2]) < 10000);
    }
    std::set<int> survivors;
    for (int rank = 0; rank < world; ++rank) {
      if (rank != 1) survivors.insert(rank);
    }
    CHECK(failed == survivors);
    CHECK(countMatches(job.output(),
                       fmt::format("checksum {} attempt 1", expectedChecksum(world, 60))) == 1);
  }
}

TEST_CASE(
    "a rank that hangs: its peers fail within DDPRUN_TIMEOUT, the group restarts and finishes") {
  Subprocess job(ddprunCommand(2, {"--max-restarts", "1", "--shutdown-timeout", "1", "--no-python",
                                   RUNTIME_RESILIENCE_WORKER, "--iterations", "40", "--fault",
                                   "hang", "--fault-rank", "1", "--fault-at", "10"}),
                 {"DDPRUN_BACKEND=gloo", "DDPRUN_TIMEOUT=2"});
  const auto status = job.wait(120s);
  INFO(job.output() << job.errors());
  REQUIRE(status == 0);
  // Rank 0 waited on the stopped rank and gave up after the 2 s timeout, no later.
  std::smatch match;
  const std::string errors = job.errors();
  REQUIRE(std::regex_search(
      errors, match,
      std::regex(
          R"(rank 0: collective failed: gloo all_reduce failed on rank 0 of 2 after (\d+) ms)")));
  const int waited = std::stoi(match[1]);
  CHECK(waited >= 1900);
  CHECK(waited < 4000);
  CHECK(countMatches(job.output(), fmt::format("checksum {} attempt 1", expectedChecksum(2, 40))) ==
        1);
}

TEST_CASE(
    "a rank that stops calling collectives: ddprun --hang-timeout finds both ranks silent, "
    "records their stacks and restarts the group") {
  // DDPRUN_TIMEOUT (5 min by default) would let rank 0 wait for minutes; --hang-timeout 5 ends
  // the hang seconds after the last collective, which reported progress by itself (and is long
  // enough that a loaded CI machine does not make a healthy attempt look hung).
  Subprocess job(ddprunCommand(2, {"--max-restarts", "1", "--hang-timeout", "5", "--no-python",
                                   RUNTIME_RESILIENCE_WORKER, "--iterations", "40", "--fault",
                                   "stall", "--fault-rank", "1", "--fault-at", "10"}),
                 {"DDPRUN_BACKEND=gloo"});
  const auto start = std::chrono::steady_clock::now();
  const auto status = job.wait(120s);
  const std::string errors = job.errors();
  INFO(job.output() << errors);
  REQUIRE(status == 0);
  CHECK(std::chrono::steady_clock::now() - start < 60s);
  CHECK_THAT(errors, Catch::Contains("is hung: no progress reported for"));
  CHECK_THAT(errors, Catch::Contains("its threads' stacks are in"));
  if (::access("/usr/bin/gdb", X_OK) == 0) {
    // The stalled rank's native stack names where it stopped.
    CHECK_THAT(errors, Catch::Contains("stallForever"));
  }
  CHECK(countMatches(job.output(), fmt::format("checksum {} attempt 1", expectedChecksum(2, 40))) ==
        1);
}

TEST_CASE("without an agent to stop them, the peers of a killed rank error out at once") {
  // Three processes started by hand (rank 0 hosts the store): nobody but the runtime notices the
  // death, and the survivors must fail fast rather than wait for the 60 s timeout.
  const std::string port = std::to_string(freePort());
  std::vector<std::unique_ptr<Subprocess>> ranks;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < 3; ++rank) {
    ranks.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{RUNTIME_RESILIENCE_WORKER, "--iterations", "100000", "--fault",
                                 "kill", "--fault-rank", "2", "--fault-at", "10"},
        std::vector<std::string>{
            "RANK=" + std::to_string(rank), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
            "MASTER_PORT=" + port, "TORCHELASTIC_RESTART_COUNT=0",
            "TORCHELASTIC_USE_AGENT_STORE=False", "DDPRUN_BACKEND=gloo", "DDPRUN_TIMEOUT=60"}));
  }
  CHECK(ranks[2]->wait(30s) == 128 + SIGKILL);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank << ": " << ranks[static_cast<std::size_t>(rank)]->errors());
    CHECK(ranks[static_cast<std::size_t>(rank)]->wait(10s) == 1);
    CHECK(countMatches(ranks[static_cast<std::size_t>(rank)]->errors(),
                       "collective failed: gloo") == 1);
  }
  CHECK(std::chrono::steady_clock::now() - start < 20s);  // far below the 60 s timeout
}
