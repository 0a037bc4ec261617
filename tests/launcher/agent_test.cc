// The ddprun agent as users run it: the real binary, real worker processes, real signals.
// Every wait is bounded well below the test's CTest TIMEOUT (180 s) and says what it saw when it
// gives up (waits.h).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ddprun_command.h"
#include "fake_peer.h"
#include "lines.h"
#include "ports.h"
#include "raw_client.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

extern char** environ;

namespace {

const std::string kReport = launcherWorker("report.sh");
const std::string kStubborn = launcherWorker("stubborn.sh");

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

// The workers' pids (stubborn.sh writes them) that still run, and the process tree under them.
std::string describePids(const std::vector<pid_t>& pids) {
  std::string alive;
  for (pid_t pid : pids) {
    if (running(pid)) alive += " " + std::to_string(pid);
  }
  return fmt::format("of {} worker pids, still running:{}\n{}", pids.size(),
                     alive.empty() ? " none" : alive, ddprun::test::processTree(pids));
}

// A worker script that writes an error file as torch's @record would (when its first argument is
// `onlyWithArgument`, if that is given), then exits with `code`.
void writeRecordingScript(const std::string& path, const std::string& message,
                          const std::string& traceback, int code,
                          const std::string& onlyWithArgument = "") {
  const std::string record = fmt::format(
      "printf '{{\"message\": {{\"message\": \"{}\", \"extraInfo\": {{\"py_callstack\": "
      "\"{}\", \"timestamp\": \"1\"}}}}}}' > \"$TORCHELASTIC_ERROR_FILE\"\n",
      message, traceback);
  std::ofstream(path) << "#!/bin/sh\n"
                      << (onlyWithArgument.empty()
                              ? record
                              : fmt::format("if [ \"$1\" = {} ]; then\n  {}fi\n", onlyWithArgument,
                                            record))
                      << "exit " << code << "\n";
  fs::permissions(path, fs::perms::owner_all);
}

// Whatever of `pids` a failed test left running is killed (they ignore SIGTERM and sleep 300 s).
struct KillLeftovers {
  const std::vector<pid_t>& pids;
  ~KillLeftovers() {
    for (pid_t pid : pids) {
      if (running(pid)) ::kill(pid, SIGKILL);
    }
  }
};

}  // namespace

TEST_CASE("a standalone job runs its workers with torchrun's ranks and every line prefixed",
          "[agent]") {
  Subprocess job(ddprunCommand(4, {"--no-python", kReport}));
  REQUIRE(exitsWith(job, 0, 30s));
  const std::string out = job.output();
  INFO(out << job.errors());
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(countLines(out, fmt::format("^\\[default{}\\]:rank={} local_rank={} world=4 "
                                      "group_rank=0 group_world=1 restart=0 generation=0 "
                                      "master=127\\.0\\.0\\.1:[0-9]+$",
                                      rank, rank, rank)) == 1);
  }
}

TEST_CASE("the agent exits with the root cause's exit code and prints torchrun's summary",
          "[agent]") {
  Subprocess job(ddprunCommand(3, {"--no-python", kReport, "--fail-rank", "1", "--exit", "7"}));
  REQUIRE(exitsWith(job, 7, 30s));
  const std::string errors = job.errors();
  INFO(errors);
  CHECK_THAT(errors, Catch::Contains("report.sh FAILED"));
  CHECK_THAT(errors, Catch::Contains("Root Cause (first observed failure):"));
  CHECK_THAT(errors, Catch::Matches("[\\s\\S]*rank\\s*:\\s*1 \\(local_rank: 1\\)[\\s\\S]*"));
  CHECK_THAT(errors, Catch::Matches("[\\s\\S]*exitcode\\s*:\\s*7[\\s\\S]*"));
  CHECK_THAT(job.output(), Catch::Contains("[default1]:rank=1"));
}

TEST_CASE("a worker killed by a signal makes the agent exit 128+signal", "[agent]") {
  Subprocess job(
      ddprunCommand(2, {"--no-python", kReport, "--fail-rank", "0", "--exit", "SIGKILL"}));
  REQUIRE(exitsWith(job, 128 + SIGKILL, 30s));
  CHECK_THAT(job.errors(), Catch::Contains("Signal 9 (SIGKILL)"));
}

TEST_CASE("a worker killed with SIGKILL restarts the whole group, and the counts are right",
          "[agent]") {
  TempDir dir;
  TempDir flags;
  const std::string go = flags.path + "/go";
  // Every worker reports, then waits for `go`, which the test gives once all four of the first
  // round have reported: rank 2 dies only after everyone has run (however slow the machine).
  Subprocess job(ddprunCommand(
      4, {"--max-restarts", "2", "--no-python", kReport, "--fail-rank", "2", "--fail-restart", "0",
          "--exit", "SIGKILL", "--touch", dir.path, "--until", go}));
  REQUIRE(eventually([&] { return countLines(job.output(), "restart=0 generation=0") == 4; }, 30s,
                     {&job}));
  std::ofstream(go).put('\n');
  REQUIRE(exitsWith(job, 0, 45s));
  const std::string out = job.output();
  INFO(out << job.errors());
  // Round 0 (restart 0) ran all four, rank 2 died; round 1 (restart 1) ran all four again.
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(fs::exists(fmt::format("{}/ran.0.{}", dir.path, rank)));
    CHECK(fs::exists(fmt::format("{}/ran.1.{}", dir.path, rank)));
    CHECK_FALSE(fs::exists(fmt::format("{}/ran.2.{}", dir.path, rank)));
  }
  CHECK(countLines(out, "restart=0 generation=0") == 4);
  CHECK(countLines(out, "restart=1 generation=1") == 4);
}

TEST_CASE("restarts stop at --max-restarts and the job fails with the cause's code", "[agent]") {
  TempDir dir;
  // Progress before each failure (a heartbeat): the same failure again is then no user error.
  Subprocess job(ddprunCommand(2, {"--max-restarts", "2", "--no-python", kReport, "--fail-rank",
                                   "0", "--exit", "3", "--touch", dir.path, "--progress"}));
  REQUIRE(exitsWith(job, 3, 60s));
  for (int generation = 0; generation < 3; ++generation) {
    CHECK(fs::exists(fmt::format("{}/ran.{}.0", dir.path, generation)));
  }
  CHECK_FALSE(fs::exists(fmt::format("{}/ran.3.0", dir.path)));
  CHECK_THAT(job.errors(), Catch::Contains("after 2 restart(s)"));
}

TEST_CASE("kill -9 of the agent leaves nothing behind, grandchildren that ignore SIGTERM included",
          "[agent]") {
  TempDir dir;
  Subprocess job(ddprunCommand(3, {"--no-python", kStubborn, dir.path}));
  REQUIRE(
      eventually([&] { return countLines(job.output(), "rank [0-9] ready") == 3; }, 30s, {&job}));
  const auto pids = readPids(dir.path);
  KillLeftovers leftovers{pids};
  {
    INFO(describePids(pids));
    REQUIRE(pids.size() == 9);  // per worker: itself, a grandchild, a grandchild in its own session
    for (pid_t pid : pids) REQUIRE(running(pid));
  }
  job.signal(SIGKILL);
  REQUIRE(exitsWith(job, 128 + SIGKILL, 10s));
  const auto killedAt = Clock::now();
  // They go at once (well under a second when the machine is idle); the bound is for a loaded one.
  CHECK(eventually(
      [&] {
        return std::none_of(pids.begin(), pids.end(), [](pid_t pid) { return running(pid); });
      },
      10s, [&] { return describePids(pids); }));
  INFO("gone after "
       << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killedAt).count()
       << " ms");
  for (pid_t pid : pids) CHECK_FALSE(running(pid));
}

TEST_CASE(
    "kill -9 of the agent where no cgroup can hold the workers: descendants of an exited "
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
  std::vector<std::string> argv = {"unshare", "--mount", "--propagation", "private",
                                   "sh",      "-c",      withoutCgroup,   "sh"};
  const auto agent = ddprunCommand(3, {"--no-python", kStubborn, dir.path, "--exit-rank", "0"});
  argv.insert(argv.end(), agent.begin(), agent.end());
  Subprocess job(argv, {"LOGLEVEL=DEBUG"});
  REQUIRE(
      eventually([&] { return countLines(job.output(), "rank [0-9] ready") == 3; }, 30s, {&job}));
  // Rank 0 has exited, its two grandchildren (one in its own session) live on.
  REQUIRE(eventually(
      [&] {
        return countLines(job.errors(), "every local worker|failed") == 0 &&
               readPids(dir.path).size() == 8;
      },
      15s, {&job}));
  const auto pids = readPids(dir.path);
  KillLeftovers leftovers{pids};
  REQUIRE(eventually(
      [&] { return std::all_of(pids.begin(), pids.end(), [](pid_t pid) { return running(pid); }); },
      10s, [&] { return describePids(pids); }));
  job.signal(SIGKILL);
  REQUIRE(exitsWith(job, 128 + SIGKILL, 10s));
  CHECK(eventually(
      [&] {
        return std::none_of(pids.begin(), pids.end(), [](pid_t pid) { return running(pid); });
      },
      10s, [&] { return describePids(pids); }));
  for (pid_t pid : pids) CHECK_FALSE(running(pid));
}

TEST_CASE("SIGTERM reaches every worker, then SIGKILL to its whole tree after --shutdown-timeout",
          "[agent]") {
  TempDir dir;
  Subprocess job(ddprunCommand(2, {"--shutdown-timeout", "1", "--no-python", kStubborn, dir.path}));
  REQUIRE(
      eventually([&] { return countLines(job.output(), "rank [0-9] ready") == 2; }, 30s, {&job}));
  const auto pids = readPids(dir.path);
  KillLeftovers leftovers{pids};
  const auto sent = Clock::now();
  job.signal(SIGTERM);
  const auto status = exitStatus(job, 20s);
  const double took = std::chrono::duration<double>(Clock::now() - sent).count();
  INFO("exited " << took << " s after SIGTERM");
  CHECK(status == 128 + SIGTERM);
  // Not before the timeout, and not much after it: without the SIGKILL these workers, which
  // ignore SIGTERM, would keep the agent forever (the upper bound leaves room for a loaded
  // machine).
  CHECK(took >= 0.9);
  CHECK(took < 10.0);
  for (int rank = 0; rank < 2; ++rank) CHECK(fs::exists(fmt::format("{}/term.{}", dir.path, rank)));
  for (pid_t pid : pids) CHECK_FALSE(running(pid));
  CHECK_THAT(job.errors(), Catch::Contains("received SIGTERM"));
}

TEST_CASE(
    "SIGTERM: what a worker left in its process group when the signal ended it is waited for "
    "until --shutdown-timeout, then killed, and nothing is left",
    "[agent][drain]") {
  // The worker is a shell that the SIGTERM ends at once; its child (a trainer behind a wrapper, a
  // DataLoader worker) is not signalled and stays in the worker's process group.
  TempDir dir;
  Subprocess job(ddprunCommand(
      2, {"--shutdown-timeout", "2", "--no-python", "sh", "-c",
          fmt::format("sleep 300 & echo $! > {}/pids.$RANK; echo \"rank $RANK ready\"; wait",
                      dir.path)}));
  REQUIRE(
      eventually([&] { return countLines(job.output(), "rank [0-9] ready") == 2; }, 30s, {&job}));
  const auto pids = readPids(dir.path);
  KillLeftovers leftovers{pids};
  REQUIRE(pids.size() == 2);
  const auto sent = Clock::now();
  job.signal(SIGTERM);
  const auto status = exitStatus(job, 20s);
  const double took = std::chrono::duration<double>(Clock::now() - sent).count();
  INFO("exited " << took << " s after SIGTERM\n" << job.errors());
  CHECK(status == 128 + SIGTERM);
  CHECK(took >= 1.9);  // the children were given the stop's time
  CHECK(took < 10.0);
  CHECK_THAT(job.errors(), Catch::Contains("every worker has exited; waiting up to"));
  CHECK(eventually(
      [&] {
        return std::none_of(pids.begin(), pids.end(), [](pid_t pid) { return running(pid); });
      },
      5s, [&] { return describePids(pids); }));
}

TEST_CASE("the log directory keeps every attempt", "[agent]") {
  TempDir dir;
  TempDir flags;
  const std::string go = flags.path + "/go";
  // Rank 0 fails in attempt 0 only once both ranks have reported (the test gives `go` then).
  Subprocess job(ddprunCommand(
      2, {"--max-restarts", "1", "--log-dir", dir.path, "--rdzv-id", "logjob", "--tee", "3",
          "--no-python", kReport, "--fail-rank", "0", "--fail-restart", "0", "--until", go}));
  REQUIRE(eventually([&] { return countLines(job.output(), "restart=0 ") == 2; }, 30s, {&job}));
  std::ofstream(go).put('\n');
  REQUIRE(exitsWith(job, 0, 30s));
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

TEST_CASE(
    "an error file left by an earlier job with the same --log-dir and run id is not "
    "taken for a new failure",
    "[agent]") {
  TempDir dir;
  const std::string script = dir.path + "/fail.sh";
  // The first job's worker writes an error file as @record would, then fails.
  writeRecordingScript(script, "ValueError: stale", "old traceback", 5,
                       /*onlyWithArgument=*/"record");
  for (const std::string mode : {"record", "plain"}) {
    Subprocess job(ddprunCommand({"--nproc-per-node", "1", "--master-port", "0", "--log-dir",
                                  dir.path, "--rdzv-id", "samejob", "--no-python", script, mode}));
    REQUIRE(exitsWith(job, 5, 30s));
    if (mode == "record") {
      CHECK_THAT(job.errors(), Catch::Contains("old traceback"));
    } else {
      CHECK_THAT(job.errors(), !Catch::Contains("old traceback"));
      CHECK_THAT(job.errors(), !Catch::Contains("ValueError: stale"));
    }
  }
}

TEST_CASE("two standalone jobs on one host never meet", "[agent]") {
  Subprocess first(ddprunCommand(2, {"--no-python", kReport, "--sleep", "1"}));
  Subprocess second(ddprunCommand(3, {"--no-python", kReport, "--sleep", "1"}));
  const Deadline deadline(45s);
  REQUIRE(exitsWith(first, 0, deadline.left(), {&second}));
  REQUIRE(exitsWith(second, 0, deadline.left(), {&first}));
  CHECK(countLines(first.output(), "world=2 ") == 2);
  CHECK(countLines(second.output(), "world=3 ") == 3);
}

TEST_CASE("bad input is one line naming the fix, exit code 2, and nothing started", "[agent]") {
  TempDir dir;
  const std::string shellScript = dir.path + "/job.sh";  // a script that is not Python
  std::ofstream(shellScript) << "#!/bin/sh\necho hello\n";
  fs::permissions(shellScript, fs::perms::owner_read | fs::perms::owner_write);
  const std::vector<std::vector<std::string>> cases = {
      {"--nnodes", "two", "--no-python", kReport},
      {"--nnodes", "3:2", "--no-python", kReport},
      {"--nnodes", "1:2:3", "--no-python", kReport},
      {"--max-restarts", "-1", "--no-python", kReport},
      {"--rdzv-backend", "zookeeper", "--no-python", kReport},
      {"--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "127.0.0.1:2379:1", "--no-python", kReport},
      {"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:99999", "--no-python", kReport},
      {"--nproc", "2", "--no-python", kReport},
      {"--nproc-per-node", "0", "--no-python", kReport},
      {"--standalone", "--nnodes", "2", "--no-python", kReport},
      {"--nnodes", "2", "--master-port", "0", "--no-python", kReport},
      {"-m", "--no-python", "json.tool"},
      {"--no-python", shellScript},
      {shellScript},
      {dir.path + "/missing.py"},
      {"--log-dir", "/proc/ddprun-cannot-be-here", "--no-python", kReport},
      {"--redirects", "7", "--no-python", kReport},
  };
  // All at once, under one deadline: one slow case (a name lookup) cannot add up with the others.
  std::vector<std::unique_ptr<Subprocess>> jobs;
  for (std::vector<std::string> args : cases) {
    args.insert(args.end(), {"--touch", dir.path});  // report.sh's argument: it would leave a mark
    jobs.push_back(std::make_unique<Subprocess>(ddprunCommand(args)));
  }
  const Deadline deadline(60s);
  for (auto& job : jobs) {
    const bool refused = exitsWith(*job, 2, deadline.left());
    INFO(job->command() << "\nstderr: " << job->errors());
    CHECK(refused);
    const auto errorLines = ddprun::test::lines(job->errors());
    CHECK(errorLines.size() == 1);
    if (!errorLines.empty()) CHECK_THAT(errorLines[0], Catch::StartsWith("ddprun: error: "));
    CHECK(job->output().empty());
  }
  std::vector<fs::path> marks(fs::directory_iterator(dir.path), fs::directory_iterator());
  CHECK(std::none_of(marks.begin(), marks.end(),
                     [](const fs::path& p) { return p.filename().string().starts_with("ran."); }));
}

TEST_CASE(
    "a store host name that never resolves is waited for up to the join timeout, then one "
    "error line, exit code 2",
    "[agent]") {
  // Not refused up front: a Kubernetes service name appears seconds after its pod (#21).
  TempDir dir;
  Subprocess job(ddprunCommand(
      {"--rdzv-backend", "c10d", "--rdzv-endpoint", "no-such-host.invalid:29400", "--rdzv-conf",
       "join_timeout=3,read_timeout=1", "--no-python", kReport, "--touch", dir.path}));
  REQUIRE(exitsWith(job, 2, 30s));
  INFO(job.errors());
  CHECK_THAT(
      job.errors(),
      Catch::Contains("host 'no-such-host.invalid' in --rdzv-endpoint does not resolve yet"));
  CHECK_THAT(job.errors(),
             Catch::Contains("waiting for the rendezvous store at no-such-host.invalid:29400: "
                             "name not resolved yet"));
  CHECK(countLines(job.errors(), "^ddprun: error: ") == 1);
  CHECK_THAT(job.errors(), Catch::Contains("did not resolve within the join timeout (3 s)"));
  CHECK(job.output().empty());
  CHECK(fs::is_empty(dir.path));  // nothing ran
}

TEST_CASE("a static rank 0 whose port is taken says so and exits 2", "[agent]") {
  // Take a port with a first static job (once it says it hosts the store there), then point a
  // second one at it.
  const std::string port = std::to_string(ddprun::test::freePort());
  Subprocess first(ddprunCommand({"--nnodes", "2", "--node-rank", "0", "--master-port", port,
                                  "--rdzv-conf", "join_timeout=60", "--no-python", kReport}),
                   {"LOGLEVEL=INFO"});
  REQUIRE(
      eventually([&] { return countLines(first.errors(), "hosting the rendezvous store") == 1; },
                 20s, {&first}));
  Subprocess second(ddprunCommand(
      {"--nnodes", "2", "--node-rank", "0", "--master-port", port, "--no-python", kReport}));
  REQUIRE(exitsWith(second, 2, 20s, {&first}));
  CHECK_THAT(second.errors(), Catch::Contains(port));
  CHECK_THAT(second.errors(), Catch::Contains("already in use"));
  first.signal(SIGTERM);
  CHECK(exitsWith(first, 128 + SIGTERM, 20s));
}

TEST_CASE("one worker's stdout reaches ddprun's stdout byte for byte, as under torchrun",
          "[agent]") {
  // Binary bytes, a NUL, and a last line without a newline: nothing added, nothing rewritten.
  Subprocess job(ddprunCommand({"--nproc-per-node", "1", "--master-port", "0", "--no-python",
                                "/bin/sh", "-c", "printf '\\000\\001bin\\nlast line'"}));
  REQUIRE(exitsWith(job, 0, 30s));
  CHECK(job.output() == std::string("\0\001bin\nlast line", 15));
}

TEST_CASE("an empty TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE turns the prefix off", "[agent]") {
  Subprocess job(ddprunCommand(2, {"--no-python", "/bin/sh", "-c", "echo rank $RANK"}),
                 {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="});
  REQUIRE(exitsWith(job, 0, 30s));
  INFO(job.output());
  CHECK(countLines(job.output(), "^rank [01]$") == 2);
}

TEST_CASE("with a log dir, every run writes into a directory of its own, never into another run's",
          "[agent]") {
  TempDir dir;
  for (int run = 0; run < 2; ++run) {
    Subprocess job(
        ddprunCommand({"--nproc-per-node", "1", "--master-port", "0", "--log-dir", dir.path,
                       "--tee", "3", "--no-python", "/bin/sh", "-c", "echo run output"}));
    REQUIRE(exitsWith(job, 0, 30s));
  }
  // torchrun's layout: <log-dir>/<run id>_<random>/attempt_<n>/<local rank>/.
  std::vector<fs::path> runs(fs::directory_iterator(dir.path), fs::directory_iterator());
  REQUIRE(runs.size() == 2);
  for (const fs::path& run : runs) {
    CHECK(run.filename().string().starts_with("none_"));
    std::ifstream in(run / "attempt_0/0/stdout.log");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(all == "run output\n");  // one run's output, once
  }
}

TEST_CASE("the error file the failure summary names still exists after ddprun exits", "[agent]") {
  TempDir dir;
  const std::string script = dir.path + "/record.sh";
  writeRecordingScript(script, "ValueError: kept", "tb", 3);
  Subprocess job(ddprunCommand(1, {"--no-python", script}));
  REQUIRE(exitsWith(job, 3, 30s));
  const std::string errors = job.errors();
  INFO(errors);
  const auto at = errors.find("error_file: /");
  REQUIRE(at != std::string::npos);
  const std::string path = errors.substr(at + 12, errors.find('\n', at) - at - 12);
  CHECK(fs::exists(path));
  fs::remove_all(fs::path(path).parent_path().parent_path().parent_path());  // the kept directory
}

TEST_CASE(
    "the run's temporary directories are gone when ddprun exits 0, and after a failure only "
    "the scratch directory with the workers' error-file directories is left",
    "[agent]") {
  // The private directory holds the heartbeat files, the stack hook's python/ and its dumps
  // itself (no directory of their own: docs/benchmarks.md, eighth pass); the two trees are
  // removed side by side at the end.
  TempDir tmp;
  const std::string check =
      "test -f \"$DDPRUN_HEARTBEAT_FILE\" && test -f \"${PYTHONPATH%%:*}/sitecustomize.py\" && "
      "test \"$(dirname \"$DDPRUN_HEARTBEAT_FILE\")\" = \"$DDPRUN_STACK_DIR\" && "
      "test -d \"$(dirname \"$TORCHELASTIC_ERROR_FILE\")\" && exit \"$1\"";
  {
    Subprocess job(ddprunCommand(4, {"--no-python", "/bin/sh", "-c", check, "sh", "0"}),
                   {"TMPDIR=" + tmp.path});
    REQUIRE(exitsWith(job, 0, 30s));
    INFO(job.errors());
    CHECK(fs::is_empty(tmp.path));
  }
  {
    Subprocess job(ddprunCommand(2, {"--no-python", "/bin/sh", "-c", check, "sh", "3"}),
                   {"TMPDIR=" + tmp.path});
    REQUIRE(exitsWith(job, 3, 30s));
    INFO(job.errors());
    std::vector<std::string> left;
    for (const auto& entry : fs::directory_iterator(tmp.path))
      left.push_back(entry.path().filename().string());
    REQUIRE(left.size() == 1);
    CHECK(left[0].rfind(fmt::format("ddprun-{}-", job.pid()), 0) == 0);  // the scratch directory
    CHECK(fs::is_directory(tmp.path + "/" + left[0] + "/attempt_0/0"));
    CHECK(fs::is_directory(tmp.path + "/" + left[0] + "/attempt_0/1"));
  }
}

TEST_CASE(
    "a run-path script: an uncaught exception's traceback is in the summary, as under torchrun",
    "[agent]") {
  TempDir dir;
  const std::string script = dir.path + "/boom.py";
  std::ofstream(script) << "def fail():\n    raise RuntimeError('runpath-boom')\nfail()\n";
  Subprocess job(ddprunCommand(1, {"--run-path", script}), {"PYTHON_EXEC=/usr/bin/python3"});
  REQUIRE(exitsWith(job, 1, 30s));
  const std::string errors = job.errors();
  INFO(errors);
  CHECK_THAT(errors, Catch::Contains("RuntimeError: runpath-boom"));
  CHECK_THAT(errors, Catch::Contains("in fail"));  // the stack, from the error file
  CHECK_THAT(errors, !Catch::Contains("error_file: <N/A>"));
}

TEST_CASE("a console nobody reads does not stop the agent: SIGTERM still ends everything in time",
          "[agent]") {
  // ddprun's stdout is a pipe the test never reads (a paused pager, a stuck log shipper); the
  // workers write as fast as they can and ignore SIGTERM.
  int console[2];
  REQUIRE(::pipe2(console, O_CLOEXEC) == 0);
  const std::string marker = fmt::format("stalled-console-{}", ::getpid());
  const std::vector<std::string> argv = ddprunCommand(
      2,
      {"--shutdown-timeout", "2", "--no-python", "/bin/sh", "-c",
       "trap '' TERM; while :; do echo " + marker + " 0123456789abcdefghijklmnopqrstuvwxyz; done"});
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, console[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t agent = -1;
  REQUIRE(::posix_spawn(&agent, args[0], &actions, nullptr, args.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(console[1]);
  const auto workersRunning = [&] {
    // "[s]talled": the pattern does not match pgrep's own shell.
    return ::system(fmt::format("pgrep -f '[s]{} 0123' > /dev/null", marker.substr(1)).c_str()) ==
           0;
  };
  // The pipe fills up: the workers are running and the console has stalled.
  REQUIRE(eventually(workersRunning, 20s, [] { return std::string("no worker started"); }));
  std::this_thread::sleep_for(1s);
  const auto stopped = Clock::now();
  ::kill(agent, SIGTERM);
  int status = 0;
  bool exited = false;
  while (Clock::now() - stopped < 20s && !exited) {
    exited = ::waitpid(agent, &status, WNOHANG) == agent;
    if (!exited) std::this_thread::sleep_for(20ms);
  }
  const double took = std::chrono::duration<double>(Clock::now() - stopped).count();
  if (!exited) {
    ::kill(agent, SIGKILL);
    ::waitpid(agent, &status, 0);
  }
  ::close(console[0]);
  INFO("the agent took " << took << " s after SIGTERM; workers left: " << workersRunning());
  CHECK(exited);
  CHECK(took < 10.0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM));
  CHECK(eventually([&] { return !workersRunning(); }, 5s,
                   [] { return std::string("workers still run"); }));
  if (workersRunning())
    CHECK(::system(fmt::format("pkill -9 -f '[s]{} 0123'", marker.substr(1)).c_str()) >= 0);
}

TEST_CASE(
    "ddprun ... | head: when the reader of its output goes away, the workers are stopped "
    "and the agent exits 128+SIGPIPE",
    "[agent]") {
  // `head -n 2` exits after two lines; the workers would write forever.
  Subprocess job({"/bin/bash", "-c",
                  fmt::format("{} --standalone --nproc-per-node 2 --no-python /bin/sh -c "
                              "'while :; do echo line $RANK; sleep 0.01; done' | head -n 2; "
                              "echo \"ddprun exited ${{PIPESTATUS[0]}}\" >&2; exit 0",
                              DDPRUN_BIN)});
  REQUIRE(exitsWith(job, 0, 30s));
  INFO(job.output() << job.errors());
  CHECK(countLines(job.output(), "^\\[default[01]\\]:line [01]$") == 2);
  CHECK_THAT(job.errors(), Catch::Contains("closed by its reader"));
  CHECK_THAT(job.errors(), Catch::Contains("ddprun exited 141"));
}

TEST_CASE(
    "redirects or tee without a log dir write into a temporary log directory, as torchrun does",
    "[agent]") {
  Subprocess job(
      ddprunCommand(2, {"-r", "3", "--no-python", "/bin/sh", "-c", "echo hidden $RANK"}));
  REQUIRE(exitsWith(job, 0, 30s));
  INFO(job.errors());
  CHECK(countLines(job.output(), "hidden") == 0);  // redirected: not on the console
  const std::string errors = job.errors();
  const auto at = errors.find("log files go under ");
  REQUIRE(at != std::string::npos);
  const std::string dir = errors.substr(at + 19, errors.find('\n', at) - at - 19);
  std::vector<fs::path> runs{fs::directory_iterator(dir), fs::directory_iterator()};
  REQUIRE(runs.size() == 1);
  std::ifstream in(runs[0] / "attempt_0/1/stdout.log");
  std::string line;
  std::getline(in, line);
  CHECK(line == "hidden 1");
  fs::remove_all(dir);
}

TEST_CASE(
    "on a terminal, a native worker's line shows when it is printed, not when its buffer "
    "fills",
    "[agent]") {
  // ddprun's stdout is a terminal (a pseudo-terminal this test reads). The worker is perl, whose
  // stdout is block-buffered on a pipe and line-buffered on a terminal, like C stdio.
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const std::string slave = ::ptsname(master);
  const std::vector<std::string> argv = ddprunCommand(
      2,
      {"--no-python", "/usr/bin/perl", "-e", "print \"step 1\\n\"; sleep 3; print \"step 2\\n\""});
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, slave.c_str(), O_RDWR | O_NOCTTY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t agent = -1;
  const auto started = Clock::now();
  REQUIRE(::posix_spawn(&agent, args[0], &actions, nullptr, args.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  // Read the terminal until both ranks' "step 1" show (or 10 s pass).
  std::string seen;
  double firstLine = -1;
  const auto bothShown = [&] {
    return seen.find("[default0]:step 1") != std::string::npos &&
           seen.find("[default1]:step 1") != std::string::npos;
  };
  while (Clock::now() - started < 10s && firstLine < 0) {
    pollfd ready{master, POLLIN, 0};
    if (::poll(&ready, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(master, buffer, sizeof buffer);
    if (n <= 0) break;
    seen.append(buffer, static_cast<std::size_t>(n));
    if (bothShown()) firstLine = std::chrono::duration<double>(Clock::now() - started).count();
  }
  int status = 0;
  ::kill(agent, SIGTERM);
  ::waitpid(agent, &status, 0);
  ::close(master);
  INFO("the terminal showed: " << seen);
  REQUIRE(firstLine >= 0);
  CHECK(firstLine < 1.5);  // under torchrun at once; before, 3 s (when the worker exited)
  CHECK(bothShown());
}

TEST_CASE(
    "workers get the descriptor limit ddprun was started with, not the one the agent raised "
    "for its stores",
    "[agent][descriptors]") {
  rlimit own{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &own) == 0);
  if (own.rlim_max != RLIM_INFINITY && own.rlim_max <= 512) {
    WARN("needs a descriptor hard limit above 512; skipped");
    return;
  }
  // A soft limit of 512 under a higher hard one: the agent raises its own, the workers keep 512
  // (torchrun's workers see the shell's limit: a raised one would change what select()-based
  // code or a library sizing a table by the limit does).
  Subprocess job({"/bin/sh", "-c", "ulimit -Sn 512 && exec \"$@\"", "sh", DDPRUN_BIN,
                  "--standalone", "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c",
                  "echo soft=$(ulimit -Sn) hard=$(ulimit -Hn)"});
  REQUIRE(exitsWith(job, 0, 30s));
  const std::string hard =
      own.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(own.rlim_max);
  INFO(job.output() << job.errors());
  CHECK(countLines(job.output(), fmt::format("soft=512 hard={}$", hard)) == 2);
}

TEST_CASE(
    "an agent at 1024 descriptors with 1100 idle connections to its store still restarts "
    "a failed worker",
    "[agent][descriptors]") {
  // This process holds the 1100 connections itself.
  rlimit own{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &own) == 0);
  if (own.rlim_max != RLIM_INFINITY && own.rlim_max < 1400) {
    WARN("needs a descriptor hard limit of 1400 for the test's own connections; skipped");
    return;
  }
  rlimit raised = own;
  raised.rlim_cur = std::max<rlim_t>(own.rlim_cur, 1400);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &raised) == 0);
  TempDir flags;
  const std::string go = flags.path + "/go";
  const std::uint16_t port = freePort();
  // ulimit -Sn 1024 -Hn 1024: the agent cannot raise its limit beyond 1024.
  std::vector<std::string> command{"/bin/sh", "-c",
                                   "ulimit -Sn 1024 && ulimit -Hn 1024 && exec \"$@\"", "sh"};
  for (std::string& word :
       c10dCommand("1", 1, fmt::format("127.0.0.1:{}", port), "descriptors",
                   {"--max-restarts", "1", "--no-python", kReport, "--fail-rank", "0",
                    "--fail-restart", "0", "--exit", "3", "--until", go})) {
    command.push_back(std::move(word));
  }
  Subprocess job(command);
  REQUIRE(eventually([&] { return countLines(job.output(), "restart=0 generation=0") == 1; }, 30s,
                     {&job}));
  // Connections that never send a byte, more than the agent has descriptors: before, they took
  // every one of them and the restart could not make the worker's pipes (exit 127).
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 1100; ++i) idle.push_back(std::make_unique<RawClient>("127.0.0.1", port));
  // Until the agent has taken them all in: its descriptor count stops changing.
  const auto descriptors = [&job] {
    std::size_t count = 0;
    for ([[maybe_unused]] const auto& entry :
         fs::directory_iterator(fmt::format("/proc/{}/fd", job.pid()))) {
      ++count;
    }
    return count;
  };
  std::size_t last = 0;
  int steady = 0;
  REQUIRE(eventually(
      [&] {
        const std::size_t now = descriptors();
        steady = now == last ? steady + 1 : 0;
        last = now;
        return steady >= 30;  // 300 ms without a change
      },
      20s, [&] { return fmt::format("{} descriptors open\n{}", last, job.describe()); }));
  INFO(fmt::format("the agent holds {} descriptors with the 1100 connections", last));
  CHECK(last < 1024 - 64);
  std::ofstream(go).put('\n');  // rank 0 fails (restart 0), then runs again and exits 0
  REQUIRE(exitsWith(job, 0, 60s));
  CHECK(countLines(job.output(), "restart=1 generation=1") == 1);
  CHECK_THAT(job.errors(), Catch::Contains("refusing connection from 127.0.0.1"));
}

TEST_CASE(
    "an --rdzv-endpoint where something that is no store answers (HTTP, SSH, silence, a "
    "hang-up) is named as such in one line, exit 2, with and without a token",
    "[agent]") {
  struct Case {
    FakePeer::Kind kind;
    std::string says;
  };
  const Case which = GENERATE(Case{FakePeer::Kind::kHttp09, "it looks like an HTTP server"},
                              Case{FakePeer::Kind::kSsh, "it looks like an SSH server"},
                              Case{FakePeer::Kind::kSilent, "answers nothing"},
                              Case{FakePeer::Kind::kClose, "closes them without a byte"});
  const bool withToken = GENERATE(false, true);
  TempDir dir;
  const std::string token = dir.path + "/job.token";
  std::ofstream(token) << "0123456789abcdef0123456789abcdef-the-job-secret\n";
  ::chmod(token.c_str(), 0600);
  FakePeer peer(which.kind);
  const std::string conf = withToken ? "read_timeout=5,token_file=" + token : "read_timeout=5";
  Subprocess job(ddprunCommand({"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                fmt::format("127.0.0.1:{}", peer.port()), "--rdzv-conf", conf,
                                "--no-python", "true"}));
  // At once: well before read_timeout (5 s) would have ended a wait for a store to come up.
  INFO(peer.describe());
  REQUIRE(exitsWith(job, 2, 4500ms));
  const auto said = lines(job.errors());
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::StartsWith("ddprun: error: store 127.0.0.1:"));
  CHECK_THAT(said[0],
             Catch::Contains("something answers there but is not a ddprun/TCPStore store"));
  CHECK_THAT(said[0], Catch::Contains(which.says));
  CHECK_THAT(said[0], Catch::EndsWith("; check --rdzv-endpoint"));
  CHECK_THAT(said[0], !Catch::Contains("token_file"));  // not guessed to be a store wanting one
}
