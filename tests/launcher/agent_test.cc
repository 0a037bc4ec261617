// The ddprun agent as users run it: the real binary, real worker processes, real signals.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "subprocess.h"
#include "temp_dir.h"

using ddprun::test::Subprocess;
using ddprun::test::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kWorkers = std::string(DDPRUN_SOURCE_DIR) + "/tests/launcher/workers/";

std::vector<std::string> ddprunCommand(std::vector<std::string> args) {
  args.insert(args.begin(), DDPRUN_BIN);
  return args;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

int countMatching(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  int n = 0;
  for (const auto& line : lines(text)) n += std::regex_search(line, re) ? 1 : 0;
  return n;
}

// Alive and not a zombie.
bool running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

std::vector<pid_t> readPids(const std::string& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("pids.", 0) != 0) continue;
    std::ifstream in(entry.path());
    for (pid_t pid; in >> pid;) pids.push_back(pid);
  }
  return pids;
}

template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

}  // namespace

TEST_CASE("a standalone job runs its workers with torchrun's ranks and every line prefixed",
          "[agent]") {
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "4", kWorkers + "report.sh"}));
  REQUIRE(job.wait(30s) == 0);
  const std::string out = job.output();
  INFO(out << job.errors());
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(countMatching(out, fmt::format("^\\[default{}\\]:rank={} local_rank={} world=4 "
                                         "group_rank=0 group_world=1 restart=0 generation=0 "
                                         "master=127\\.0\\.0\\.1:[0-9]+$",
                                         rank, rank, rank)) == 1);
  }
}

TEST_CASE("the agent exits with the root cause's exit code and prints torchrun's summary",
          "[agent]") {
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "3", kWorkers + "report.sh",
                         "--fail-rank", "1", "--exit", "7"}));
  REQUIRE(job.wait(30s) == 7);
  const std::string errors = job.errors();
  INFO(errors);
  CHECK_THAT(errors, Catch::Contains("report.sh FAILED"));
  CHECK_THAT(errors, Catch::Contains("Root Cause (first observed failure):"));
  CHECK_THAT(errors, Catch::Matches("[\\s\\S]*rank\\s*:\\s*1 \\(local_rank: 1\\)[\\s\\S]*"));
  CHECK_THAT(errors, Catch::Matches("[\\s\\S]*exitcode\\s*:\\s*7[\\s\\S]*"));
  CHECK_THAT(job.output(), Catch::Contains("[default1]:rank=1"));
}

TEST_CASE("a worker killed by a signal makes the agent exit 128+signal", "[agent]") {
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "2", kWorkers + "report.sh",
                         "--fail-rank", "0", "--exit", "SIGKILL"}));
  REQUIRE(job.wait(30s) == 128 + SIGKILL);
  CHECK_THAT(job.errors(), Catch::Contains("Signal 9 (SIGKILL)"));
}

TEST_CASE("a worker killed with SIGKILL restarts the whole group, and the counts are right",
          "[agent]") {
  TempDir dir;
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "4", "--max-restarts", "2",
                         kWorkers + "report.sh", "--fail-rank", "2", "--fail-restart", "0",
                         "--exit", "SIGKILL", "--touch", dir.path, "--sleep", "0.2"}));
  REQUIRE(job.wait(60s) == 0);
  const std::string out = job.output();
  INFO(out << job.errors());
  // Round 0 (restart 0) ran all four, rank 2 died; round 1 (restart 1) ran all four again.
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(fs::exists(fmt::format("{}/ran.0.{}", dir.path, rank)));
    CHECK(fs::exists(fmt::format("{}/ran.1.{}", dir.path, rank)));
    CHECK_FALSE(fs::exists(fmt::format("{}/ran.2.{}", dir.path, rank)));
  }
  CHECK(countMatching(out, "restart=0 generation=0") == 4);
  CHECK(countMatching(out, "restart=1 generation=1") == 4);
}

TEST_CASE("restarts stop at --max-restarts and the job fails with the cause's code", "[agent]") {
  TempDir dir;
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                         kWorkers + "report.sh", "--fail-rank", "0", "--exit", "3", "--touch",
                         dir.path}));
  REQUIRE(job.wait(60s) == 3);
  for (int generation = 0; generation < 3; ++generation) {
    CHECK(fs::exists(fmt::format("{}/ran.{}.0", dir.path, generation)));
  }
  CHECK_FALSE(fs::exists(fmt::format("{}/ran.3.0", dir.path)));
  CHECK_THAT(job.errors(), Catch::Contains("after 2 restart(s)"));
}

TEST_CASE("kill -9 of the agent leaves nothing behind, grandchildren that ignore SIGTERM included",
          "[agent]") {
  TempDir dir;
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "3", kWorkers + "stubborn.sh", dir.path}));
  REQUIRE(eventually([&] { return countMatching(job.output(), "rank [0-9] ready") == 3; }, 20s));
  const auto pids = readPids(dir.path);
  REQUIRE(pids.size() == 9);  // per worker: itself, a grandchild, a grandchild in its own session
  for (pid_t pid : pids) REQUIRE(running(pid));
  job.signal(SIGKILL);
  REQUIRE(job.wait(5s) == 128 + SIGKILL);
  const auto killedAt = Clock::now();
  CHECK(eventually([&] {
    return std::none_of(pids.begin(), pids.end(), [](pid_t pid) { return running(pid); });
  }, 1s));
  INFO("gone after " << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killedAt).count() << " ms");
  for (pid_t pid : pids) CHECK_FALSE(running(pid));
}

TEST_CASE("kill -9 of the agent where no cgroup can hold the workers: descendants of an exited "
          "worker and ones in their own session die too",
          "[agent]") {
  // The same agent in a mount namespace without cgroup2 (what an unprivileged user gets on most
  // hosts): only process groups, the death signal and the DDPRUN_AGENT token are left.
  if (::geteuid() != 0) {
    WARN("needs root for unshare -m; skipped");
    return;
  }
  TempDir dir;
  const std::string withoutCgroup =
      "for m in $(awk '$9 == \"cgroup2\" { print $5 }' /proc/self/mountinfo); do "
      "umount -l \"$m\" || exit 1; done; exec \"$@\"";
  Subprocess job({"unshare", "--mount", "--propagation", "private", "sh", "-c", withoutCgroup, "sh",
                  DDPRUN_BIN, "--standalone", "--nproc-per-node", "3", kWorkers + "stubborn.sh",
                  dir.path, "--exit-rank", "0"},
                 {"LOGLEVEL=DEBUG"});
  REQUIRE(eventually([&] { return countMatching(job.output(), "rank [0-9] ready") == 3; }, 20s));
  // Rank 0 has exited, its two grandchildren (one in its own session) live on.
  REQUIRE(eventually([&] { return countMatching(job.errors(), "every local worker|failed") == 0 &&
                                  readPids(dir.path).size() == 8; }, 5s));
  const auto pids = readPids(dir.path);
  REQUIRE(eventually([&] {
    return std::all_of(pids.begin(), pids.end(), [](pid_t pid) { return running(pid); });
  }, 2s));
  job.signal(SIGKILL);
  REQUIRE(job.wait(5s) == 128 + SIGKILL);
  CHECK(eventually([&] {
    return std::none_of(pids.begin(), pids.end(), [](pid_t pid) { return running(pid); });
  }, 1s));
  for (pid_t pid : pids) {
    CHECK_FALSE(running(pid));
    if (running(pid)) ::kill(pid, SIGKILL);
  }
}

TEST_CASE("SIGTERM reaches every worker's group, then SIGKILL after --shutdown-timeout",
          "[agent]") {
  TempDir dir;
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "2", "--shutdown-timeout", "1",
                         kWorkers + "stubborn.sh", dir.path}));
  REQUIRE(eventually([&] { return countMatching(job.output(), "rank [0-9] ready") == 2; }, 20s));
  const auto pids = readPids(dir.path);
  const auto sent = Clock::now();
  job.signal(SIGTERM);
  const auto status = job.wait(10s);
  const double took = std::chrono::duration<double>(Clock::now() - sent).count();
  CHECK(status == 128 + SIGTERM);
  CHECK(took >= 0.9);
  CHECK(took < 2.5);
  for (int rank = 0; rank < 2; ++rank) CHECK(fs::exists(fmt::format("{}/term.{}", dir.path, rank)));
  for (pid_t pid : pids) CHECK_FALSE(running(pid));
  CHECK_THAT(job.errors(), Catch::Contains("received SIGTERM"));
}

TEST_CASE("the log directory keeps every attempt", "[agent]") {
  TempDir dir;
  Subprocess job(ddprunCommand({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                         "--log-dir", dir.path, "--rdzv-id", "logjob", "--tee", "3",
                         kWorkers + "report.sh", "--fail-rank", "0", "--fail-restart", "0",
                         "--sleep", "0.3"}));  // everyone has reported before rank 0 fails
  REQUIRE(job.wait(30s) == 0);
  // --standalone replaces the run id with a random one: find it.
  std::vector<fs::path> runs(fs::directory_iterator(dir.path), fs::directory_iterator());
  REQUIRE(runs.size() == 1);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int local = 0; local < 2; ++local) {
      const fs::path out = runs[0] / fmt::format("attempt_{}/{}/stdout.log", attempt, local);
      REQUIRE(fs::exists(out));
      std::ifstream in(out);
      std::string line;
      std::getline(in, line);
      CHECK_THAT(line, Catch::Contains(fmt::format("rank={} ", local)));
      CHECK_THAT(line, Catch::Contains(fmt::format("restart={}", attempt)));
    }
  }
  CHECK(fs::exists(runs[0] / "attempt_0/0/stderr.log"));
}

TEST_CASE("an error file left by an earlier job with the same --log-dir and run id is not "
          "taken for a new failure",
          "[agent]") {
  TempDir dir;
  const std::string script = dir.path + "/fail.sh";
  // The first job's worker writes an error file as @record would, then fails.
  std::ofstream(script) << "#!/bin/sh\n"
                           "if [ \"$1\" = record ]; then\n"
                           "  printf '{\"message\": {\"message\": \"ValueError: stale\", "
                           "\"extraInfo\": {\"py_callstack\": \"old traceback\", "
                           "\"timestamp\": \"1\"}}}' > \"$TORCHELASTIC_ERROR_FILE\"\n"
                           "fi\n"
                           "exit 5\n";
  fs::permissions(script, fs::perms::owner_all);
  for (const std::string mode : {"record", "plain"}) {
    Subprocess job(ddprunCommand({"--nproc-per-node", "1", "--master-port", "0", "--log-dir",
                                  dir.path, "--rdzv-id", "samejob", script, mode}));
    REQUIRE(job.wait(30s) == 5);
    if (mode == "record") {
      CHECK_THAT(job.errors(), Catch::Contains("old traceback"));
    } else {
      CHECK_THAT(job.errors(), !Catch::Contains("old traceback"));
      CHECK_THAT(job.errors(), !Catch::Contains("ValueError: stale"));
    }
  }
}

TEST_CASE("two standalone jobs on one host never meet", "[agent]") {
  Subprocess first(ddprunCommand({"--standalone", "--nproc-per-node", "2", kWorkers + "report.sh",
                           "--sleep", "1"}));
  Subprocess second(ddprunCommand({"--standalone", "--nproc-per-node", "3", kWorkers + "report.sh",
                            "--sleep", "1"}));
  REQUIRE(first.wait(30s) == 0);
  REQUIRE(second.wait(30s) == 0);
  CHECK(countMatching(first.output(), "world=2 ") == 2);
  CHECK(countMatching(second.output(), "world=3 ") == 3);
}

TEST_CASE("bad input is one line naming the fix, exit code 2, and nothing started", "[agent]") {
  TempDir dir;
  const std::string report = kWorkers + "report.sh";
  const std::string shellScript = dir.path + "/job.sh";  // a script that is not Python
  std::ofstream(shellScript) << "#!/bin/sh\necho hello\n";
  fs::permissions(shellScript, fs::perms::owner_read | fs::perms::owner_write);
  const std::vector<std::vector<std::string>> cases = {
      {"--nnodes", "two", report},
      {"--nnodes", "3:2", report},
      {"--nnodes", "1:2:3", report},
      {"--max-restarts", "-1", report},
      {"--rdzv-backend", "etcd-v3", report},
      {"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:99999", report},
      {"--rdzv-backend", "c10d", "--rdzv-endpoint", "no-such-host.invalid:29400", report},
      {"--nproc", "2", report},
      {"--nproc-per-node", "0", report},
      {"--standalone", "--nnodes", "2", report},
      {"--nnodes", "2", "--master-port", "0", report},
      {"-m", "--no-python", "json.tool"},
      {"--no-python", shellScript},
      {shellScript},
      {dir.path + "/missing.py"},
      {"--log-dir", "/proc/ddprun-cannot-be-here", report},
      {"--redirects", "7", report},
  };
  for (std::vector<std::string> args : cases) {
    args.insert(args.end(), {"--touch", dir.path});  // report.sh's argument: it would leave a mark
    Subprocess job(ddprunCommand(args));
    const auto status = job.wait(20s);
    std::string command;
    for (const auto& arg : args) command += " " + arg;
    INFO("ddprun" << command << "\nstderr: " << job.errors());
    CHECK(status == 2);
    const auto errorLines = lines(job.errors());
    CHECK(errorLines.size() == 1);
    if (!errorLines.empty()) CHECK_THAT(errorLines[0], Catch::StartsWith("ddprun: error: "));
    CHECK(job.output().empty());
  }
  std::vector<fs::path> marks(fs::directory_iterator(dir.path), fs::directory_iterator());
  CHECK(std::none_of(marks.begin(), marks.end(), [](const fs::path& p) {
    return p.filename().string().starts_with("ran.");
  }));
}

TEST_CASE("a static rank 0 whose port is taken says so and exits 2", "[agent]") {
  // Take a port with a first static job, then point a second one at it.
  Subprocess first(ddprunCommand({"--nnodes", "2", "--node-rank", "0", "--master-port", "29871",
                           "--rdzv-conf", "join_timeout=20", kWorkers + "report.sh"}));
  std::this_thread::sleep_for(300ms);
  Subprocess second(ddprunCommand({"--nnodes", "2", "--node-rank", "0", "--master-port", "29871",
                            kWorkers + "report.sh"}));
  REQUIRE(second.wait(10s) == 2);
  CHECK_THAT(second.errors(), Catch::Contains("29871"));
  CHECK_THAT(second.errors(), Catch::Contains("already in use"));
  first.signal(SIGTERM);
  CHECK(first.wait(10s) == 128 + SIGTERM);
}
