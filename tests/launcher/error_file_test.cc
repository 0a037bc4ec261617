// A worker's error file as the worker (or whatever it runs) may leave it: a link to another file,
// a FIFO, a huge file. loadErrorFile and propagateErrorFile read it without following the link,
// without blocking, and no further than their limit, and say so in the message; the parent's
// error file is written through a fresh file and a rename, never through a link planted beside it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "fifo_watchdog.h"
#include "report/failure_report.h"
#include "temp_dir.h"

using namespace ddprun::launcher;
using ddprun::test::readFile;
using ddprun::test::TempDir;
using ddprun::test::writeFile;
using nlohmann::json;

using ddprun::test::blockedOnFifo;

namespace {

constexpr const char* kValid = R"({"message": {"message": "ValueError: boom", "extraInfo": )"
                               R"({"py_callstack": "Traceback ...", "timestamp": "1763776719"}}})";

WorkerFailure failureWith(const std::string& errorFile) {
  WorkerFailure failure;
  failure.rank = 1;
  failure.localRank = 1;
  failure.host = "node-a";
  failure.pid = 4242;
  failure.exitCode = 1;
  failure.observedAt = 1763776800;
  failure.errorFile = errorFile;
  return failure;
}

}  // namespace

TEST_CASE("an error file that is a link is not followed: found, not read", "[error_file]") {
  TempDir dir;
  const std::string target = dir.path + "/elsewhere.json";
  writeFile(target, kValid);
  const std::string link = dir.path + "/error.json";
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  WorkerFailure failure = failureWith(link);
  CHECK(loadErrorFile(failure));
  CHECK(failure.errorFileFound);
  CHECK(failure.message == "<error file " + link + " is a symbolic link (not followed): not read>");
  CHECK(failure.traceback.empty());
  // A link to a directory ("/") too: not followed, so not taken for torchrun's "no file".
  REQUIRE(::unlink(link.c_str()) == 0);
  REQUIRE(::symlink("/", link.c_str()) == 0);
  CHECK(loadErrorFile(failure));
  CHECK(failure.message.find("symbolic link") != std::string::npos);
}

TEST_CASE("an error file that is a FIFO is reported at once, not waited on", "[error_file]") {
  TempDir dir;
  const std::string fifo = dir.path + "/error.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  WorkerFailure failure = failureWith(fifo);
  CHECK_FALSE(blockedOnFifo(fifo, [&] { CHECK(loadErrorFile(failure)); }));
  CHECK(failure.message == "<error file " + fifo + " is a FIFO, not a regular file: not read>");

  // Propagation reads it again, as loadErrorFile does: a synthesized file, no wait.
  const std::string parent = dir.path + "/parent.json";
  CHECK_FALSE(blockedOnFifo(fifo, [&] { propagateErrorFile(failure, parent); }));
  const json written = json::parse(readFile(parent));
  CHECK(written["message"]["errorCode"] == 1);
  CHECK(written["message"]["message"] == failure.message);
}

TEST_CASE("an error file over the limit is not read, and says so", "[error_file]") {
  TempDir dir;
  const std::string huge = dir.path + "/error.json";
  writeFile(huge, kValid);
  REQUIRE(::truncate(huge.c_str(), off_t{1} << 30) == 0);  // 1 GiB, sparse
  WorkerFailure failure = failureWith(huge);
  CHECK(loadErrorFile(failure));
  CHECK(failure.message == "<error file " + huge + " is larger than 4 MiB: not read>");

  // Just under the limit is read (and parsed: the valid JSON followed by spaces).
  const std::string large = dir.path + "/large.json";
  writeFile(large, std::string(kValid) + std::string((4u << 20) - std::string(kValid).size(), ' '));
  WorkerFailure read = failureWith(large);
  CHECK(loadErrorFile(read));
  CHECK(read.message == "ValueError: boom");
}

TEST_CASE("a directory or no file at the error file's name is torchrun's 'no file'",
          "[error_file]") {
  TempDir dir;
  WorkerFailure directory = failureWith(dir.path);
  CHECK_FALSE(loadErrorFile(directory));
  CHECK_FALSE(directory.errorFileFound);
  WorkerFailure missing = failureWith(dir.path + "/none/error.json");
  CHECK_FALSE(loadErrorFile(missing));
}

TEST_CASE("the parent's error file replaces a link at its name instead of writing through it",
          "[error_file]") {
  TempDir dir;
  const std::string child = dir.path + "/child.json";
  writeFile(child, kValid);
  WorkerFailure failure = failureWith(child);
  REQUIRE(loadErrorFile(failure));

  const std::string target = dir.path + "/root-only";
  writeFile(target, "untouched");
  const std::string parent = dir.path + "/parent.json";
  REQUIRE(::symlink(target.c_str(), parent.c_str()) == 0);
  propagateErrorFile(failure, parent);
  CHECK(readFile(target) == "untouched");
  struct stat info {};
  REQUIRE(::lstat(parent.c_str(), &info) == 0);
  CHECK(S_ISREG(info.st_mode));
  CHECK((info.st_mode & 0777) == 0644);
  CHECK(json::parse(readFile(parent))["message"]["errorCode"] == 1);
  // No temporary file is left beside it.
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path))
    ++entries;
  CHECK(entries == 3);
}
