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

// The first column of each row of the table under "## Exit codes of ddprun (the agent)".
std::set<std::string> documentedCodes() {
  std::ifstream docs(std::string(DDPRUN_SOURCE_DIR) + "/docs/errors.md");
  REQUIRE(docs.good());
  std::set<std::string> codes;
  bool inSection = false;
  for (std::string line; std::getline(docs, line);) {
    if (line.rfind("## ", 0) == 0) inSection = line == "## Exit codes of ddprun (the agent)";
    if (!inSection || line.rfind("| ", 0) != 0 || line.rfind("| code", 0) == 0) continue;
    const auto end = line.find(" |", 2);
    codes.insert(line.substr(2, end - 2));
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

TEST_CASE("exit codes: each ending's code, and docs/errors.md names exactly those",
          "[exit_codes]") {
  // Each ending, its code, and the row of the docs' table that describes it.
  struct Row {
    Ending ending;
    int code;
    std::string documentedAs;
  };
  const Row rows[] = {
      {Ending::succeeded(), 0, "0"},
      {Ending::jobFailed(exitedWith(7), "m"), 7, "the root cause's exit code"},
      {Ending::jobFailed(killedBy(SIGKILL), "m"), 128 + SIGKILL, "128 + signal"},
      {Ending::signalled(SIGTERM), 128 + SIGTERM, "128 + signal"},
      {Ending::rendezvousFailed("m"), 1, "1"},
      {Ending::storeLost("m"), 1, "1"},
      {Ending::badInput("m"), 2, "2"},
      {Ending::consoleClosed("m"), 128 + SIGPIPE, "141"},
  };
  const std::set<std::string> documented = documentedCodes();
  std::set<std::string> used;
  for (const Row& row : rows) {
    INFO("ending kind " << static_cast<int>(row.ending.kind));
    CHECK(exitCode(row.ending) == row.code);
    CHECK(documented.count(row.documentedAs) == 1);
    used.insert(row.documentedAs);
  }
  // No row of the docs describes a code the agent never returns.
  CHECK(used == documented);
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
