// `ddprun status` without a job: the text and JSON rendered from fixed snapshots (ended, stale,
// the last failure, escaping), the bound on a published snapshot, the publisher over the
// in-process store (newest only, a rejoin moving the key, the final write), and the rendezvous
// options read by the agent's rules. Milliseconds, no process.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/rendezvous_options.h"
#include "core/agent_snapshot.h"
#include "ddprun/rendezvous/hash_store.h"
#include "membership/membership_keys.h"
#include "membership/status_publisher.h"
#include "membership/store_backend.h"
#include "status/job_status.h"

using namespace ddprun::launcher;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr double kNow = 2000;

AgentSnapshot node(int groupRank, const std::string& host, AgentPhase phase = AgentPhase::kRunning) {
  AgentSnapshot snapshot;
  snapshot.runId = "job-7";
  snapshot.round = 1;
  snapshot.restarts = 1;
  snapshot.maxRestarts = 3;
  snapshot.address = "10.0.0." + std::to_string(groupRank + 1);
  snapshot.hostname = host;
  snapshot.agentPid = 100 + groupRank;
  snapshot.groupRank = groupRank;
  snapshot.nodes = 2;
  snapshot.phase = phase;
  snapshot.startedAt = 1000;
  snapshot.updatedAt = kNow - 1;
  for (int local = 0; local < 2; ++local) {
    WorkerSnapshot worker;
    worker.rank = groupRank * 2 + local;
    worker.localRank = local;
    worker.pid = 5000 + worker.rank;
    worker.startedAt = kNow - 75;
    if (local == 0) worker.lastHeartbeat = kNow - 2;
    snapshot.workers.push_back(worker);
  }
  return snapshot;
}

WorkerFailure failure(int rank, double at, std::string message) {
  WorkerFailure failure;
  failure.rank = rank;
  failure.localRank = rank % 2;
  failure.groupRank = rank / 2;
  failure.host = "host-b";
  failure.exitCode = 3;
  failure.observedAt = at;
  failure.message = std::move(message);
  return failure;
}

}  // namespace

TEST_CASE("status text: run, round, restarts, each node and worker, the last failure", "[status]") {
  AgentSnapshot second = node(1, "host-b");
  second.lastFailure = failure(3, 1500, "ValueError: boom");
  AgentSnapshot first = node(0, "host-a");
  first.lastFailure = failure(2, 1200, "older");
  // Given out of order: shown by group rank.
  const JobStatus status = jobStatusOf("job-7", {second, first});
  const std::string text = renderText(status, kNow);
  CHECK(text ==
        "job 'job-7': round 1, restarts 1 of 3, 2 nodes\n"
        "node 0 on host-a (10.0.0.1), agent pid 100: running\n"
        "  rank 0 (local 0): pid 5000, running, started 1 min 15 s ago, last heartbeat 2 s ago\n"
        "  rank 1 (local 1): pid 5001, running, started 1 min 15 s ago\n"
        "node 1 on host-b (10.0.0.2), agent pid 101: running\n"
        "  rank 2 (local 0): pid 5002, running, started 1 min 15 s ago, last heartbeat 2 s ago\n"
        "  rank 3 (local 1): pid 5003, running, started 1 min 15 s ago\n"
        "last failure: rank 3 (local 1) on host-b: exitcode 3: ValueError: boom\n");
  CHECK_FALSE(ended(status));
}

TEST_CASE("status JSON: the fields programs read, per node the snapshot's one form", "[status]") {
  AgentSnapshot second = node(1, "host-b");
  second.lastFailure = failure(3, 1500, "ValueError: boom");
  const json value = renderJson(jobStatusOf("job-7", {node(0, "host-a"), second}), kNow);
  CHECK(value["run_id"] == "job-7");
  CHECK(value["state"] == "running");
  CHECK(value["round"] == 1);
  CHECK(value["restarts"] == 1);
  CHECK(value["max_restarts"] == 3);
  CHECK_FALSE(value.contains("exit_code"));
  REQUIRE(value["nodes"].size() == 2);
  CHECK(value["nodes"][1]["addr"] == "10.0.0.2");
  CHECK(value["nodes"][1]["group_rank"] == 1);
  CHECK(value["nodes"][1]["stale"] == false);
  CHECK(value["nodes"][1]["workers"][1] ==
        json{{"rank", 3}, {"local_rank", 1}, {"pid", 5003}, {"state", "running"}, {"started_at", kNow - 75}});
  CHECK(value["last_failure"]["rank"] == 3);
  CHECK(value["last_failure"]["reason"] == "exitcode 3: ValueError: boom");
  // The nodes read back as snapshots: one form, published and shown.
  CHECK(agentSnapshotFromJson(value["nodes"][0]).hostname == "host-a");
}

TEST_CASE("status: a job whose every node finished has ended, with its outcome", "[status]") {
  AgentSnapshot first = node(0, "host-a", AgentPhase::kFinished);
  AgentSnapshot second = node(1, "host-b", AgentPhase::kFinished);
  first.exitCode = 0;
  second.exitCode = 0;
  CHECK(ended(jobStatusOf("j", {first, second})));
  CHECK(outcomeCode(jobStatusOf("j", {first, second})) == 0);
  CHECK_THAT(renderText(jobStatusOf("j", {first, second}), kNow),
             Catch::StartsWith("job 'j' has ended: succeeded (exit code 0), round 1, restarts 1 of 3\n"));
  second.exitCode = 143;  // stopped by SIGTERM, no worker failed
  CHECK_THAT(renderText(jobStatusOf("j", {first, second}), kNow),
             Catch::StartsWith("job 'j' has ended: stopped (exit code 143)"));
  second.exitCode = 3;
  second.lastFailure = failure(3, 1500, "ValueError: boom");
  CHECK_THAT(renderText(jobStatusOf("j", {first, second}), kNow),
             Catch::StartsWith("job 'j' has ended: failed (exit code 3)"));
  const JobStatus failed = jobStatusOf("j", {first, second});
  CHECK(outcomeCode(failed) == 3);
  CHECK(renderJson(failed, kNow)["exit_code"] == 3);
  CHECK(renderJson(failed, kNow)["state"] == "ended");
  CHECK_THAT(renderText(failed, kNow), Catch::Contains("node 1 on host-b (10.0.0.2), agent pid 101: finished, exit code 3"));
  // One node still running: not ended.
  CHECK_FALSE(ended(jobStatusOf("j", {first, node(1, "host-b")})));
  CHECK_FALSE(ended(jobStatusOf("j", {})));
}

TEST_CASE("status: a node silent for long is shown as possibly gone, a finished one never", "[status]") {
  AgentSnapshot silent = node(0, "host-a");
  silent.updatedAt = kNow - 40;
  CHECK_THAT(renderText(jobStatusOf("j", {silent}), kNow),
             Catch::Contains("agent pid 100: running (no update for 40 s: the agent may be gone)"));
  CHECK(renderJson(jobStatusOf("j", {silent}), kNow)["nodes"][0]["stale"] == true);
  silent.phase = AgentPhase::kFinished;
  CHECK(renderJson(jobStatusOf("j", {silent}), kNow)["nodes"][0]["stale"] == false);
}

TEST_CASE("status: an earlier run of the same run id on a store that outlived it is left out", "[status]") {
  AgentSnapshot earlier = node(0, "host-old", AgentPhase::kFinished);
  earlier.updatedAt = 900;  // ended before the running agents started (1000)
  AgentSnapshot leftLater = node(1, "host-left", AgentPhase::kFinished);
  leftLater.updatedAt = 1500;  // this job's: it finished while the others ran
  const JobStatus status = jobStatusOf("j", {earlier, leftLater, node(0, "host-a")});
  REQUIRE(status.nodes.size() == 2);
  CHECK(status.nodes[0].hostname == "host-a");
  CHECK(status.nodes[1].hostname == "host-left");
  // Every node finished: an ended job, all kept.
  CHECK(jobStatusOf("j", {earlier, leftLater}).nodes.size() == 2);
}

TEST_CASE("status text: bytes from the store are escaped before they are printed", "[status]") {
  AgentSnapshot hostile = node(0, "evil\x1b[2J\nhost");
  hostile.lastFailure = failure(0, 1, "line\x07one\nline two");
  const std::string text = renderText(jobStatusOf("run\x1b", {hostile}), kNow);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  // Only the line ends the text itself writes.
  CHECK(std::count(text.begin(), text.end(), '\n') == 5);
}

TEST_CASE("status: the published snapshot stays within its bound, the failure shortened first", "[status]") {
  AgentSnapshot big = node(0, "host-a");
  big.lastFailure = failure(0, 1, std::string(200000, 'x'));
  std::string text = boundedSnapshotText(big);
  CHECK(text.size() <= kMaxSnapshotBytes);
  AgentSnapshot read = agentSnapshotFromJson(json::parse(text));
  CHECK(read.workers.size() == 2);
  CHECK(read.lastFailure->message.size() < 2000);
  // Thousands of workers: some left out, still a snapshot.
  for (int i = 0; i < 4000; ++i) big.workers.push_back(big.workers.front());
  text = boundedSnapshotText(big);
  CHECK(text.size() <= kMaxSnapshotBytes);
  CHECK(agentSnapshotFromJson(json::parse(text)).workers.size() < big.workers.size());
  // The exit code of a finished agent round-trips.
  big.exitCode = 7;
  big.workers.resize(1);
  CHECK(agentSnapshotFromJson(json::parse(boundedSnapshotText(big))).exitCode == 7);
}

TEST_CASE("status publisher: the newest snapshot under the node's key, a rejoin moves it", "[status]") {
  ddprun::rendezvous::HashStore store;
  InProcessStoreBackend backend(store);
  const MembershipKeys keys("job-7");
  StatusPublisher publisher(backend, "job-7", 1s);
  AgentSnapshot snapshot = node(0, "host-a");
  publisher.publish(snapshot, -1);  // not a member yet: nothing
  for (int round = 0; round < 50; ++round) {
    snapshot.round = round;
    publisher.publish(snapshot, 4);
  }
  snapshot.round = 77;
  snapshot.phase = AgentPhase::kFinished;
  snapshot.exitCode = 0;
  // The final one is written before publishLast returns, after whatever came first.
  REQUIRE(publisher.publishLast(snapshot, 5, 2s));
  CHECK_FALSE(store.check({keys.status(4)}));  // the old member's key went with the rejoin
  const AgentSnapshot read = agentSnapshotFromJson(json::parse(store.get(keys.status(5))));
  CHECK(read.round == 77);
  CHECK(read.phase == AgentPhase::kFinished);
  // Nothing after the last one.
  snapshot.round = 78;
  publisher.publish(snapshot, 5);
  std::this_thread::sleep_for(20ms);
  CHECK(agentSnapshotFromJson(json::parse(store.get(keys.status(5)))).round == 77);
}

TEST_CASE("status options: the agent's rendezvous rules, c10d unless given, nothing else taken", "[status]") {
  const std::map<std::string, std::string> none;
  CommandLine parsed = parseRendezvousOptions(
      "ddprun status", {"--rdzv-endpoint", "127.0.0.1:29555", "--rdzv_id=job-7"}, none);
  CHECK(parsed.config.rdzv.backend == RdzvBackend::kC10d);
  CHECK(parsed.config.rdzv.host == "127.0.0.1");
  CHECK(parsed.config.rdzv.port == 29555);
  CHECK(parsed.config.rdzv.runId == "job-7");
  // PET_RDZV_* as for the agent; a job's other PET_ variables say nothing here.
  parsed = parseRendezvousOptions("ddprun status", {},
                                  {{"PET_RDZV_ENDPOINT", "127.0.0.1:29556"}, {"PET_RDZV_ID", "env-job"},
                                   {"PET_STANDALONE", "1"}, {"PET_NNODES", "banana"}});
  CHECK(parsed.config.rdzv.port == 29556);
  CHECK(parsed.config.rdzv.runId == "env-job");
  CHECK_FALSE(parsed.config.rdzv.standalone);
  CHECK_THROWS_WITH(parseRendezvousOptions("ddprun status", {"--nproc-per-node", "2"}, none),
                    Catch::Contains("ddprun status does not take --nproc-per-node"));
  CHECK_THROWS_WITH(parseRendezvousOptions("ddprun status", {"train.py"}, none),
                    Catch::Contains("takes no argument 'train.py'"));
  CHECK_THROWS_WITH(parseRendezvousOptions("ddprun status", {"--rdzv-backend", "zookeeper"}, none),
                    Catch::Contains("is not a rendezvous backend"));
  CHECK_THROWS_WITH(parseRendezvousOptions("ddprun status", {"--rdzv-endpoint", "h:99999"}, none),
                    Catch::Contains("99999"));
}
