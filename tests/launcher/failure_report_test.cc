// failure_report: wait statuses of real children, error files (torchrun's schema, the legacy one,
// and the real thing written by torch 1.13's @record), root-cause choice, the ChildFailedError
// summary (golden text, and compared with torch's own formatter), the JSON round trip and the
// propagation to a parent's error file.
#include "report/failure_report.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <sstream>
#include <string>

#include "subprocess.h"
#include "temp_dir.h"

using namespace ddprun::launcher;
using ddprun::test::readFile;
using ddprun::test::TempDir;
using ddprun::test::writeFile;
using nlohmann::json;

namespace {

constexpr int kSkip = 77;

// Forks a child that runs `body` (which must not return) and returns its wait status.
template <typename Body>
int waitStatusOf(Body body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Catch2 installs handlers for fatal signals; the child must die the default way, quietly.
    rlimit noCore{0, 0};
    ::setrlimit(RLIMIT_CORE, &noCore);
    ::signal(SIGSEGV, SIG_DFL);
    ::signal(SIGABRT, SIG_DFL);
    body();
    ::_exit(99);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

void useUtc() {
  ::setenv("TZ", "UTC", 1);
  ::tzset();
}

const std::string kTraceback =
    "Traceback (most recent call last):\n"
    "  File \"train.py\", line 3, in <module>\n"
    "ValueError: boom\n";

WorkerFailure segfaultedRank0() {
  WorkerFailure failure;
  failure.rank = 0;
  failure.localRank = 0;
  failure.groupRank = 0;
  failure.host = "node-a";
  failure.pid = 4242;
  failure.signal = SIGSEGV;
  failure.observedAt = 1763776720.7;  // 2025-11-22 01:58:40 UTC
  return failure;
}

WorkerFailure raisedRank1() {
  WorkerFailure failure;
  failure.rank = 1;
  failure.localRank = 1;
  failure.groupRank = 0;
  failure.host = "node-a";
  failure.pid = 4243;
  failure.exitCode = 1;
  failure.observedAt = 1763776725;
  failure.errorFile = "/logs/r/attempt_0/1/error.json";
  failure.errorFileFound = true;
  failure.message = "ValueError: boom";
  failure.traceback = kTraceback;
  failure.errorTimestamp = 1763776719;  // 2025-11-22 01:58:39 UTC
  return failure;
}

}  // namespace

TEST_CASE("a real child's exit code is decoded", "[failure_report]") {
  const int status = waitStatusOf([] { ::_exit(7); });
  const WorkerFailure failure =
      fromWaitStatus(status, WorkerIdentity{3, 1, 2, "host", 1234, "/e.json"}, 100.5);
  CHECK(failure.exitCode == 7);
  CHECK(failure.signal == 0);
  CHECK(failure.rank == 3);
  CHECK(failure.localRank == 1);
  CHECK(failure.groupRank == 2);
  CHECK(failure.host == "host");
  CHECK(failure.pid == 1234);
  CHECK(failure.errorFile == "/e.json");
  CHECK(failure.observedAt == 100.5);
  CHECK(exitCodeOf(failure) == 7);
  CHECK(statusText(failure) == "exitcode 7");
}

TEST_CASE("a real child's fatal signal is decoded, with 128+signal as the exit code",
          "[failure_report]") {
  const int segv = waitStatusOf([] { ::raise(SIGSEGV); });
  const WorkerFailure crashed = fromWaitStatus(segv, WorkerIdentity{}, 0);
  CHECK(crashed.signal == SIGSEGV);
  CHECK(exitCodeOf(crashed) == 128 + SIGSEGV);
  CHECK(statusText(crashed) == "Signal 11 (SIGSEGV)");

  const int killed = waitStatusOf([] {
    ::kill(::getpid(), SIGKILL);
    ::pause();
  });
  const WorkerFailure gone = fromWaitStatus(killed, WorkerIdentity{}, 0);
  CHECK(gone.signal == SIGKILL);
  CHECK(exitCodeOf(gone) == 137);
  CHECK(statusText(gone) == "Signal 9 (SIGKILL)");
  // Real-time and unknown signals are named by ddprun::common::signalName (common_test).
  CHECK(statusText(fromWaitStatus(SIGRTMIN + 2, WorkerIdentity{}, 0)) ==
        "Signal " + std::to_string(SIGRTMIN + 2) + " (SIGRTMIN+2)");
}

TEST_CASE("a status that is not a termination is refused", "[failure_report]") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, WUNTRACED) == pid);
  CHECK_THROWS_AS(fromWaitStatus(status, WorkerIdentity{}, 0), std::invalid_argument);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
}

TEST_CASE("torchrun's error file schema is read", "[failure_report]") {
  TempDir dir;
  WorkerFailure failure;
  failure.errorFile = dir.file("error.json");
  writeFile(failure.errorFile,
            R"({"message": {"message": "ValueError: boom from rank 1", "extraInfo": )"
            R"({"py_callstack": "Traceback ...\nValueError: boom from rank 1\n", )"
            R"("timestamp": "1763776719"}}})");
  failure.observedAt = 1763776800;
  CHECK(loadErrorFile(failure));
  CHECK(failure.errorFileFound);
  CHECK(failure.message == "ValueError: boom from rank 1");
  CHECK(failure.traceback == "Traceback ...\nValueError: boom from rank 1\n");
  REQUIRE(failure.errorTimestamp.has_value());
  CHECK(*failure.errorTimestamp == 1763776719);
  CHECK(failureTime(failure) == 1763776719);
}

TEST_CASE("the legacy error file schema is read", "[failure_report]") {
  TempDir dir;
  WorkerFailure failure;
  failure.errorFile = dir.file("error.json");
  writeFile(failure.errorFile, R"({"message": "RuntimeError: legacy", "timestamp": 1700000000})");
  CHECK(loadErrorFile(failure));
  CHECK(failure.message == "RuntimeError: legacy");
  CHECK(failure.traceback.empty());
  CHECK(failure.errorTimestamp == 1700000000.0);

  writeFile(failure.errorFile, R"({"message": "RuntimeError: legacy", "timestamp": "1700000001"})");
  CHECK(loadErrorFile(failure));
  CHECK(failure.errorTimestamp == 1700000001.0);

  writeFile(failure.errorFile, R"({"message": "no time"})");
  CHECK(loadErrorFile(failure));
  CHECK_FALSE(failure.errorTimestamp.has_value());
}

TEST_CASE("a missing error file changes nothing and a broken one is reported", "[failure_report]") {
  TempDir dir;
  WorkerFailure failure;
  failure.errorFile = dir.file("absent.json");
  failure.message = "set by the agent";
  CHECK_FALSE(loadErrorFile(failure));
  CHECK_FALSE(failure.errorFileFound);
  CHECK(failure.message == "set by the agent");

  WorkerFailure none;
  CHECK_FALSE(loadErrorFile(none));

  failure.errorFile = dir.file("broken.json");
  writeFile(failure.errorFile, "{not json");
  CHECK(loadErrorFile(failure));
  CHECK(failure.errorFileFound);
  CHECK(failure.message.find("could not be parsed") != std::string::npos);
  CHECK_FALSE(failure.errorTimestamp.has_value());
}

TEST_CASE("the root cause is the earliest failure, error-file time first, ties to the lowest rank",
          "[failure_report]") {
  WorkerFailure observedFirst;
  observedFirst.rank = 0;
  observedFirst.observedAt = 1000.5;
  WorkerFailure recordedEarlier;
  recordedEarlier.rank = 1;
  recordedEarlier.observedAt = 1005;
  recordedEarlier.errorTimestamp = 1000;
  CHECK(rootCauseIndex({observedFirst, recordedEarlier}) == 1);

  recordedEarlier.errorTimestamp.reset();
  CHECK(rootCauseIndex({observedFirst, recordedEarlier}) == 0);

  WorkerFailure a;
  a.rank = 5;
  a.observedAt = 10;
  WorkerFailure b;
  b.rank = 2;
  b.observedAt = 10;
  CHECK(rootCauseIndex({a, b}) == 1);
  CHECK(rootCauseIndex({b, a}) == 0);
  CHECK_THROWS_AS(rootCauseIndex({}), std::invalid_argument);
}

TEST_CASE("the summary has torchrun's layout", "[failure_report]") {
  useUtc();
  // Given out of rank order on purpose: entries are numbered by rank.
  const std::string summary = formatSummary("train.py", {raisedRank1(), segfaultedRank0()});
  const std::string border(54, '=');
  const std::string section(54, '-');
  const std::string expected = border + "\n" + "train.py FAILED\n" + section + "\n" +
                               "Failures:\n"
                               "[0]:\n"
                               "  time      : 2025-11-22_01:58:40\n"
                               "  host      : node-a\n"
                               "  rank      : 0 (local_rank: 0)\n"
                               "  exitcode  : -11 (pid: 4242)\n"
                               "  error_file: <N/A>\n"
                               "  traceback : Signal 11 (SIGSEGV) received by PID 4242\n" +
                               section + "\n" +
                               "Root Cause (first observed failure):\n"
                               "[1]:\n"
                               "  time      : 2025-11-22_01:58:39\n"
                               "  host      : node-a\n"
                               "  rank      : 1 (local_rank: 1)\n"
                               "  exitcode  : 1 (pid: 4243)\n"
                               "  error_file: /logs/r/attempt_0/1/error.json\n"
                               "  traceback : Traceback (most recent call last):\n"
                               "    File \"train.py\", line 3, in <module>\n"
                               "  ValueError: boom\n"
                               "  \n" +
                               border;
  CHECK(summary == expected);

  // The caller may name the root cause itself (the job-wide one, chosen elsewhere).
  const std::string forced = formatSummary("train.py", {raisedRank1(), segfaultedRank0()}, 1);
  CHECK(forced.find("Root Cause (first observed failure):\n[0]:") != std::string::npos);
}

TEST_CASE("a lone failure without a traceback: capped border and the hint", "[failure_report]") {
  useUtc();
  WorkerFailure failure;
  failure.rank = 3;
  failure.localRank = 1;
  failure.host = "node-b";
  failure.pid = 77;
  failure.exitCode = 7;
  failure.observedAt = 0;
  const std::string border(60, '=');
  const std::string section(60, '-');
  const std::string expected = border + "\n/usr/bin/worker FAILED\n" + section +
                               "\nFailures:\n  <NO_OTHER_FAILURES>\n" + section +
                               "\nRoot Cause (first observed failure):\n"
                               "[0]:\n"
                               "  time      : 1970-01-01_00:00:00\n"
                               "  host      : node-b\n"
                               "  rank      : 3 (local_rank: 1)\n"
                               "  exitcode  : 7 (pid: 77)\n"
                               "  error_file: <N/A>\n"
                               "  traceback : To enable traceback see: "
                               "https://pytorch.org/docs/stable/elastic/errors.html\n" +
                               border;
  CHECK(formatSummary("/usr/bin/worker", {failure}) == expected);
}

TEST_CASE("the summary keeps a traceback's lines and escapes every other control character",
          "[failure_report]") {
  useUtc();
  // What a worker (or, through a forged stop record, whoever writes the store) may put in its
  // message: a whole line in the agent's log format, a carriage return that would overwrite the
  // line it is on, and escape sequences that retitle and clear the terminal.
  const std::string forgedLine =
      "[2026-01-01 00:00:00.000] [ddprun] [info] every worker of every node exited 0";
  WorkerFailure failure = raisedRank1();
  failure.traceback = "Traceback (most recent call last):\n  File \"train.py\", line 3\n" +
                      forgedLine + "\x1b]0;owned\x07\x1b[2J\rValueError: boom\tat\n";
  failure.host = "node-z\n" + forgedLine + "\x1b[2J";
  failure.errorFile = "/logs/\x1b[2J/error.json";
  failure.hang = HangKind::kFileTimer;
  failure.hangDetail = "its FileTimer \"s\n\x1b[2J\" expired";
  failure.oom = "killed\r\x1b[2J";
  failure.stack = {"Thread 1 (\x1b]0;owned\x07):", "  File \"x.py\", line 1"};
  failure.evidenceFile = "/logs/stacks\n.txt";
  WorkerFailure quiet = segfaultedRank0();
  quiet.stderrTail = {"progress 50%\r\x1b[Kprogress 100%", "died\x1b[0m"};
  const std::string summary = formatSummary("train.py", {failure, quiet});

  // Torchrun's layout: the traceback's lines stay lines, indented under its entry; nothing else
  // breaks a line.
  CHECK_THAT(summary, Catch::Contains("  traceback : Traceback (most recent call last):\n"
                                      "    File \"train.py\", line 3\n"
                                      "  " +
                                      forgedLine +
                                      "\\x1b]0;owned\\x07\\x1b[2J\\x0dValueError: boom\\tat\n"
                                      "  \n"));
  CHECK_THAT(summary, Catch::Contains("  host      : node-z\\n" + forgedLine + "\\x1b[2J\n"));
  CHECK_THAT(summary, Catch::Contains("  error_file: /logs/\\x1b[2J/error.json\n"));
  CHECK_THAT(summary, Catch::Contains("  hung      : its FileTimer \"s\\n\\x1b[2J\" expired\n"));
  CHECK_THAT(summary, Catch::Contains("  oom       : killed\\x0d\\x1b[2J\n"));
  CHECK_THAT(summary, Catch::Contains("  stack     : Thread 1 (\\x1b]0;owned\\x07):\n"
                                      "    File \"x.py\", line 1\n"
                                      "              (every thread: /logs/stacks\\n.txt)"));
  CHECK_THAT(summary, Catch::Contains("  stderr    : progress 50%\\x0d\\x1b[Kprogress 100%\n"
                                      "  died\\x1b[0m"));
  // No byte a terminal acts on, and no line the forged one starts.
  CHECK(std::none_of(summary.begin(), summary.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return c != '\n' && (byte < 0x20 || byte == 0x7f);
  }));
  std::istringstream lines(summary);
  for (std::string line; std::getline(lines, line);) CHECK_FALSE(line.starts_with(forgedLine));
}

TEST_CASE("a failure survives the JSON round trip", "[failure_report]") {
  const WorkerFailure original = raisedRank1();
  const WorkerFailure back = failureFromJson(json::parse(toJson(original).dump()));
  CHECK(back.rank == original.rank);
  CHECK(back.localRank == original.localRank);
  CHECK(back.groupRank == original.groupRank);
  CHECK(back.host == original.host);
  CHECK(back.pid == original.pid);
  CHECK(back.exitCode == original.exitCode);
  CHECK(back.signal == original.signal);
  CHECK(back.observedAt == original.observedAt);
  CHECK(back.errorFile == original.errorFile);
  CHECK(back.errorFileFound == original.errorFileFound);
  CHECK(back.message == original.message);
  CHECK(back.traceback == original.traceback);
  CHECK(back.errorTimestamp == original.errorTimestamp);

  const WorkerFailure crashed = failureFromJson(toJson(segfaultedRank0()));
  CHECK(crashed.signal == SIGSEGV);
  CHECK_FALSE(crashed.errorTimestamp.has_value());
  CHECK(crashed.observedAt == 1763776720.7);

  CHECK(failureFromJson(json::object()).rank == -1);
  CHECK_THROWS_AS(failureFromJson(json::array()), std::invalid_argument);
}

TEST_CASE("JSON caps long tracebacks (keeping the end) and survives invalid UTF-8",
          "[failure_report]") {
  WorkerFailure failure = raisedRank1();
  failure.traceback = std::string(100 * 1024, 'x') + "\xC3\xA9" + "ValueError: the end\n";
  failure.message = "bad byte \xFF here";
  const json value = toJson(failure);
  const std::string dumped = value.dump();  // throws on invalid UTF-8
  const WorkerFailure back = failureFromJson(json::parse(dumped));
  CHECK(back.traceback.size() <= kMaxJsonText);
  CHECK(back.traceback.size() > kMaxJsonText - 100);
  CHECK(back.traceback.find("\xC3\xA9ValueError: the end\n") != std::string::npos);
  CHECK(back.message == "bad byte \xEF\xBF\xBD here");
}

TEST_CASE("the root cause's error file is propagated with errorCode", "[failure_report]") {
  TempDir dir;
  WorkerFailure cause = raisedRank1();
  cause.errorFile = dir.file("child.json");
  const json child = json::parse(
      R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "tb", )"
      R"("timestamp": "1763776719"}, "custom": 1}, "other": true})");
  writeFile(cause.errorFile, child.dump());
  const std::string parent = dir.file("parent.json");
  writeFile(parent, "stale");
  propagateErrorFile(cause, parent);
  json expected = child;
  expected["message"]["errorCode"] = 1;
  CHECK(json::parse(readFile(parent)) == expected);
}

TEST_CASE("a failure without an error file gets a synthesized one", "[failure_report]") {
  TempDir dir;
  const std::string parent = dir.file("parent.json");
  propagateErrorFile(segfaultedRank0(), parent);
  const json written = json::parse(readFile(parent));
  CHECK(written["message"]["message"] == "Signal 11 (SIGSEGV) received by PID 4242");
  CHECK(written["message"]["errorCode"] == -11);
  CHECK(written["message"]["extraInfo"]["timestamp"] == "1763776720");

  // A failure that travelled from another node: its error file is not here.
  WorkerFailure remote = raisedRank1();
  remote.errorFile = dir.file("not-here.json");
  propagateErrorFile(remote, parent);
  const json synthesized = json::parse(readFile(parent));
  CHECK(synthesized["message"]["message"] == "ValueError: boom");
  CHECK(synthesized["message"]["extraInfo"]["py_callstack"] == kTraceback);
  CHECK(synthesized["message"]["extraInfo"]["timestamp"] == "1763776719");
  CHECK(synthesized["message"]["errorCode"] == 1);

  WorkerFailure plain;
  plain.rank = 2;
  plain.localRank = 0;
  plain.pid = 9;
  plain.host = "h";
  plain.exitCode = 7;
  propagateErrorFile(plain, parent);
  CHECK(json::parse(readFile(parent))["message"]["message"] ==
        "worker rank 2 (local_rank 0, pid 9) on h failed with exitcode 7");
}

TEST_CASE(
    "propagation: legacy files are copied as they are, nothing without a parent file, errors throw",
    "[failure_report]") {
  TempDir dir;
  WorkerFailure cause = raisedRank1();
  cause.errorFile = dir.file("legacy.json");
  writeFile(cause.errorFile, R"({"message": "RuntimeError: old", "timestamp": 5})");
  const std::string parent = dir.file("parent.json");
  propagateErrorFile(cause, parent);
  CHECK(json::parse(readFile(parent)) ==
        json::parse(R"({"message": "RuntimeError: old", "timestamp": 5})"));

  CHECK_NOTHROW(propagateErrorFile(cause, ""));
  CHECK_THROWS_AS(propagateErrorFile(cause, dir.file("no/such/dir/parent.json")),
                  std::system_error);
}

// torch 1.13's own @record writes the error file, its ChildFailedError formats the summary and its
// ErrorHandler propagates to the parent; ddprun must read, print and write the same.
TEST_CASE("torch 1.13: ddprun reads @record's file and matches torch's summary and propagation",
          "[failure_report][torch113]") {
  const std::string python = DDPRUN_TORCH113_PYTHON;
  TempDir dir;
  const std::string script = dir.file("torch_failure.py");
  writeFile(script, R"(import json, os, socket, sys
try:
    from torch.distributed.elastic.multiprocessing.errors import (
        ChildFailedError, ProcessFailure, get_error_handler, record)
except ImportError as error:
    print("no torch:", error, file=sys.stderr)
    sys.exit(77)
err, parent = sys.argv[1], sys.argv[2]
os.environ["TORCHELASTIC_ERROR_FILE"] = err

@record
def main():
    raise ValueError("boom from rank 1")

try:
    main()
except ValueError:
    pass
failures = {}
failures[0] = ProcessFailure(local_rank=0, pid=4242, exitcode=-11, error_file=err + ".missing")
failures[1] = ProcessFailure(local_rank=1, pid=4243, exitcode=1, error_file=err)
message = ChildFailedError("train.py", failures).format_msg()
os.environ["TORCHELASTIC_ERROR_FILE"] = parent
get_error_handler().dump_error_file(err, 1)
print(json.dumps({"fqdn": socket.getfqdn(), "ts0": failures[0].timestamp, "msg": message}))
)");
  const std::string errorFile = dir.file("error.json");
  const std::string torchParent = dir.file("torch-parent.json");
  ddprun::test::Subprocess run({python, script, errorFile, torchParent}, {"TZ=UTC"});
  const std::optional<int> status = run.wait(std::chrono::seconds(120));
  REQUIRE(status.has_value());
  if (*status == kSkip) {
    std::cout << "skipped: " << run.errors() << std::endl;
    std::exit(kSkip);
  }
  REQUIRE(*status == 0);
  std::string output = run.output();
  const json result = json::parse(output.substr(output.rfind('{', output.rfind("\"fqdn\""))));

  WorkerFailure raised;
  raised.rank = 1;
  raised.localRank = 1;
  raised.pid = 4243;
  raised.exitCode = 1;
  raised.host = result["fqdn"];
  raised.errorFile = errorFile;
  REQUIRE(loadErrorFile(raised));
  CHECK(raised.message == "ValueError: boom from rank 1");
  CHECK(raised.traceback.find("Traceback (most recent call last):") == 0);
  CHECK(raised.traceback.find("ValueError: boom from rank 1\n") != std::string::npos);
  REQUIRE(raised.errorTimestamp.has_value());
  const double now = static_cast<double>(std::time(nullptr));
  CHECK(*raised.errorTimestamp > now - 600);
  CHECK(*raised.errorTimestamp <= now);

  WorkerFailure crashed;
  crashed.rank = 0;
  crashed.localRank = 0;
  crashed.pid = 4242;
  crashed.signal = SIGSEGV;
  crashed.host = result["fqdn"];
  crashed.errorFile = errorFile + ".missing";
  crashed.observedAt = result["ts0"].get<double>();
  CHECK_FALSE(loadErrorFile(crashed));

  useUtc();
  std::string torchMessage = result["msg"];
  REQUIRE(torchMessage.front() == '\n');  // torch's message starts on the line after its title
  CHECK(formatSummary("train.py", {crashed, raised}) == torchMessage.substr(1));

  const std::string ourParent = dir.file("our-parent.json");
  propagateErrorFile(raised, ourParent);
  CHECK(json::parse(readFile(ourParent)) == json::parse(readFile(torchParent)));
}
