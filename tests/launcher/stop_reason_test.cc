// Why a round stops (core/stop_reason.h), as the agents of one job tell each other through the
// store, and how a run's ending becomes ddprun's exit status (core/exit_codes.h). The stop
// record is read by agents of other versions and can be written by anyone who reaches a store
// without a token: what is not one of ours must read as nothing, never as a guess.
#include "core/stop_reason.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/exit_codes.h"
#include "core/restart_policy.h"
#include "core/worker_failure.h"

namespace {

using namespace ddprun::launcher;
using nlohmann::json;

WorkerFailure sampleFailure() {
  WorkerFailure failure;
  failure.rank = 5;
  failure.localRank = 1;
  failure.groupRank = 2;
  failure.host = "host-c";
  failure.pid = 31337;
  failure.exitCode = 3;
  failure.observedAt = 1767225600.25;
  failure.errorFile = "/tmp/ddprun-job-1/attempt_0/1/error.json";
  failure.errorFileFound = true;
  failure.message = "ValueError: boom";
  failure.traceback =
      "Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: boom\n";
  failure.errorTimestamp = 1767225599.0;
  failure.hang = HangKind::kNoProgress;
  failure.hangDetail = "no progress reported for 30.0 s (--hang-timeout 30)";
  failure.oom = "killed by the kernel's OOM killer";
  failure.stack = {"File \"train.py\", line 9, in step", "  loss.backward()"};
  failure.evidenceFile = "/tmp/ddprun-job-1/stacks/31337.txt";
  failure.stderrTail = {"warning: x", "ValueError: boom"};
  return failure;
}

void checkSameFailure(const WorkerFailure& back, const WorkerFailure& sent) {
  CHECK(back.rank == sent.rank);
  CHECK(back.localRank == sent.localRank);
  CHECK(back.groupRank == sent.groupRank);
  CHECK(back.host == sent.host);
  CHECK(back.pid == sent.pid);
  CHECK(back.exitCode == sent.exitCode);
  CHECK(back.signal == sent.signal);
  CHECK(back.observedAt == sent.observedAt);
  CHECK(back.errorFile == sent.errorFile);
  CHECK(back.errorFileFound == sent.errorFileFound);
  CHECK(back.message == sent.message);
  CHECK(back.traceback == sent.traceback);
  CHECK(back.errorTimestamp == sent.errorTimestamp);
  CHECK(back.hang == sent.hang);
  CHECK(back.hangDetail == sent.hangDetail);
  CHECK(back.oom == sent.oom);
  CHECK(back.stack == sent.stack);
  CHECK(back.evidenceFile == sent.evidenceFile);
  CHECK(back.stderrTail == sent.stderrTail);
}

TEST_CASE("every kind an agent writes reads back the same", "[stop_reason]") {
  struct Row {
    const char* what;
    StopReason stop;
    const char* wireName;
  };
  const std::vector<Row> rows = {
      {"a worker failed", StopReason::workerFailed(sampleFailure(), 4), "failure"},
      {"a node was lost", StopReason::nodeLost(7, 1, "host-b"), "node_lost"},
      {"a node joined", StopReason::nodeJoined(9, "host-new"), "node_joined"},
      {"a node left", StopReason::nodeLeft(3, 0, "host-a", SIGTERM), "node_left"},
      {"the store's host left",
       StopReason::nodeLeft(1, 0, "host-store", SIGINT, /*storeHost=*/true), "node_left"},
      {"every node is done", StopReason::done(), "done"},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    const std::string text = row.stop.serialize();
    // The kind names are the wire format every version of the agent reads.
    CHECK(json::parse(text).at("kind") == row.wireName);
    CHECK(std::string(stopKindName(row.stop.kind)) == row.wireName);
    const auto back = StopReason::parse(text);
    REQUIRE(back);
    CHECK(back->kind == row.stop.kind);
    CHECK(back->node == row.stop.node);
    CHECK(back->groupRank == row.stop.groupRank);
    CHECK(back->host == row.stop.host);
    CHECK(back->signal == row.stop.signal);
    CHECK(back->storeHost == row.stop.storeHost);
    REQUIRE(back->failure.has_value() == row.stop.failure.has_value());
    if (back->failure) checkSameFailure(*back->failure, *row.stop.failure);
  }
}

TEST_CASE("a worker failure names its node by the failure's group rank and host", "[stop_reason]") {
  const StopReason stop = StopReason::workerFailed(sampleFailure(), 4);
  CHECK(stop.kind == StopKind::kWorkerFailed);
  CHECK(stop.node == 4);
  CHECK(stop.groupRank == 2);
  CHECK(stop.host == "host-c");
}

TEST_CASE("a host name that is not UTF-8 still makes a stop record", "[stop_reason]") {
  const StopReason lost = StopReason::nodeLost(7, 1, "host\xff");  // gethostname() returns bytes
  const auto back = StopReason::parse(lost.serialize());  // did not throw json's type_error 316
  REQUIRE(back);
  CHECK(back->host == "host\xEF\xBF\xBD");
}

TEST_CASE("the local-only kinds are never written to the store", "[stop_reason]") {
  // Another agent reading "the store was lost" or "I was signalled" would act on news that is not
  // its own.
  CHECK_THROWS_AS(StopReason::storeLost("connection reset").serialize(), std::logic_error);
  CHECK_THROWS_AS(StopReason::signalled(SIGTERM).serialize(), std::logic_error);
  CHECK(std::string(stopKindName(StopKind::kStoreLost)) == "store_lost");
  CHECK(std::string(stopKindName(StopKind::kSignalled)) == "signalled");
}

TEST_CASE("a stop record that is not one of ours reads as nothing", "[stop_reason]") {
  const std::string text = GENERATE(
      as<std::string>{},
      // not JSON, or not an object
      "", "garbage", "{", "null", "[]", "\"done\"", "7", R"([{"kind": "done"}])",
      R"({"kind": "done"} trailing)",
      // no kind, or not one we know
      "{}", R"({"node": 1})", R"({"kind": 5})", R"({"kind": null})", R"({"kind": "exploded"})",
      R"({"kind": "DONE"})", R"({"kind": "unknown"})",
      // kinds that only ever live inside one agent
      R"({"kind": "store_lost"})", R"({"kind": "signalled", "signal": 15})",
      // a failure without its failure
      R"({"kind": "failure", "node": 1})", R"({"kind": "failure", "failure": null})",
      R"({"kind": "failure", "failure": "boom"})", R"({"kind": "failure", "failure": [1]})",
      // fields of the wrong type
      R"({"kind": "node_lost", "node": "3"})", R"({"kind": "node_lost", "group_rank": []})",
      R"({"kind": "node_lost", "host": 7})", R"({"kind": "node_left", "signal": "SIGTERM"})",
      R"({"kind": "node_left", "store_host": "yes"})",
      R"({"kind": "failure", "failure": {"rank": "0"}})",
      R"({"kind": "failure", "failure": {"message": 1}})",
      R"({"kind": "failure", "failure": {"stack": "x"}})");
  INFO("record: " << text);
  CHECK_FALSE(StopReason::parse(text));
}

TEST_CASE("a stop record from a newer agent keeps what this one understands", "[stop_reason]") {
  // Agents of one job may be upgraded one at a time: fields this version does not know are
  // ignored, not a reason to call the record corrupt.
  const auto stop = StopReason::parse(
      R"({"kind": "node_lost", "node": 4, "group_rank": 1, "host": "b", "why": "x"})");
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kNodeLost);
  CHECK(stop->node == 4);
  CHECK(stop->groupRank == 1);
  CHECK(stop->host == "b");
  // Missing fields take their "unknown" values.
  const auto bare = StopReason::parse(R"({"kind": "node_joined"})");
  REQUIRE(bare);
  CHECK(bare->node == -1);
  CHECK(bare->groupRank == -1);
  CHECK(bare->host.empty());
}

TEST_CASE("only a worker failure costs a restart", "[stop_reason]") {
  struct Row {
    StopReason stop;
    bool costs;
  };
  const std::vector<Row> rows = {
      {StopReason::workerFailed(sampleFailure(), 1), true},
      {StopReason::nodeLost(1, 0, "a"), false},
      {StopReason::nodeJoined(2, "b"), false},
      {StopReason::nodeLeft(1, 0, "a", SIGTERM), false},
      {StopReason::done(), false},
      {StopReason::storeLost("gone"), false},
      {StopReason::signalled(SIGINT), false},
  };
  for (const Row& row : rows) {
    INFO(stopKindName(row.stop.kind));
    CHECK(row.stop.costsRestart() == row.costs);
    for (int restarts : {0, 1, 5}) {
      RestartHistory history;
      history.restarts = restarts;
      CHECK(historyAfter(history, row.stop).restarts == restarts + (row.costs ? 1 : 0));
    }
  }
}

TEST_CASE("messages name the node a stop concerns", "[stop_reason]") {
  CHECK(StopReason::nodeLost(7, 1, "host-b").nodeText() == "node 1 (host-b)");
  CHECK(StopReason::nodeLost(7, 0, "").nodeText() == "node 0");
  // A joining node has no group rank yet.
  CHECK(StopReason::nodeJoined(9, "host-new").nodeText() == "a node (host-new)");
  CHECK(StopReason::nodeJoined(9, "").nodeText() == "a node");
}

TEST_CASE("a forged host name is one line, escaped, when a message names its node",
          "[stop_reason]") {
  // A stop record read from the store: whoever can write it (anyone, without a token) chooses the
  // host name, and the record must still read back, its host raw, and show escaped.
  const std::string line =
      "[2026-01-01 00:00:00.000] [ddprun] [info] every worker of every node exited 0";
  const std::string host = "node-z\n" + line + "\x1b]0;owned\x07\x1b[2J\r";
  const auto read = StopReason::parse(StopReason::nodeLost(7, 1, host).serialize());
  REQUIRE(read);
  CHECK(read->host == host);
  CHECK(read->nodeText() == "node 1 (node-z\\n" + line + "\\x1b]0;owned\\x07\\x1b[2J\\x0d)");
  // A long one is cut: a log line holds a bounded part of it.
  const std::string text = StopReason::nodeJoined(9, std::string(100000, 'h')).nodeText();
  CHECK(text.size() < 300);
  CHECK(text.ends_with("...)"));
}

TEST_CASE("a failure's payload crosses the store capped, keeping what tells the story",
          "[stop_reason]") {
  WorkerFailure failure = sampleFailure();
  // A megabyte of message: the exception is at its end, where a traceback names it.
  failure.message = "head-that-goes " + std::string(1 << 20, 'm') + " ValueError: the real cause";
  failure.traceback = std::string(1 << 20, 't') + "\nRuntimeError: last line";
  for (int i = 0; i < 100; ++i)
    failure.stack.push_back("frame " + std::to_string(i) + " " + std::string(1000, 's'));
  for (int i = 0; i < 100; ++i) failure.stderrTail.push_back("line " + std::to_string(i));
  const std::string text = StopReason::workerFailed(failure, 1).serialize();
  // One stop record stays small enough for every agent to read it at once.
  CHECK(text.size() < 200 * 1024);

  const auto back = StopReason::parse(text);
  REQUIRE(back);
  REQUIRE(back->failure);
  const WorkerFailure& got = *back->failure;
  CHECK(got.message.size() <= kMaxJsonText);
  CHECK(got.message.starts_with("[ddprun: " + std::to_string(failure.message.size()) +
                                " bytes, only the last ones kept]\n"));
  CHECK(got.message.ends_with("m ValueError: the real cause"));
  CHECK(got.traceback.size() <= kMaxJsonText);
  CHECK(got.traceback.ends_with("t\nRuntimeError: last line"));
  // The last 40 lines, each cut at 512 bytes.
  REQUIRE(got.stack.size() == 40);
  CHECK(got.stack.back().starts_with("frame 99 "));
  CHECK(got.stack.front().starts_with("frame 60 "));
  for (const std::string& line : got.stack) CHECK(line.size() <= 512);
  REQUIRE(got.stderrTail.size() == 40);
  CHECK(got.stderrTail.back() == "line 99");
  // Everything else arrives as it was.
  CHECK(got.rank == failure.rank);
  CHECK(got.exitCode == failure.exitCode);
  CHECK(got.hang == failure.hang);
  CHECK(got.errorTimestamp == failure.errorTimestamp);
}

TEST_CASE("a failure's text that is not UTF-8 crosses the store without breaking the record",
          "[stop_reason]") {
  // Worker output is bytes; the record is JSON, which must be valid UTF-8 to be written at all.
  WorkerFailure failure = sampleFailure();
  failure.message = "bad \xff\xfe bytes";
  failure.stderrTail = {"\xc3", "ok"};
  failure.hangDetail = "\xe2\x82";
  // A cut inside a multi-byte character: the capped tail starts on a character boundary.
  failure.traceback = std::string(1, 'x') + [] {
    std::string many;
    for (int i = 0; i < 40000; ++i) many += "\xc3\xa9";  // é
    return many;
  }();
  std::string text;
  REQUIRE_NOTHROW(text = StopReason::workerFailed(failure, 1).serialize());
  const auto back = StopReason::parse(text);
  REQUIRE(back);
  REQUIRE(back->failure);
  CHECK(back->failure->message.starts_with("bad "));
  CHECK(back->failure->message.ends_with(" bytes"));
  CHECK(back->failure->stderrTail.back() == "ok");
  const std::string& tail = back->failure->traceback;
  const std::size_t body = tail.find("]\n") + 2;
  REQUIRE(body < tail.size());
  CHECK((static_cast<unsigned char>(tail[body]) & 0xC0) != 0x80);
  CHECK(tail.ends_with("\xc3\xa9"));
}

TEST_CASE("every hang kind crosses the store by name", "[stop_reason]") {
  for (HangKind kind : {HangKind::kNone, HangKind::kNoProgress, HangKind::kNoFirstProgress,
                        HangKind::kAtExit, HangKind::kFileTimer}) {
    WorkerFailure failure;
    failure.hang = kind;
    INFO(hangKindName(kind));
    CHECK(failureFromJson(toJson(failure)).hang == kind);
    CHECK(hangKindFromName(hangKindName(kind)) == kind);
  }
  CHECK(std::string(hangKindName(HangKind::kNoProgress)) == "no_progress");
  CHECK(std::string(hangKindName(HangKind::kNoFirstProgress)) == "no_first_progress");
  CHECK(std::string(hangKindName(HangKind::kAtExit)) == "at_exit");
  CHECK(std::string(hangKindName(HangKind::kFileTimer)) == "file_timer");
  // A hang kind from a newer agent is shown as no hang rather than refused.
  CHECK(failureFromJson(json{{"hang", "from_the_future"}}).hang == HangKind::kNone);
  // No error file timestamp stays none (not 0).
  WorkerFailure noStamp;
  CHECK_FALSE(failureFromJson(toJson(noStamp)).errorTimestamp);
}

TEST_CASE("ddprun's exit status says how the job ended", "[exit_codes]") {
  WorkerFailure exited = sampleFailure();
  exited.exitCode = 3;
  WorkerFailure killed = sampleFailure();
  killed.exitCode = 0;
  killed.signal = SIGSEGV;
  WorkerFailure cannotStart = sampleFailure();
  cannotStart.exitCode = 127;  // as a shell: the program was not found

  const auto exitedWith256 = [] {
    WorkerFailure failure;
    failure.exitCode = 256;
    return failure;
  };
  struct Row {
    const char* what;
    Ending ending;
    int code;
  };
  const std::vector<Row> rows = {
      {"every worker exited 0", Ending::succeeded(), 0},
      {"the root cause exited 3", Ending::jobFailed(exited, "failed"), 3},
      {"the root cause died of SIGSEGV", Ending::jobFailed(killed, "failed"), 128 + SIGSEGV},
      {"the root cause could not start", Ending::jobFailed(cannotStart, "failed"), 127},
      {"a failed job without a known root cause",
       Ending{EndKind::kJobFailed, std::nullopt, 0, "failed"}, 1},
      // A stop record {"kind":"failure","failure":{}} parses with exit code 0: still a failure.
      {"a root cause that claims exit 0", Ending::jobFailed(WorkerFailure{}, "failed"), 1},
      {"a root cause that claims exit 256 (0 to a shell)",
       Ending::jobFailed(exitedWith256(), "failed"), 1},
      {"the agent got SIGINT", Ending::signalled(SIGINT), 130},
      {"the agent got SIGTERM", Ending::signalled(SIGTERM), 143},
      {"the agent got SIGHUP", Ending::signalled(SIGHUP), 129},
      {"the rendezvous failed", Ending::rendezvousFailed("timeout"), 1},
      {"the store was lost", Ending::storeLost("gone"), 1},
      {"bad input found late", Ending::badInput("port taken"), 2},
      // 128 + SIGPIPE: what a worker writing to the closed console would have died of.
      {"ddprun's stdout was closed", Ending::consoleClosed("| head"), 141},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    CHECK(exitCode(row.ending) == row.code);
  }
  CHECK(exitCodeOf(killed) == 128 + SIGSEGV);
  CHECK(exitCodeOf(exited) == 3);
}

}  // namespace
