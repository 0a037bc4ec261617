#include "core/restart_policy.h"

#include <fmt/format.h>

#include <cerrno>
#include <string_view>

#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using nlohmann::json;

// The exception type of an error file's message as Python writes it, "ValueError: boom" (the
// type's qualified name, then ": "), or the whole first line when it has no ": ".
std::string exceptionType(std::string_view message) {
  message = message.substr(0, message.find('\n'));
  return std::string(message.substr(0, message.find(": ")));
}

// `  File "x.py", line 12, in main` of the innermost frame (a traceback's last File line):
// "x.py:12"; "" when the traceback has none.
std::string innermostFrame(std::string_view traceback) {
  constexpr std::string_view kFile = "File \"";
  const auto at = traceback.rfind(kFile);
  if (at == std::string_view::npos) return {};
  std::string_view rest = traceback.substr(at + kFile.size());
  const auto quote = rest.find('"');
  if (quote == std::string_view::npos) return {};
  const std::string_view file = rest.substr(0, quote);
  rest = rest.substr(quote);
  constexpr std::string_view kLine = ", line ";
  std::string line;
  if (rest.rfind("\"" + std::string(kLine), 0) == 0) {
    for (char c : rest.substr(1 + kLine.size())) {
      if (c < '0' || c > '9') break;
      line += c;
    }
  }
  return line.empty() ? std::string(file) : fmt::format("{}:{}", file, line);
}

bool machineErrno(int error) {
  switch (error) {
    case EAGAIN:
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EBUSY:
      return true;
    default:
      return false;
  }
}

}  // namespace

json toJson(const RestartHistory& history) {
  json value{{"restarts", history.restarts}};
  if (history.noProgress != 0) value["no_progress"] = history.noProgress;
  if (!history.signature.empty()) value["signature"] = history.signature;
  if (history.causeNode >= 0) {
    value["cause_node"] = history.causeNode;
    value["cause_streak"] = history.causeStreak;
  }
  return value;
}

RestartHistory restartHistoryFromJson(const json& value) {
  RestartHistory history;
  history.restarts = value.at("restarts").get<int>();
  history.noProgress = value.value("no_progress", 0);
  history.signature = value.value("signature", std::string());
  history.causeNode = value.value("cause_node", std::int64_t{-1});
  history.causeStreak = value.value("cause_streak", 0);
  return history;
}

RestartHistory historyAfter(const RestartHistory& history, const StopReason& stop) {
  if (!stop.costsRestart() || !stop.failure) return history;
  const WorkerFailure& failure = *stop.failure;
  RestartHistory after;
  after.restarts = history.restarts + 1;
  after.noProgress = failure.progress ? 0 : history.noProgress + 1;
  after.signature = failureSignature(failure);
  after.causeNode = stop.node;
  after.causeStreak =
      stop.node >= 0 && stop.node == history.causeNode ? history.causeStreak + 1 : 1;
  return after;
}

std::string failureSignature(const WorkerFailure& failure) {
  if (failure.startFault) return fmt::format("start errno {}", failure.startFault->error);
  if (failure.hang != HangKind::kNone) return fmt::format("hang {}", hangKindName(failure.hang));
  if (failure.errorFileFound && !failure.message.empty()) {
    const std::string type = exceptionType(failure.message);
    const std::string frame = innermostFrame(failure.traceback);
    return frame.empty() ? type : fmt::format("{} at {}", type, frame);
  }
  if (failure.signal != 0) return fmt::format("signal {}", failure.signal);
  return fmt::format("exit {}", failure.exitCode);
}

FailureClass evidenceClass(const WorkerFailure& failure, const RestartPolicy& policy) {
  if (failure.startFault) {
    if (machineErrno(failure.startFault->error)) return FailureClass::kMachine;
    return failure.startFault->exec ? FailureClass::kUser : FailureClass::kMachine;
  }
  // The user's own rule said it failed (--fail-pattern): restarting runs into it again.
  if (failure.hang == HangKind::kFailPattern) return FailureClass::kUser;
  if (policy.noRestartExitCode && failure.signal == 0 &&
      failure.exitCode == *policy.noRestartExitCode) {
    return FailureClass::kUser;
  }
  return FailureClass::kWorker;
}

std::chrono::milliseconds doublingWait(int n, std::chrono::milliseconds initial,
                                       std::chrono::milliseconds cap) {
  using std::chrono::milliseconds;
  if (initial <= milliseconds(0)) return milliseconds(0);
  const bool capped = cap > milliseconds(0);
  // Doubling stops at the cap, or once more would overflow: the loop stays bounded.
  milliseconds wait = initial;
  for (int i = 1; i < n && (!capped || wait < cap) && wait < milliseconds::max() / 2; ++i)
    wait *= 2;
  return capped ? std::min(wait, cap) : wait;
}

std::chrono::milliseconds backoffFor(int n, const RestartPolicy& policy) {
  const auto cap = policy.backoffCap > std::chrono::milliseconds(0) ? policy.backoffCap
                                                                    : 16 * policy.backoffInitial;
  return doublingWait(n, policy.backoffInitial, cap);
}

std::string RestartDecision::text(const RestartPolicy& policy) const {
  switch (why) {
    case Why::kRestart:
      return "restarting";
    case Why::kNoRestartExitCode:
      return fmt::format(
          "the worker exited with the no-restart exit code {} (--no-restart-exit-code)",
          policy.noRestartExitCode.value_or(0));
    case Why::kCannotExecute:
      return "the worker's program cannot be executed";
    case Why::kFailPattern:
      return "a worker wrote a line matching --fail-pattern";
    case Why::kHungAtExit:
      return "a worker hung at exit while its peers finished";
    case Why::kSameFailure:
      return fmt::format("the same failure as the last one ({}) with no progress in between",
                         history.signature);
    case Why::kBudgetSpent:
      return fmt::format("the restart budget is spent (--max-restarts {})", policy.maxRestarts);
    case Why::kNoProgress:
      return fmt::format("{} restart(s) in a row without progress (--max-no-progress-restarts {})",
                         history.noProgress - 1, policy.maxNoProgressRestarts);
  }
  return "restarting";
}

std::string nodeTrustText(const RestartDecision& decision, const StopReason& stop,
                          const RestartPolicy& policy, const RoundShape& shape) {
  if (decision.node == NodeTrust::kTrusted) return {};
  const std::string streak = fmt::format(
      "{} was the root cause of the last {} failures in a row (--max-node-failures {}), the "
      "last: {}",
      stop.nodeText(), decision.history.causeStreak, policy.maxNodeFailures,
      common::printable(decision.history.signature));
  switch (decision.node) {
    case NodeTrust::kLeaves:
      if (shape.spares > 0 && shape.nodes - 1 < shape.minNodes)
        return streak + "; it leaves the job, and a spare takes its place";
      return streak +
             fmt::format("; it leaves the job, which goes on with {} node(s)", shape.nodes - 1);
    case NodeTrust::kKeptAtMin:
      return streak + fmt::format(
                          "; it stays in the job: without it {} node(s) would be left, fewer "
                          "than the minimum of {}",
                          shape.nodes - 1, shape.minNodes);
    case NodeTrust::kKeptStoreHost:
      return streak +
             "; it stays in the job: it hosts the rendezvous store, and the others would lose it";
    case NodeTrust::kTrusted:
      break;
  }
  return {};
}

RestartDecision decideRestart(const RestartHistory& history, const StopReason& stop,
                              const RestartPolicy& policy, const RoundShape& shape) {
  const WorkerFailure& failure = *stop.failure;
  RestartDecision decision;
  decision.history = historyAfter(history, stop);
  decision.failureClass = evidenceClass(failure, policy);
  using Why = RestartDecision::Why;
  const auto stopFor = [&](Why why, FailureClass kind) {
    decision.why = why;
    decision.failureClass = kind;
    return decision;
  };
  if (decision.failureClass == FailureClass::kUser) {
    const Why why = failure.startFault                       ? Why::kCannotExecute
                    : failure.hang == HangKind::kFailPattern ? Why::kFailPattern
                                                             : Why::kNoRestartExitCode;
    return stopFor(why, FailureClass::kUser);
  }
  if (failure.hang == HangKind::kAtExit) return stopFor(Why::kHungAtExit, decision.failureClass);
  if (decision.failureClass == FailureClass::kWorker && !failure.progress &&
      !history.signature.empty() && history.signature == decision.history.signature) {
    return stopFor(Why::kSameFailure, FailureClass::kUser);
  }
  if (decision.history.restarts > policy.maxRestarts)
    return stopFor(Why::kBudgetSpent, decision.failureClass);
  if (policy.maxNodeFailures > 0 && (shape.elastic || shape.spares > 0) && stop.node >= 0 &&
      decision.history.causeStreak >= policy.maxNodeFailures) {
    if (stop.storeHost) {
      decision.node = NodeTrust::kKeptStoreHost;
    } else if (shape.nodes - 1 + shape.spares < shape.minNodes) {
      decision.node = NodeTrust::kKeptAtMin;
    } else {
      // The node leaves and the others restart without it at once: the back-off is for a cause
      // that may pass, and this one leaves with the node.
      decision.node = NodeTrust::kLeaves;
      decision.failureClass = FailureClass::kMachine;
      return decision;
    }
  }
  if (decision.history.noProgress > policy.maxNoProgressRestarts)
    return stopFor(Why::kNoProgress, decision.failureClass);
  decision.backoff = backoffFor(std::max(1, decision.history.noProgress), policy);
  return decision;
}

}  // namespace ddprun::launcher
