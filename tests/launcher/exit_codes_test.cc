// Every exit code of the agent is decided by exitCode() (launcher/src/core/exit_codes.cc), and
// docs/errors.md's table, which users read, names exactly the codes it can return: the table is
// checked against the code here instead of being trusted to stay in step.
#include "core/exit_codes.h"

#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

using namespace ddprun::launcher;

namespace {

// The first two columns of each row of the table under "## Exit codes of ddprun (the agent)": the
// code with --exit-codes root-cause and with --exit-codes classes.
std::set<std::pair<std::string, std::string>> documentedCodes() {
  std::ifstream docs(std::string(DDPRUN_SOURCE_DIR) + "/docs/errors.md");
  REQUIRE(docs.good());
  std::set<std::pair<std::string, std::string>> codes;
  bool inSection = false;
  for (std::string line; std::getline(docs, line);) {
    if (line.rfind("## ", 0) == 0) inSection = line == "## Exit codes of ddprun (the agent)";
    if (!inSection || line.rfind("| ", 0) != 0 || line.rfind("| code", 0) == 0) continue;
    const auto end = line.find(" | ", 2);
    const auto second = line.find(" | ", end + 3);
    codes.emplace(line.substr(2, end - 2), line.substr(end + 3, second - end - 3));
  }
  return codes;
}

WorkerFailure exitedWith(int code) {
  WorkerFailure failure;
  failure.exitCode = code;
  return failure;
}

WorkerFailure killedBy(int signal) {
  WorkerFailure failure;
  failure.signal = signal;
  return failure;
}

}  // namespace

TEST_CASE("exit codes: each ending's code in both schemes, and docs/errors.md names exactly those",
          "[exit_codes]") {
  // Each ending, its codes (root-cause, classes), and the row of the docs' table that describes
  // it.
  struct Row {
    Ending ending;
    int code;
    int classCode;
    std::string documentedAs;
    std::string classDocumentedAs;
  };
  const std::string rootCause = "the root cause's code";
  const Row rows[] = {
      {Ending::succeeded(), 0, 0, "0", "0"},
      {Ending::jobFailed(exitedWith(7), "m", FailureClass::kUser), 7, 80, rootCause, "80"},
      {Ending::jobFailed(exitedWith(7), "m"), 7, 81, rootCause, "81"},
      {Ending::jobFailed(killedBy(SIGKILL), "m"), 128 + SIGKILL, 81, rootCause, "81"},
      {Ending::jobFailed(exitedWith(127), "m", FailureClass::kMachine), 127, 82, rootCause, "82"},
      {Ending::signalled(SIGTERM), 128 + SIGTERM, 83, "128 + signal", "83"},
      {Ending::rendezvousFailed("m"), 1, 82, "1", "82"},
      {Ending::storeLost("m"), 1, 82, "1", "82"},
      {Ending::badInput("m"), 2, 2, "2", "2"},
      {Ending::consoleClosed("m"), 128 + SIGPIPE, 128 + SIGPIPE, "141", "141"},
  };
  const auto documented = documentedCodes();
  std::set<std::pair<std::string, std::string>> used;
  for (const Row& row : rows) {
    INFO("ending kind " << static_cast<int>(row.ending.kind) << ", class "
                        << failureClassName(row.ending.failureClass));
    CHECK(exitCode(row.ending) == row.code);
    CHECK(exitCode(row.ending, ExitCodeScheme::kRootCause) == row.code);
    CHECK(exitCode(row.ending, ExitCodeScheme::kClasses) == row.classCode);
    const std::pair documentedRow(row.documentedAs, row.classDocumentedAs);
    CHECK(documented.count(documentedRow) == 1);
    used.insert(documentedRow);
  }
  // No row of the docs describes a code the agent never returns.
  CHECK(used == documented);
  // The classes' codes are none of the agent's own codes (0, 1, 2, 141, 128 + signal).
  for (int code : {kExitUserError, kExitBudgetSpent, kExitMachineFault, kExitStopped}) {
    CHECK(code > 2);
    CHECK(code < 128);
  }
}

TEST_CASE("a reaped child's wait status as a shell's exit code", "[exit_codes]") {
  CHECK(shellExitCode(W_EXITCODE(0, 0)) == 0);
  CHECK(shellExitCode(W_EXITCODE(3, 0)) == 3);
  CHECK(shellExitCode(W_EXITCODE(255, 0)) == 255);
  CHECK(shellExitCode(W_EXITCODE(0, SIGKILL)) == 128 + SIGKILL);
  CHECK(shellExitCode(W_EXITCODE(0, SIGTERM) | WCOREFLAG) == 128 + SIGTERM);
  CHECK(shellExitCode(W_STOPCODE(SIGSTOP)) == 1);
  CHECK(exitedZero(W_EXITCODE(0, 0)));
  CHECK_FALSE(exitedZero(W_EXITCODE(1, 0)));
  CHECK_FALSE(exitedZero(W_EXITCODE(0, SIGINT)));
}
