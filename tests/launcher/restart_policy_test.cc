// The restart policy's pure logic (core/restart_policy.h): the history every agent derives from
// the same close and stop records, the signature of a root cause, the back-off arithmetic and
// the decision table.
#include "core/restart_policy.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>

using namespace ddprun::launcher;
using namespace std::chrono_literals;

namespace {

WorkerFailure valueError(bool progress, int line = 3) {
  WorkerFailure failure;
  failure.exitCode = 1;
  failure.errorFileFound = true;
  failure.message = "ValueError: bad shard 7";
  failure.traceback =
      "Traceback (most recent call last):\n  File \"/job/train.py\", line 9, in "
      "<module>\n    main()\n  File \"/job/data.py\", line " +
      std::to_string(line) + ", in load\n    raise ValueError(...)\n";
  failure.progress = progress;
  return failure;
}

WorkerFailure exited(int code, bool progress) {
  WorkerFailure failure;
  failure.exitCode = code;
  failure.progress = progress;
  return failure;
}

StopReason failed(WorkerFailure failure, std::int64_t node = 1) {
  return StopReason::workerFailed(std::move(failure), node);
}

RestartPolicy policy(int maxRestarts) {
  RestartPolicy rules;
  rules.maxRestarts = maxRestarts;
  return rules;
}

// Runs the failures through the policy as the rounds would: the decision of the last one.
RestartDecision afterFailures(const std::vector<StopReason>& stops, const RestartPolicy& rules,
                              const RoundShape& shape = {}) {
  RestartHistory history;
  RestartDecision decision;
  for (const StopReason& stop : stops) {
    decision = decideRestart(history, stop, rules, shape);
    history = historyAfter(history, stop);
    REQUIRE(decision.history == history);  // the closer's rule and the agents' agree
  }
  return decision;
}

}  // namespace

TEST_CASE("a root cause's signature: exception type and innermost frame, else the exit status",
          "[restart_policy]") {
  CHECK(failureSignature(valueError(false)) == "ValueError at /job/data.py:3");
  CHECK(failureSignature(valueError(false, 4)) != failureSignature(valueError(false, 3)));
  WorkerFailure noTraceback = valueError(false);
  noTraceback.traceback.clear();
  CHECK(failureSignature(noTraceback) == "ValueError");
  CHECK(failureSignature(exited(3, false)) == "exit 3");
  WorkerFailure killed;
  killed.signal = 11;
  CHECK(failureSignature(killed) == "signal 11");
  WorkerFailure hung = exited(0, false);
  hung.signal = 9;
  hung.hang = HangKind::kNoProgress;
  CHECK(failureSignature(hung) == "hang no_progress");
  // The message's text after the type does not count: "bad shard 7" and "bad shard 8" are one
  // bug.
  WorkerFailure other = valueError(false);
  other.message = "ValueError: bad shard 8";
  CHECK(failureSignature(other) == failureSignature(valueError(false)));
}

TEST_CASE("historyAfter: failures count, membership changes keep the history", "[restart_policy]") {
  RestartHistory history;
  history = historyAfter(history, failed(exited(1, false), 4));
  CHECK(history.restarts == 1);
  CHECK(history.noProgress == 1);
  CHECK(history.signature == "exit 1");
  CHECK(history.causeNode == 4);
  CHECK(history.causeStreak == 1);
  const RestartHistory kept = historyAfter(history, StopReason::nodeJoined(9, "c"));
  CHECK(kept == history);
  history = historyAfter(history, failed(exited(2, false), 4));
  CHECK(history.noProgress == 2);
  CHECK(history.causeStreak == 2);
  history = historyAfter(history, failed(exited(2, true), 5));
  CHECK(history.restarts == 3);
  CHECK(history.noProgress == 0);  // progress before it
  CHECK(history.causeNode == 5);
  CHECK(history.causeStreak == 1);
  // Through the close record's JSON and back.
  CHECK(restartHistoryFromJson(toJson(history)) == history);
  CHECK(restartHistoryFromJson(nlohmann::json{{"restarts", 2}}).restarts == 2);  // an older agent's
}

TEST_CASE("back-off: INITIAL * 2^(n-1), capped", "[restart_policy]") {
  RestartPolicy rules;
  CHECK(backoffFor(1, rules) == 0ms);
  rules.backoffInitial = 2s;
  rules.backoffCap = 10s;
  CHECK(backoffFor(1, rules) == 2s);
  CHECK(backoffFor(2, rules) == 4s);
  CHECK(backoffFor(3, rules) == 8s);
  CHECK(backoffFor(4, rules) == 10s);
  CHECK(backoffFor(1000, rules) == 10s);  // no overflow
  rules.backoffCap = 0ms;                 // not given: 16 x INITIAL
  CHECK(backoffFor(10, rules) == 32s);
  // The rule itself, as the health gate's cooldown uses it: no cap given means none.
  CHECK(doublingWait(3, 30s, 0ms) == 120s);
  CHECK(doublingWait(5, 30s, 60s) == 60s);
  CHECK(doublingWait(100000, 1ms, 0ms) > 1000h);  // stops doubling before it overflows
  CHECK(doublingWait(2, 0ms, 0ms) == 0ms);
}

TEST_CASE("the decision table", "[restart_policy]") {
  using Why = RestartDecision::Why;
  SECTION("the same ValueError twice without progress stops after 1 restart, the user's") {
    const auto first = afterFailures({failed(valueError(false))}, policy(3));
    CHECK(first.restart());
    const auto second =
        afterFailures({failed(valueError(false)), failed(valueError(false))}, policy(3));
    CHECK(second.why == Why::kSameFailure);
    CHECK(second.failureClass == FailureClass::kUser);
    CHECK(second.text(policy(3)).find("ValueError at /job/data.py:3") != std::string::npos);
  }
  SECTION("the same failure after progress restarts") {
    const auto decision =
        afterFailures({failed(valueError(false)), failed(valueError(true))}, policy(3));
    CHECK(decision.restart());
  }
  SECTION("different failures without progress spend the budget; the class is the worker's") {
    const auto decision = afterFailures(
        {failed(exited(1, false)), failed(exited(2, false)), failed(exited(1, false))}, policy(2));
    CHECK(decision.why == Why::kBudgetSpent);
    CHECK(decision.failureClass == FailureClass::kWorker);
  }
  SECTION("--max-no-progress-restarts stops before --max-restarts") {
    RestartPolicy rules = policy(10);
    rules.maxNoProgressRestarts = 2;
    const auto two = afterFailures({failed(exited(1, false)), failed(exited(2, false))}, rules);
    CHECK(two.restart());
    const auto three = afterFailures(
        {failed(exited(1, false)), failed(exited(2, false)), failed(exited(3, false))}, rules);
    CHECK(three.why == Why::kNoProgress);
    CHECK(three.failureClass == FailureClass::kWorker);
    // Progress in between starts the count afresh.
    const auto again = afterFailures({failed(exited(1, false)), failed(exited(2, false)),
                                      failed(exited(3, true)), failed(exited(4, false))},
                                     rules);
    CHECK(again.restart());
  }
  SECTION("--no-restart-exit-code stops at once, the user's") {
    RestartPolicy rules = policy(3);
    rules.noRestartExitCode = 93;
    const auto decision = afterFailures({failed(exited(93, true))}, rules);
    CHECK(decision.why == Why::kNoRestartExitCode);
    CHECK(decision.failureClass == FailureClass::kUser);
    CHECK(afterFailures({failed(exited(94, true))}, rules).restart());
    WorkerFailure signalled;  // a worker killed by a signal did not choose its code
    signalled.exitCode = 93;
    signalled.signal = 9;
    CHECK(evidenceClass(signalled, rules) == FailureClass::kWorker);
  }
  SECTION("--fail-pattern stops at once, the user's, whatever budget is left") {
    WorkerFailure nan = exited(0, true);
    nan.signal = 9;  // killed by the agent after the line
    nan.hang = HangKind::kFailPattern;
    CHECK(evidenceClass(nan, policy(3)) == FailureClass::kUser);
    const auto decision = afterFailures({failed(nan)}, policy(3));
    CHECK(decision.why == Why::kFailPattern);
    CHECK(decision.failureClass == FailureClass::kUser);
    CHECK(decision.text(policy(3)) == "a worker wrote a line matching --fail-pattern");
    // A worker that wrote no start line is hung like any other: restarted.
    WorkerFailure silent = nan;
    silent.hang = HangKind::kNoStart;
    CHECK(afterFailures({failed(silent)}, policy(3)).restart());
    CHECK(hangKindFromName("fail_pattern") == HangKind::kFailPattern);
    CHECK(hangKindFromName("no_start") == HangKind::kNoStart);
  }
  SECTION("a worker that could not start: the errno decides whose fault") {
    WorkerFailure missing = exited(127, false);
    missing.startFault = WorkerFailure::StartFault{ENOENT, true};
    const auto user = afterFailures({failed(missing)}, policy(3));
    CHECK(user.why == Why::kCannotExecute);
    CHECK(user.failureClass == FailureClass::kUser);
    WorkerFailure noMemory = exited(127, false);
    noMemory.startFault = WorkerFailure::StartFault{EAGAIN, false};
    const auto machine = afterFailures({failed(noMemory), failed(noMemory)}, policy(3));
    CHECK(machine.restart());  // the same machine fault twice is not the user's
    CHECK(machine.failureClass == FailureClass::kMachine);
    const auto spent = afterFailures({failed(noMemory), failed(noMemory)}, policy(1));
    CHECK(spent.why == Why::kBudgetSpent);
    CHECK(spent.failureClass == FailureClass::kMachine);
  }
  SECTION("a hang at exit is not restarted") {
    WorkerFailure hung = exited(0, true);
    hung.signal = 9;
    hung.hang = HangKind::kAtExit;
    CHECK(afterFailures({failed(hung)}, policy(3)).why == Why::kHungAtExit);
  }
  SECTION("the back-off follows the failures in a row without progress") {
    RestartPolicy rules = policy(10);
    rules.backoffInitial = 1s;
    rules.backoffCap = 60s;
    CHECK(afterFailures({failed(exited(1, true))}, rules).backoff == 1s);
    CHECK(afterFailures({failed(exited(1, false))}, rules).backoff == 1s);
    CHECK(afterFailures({failed(exited(1, false)), failed(exited(2, false))}, rules).backoff == 2s);
    CHECK(afterFailures(
              {failed(exited(1, false)), failed(exited(2, false)), failed(exited(3, true))}, rules)
              .backoff == 1s);
  }
}

TEST_CASE(
    "the node rule (--max-node-failures): a node that was the root cause K times in a row leaves",
    "[restart_policy]") {
  // A 1:3 job on 3 nodes; node 7's workers fail after progress each time (different exit codes,
  // so that the same-failure rule has no say).
  const RoundShape three{.elastic = true, .nodes = 3, .minNodes = 1};
  const RestartPolicy rules = policy(5);  // maxNodeFailures 3 by default
  const std::vector<StopReason> onSeven = {failed(exited(1, true), 7), failed(exited(2, true), 7),
                                           failed(exited(3, true), 7)};
  SECTION("the streak: two are trusted, the third leaves, class machine, at once") {
    RestartPolicy slow = rules;
    slow.backoffInitial = 5s;
    const auto two = afterFailures({onSeven[0], onSeven[1]}, slow, three);
    CHECK(two.restart());
    CHECK(two.node == NodeTrust::kTrusted);
    CHECK(two.backoff == 5s);
    const auto third = afterFailures(onSeven, slow, three);
    CHECK(third.restart());  // the others go on
    CHECK(third.node == NodeTrust::kLeaves);
    CHECK(third.failureClass == FailureClass::kMachine);
    CHECK(third.backoff == 0ms);
    // The re-form spends no restart of its own: the failure's is the one counted.
    CHECK(third.history.restarts == 3);
    CHECK(third.history.causeNode == 7);
    CHECK(third.history.causeStreak == 3);
    const std::string text = nodeTrustText(third, onSeven.back(), slow, three);
    CHECK(text.find("the last 3 failures in a row (--max-node-failures 3), the last: exit 3") !=
          std::string::npos);
    CHECK(text.find("it leaves the job, which goes on with 2 node(s)") != std::string::npos);
  }
  SECTION("a failure on another node in between starts the streak afresh") {
    const auto decision = afterFailures(
        {onSeven[0], onSeven[1], failed(exited(4, true), 8), onSeven[2]}, rules, three);
    CHECK(decision.node == NodeTrust::kTrusted);
    CHECK(decision.history.causeStreak == 1);
  }
  SECTION("off with 0, in a job that is not elastic, and when the budget is spent") {
    RestartPolicy off = rules;
    off.maxNodeFailures = 0;
    CHECK(afterFailures(onSeven, off, three).node == NodeTrust::kTrusted);
    CHECK(afterFailures(onSeven, rules, RoundShape{.elastic = false, .nodes = 3, .minNodes = 3})
              .node == NodeTrust::kTrusted);
    const auto spent = afterFailures(onSeven, policy(2), three);
    CHECK(spent.why == RestartDecision::Why::kBudgetSpent);
    CHECK(spent.node == NodeTrust::kTrusted);
  }
  SECTION("kept when the job would drop below MIN: the job goes on as without the rule") {
    const RoundShape atMin{.elastic = true, .nodes = 2, .minNodes = 2};
    const auto decision = afterFailures(onSeven, rules, atMin);
    CHECK(decision.restart());
    CHECK(decision.node == NodeTrust::kKeptAtMin);
    CHECK(decision.failureClass == FailureClass::kWorker);
    CHECK(nodeTrustText(decision, onSeven.back(), rules, atMin)
              .find("without it 1 node(s) would be left, fewer than the minimum of 2") !=
          std::string::npos);
  }
  SECTION("with spares wanted the rule applies at MIN = MAX: a spare takes the seat") {
    const RoundShape fixed{.elastic = false, .nodes = 2, .minNodes = 2, .spares = 1};
    const auto decision = afterFailures(onSeven, rules, fixed);
    CHECK(decision.restart());
    CHECK(decision.node == NodeTrust::kLeaves);
    CHECK(decision.failureClass == FailureClass::kMachine);
    CHECK(nodeTrustText(decision, onSeven.back(), rules, fixed)
              .find("it leaves the job, and a spare takes its place") != std::string::npos);
    const RoundShape tooFew{.elastic = false, .nodes = 3, .minNodes = 3, .spares = 0};
    CHECK(afterFailures(onSeven, rules, tooFew).node == NodeTrust::kTrusted);
  }
  SECTION("kept when it hosts the rendezvous store (the stop record says so)") {
    std::vector<StopReason> hosting = onSeven;
    for (StopReason& stop : hosting) stop.storeHost = true;
    const auto decision = afterFailures(hosting, rules, three);
    CHECK(decision.restart());
    CHECK(decision.node == NodeTrust::kKeptStoreHost);
  }
  SECTION("the user's rules come first: the same failure without progress stops the job") {
    const auto decision = afterFailures(
        {failed(exited(1, true), 7), failed(exited(1, false), 7), failed(exited(1, false), 7)},
        rules, three);
    CHECK(decision.why == RestartDecision::Why::kSameFailure);
  }
}
