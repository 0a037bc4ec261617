// The run's directories (agent/run_directories.h) where other users may write: a TMPDIR or a
// --log-dir someone else can change is refused (one line, StartupError: exit 2) or, for a
// group-writable --log-dir, warned about; and the guardian removes every directory it was given
// when the agent dies without a word (kill -9), not only the last.
#include "agent/run_directories.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "agent/startup_error.h"
#include "ddprun/common/process_environment.h"
#include "process/guardian.h"
#include "temp_dir.h"

using namespace ddprun::launcher;
using ddprun::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kOtherUid = 54321;

// TMPDIR set for one test, restored after it.
class TmpdirFor {
 public:
  explicit TmpdirFor(const std::string& value) {
    if (const char* old = ::getenv("TMPDIR")) old_ = old;
    ::setenv("TMPDIR", value.c_str(), 1);
  }
  ~TmpdirFor() {
    if (old_) {
      ::setenv("TMPDIR", old_->c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }

 private:
  std::optional<std::string> old_;
};

std::string startupError(LaunchConfig& config) {
  try {
    RunDirectories directories(config, ddprun::common::processEnvironment(), nullptr);
  } catch (const StartupError& error) {
    return error.what();
  }
  return {};
}

mode_t modeOf(const std::string& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

}  // namespace

TEST_CASE("run directories: fresh mode-0700 directories in a TMPDIR only we can change",
          "[run_directories]") {
  TempDir dir;
  TmpdirFor tmpdir(dir.path);
  LaunchConfig config;
  {
    RunDirectories directories(config, ddprun::common::processEnvironment(), nullptr);
    CHECK(modeOf(directories.scratchDir()) == 0700);
    CHECK(modeOf(directories.privateDir()) == 0700);
    CHECK(fs::path(directories.scratchDir()).parent_path() == dir.path);
  }
  CHECK(fs::is_empty(dir.path));

  SECTION("a sticky world-writable TMPDIR (as /tmp) is fine") {
    REQUIRE(::chmod(dir.path.c_str(), 01777) == 0);
    CHECK(startupError(config).empty());
  }
  SECTION("a world-writable TMPDIR without the sticky bit is refused, nothing made in it") {
    REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);
    const std::string message = startupError(config);
    CHECK_THAT(message, Catch::Contains(dir.path) && Catch::Contains("writable by every user") &&
                            Catch::Contains("set TMPDIR"));
    CHECK(message.find('\n') == std::string::npos);
    CHECK(fs::is_empty(dir.path));
  }
  SECTION("a TMPDIR of another user is refused") {
    if (::geteuid() != 0) return;
    REQUIRE(::chown(dir.path.c_str(), kOtherUid, kOtherUid) == 0);
    CHECK_THAT(startupError(config),
               Catch::Contains("owned by uid 54321") && Catch::Contains("set TMPDIR"));
  }
  SECTION("a TMPDIR that does not exist is skipped, as Python's tempfile skips it (#19)") {
    TmpdirFor missing(dir.path + "/none");
    CHECK(startupError(config).empty());
    const fs::path chosen = temporaryDirectoryFor(ddprun::common::processEnvironment());
    CHECK(chosen.is_absolute());
    CHECK_FALSE(chosen.string().starts_with(dir.path));
  }
  SECTION("a relative TMPDIR is made absolute") {
    const fs::path cwd = fs::current_path();
    fs::current_path(dir.path);
    fs::create_directory("relative");
    TmpdirFor relative("relative");
    const fs::path chosen = temporaryDirectoryFor(ddprun::common::processEnvironment());
    fs::current_path(cwd);
    CHECK(chosen == fs::path(dir.path) / "relative");
  }
}

TEST_CASE("run directories: a --log-dir others can change is refused, a group's is warned about",
          "[run_directories]") {
  TempDir dir;
  TmpdirFor tmpdir(dir.path);
  const std::string logs = dir.path + "/logs";
  LaunchConfig config;
  config.logs.dir = logs;
  config.rdzv.runId = "job";

  SECTION("made when missing, and this run's directory in it is fresh") {
    RunDirectories directories(config, ddprun::common::processEnvironment(), nullptr);
    CHECK(fs::path(directories.logRunDir()).parent_path() == logs);
    CHECK(modeOf(directories.logRunDir()) == 0700);
  }
  SECTION("world-writable without the sticky bit: refused") {
    REQUIRE(::mkdir(logs.c_str(), 0777) == 0);
    REQUIRE(::chmod(logs.c_str(), 0777) == 0);
    CHECK_THAT(startupError(config),
               Catch::Contains("--log-dir " + logs) && Catch::Contains("writable by every user"));
    CHECK(fs::is_empty(logs));
  }
  SECTION("under a world-writable directory without the sticky bit: refused") {
    const std::string shared = dir.path + "/shared";
    REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
    REQUIRE(::chmod(shared.c_str(), 0777) == 0);
    config.logs.dir = shared + "/mine";
    CHECK_THAT(startupError(config), Catch::Contains(shared + " is writable by every user"));
  }
  if (::geteuid() != 0) return;
  SECTION("another user's directory is never adopted") {
    REQUIRE(::mkdir(logs.c_str(), 0755) == 0);
    REQUIRE(::chown(logs.c_str(), kOtherUid, kOtherUid) == 0);
    CHECK_THAT(startupError(config), Catch::Contains("owned by uid 54321"));
    CHECK(fs::is_empty(logs));
  }
  SECTION("group-writable (another group) is used, with a warning") {
    REQUIRE(::mkdir(logs.c_str(), 0770) == 0);
    REQUIRE(::chown(logs.c_str(), 0, kOtherUid) == 0);
    REQUIRE(::chmod(logs.c_str(), 0770) == 0);
    CHECK(startupError(config).empty());
  }
}

TEST_CASE("the guardian removes every directory it was given when the agent dies",
          "[run_directories][guardian]") {
  TempDir dir;
  const std::string first = dir.path + "/scratch";
  const std::string second = dir.path + "/private";
  REQUIRE(::mkdir(first.c_str(), 0700) == 0);
  REQUIRE(::mkdir(second.c_str(), 0700) == 0);
  // The "agent": a child that starts a guardian, registers both, and dies without telling it.
  const pid_t agent = ::fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {
    auto guardian = Guardian::start();
    if (!guardian) ::_exit(3);
    guardian->removeOnDeath(first);
    guardian->removeOnDeath(second);
    guardian.release();  // no destructor: as after kill -9
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(agent, &status, 0) == agent);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((fs::exists(first) || fs::exists(second)) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_FALSE(fs::exists(first));
  CHECK_FALSE(fs::exists(second));
}
