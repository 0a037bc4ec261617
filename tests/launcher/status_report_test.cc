// `ddprun status` without a job: the text and JSON rendered from fixed snapshots (ended, stale,
// the last failure, escaping), the bound on a published snapshot, the publisher over the
// in-process store (newest only, a rejoin moving the key, the final write), and the rendezvous
// options read by the agent's rules. Milliseconds, no process.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/cli.h"
#include "cli/rendezvous_options.h"
#include "core/agent_snapshot.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/hash_store.h"
#include "membership/membership_keys.h"
#include "membership/status_publisher.h"
#include "status/job_status.h"
#include "status/status_command.h"
#include "stores/store_backend.h"

using namespace ddprun::launcher;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr double kNow = 2000;

// Every control (C0 but the line ends given, DEL, C1) and bidi control in `text`, as "U+XXXX at
// N" each: what a terminal would act on or reorder. Empty when there is none.
std::string unsafeIn(const std::string& text, bool lineEndsAllowed) {
  std::string found;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto next = [&](std::size_t k) {
      return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
    };
    unsigned point = 0;
    if ((byte < 0x20 && !(lineEndsAllowed && byte == '\n')) || byte == 0x7f) {
      point = byte;
    } else if (byte == 0xC2 && next(1) >= 0x80 && next(1) <= 0x9F) {
      point = next(1);
    } else if (byte == 0xD8 && next(1) == 0x9C) {
      point = 0x061C;
    } else if (byte == 0xE2 && next(1) == 0x80 &&
               ((next(2) >= 0xAA && next(2) <= 0xAE) || next(2) == 0x8E || next(2) == 0x8F)) {
      point = 0x2000 + (next(2) - 0x80);
    } else if (byte == 0xE2 && next(1) == 0x81 && next(2) >= 0xA6 && next(2) <= 0xA9) {
      point = 0x2040 + (next(2) - 0x80);
    } else if (byte >= 0x80 && byte < 0xC0) {
      continue;  // a continuation byte of a character checked at its lead
    } else if (byte >= 0x80 && (byte < 0xC2 || byte > 0xF4)) {
      point = byte;  // no UTF-8 lead: an 8-bit terminal reads 0x80..0x9F as C1
    }
    if (point != 0 || (byte == 0 && !lineEndsAllowed))
      found += fmt::format("U+{:04X} at {}; ", point, i);
  }
  return found;
}

// A value from the store with every kind of character a terminal acts on or reorders: ESC (a
// screen clear), BEL, CR, DEL, a newline, C1 CSI (U+009B), U+202E and the other bidi controls, a
// byte that is no UTF-8, and plain UTF-8 text that must stay readable.
const std::string kHostile =
    "x\x1b[2J\x07\r\x7f\nforged line\xc2\x9b"
    "31m\xe2\x80\xae"
    "gnp.exe\xe2\x81\xa6\xe2\x80\x8f\xd8\x9c\xff \xe6\xbc\xa2";

AgentSnapshot node(int groupRank, const std::string& host,
                   AgentPhase phase = AgentPhase::kRunning) {
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
  CHECK(value["nodes"][1]["workers"][1] == json{{"rank", 3},
                                                {"local_rank", 1},
                                                {"pid", 5003},
                                                {"state", "running"},
                                                {"started_at", kNow - 75}});
  CHECK(value["last_failure"]["rank"] == 3);
  CHECK(value["last_failure"]["reason"] == "exitcode 3: ValueError: boom");
  // The nodes read back as snapshots: one form, published and shown.
  CHECK(agentSnapshotFromJson(value["nodes"][0]).hostname == "host-a");
}

TEST_CASE("status: the spares waiting beside the count wanted, fewer than wanted said",
          "[status][spares]") {
  AgentSnapshot first = node(0, "host-a");
  AgentSnapshot second = node(1, "host-b");
  first.sparesWanted = second.sparesWanted = 2;
  AgentSnapshot spare = node(-1, "host-c", AgentPhase::kJoining);
  spare.round = -1;
  spare.nodes = 0;
  spare.workers.clear();
  spare.spare = true;
  spare.sparesWanted = 2;
  const JobStatus status = jobStatusOf("job-7", {spare, second, first});
  const std::string text = renderText(status, kNow);
  CHECK_THAT(text, Catch::StartsWith("job 'job-7': round 1, restarts 1 of 3, 2 nodes\n"
                                     "spares: 1 waiting (host-c), 2 wanted (fewer than wanted)\n"));
  CHECK_THAT(text, Catch::Contains("spare on host-c (10.0.0.0), agent pid 99: joining\n"));
  const json value = renderJson(status, kNow);
  CHECK(value["spares"] == json{{"wanted", 2}, {"waiting", 1}, {"hosts", {"host-c"}}});
  CHECK(value["nodes"][2]["spare"] == true);
  CHECK(agentSnapshotFromJson(value["nodes"][2]).spare);
  CHECK(agentSnapshotFromJson(value["nodes"][2]).sparesWanted == 2);
  // As many as wanted: no remark; a job that wants none and has none: no line.
  first.sparesWanted = second.sparesWanted = spare.sparesWanted = 1;
  CHECK_THAT(renderText(jobStatusOf("job-7", {spare, second, first}), kNow),
             Catch::Contains("spares: 1 waiting (host-c), 1 wanted\n"));
  CHECK_THAT(renderText(jobStatusOf("job-7", {node(0, "host-a")}), kNow),
             !Catch::Contains("spares"));
  // A spare that went silent is not counted as waiting.
  spare.updatedAt = kNow - 60;
  CHECK(sparePool(jobStatusOf("job-7", {spare, first}), kNow).waiting.empty());
}

TEST_CASE("status: a job whose every node finished has ended, with its outcome", "[status]") {
  AgentSnapshot first = node(0, "host-a", AgentPhase::kFinished);
  AgentSnapshot second = node(1, "host-b", AgentPhase::kFinished);
  first.exitCode = 0;
  second.exitCode = 0;
  CHECK(ended(jobStatusOf("j", {first, second})));
  CHECK(outcomeCode(jobStatusOf("j", {first, second})) == 0);
  CHECK_THAT(
      renderText(jobStatusOf("j", {first, second}), kNow),
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
  CHECK_THAT(renderText(failed, kNow),
             Catch::Contains("node 1 on host-b (10.0.0.2), agent pid 101: finished, exit code 3"));
  // One node still running: not ended.
  CHECK_FALSE(ended(jobStatusOf("j", {first, node(1, "host-b")})));
  CHECK_FALSE(ended(jobStatusOf("j", {})));
}

TEST_CASE(
    "status: the restart policy's words: the last failure's class, a back-off's wait, a node "
    "left out and why, escaped",
    "[status]") {
  AgentSnapshot waiting = node(0, "host-a");
  waiting.lastFailure = failure(3, 1500, "ValueError: boom");
  waiting.lastFailureClass = FailureClass::kWorker;
  waiting.restartAt = kNow + 12;
  AgentSnapshot leaving = node(1, "host-b", AgentPhase::kFinished);
  leaving.exitCode = 82;
  leaving.lastFailureClass = FailureClass::kMachine;
  leaving.leftOut = "node 1 (host-b\x1b[2J) was the root cause of the last 3 failures in a row";
  const JobStatus status = jobStatusOf("job-7", {waiting, leaving});

  const std::string text = renderText(status, kNow);
  CHECK_THAT(text,
             Catch::Contains("agent pid 100: running\n  restart 2 in 12 s (back-off)\n  rank 0"));
  CHECK_THAT(text, Catch::Contains("\n  left out of the job: node 1 (host-b\\x1b[2J) was the root "
                                   "cause of the last 3 failures in a row\n"));
  CHECK(text.find('\x1b') == std::string::npos);
  // The class the node holding the failure gave it; node 1's is about no failure it shows.
  CHECK_THAT(text, Catch::EndsWith("on host-b: exitcode 3: ValueError: boom (worker failure)\n"));

  const json value = renderJson(status, kNow);
  CHECK(value["nodes"][0]["failure_class"] == "worker");
  CHECK(value["nodes"][0]["restart_at"] == kNow + 12);
  CHECK(value["nodes"][1]["failure_class"] == "machine");
  CHECK(value["nodes"][1]["left_out"] == *leaving.leftOut);
  // One form: what status shows is what the agent published.
  const AgentSnapshot back = agentSnapshotFromJson(value["nodes"][1]);
  CHECK(back.lastFailureClass == FailureClass::kMachine);
  CHECK(back.leftOut == leaving.leftOut);
  CHECK(agentSnapshotFromJson(value["nodes"][0]).restartAt == kNow + 12);
  // /healthz has none of the reason's text.
  CHECK_FALSE(toHealthJson(leaving).contains("left_out"));
}

TEST_CASE("status: a node silent for long is shown as possibly gone, a finished one never",
          "[status]") {
  AgentSnapshot silent = node(0, "host-a");
  silent.updatedAt = kNow - 40;
  CHECK_THAT(renderText(jobStatusOf("j", {silent}), kNow),
             Catch::Contains("agent pid 100: running (no update for 40 s: the agent may be gone)"));
  CHECK(renderJson(jobStatusOf("j", {silent}), kNow)["nodes"][0]["stale"] == true);
  silent.phase = AgentPhase::kFinished;
  CHECK(renderJson(jobStatusOf("j", {silent}), kNow)["nodes"][0]["stale"] == false);
}

TEST_CASE("status: an earlier run of the same run id on a store that outlived it is left out",
          "[status]") {
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

TEST_CASE(
    "status text and JSON: no control or bidi character from any store field reaches the terminal",
    "[status]") {
  // Every text a snapshot carries, hostile: the host name, the address, the run id (the user's
  // and the snapshot's), the failure's host, message, hang detail, OOM line and files, and a key
  // that is no snapshot.
  AgentSnapshot first = node(0, kHostile);
  first.address = kHostile;
  first.runId = kHostile;
  WorkerFailure hostile = failure(1, 1500, kHostile);
  hostile.host = kHostile;
  hostile.hang = HangKind::kNoProgress;
  hostile.hangDetail = kHostile;
  hostile.oom = kHostile;
  hostile.errorFile = kHostile;
  first.lastFailure = hostile;
  JobStatus status = jobStatusOf(kHostile, {first, node(1, "host-b")});
  status.unreadable.push_back(
      {"ddprun/r/status/" + kHostile, UnreadableKey::Why::kNotASnapshot, 0});
  status.unreadable.push_back(
      {"ddprun/r/status/" + kHostile, UnreadableKey::Why::kTooLarge, 2 << 20});

  const std::string text = renderText(status, kNow);
  CHECK(unsafeIn(text, /*lineEndsAllowed=*/true) == "");
  // One line per node, worker, failure and key set aside: none forged by a newline in a value.
  CHECK(std::count(text.begin(), text.end(), '\n') == 1 + 2 * 3 + 1 + 2);
  CHECK_THAT(text, Catch::Contains("\\u202egnp.exe\\u2066\\u200f\\u061c\\xff \xe6\xbc\xa2"));

  const std::string jsonText = renderJsonText(status, kNow);
  CHECK(unsafeIn(jsonText, /*lineEndsAllowed=*/false) == "");
  CHECK(jsonText.find('\n') == std::string::npos);
  // Valid JSON of the same values: a program reads each field back exactly (the byte that is no
  // UTF-8 as U+FFFD), and the plain UTF-8 text is kept readable, not escaped.
  const json value = json::parse(jsonText);
  const std::string expected = ddprun::common::validUtf8(kHostile);
  CHECK(value["run_id"] == expected);
  CHECK(value["nodes"][0]["hostname"] == expected);
  CHECK(value["nodes"][0]["addr"] == expected);
  CHECK(value["nodes"][0]["run_id"] == expected);
  CHECK(value["last_failure"]["host"] == expected);
  CHECK(value["last_failure"]["message"] == expected);
  CHECK(value["unreadable"][0]["key"] == "ddprun/r/status/" + expected);
  CHECK(value["unreadable"][1] ==
        json{{"key", "ddprun/r/status/" + expected}, {"reason", "too_large"}, {"bytes", 2 << 20}});
  CHECK_THAT(jsonText, Catch::Contains("\\u202egnp.exe") && Catch::Contains(" \xe6\xbc\xa2"));
  // The one-line reason is the text's (escaped) form.
  CHECK(unsafeIn(value["last_failure"]["reason"].get<std::string>(), false) == "");
}

TEST_CASE(
    "status read: a value too large or not a snapshot is one node's problem, the others shown",
    "[status]") {
  ddprun::rendezvous::HashStore store;
  const MembershipKeys keys("job-7");
  store.set(keys.status(0), boundedSnapshotText(node(0, "host-a")));
  store.set(keys.status(1), std::string(kMaxSnapshotBytes + 1, '{'));
  store.set(keys.status(2), "not json");
  const JobStatus status = readJob(store, "job-7");
  REQUIRE(status.nodes.size() == 1);
  CHECK(status.nodes[0].hostname == "host-a");
  REQUIRE(status.unreadable.size() == 2);
  CHECK(status.unreadable[0].key == keys.status(1));
  CHECK(status.unreadable[0].why == UnreadableKey::Why::kTooLarge);
  CHECK(status.unreadable[0].bytes == kMaxSnapshotBytes + 1);
  CHECK(status.unreadable[1].why == UnreadableKey::Why::kNotASnapshot);
  CHECK_FALSE(status.records);  // a snapshot is there: the round records are not read
  const std::string text = renderText(status, kNow);
  CHECK_THAT(text, Catch::StartsWith("job 'job-7': round 1, restarts 1 of 3, 1 node\n"));
  CHECK_THAT(text, Catch::Contains(fmt::format(
                       "(not shown: 'ddprun/job-7/status/1' holds {} bytes, too large for a "
                       "snapshot (at most {}))\n",
                       kMaxSnapshotBytes + 1, kMaxSnapshotBytes)));
  CHECK_THAT(text,
             Catch::Contains(
                 "(not shown: 'ddprun/job-7/status/2' holds no snapshot this ddprun can read)\n"));
}

TEST_CASE(
    "status read: before any snapshot, what the round records say, and nothing at all is no job",
    "[status]") {
  ddprun::rendezvous::HashStore store;
  const MembershipKeys keys("job-7");
  CHECK_FALSE(readJob(store, "job-7").records);  // no record of the run: "no job"
  // Registered, no round yet.
  store.set(keys.node(1), "{}");
  store.set(keys.node(2), "{}");
  JobStatus status = readJob(store, "job-7");
  REQUIRE(status.records);
  CHECK(renderText(status, kNow) ==
        "job 'job-7': joining, 2 nodes registered, no round yet, no status published yet\n");
  CHECK(renderJson(status, kNow)["state"] == "joining");
  // Round 0 forming: one joiner.
  store.set(keys.currentRound(), "0");
  store.set(keys.member(0, 1), "1");
  status = readJob(store, "job-7");
  CHECK(renderText(status, kNow) ==
        "job 'job-7': round 0 forming, 1 node joined, no status published yet\n");
  // Formed: its workers are starting; the close record's count and restarts.
  store.set(keys.member(0, 2), "2");
  store.set(keys.closed(0), R"({"nodes":2,"closer":1,"restarts":0})");
  status = readJob(store, "job-7");
  CHECK(renderText(status, kNow) ==
        "job 'job-7': round 0 starting, 2 nodes joined, no status published yet\n");
  json value = renderJson(status, kNow);
  CHECK(value["state"] == "starting");
  CHECK(value["round"] == 0);
  CHECK(value["joined"] == 2);
  CHECK(value["max_restarts"].is_null());
  CHECK(value["nodes"].empty());
  // A later round after a restart, closed by a closer that listed its members.
  store.set(keys.currentRound(), "1");
  store.set(keys.member(1, 1), "1");
  store.set(keys.member(1, 2), "2");
  store.set(keys.member(1, 3), "3");
  store.set(keys.closed(1), R"({"members":[1,2],"restarts":1})");
  status = readJob(store, "job-7");
  CHECK(renderText(status, kNow) ==
        "job 'job-7': round 1 starting (restarts 1), 2 nodes joined, no status published yet\n");
  // Reading wrote nothing: no counter, no key.
  CHECK(store.listKeys().size() == 10);
}

TEST_CASE("status: the published snapshot stays within its bound, the failure shortened first",
          "[status]") {
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

TEST_CASE("status publisher: the newest snapshot under the node's key, a rejoin moves it",
          "[status]") {
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

TEST_CASE("status options: the agent's rendezvous rules, c10d unless given, nothing else taken",
          "[status]") {
  const std::map<std::string, std::string> none;
  CommandLine parsed = parseRendezvousOptions(
      "ddprun status", {"--rdzv-endpoint", "127.0.0.1:29555", "--rdzv_id=job-7"}, none);
  CHECK(parsed.config.rdzv.backend == RdzvBackend::kC10d);
  CHECK(parsed.config.rdzv.host == "127.0.0.1");
  CHECK(parsed.config.rdzv.port == 29555);
  CHECK(parsed.config.rdzv.runId == "job-7");
  // PET_RDZV_* as for the agent; a job's other PET_ variables say nothing here.
  parsed = parseRendezvousOptions("ddprun status", {},
                                  {{"PET_RDZV_ENDPOINT", "127.0.0.1:29556"},
                                   {"PET_RDZV_ID", "env-job"},
                                   {"PET_STANDALONE", "1"},
                                   {"PET_NNODES", "banana"}});
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

TEST_CASE("status: one failure's records from every node merge into one incident, in order",
          "[status][unit]") {
  Incident seen;
  seen.round = 0;
  seen.kind = IncidentKind::kWorkerFailed;
  seen.rank = 3;
  seen.groupRank = 1;
  seen.host = kHostile;
  seen.detail = "exitcode 1";
  seen.failedAt = 1500;
  seen.detectedAt = 1500;
  seen.decidedAt = 1500.2;
  seen.outcome = IncidentOutcome::kRestarted;
  seen.failureClass = FailureClass::kWorker;
  seen.runningAt = 1500.5;
  seen.progressAt = 1502;
  seen.closed = true;
  Incident other = seen;  // the other node: it learnt later, and its workers ran later
  other.detectedAt = 1500.1;
  other.decidedAt = 1500.3;
  other.runningAt = 1500.9;
  other.progressAt = 1501.5;
  Incident earlier = seen;  // a failure of the round before, on one node only
  earlier.round = 0;
  earlier.rank = 0;
  earlier.failedAt = 1400;
  earlier.detectedAt = 1400;
  earlier.runningAt.reset();
  earlier.progressAt.reset();
  earlier.closed = false;
  AgentSnapshot a = node(0, "host-a");
  AgentSnapshot b = node(1, "host-b");
  a.incidents = {earlier, seen};
  b.incidents = {other};
  const JobStatus status = jobStatusOf("job-7", {a, b});
  const std::vector<Incident> merged = jobIncidents(status);
  REQUIRE(merged.size() == 2);
  CHECK(merged[0].failedAt == 1400);  // oldest first
  const Incident& one = merged[1];
  CHECK(one.detectedAt == 1500);
  CHECK(*one.decidedAt == Approx(1500.2));
  CHECK(*one.runningAt == Approx(1500.9));  // the group runs once every node's workers do
  CHECK(*one.progressAt == Approx(1501.5));
  CHECK(*one.lostSeconds() == Approx(1.5));
  const std::string text = renderText(status, kNow);
  CHECK_THAT(text, Catch::Contains("incidents (2, oldest first"));
  CHECK_THAT(text, Catch::Contains("worker_failed, rank 3 on "));
  CHECK_THAT(text, Catch::Contains("(exitcode 1; worker, restarted): detected +0.00 s, decided "
                                   "+0.20 s, running +0.90 s, progress +1.50 s; 1.50 s lost"));
  CHECK_THAT(text, Catch::Contains("progress -; open"));
  CHECK(unsafeIn(text, true).empty());
  const json value = renderJson(status, kNow);
  REQUIRE(value.at("incidents").size() == 2);
  CHECK(value.at("incidents")[1].at("lost_s").get<double>() == Approx(1.5));
  CHECK(value.at("incidents")[1].at("outcome") == "restarted");
}

TEST_CASE("status: a published snapshot carries its incidents, read back whole", "[status][unit]") {
  AgentSnapshot snapshot = node(0, "host-a");
  Incident incident;
  incident.round = 2;
  incident.kind = IncidentKind::kNodeLost;
  incident.groupRank = 1;
  incident.host = "host-b";
  incident.failedAt = incident.detectedAt = 1900;
  incident.runningAt = 1901;
  snapshot.incidents = {incident};
  const AgentSnapshot back = agentSnapshotFromJson(json::parse(boundedSnapshotText(snapshot)));
  REQUIRE(back.incidents.size() == 1);
  CHECK(back.incidents[0].kind == IncidentKind::kNodeLost);
  CHECK(back.incidents[0].host == "host-b");
  CHECK(*back.incidents[0].runningAt == 1901);
  CHECK_FALSE(back.incidents[0].progressAt);
  json forged = toJson(snapshot);
  forged["incidents"][0]["kind"] = "meteor";
  CHECK_THROWS_AS(agentSnapshotFromJson(forged), std::invalid_argument);
}
