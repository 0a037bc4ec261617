// The NCCL backend's own logic under the real ddprun, on a machine without a GPU: a scripted
// libcudart and libnccl (runtime/scripted_nccl/scripted.h) come first on LD_LIBRARY_PATH, and the
// script decides whether the communicator comes up, which collective hangs or fails, and whether
// finalizing hangs. What is checked is what the backend does about it: every call polled to
// completion, an error within DDPRUN_TIMEOUT, the communicator aborted, the group restarted, the
// unique id namespaced by restart, host buffers staged. NCCL itself runs in gpu_test.sh.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "job_helpers.h"
#include "subprocess.h"
#include "temp_dir.h"

using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;

namespace {

struct Job {
  int status = -1;
  std::string output;
  std::string errors;
  std::string log;  // what the scripted libraries logged, a line per event
};

// Runs `ddprun --standalone --nproc-per-node N --no-python args...` (every worker here is a C++
// program) with the scripted libraries and `env`.
Job runScripted(int nproc, std::vector<std::string> args, std::vector<std::string> env) {
  args.insert(args.begin(), "--no-python");
  TempDir dir;
  env.push_back(std::string("LD_LIBRARY_PATH=") + SCRIPTED_NCCL_DIR);
  env.push_back("DDPRUN_SCRIPTED_NCCL_LOG=" + dir.path + "/log");
  env.push_back("DDPRUN_CHECK_DIR=" + dir.path);
  Subprocess process(ddprunCommand(nproc, args), env);
  Job job;
  const auto status = process.wait(120s);
  job.status = status.value_or(-1);
  job.output = process.output();
  job.errors = process.errors();
  std::ifstream log(dir.path + "/log");
  std::stringstream text;
  text << log.rdbuf();
  job.log = text.str();
  return job;
}

// The milliseconds in every match of `pattern`'s first group.
std::vector<int> millisecondsIn(const std::string& text, const std::string& pattern) {
  std::vector<int> found;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    found.push_back(std::stoi((*it)[1]));
  }
  return found;
}

}  // namespace

TEST_CASE(
    "scripted NCCL: every collective and data type through the NCCL backend, host buffers "
    "staged and device buffers as given") {
  for (const bool device : {false, true}) {
    std::vector<std::string> args{RUNTIME_COLLECTIVES_CHECK};
    if (device) args.push_back("--device");
    const Job job = runScripted(1, args, {"DDPRUN_BACKEND=nccl", "DDPRUN_TIMEOUT=30"});
    INFO((device ? "device" : "host") << " buffers\n" << job.output << job.errors << job.log);
    REQUIRE(job.status == 0);
    CHECK(countMatches(job.output, R"(rank 0: \d+ checks passed \(backend nccl, world 1\))") == 1);
    CHECK(countMatches(job.log, "BUG") == 0);  // no call while in progress, no host pointer
    CHECK(countMatches(job.log, "init rank=0 ranks=1 device=0 attempt=0 blocking=0 ") == 1);
    CHECK(countMatches(job.log, "finalize rank=0") == 1);
    CHECK(countMatches(job.log, "destroy rank=0") == 1);
    CHECK(countMatches(job.log, "abort") == 0);
  }
}

TEST_CASE("scripted NCCL: backend auto takes NCCL where a GPU is visible and Gloo where none is") {
  const Job withGpu = runScripted(1, {RUNTIME_COLLECTIVES_CHECK}, {"DDPRUN_TIMEOUT=30"});
  INFO(withGpu.output << withGpu.errors);
  CHECK(withGpu.status == 0);
  CHECK(countMatches(withGpu.output, R"(checks passed \(backend nccl, world 1\))") == 1);
  const Job without =
      runScripted(1, {RUNTIME_COLLECTIVES_CHECK}, {"DDPRUN_TIMEOUT=30", "DDPRUN_SCRIPTED_GPUS=0"});
  INFO(without.output << without.errors);
  CHECK(without.status == 0);
  CHECK(countMatches(without.output, R"(checks passed \(backend gloo, world 1\))") == 1);
  // Asked for by name, NCCL without a GPU is a one-line error that names the way out.
  const Job refused = runScripted(1, {RUNTIME_RESILIENCE_WORKER, "--iterations", "1"},
                                  {"DDPRUN_BACKEND=nccl", "DDPRUN_SCRIPTED_GPUS=0"});
  INFO(refused.errors);
  CHECK(refused.status != 0);
  CHECK(countMatches(refused.errors,
                     "the NCCL backend was asked for but no GPU is usable "
                     R"(\(no CUDA-capable device is detected \(scripted\)\): run )"
                     "on a GPU host with a build that has NCCL, or use "
                     "DDPRUN_BACKEND=gloo") == 1);
}

TEST_CASE(
    "scripted NCCL: each rank's GPU is its LOCAL_RANK, and more workers than GPUs is a "
    "clear error") {
  const Job job = runScripted(2, {RUNTIME_RESILIENCE_WORKER, "--iterations", "0"},
                              {"DDPRUN_BACKEND=nccl", "DDPRUN_SCRIPTED_GPUS=2"});
  INFO(job.output << job.errors << job.log);
  CHECK(job.status == 0);
  CHECK(countMatches(job.log, "init rank=0 ranks=2 device=0 ") == 1);
  CHECK(countMatches(job.log, "init rank=1 ranks=2 device=1 ") == 1);
  const Job tooMany =
      runScripted(2, {RUNTIME_RESILIENCE_WORKER, "--iterations", "0"},
                  {"DDPRUN_BACKEND=nccl", "DDPRUN_SCRIPTED_GPUS=1", "DDPRUN_TIMEOUT=10"});
  INFO(tooMany.errors);
  CHECK(tooMany.status != 0);
  // The worker's own line ("[default1]:..."; the failure summary quotes it again).
  CHECK(
      countMatches(
          tooMany.errors,
          R"(\]:rank -?\d+: collective failed: rank 1 wants CUDA device 1 \(LOCAL_RANK/DDPRUN_DEVICE\) but only 1 )"
          R"(GPU\(s\) are visible \(CUDA_VISIBLE_DEVICES=unset\): start at most 1 )"
          R"(workers per node \(--nproc-per-node 1\))") == 1);
}

TEST_CASE("scripted NCCL: a restarted group never reads the unique id of the attempt before") {
  // Attempt 0: rank 1 exits after init, the agent restarts both; every rank of an attempt must
  // have initialized with the id rank 0 published for that attempt, not an earlier one.
  const Job job =
      runScripted(2,
                  {"--max-restarts", "1", RUNTIME_RESILIENCE_WORKER, "--iterations", "0", "--fault",
                   "exit-after-init", "--fault-rank", "1"},
                  {"DDPRUN_BACKEND=nccl", "DDPRUN_SCRIPTED_GPUS=2", "DDPRUN_TIMEOUT=10"});
  INFO(job.output << job.errors << job.log);
  REQUIRE(job.status == 0);
  CHECK(countMatches(job.output, "checksum 0 attempt 1") == 1);
  std::map<std::string, std::set<std::string>> idsByAttempt;
  std::map<std::string, int> initsByAttempt;
  const std::regex init(R"(init rank=\d ranks=2 device=\d attempt=(\d) blocking=0 id=([0-9a-f]+))");
  for (auto it = std::sregex_iterator(job.log.begin(), job.log.end(), init);
       it != std::sregex_iterator(); ++it) {
    idsByAttempt[(*it)[1]].insert((*it)[2]);
    ++initsByAttempt[(*it)[1]];
  }
  // Rank 1 of attempt 0 initialized with attempt 0's id; rank 0 may have been stopped by the
  // agent before it reached ncclCommInitRank (rank 1 fails as soon as it is up).
  REQUIRE(initsByAttempt["0"] >= 1);
  REQUIRE(initsByAttempt["1"] == 2);
  REQUIRE(idsByAttempt["0"].size() == 1);  // the ranks of attempt 0 that got there used one id
  REQUIRE(idsByAttempt["1"].size() == 1);
  CHECK(*idsByAttempt["0"].begin() != *idsByAttempt["1"].begin());
}

TEST_CASE(
    "scripted NCCL: ranks whose peer never joins fail ncclCommInitRank within "
    "DDPRUN_TIMEOUT and abort the communicator") {
  // The workers ignore the agent's SIGTERM (and its SIGKILL comes 30 s later), so that each rank
  // is seen to fail by itself rather than be stopped when the first one failed.
  const Job job = runScripted(2,
                              {"--shutdown-timeout", "30", RUNTIME_RESILIENCE_WORKER,
                               "--ignore-sigterm", "--iterations", "5"},
                              {"DDPRUN_BACKEND=nccl", "DDPRUN_SCRIPTED_GPUS=2",
                               "DDPRUN_SCRIPTED_NCCL=init-hang", "DDPRUN_TIMEOUT=2"});
  INFO(job.output << job.errors << job.log);
  CHECK(job.status != 0);
  const auto waited = millisecondsIn(
      job.errors,
      R"(\]:rank -?\d+: collective failed: nccl ncclCommInitRank on rank \d of 2 did not complete within (\d+) ms \(a )"
      R"(peer hung or died\): the communicator was aborted; raise DDPRUN_TIMEOUT)");
  REQUIRE(waited.size() == 2);
  for (const int ms : waited) {
    CHECK(ms >= 2000);
    CHECK(ms < 4000);
  }
  CHECK(countMatches(job.log, "abort rank=0") == 1);
  CHECK(countMatches(job.log, "abort rank=1") == 1);
  CHECK(countMatches(job.log, "destroy") == 0);
  CHECK(countMatches(job.log, "BUG") == 0);
}

// One rank, 10 iterations, `scenario` played in attempt 0 and one restart allowed; checks what
// every such failure must end in -- attempt 0's communicator aborted, attempt 1's finalized, the
// right checksum, no broken rule -- and returns the milliseconds in the failure `message`.
int failedThenRestarted(const std::string& scenario, const std::string& timeoutSeconds,
                        const std::string& message) {
  const Job job =
      runScripted(1, {"--max-restarts", "1", RUNTIME_RESILIENCE_WORKER, "--iterations", "10"},
                  {"DDPRUN_BACKEND=nccl", "DDPRUN_SCRIPTED_NCCL=" + scenario,
                   "DDPRUN_TIMEOUT=" + timeoutSeconds});
  INFO(job.output << job.errors << job.log);
  REQUIRE(job.status == 0);
  const auto waited = millisecondsIn(job.errors, message);
  REQUIRE(waited.size() == 1);
  CHECK(countMatches(job.output, fmt::format("checksum {} attempt 1", expectedChecksum(1, 10))) ==
        1);
  CHECK(countMatches(job.log, "abort rank=0") == 1);
  CHECK(countMatches(job.log, "destroy rank=0") == 1);
  CHECK(countMatches(job.log, "BUG") == 0);
  return waited[0];
}

TEST_CASE(
    "scripted NCCL: a collective that never completes (a hung peer) fails within "
    "DDPRUN_TIMEOUT, is aborted, and the restarted group finishes") {
  const int waited = failedThenRestarted(
      "hang-at:3", "2",
      R"(collective failed: nccl all_reduce on rank 0 of 1 did not complete within (\d+) ms)");
  CHECK(waited >= 2000);
  CHECK(waited < 4000);
}

TEST_CASE(
    "scripted NCCL: an asynchronous NCCL error (a peer's connection closed) fails the "
    "collective at once with NCCL's message, and the restarted group finishes") {
  const int waited = failedThenRestarted(
      "remote-error-at:3", "30",
      R"(collective failed: nccl all_reduce failed on rank 0 of 1 after (\d+) ms: remote )"
      R"(process exited or there was a network error: scripted: rank 1 closed its connection)");
  CHECK(waited < 1000);  // not the 30 s timeout
}

TEST_CASE(
    "scripted NCCL: a shutdown whose peer never finalizes aborts after the grace instead "
    "of hanging") {
  const auto start = std::chrono::steady_clock::now();
  const Job job = runScripted(
      1, {RUNTIME_RESILIENCE_WORKER, "--iterations", "3"},
      {"DDPRUN_BACKEND=nccl", "DDPRUN_SCRIPTED_NCCL=finalize-hang", "DDPRUN_TIMEOUT=2"});
  INFO(job.output << job.errors << job.log);
  CHECK(job.status == 0);  // every collective completed: the job's result stands
  CHECK(countMatches(job.output, fmt::format("checksum {} attempt 0", expectedChecksum(1, 3))) ==
        1);
  CHECK(countMatches(job.log, "finalize rank=0") == 1);
  CHECK(countMatches(job.log, "abort rank=0") == 1);
  CHECK(countMatches(job.log, "destroy") == 0);
  CHECK(countMatches(job.log, "BUG") == 0);
  CHECK(std::chrono::steady_clock::now() - start < 20s);  // the grace is min(timeout, 5 s)
}
