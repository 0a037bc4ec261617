// The stop-request files (process/stop_files.h): what a worker finds at DDPRUN_STOP_FILE, and that
// no earlier attempt's request, nor anything put at the next name, stops a new attempt.
#include "process/stop_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace ddprun::launcher;
using ddprun::test::TempDir;
using namespace std::chrono_literals;

std::string contentOf(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

const EventLoop::WallTime kDeadline{std::chrono::seconds(1767225630) + 250ms};

}  // namespace

TEST_CASE("a stop request appears complete at the attempt's path, and only there", "[stop_files]") {
  TempDir dir;
  const std::string agentDir = dir.path + "/agent";
  REQUIRE(fs::create_directory(agentDir));
  StopFiles files(agentDir);
  const std::string first = files.prepare();
  CHECK(first == agentDir + "/stop-1");
  CHECK_FALSE(fs::exists(first));  // no request while the workers may run
  files.request("SIGTERM", kDeadline);
  CHECK(contentOf(first) == "reason=SIGTERM\ndeadline=1767225630.250\n");
  struct stat info {};
  REQUIRE(::stat(first.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  // A second request (a signal during a peer's stop) replaces the first.
  files.request("SIGINT", kDeadline + 1s);
  CHECK(contentOf(first) == "reason=SIGINT\ndeadline=1767225631.250\n");
  // Only the file itself: no temporary name left beside it.
  CHECK(std::distance(fs::directory_iterator(agentDir), fs::directory_iterator()) == 1);

  SECTION("the next attempt gets a fresh name; the last one's request is gone") {
    const std::string second = files.prepare();
    CHECK(second == agentDir + "/stop-2");
    CHECK_FALSE(fs::exists(first));
    CHECK_FALSE(fs::exists(second));
  }
  SECTION("whatever is at the next name is cleared, never followed") {
    const std::string target = dir.path + "/elsewhere";
    std::ofstream(target) << "keep me";
    fs::create_symlink(target, agentDir + "/stop-2");
    const std::string second = files.prepare();
    CHECK_FALSE(fs::exists(fs::symlink_status(second)));
    files.request("node_lost", kDeadline);
    CHECK(contentOf(second) == "reason=node_lost\ndeadline=1767225630.250\n");
    CHECK(contentOf(target) == "keep me");
  }
}

TEST_CASE("a stop-file directory that is a link is refused", "[stop_files]") {
  TempDir dir;
  REQUIRE(fs::create_directory(dir.path + "/real"));
  fs::create_directory_symlink(dir.path + "/real", dir.path + "/link");
  StopFiles files(dir.path + "/link");
  CHECK_THROWS_AS(files.prepare(), std::system_error);
}
