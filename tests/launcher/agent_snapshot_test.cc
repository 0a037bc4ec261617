// The snapshot's one JSON form: what an agent publishes is what `ddprun status` reads back, and
// what is not a snapshot is refused whole, naming the field.
#include "core/agent_snapshot.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace ddprun::launcher;
using nlohmann::json;

namespace {

AgentSnapshot sample() {
  AgentSnapshot snapshot;
  snapshot.runId = "job-7";
  snapshot.round = 3;
  snapshot.restarts = 1;
  snapshot.maxRestarts = 4;
  snapshot.address = "10.0.0.2";
  snapshot.hostname = "host-b";
  snapshot.agentPid = 4242;
  snapshot.groupRank = 1;
  snapshot.nodes = 2;
  snapshot.phase = AgentPhase::kRunning;
  snapshot.startedAt = 1000.5;
  snapshot.updatedAt = 1010.25;
  WorkerSnapshot worker;
  worker.rank = 2;
  worker.localRank = 0;
  worker.pid = 5000;
  worker.startedAt = 1001;
  worker.lastHeartbeat = 1009.5;
  snapshot.workers.push_back(worker);
  worker.rank = 3;
  worker.localRank = 1;
  worker.pid = 5001;
  worker.state = WorkerState::kFailed;
  worker.lastHeartbeat.reset();
  worker.exitCode = 137;
  snapshot.workers.push_back(worker);
  WorkerFailure failure;
  failure.rank = 3;
  failure.exitCode = 0;
  failure.signal = 9;
  failure.message = "killed";
  failure.traceback = std::string(100000, 't');
  failure.stack = {"a", "b"};
  snapshot.lastFailure = failure;
  return snapshot;
}

}  // namespace

TEST_CASE("a snapshot survives its JSON form, without the failure's bulky parts",
          "[snapshot][unit]") {
  const json value = toJson(sample());
  CHECK(value.at("run_id") == "job-7");
  CHECK(value.at("state") == "running");
  CHECK(value.at("healthy") == true);
  CHECK(value.at("workers").at(1).at("state") == "failed");
  CHECK_FALSE(value.at("workers").at(1).contains("last_heartbeat"));
  CHECK(value.at("last_failure").at("traceback") == "");
  const AgentSnapshot back = agentSnapshotFromJson(json::parse(value.dump()));
  CHECK(back.runId == "job-7");
  CHECK(back.round == 3);
  CHECK(back.maxRestarts == 4);
  CHECK(back.address == "10.0.0.2");
  CHECK(back.phase == AgentPhase::kRunning);
  REQUIRE(back.workers.size() == 2);
  CHECK(back.workers[0].lastHeartbeat == 1009.5);
  CHECK(back.workers[1].state == WorkerState::kFailed);
  CHECK(back.workers[1].exitCode == 137);
  REQUIRE(back.lastFailure);
  CHECK(back.lastFailure->signal == 9);
  CHECK(back.lastFailure->message == "killed");
  CHECK(back.lastFailure->stack.empty());
}

TEST_CASE("a hung worker or a stopping agent is not healthy", "[snapshot][unit]") {
  AgentSnapshot snapshot = sample();
  snapshot.workers[1].state = WorkerState::kRunning;
  CHECK(healthy(snapshot));
  snapshot.workers[1].state = WorkerState::kHung;
  CHECK_FALSE(healthy(snapshot));
  snapshot.workers[1].state = WorkerState::kRunning;
  snapshot.phase = AgentPhase::kStopping;
  CHECK_FALSE(healthy(snapshot));
  snapshot.phase = AgentPhase::kJoining;
  CHECK(healthy(snapshot));
}

TEST_CASE("what is not a snapshot is refused, naming the field", "[snapshot][unit]") {
  json value = toJson(sample());
  CHECK_THROWS_WITH(agentSnapshotFromJson(json::array()), Catch::Contains("JSON object"));
  json missing = value;
  missing.erase("round");
  CHECK_THROWS_WITH(agentSnapshotFromJson(missing), Catch::Contains("'round'"));
  json wrongType = value;
  wrongType["restarts"] = "one";
  CHECK_THROWS_WITH(agentSnapshotFromJson(wrongType), Catch::Contains("'restarts'"));
  json unknownState = value;
  unknownState["state"] = "dancing";
  CHECK_THROWS_AS(agentSnapshotFromJson(unknownState), std::invalid_argument);
  json badWorker = value;
  badWorker["workers"][0]["state"] = "?";
  CHECK_THROWS_AS(agentSnapshotFromJson(badWorker), std::invalid_argument);
}

TEST_CASE("/healthz's view: states, counts and times, no failure text, path or host name",
          "[snapshot][unit]") {
  AgentSnapshot snapshot = sample();
  snapshot.lastFailure->message = "KeyError: 'password=hunter2'";
  snapshot.lastFailure->errorFile = "/scratch/ddprun-secret-dir/error.json";
  snapshot.lastFailure->evidenceFile = "/scratch/ddprun-secret-dir/stacks.txt";
  snapshot.lastFailure->host = "host-b";
  snapshot.lastFailure->hangDetail = "no progress reported for 30.0 s";
  snapshot.lastFailure->oom = "the kernel's OOM killer (cgroup /kubepods/x)";
  snapshot.lastFailure->stderrTail = {"token=abc"};
  const json value = toHealthJson(snapshot);
  const std::string text = value.dump();
  for (const char* secret : {"hunter2", "KeyError", "/scratch", "ddprun-secret-dir", "host-b",
                             "10.0.0.2", "no progress", "cgroup", "token=abc"}) {
    INFO(secret);
    CHECK(text.find(secret) == std::string::npos);
  }
  CHECK(value.at("run_id") == "job-7");
  CHECK(value.at("state") == "running");
  CHECK(value.at("healthy") == true);
  CHECK(value.at("round") == 3);
  CHECK(value.at("restarts") == 1);
  CHECK(value.at("nodes") == 2);
  CHECK(value.at("agent_pid") == 4242);
  CHECK(value.at("workers") == toJson(snapshot).at("workers"));  // the workers' one form
  CHECK(value.at("last_failure") == json{{"rank", 3},
                                         {"local_rank", -1},
                                         {"group_rank", -1},
                                         {"exit_code", 137},
                                         {"signal", 9},
                                         {"observed_at", 0.0},
                                         {"hang", "none"},
                                         {"oom", true}});
  CHECK_FALSE(value.contains("addr"));
  CHECK_FALSE(value.contains("hostname"));
  CHECK_FALSE(value.contains("exit_code"));
  CHECK_FALSE(value.contains("spare"));
  AgentSnapshot spare = sample();
  spare.phase = AgentPhase::kJoining;
  spare.spare = true;
  spare.sparesWanted = 2;
  CHECK(toHealthJson(spare).at("spare") == true);
  CHECK_FALSE(toHealthJson(spare).contains("spares_wanted"));

  snapshot.lastFailure.reset();
  snapshot.phase = AgentPhase::kFinished;
  snapshot.exitCode = 1;
  const json finished = toHealthJson(snapshot);
  CHECK(finished.at("last_failure").is_null());
  CHECK(finished.at("exit_code") == 1);
  CHECK(finished.at("healthy") == false);
  // `ddprun status` keeps the whole story.
  CHECK(toJson(sample()).at("last_failure").at("message") == "killed");
}

TEST_CASE("the health gate's exclusions travel in the snapshot, and /healthz has no reason",
          "[snapshot][unit][health]") {
  AgentSnapshot snapshot = sample();
  CHECK_FALSE(toJson(snapshot).contains("exclusions"));  // none: nothing said
  snapshot.exclusions = 2;
  snapshot.lastExclusion = "--health-check: exited with 1 (secret-word)";
  snapshot.healthRetryAt = 1767225660.5;
  const json value = toJson(snapshot);
  CHECK(value.at("exclusions") == 2);
  CHECK(value.at("last_exclusion") == "--health-check: exited with 1 (secret-word)");
  const AgentSnapshot back = agentSnapshotFromJson(value);
  CHECK(back.exclusions == 2);
  CHECK(back.lastExclusion == snapshot.lastExclusion);
  CHECK(back.healthRetryAt == snapshot.healthRetryAt);
  const json health = toHealthJson(snapshot);
  CHECK(health.at("exclusions") == 2);
  CHECK(health.at("health_retry_at") == 1767225660.5);
  CHECK(health.dump().find("secret-word") == std::string::npos);
}
