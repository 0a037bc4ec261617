// The real process launcher (process/posix_launcher.h, with clone_spawn.h and child_exec.h under
// it) with real processes, where the operating system is the point: what a worker is started
// with (argv, exactly the environment given, its output descriptors, its directory, its own
// session, nothing else of the agent's), how its end is reaped, that signals reach its whole
// process group or its own process only, that strays which left its session are found, and how a
// program that cannot start is reported. Every wait is bounded and says what it saw; nothing
// outlives a test.
#include "process/posix_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/exec_plan.h"
#include "core/process_launcher.h"
#include "process/child_exec.h"
#include "process/clone_spawn.h"
#include "process/guardian.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

namespace {

using namespace ddprun::launcher;
using namespace ddprun::test;
using namespace std::chrono_literals;

// Enough for sh, sleep and setsid; nothing else of the test's environment.
const std::vector<std::string> kShellEnvironment = {"PATH=/usr/bin:/bin"};

// A pipe whose ends close with it; both ends close-on-exec (the worker gets one through dup2).
class Pipe {
 public:
  Pipe() { REQUIRE(::pipe2(fds_, O_CLOEXEC) == 0); }
  ~Pipe() {
    closeWriteEnd();
    ::close(fds_[0]);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  int writeEnd() const { return fds_[1]; }
  void closeWriteEnd() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }
  // Everything written until every writer closed it, or what came within `timeout` (then the
  // text says so, for the assertion that follows).
  std::string readAll(std::chrono::milliseconds timeout) { return read(timeout, /*toEnd=*/true); }
  // The first line (with its '\n'), for a writer that stays: what was written so far also tells
  // what was seen when no line came within `timeout`.
  std::string readLine(std::chrono::milliseconds timeout) { return read(timeout, /*toEnd=*/false); }

 private:
  std::string read(std::chrono::milliseconds timeout, bool toEnd) {
    closeWriteEnd();
    const Deadline deadline(timeout);
    std::string text;
    for (;;) {
      pollfd ready{fds_[0], POLLIN, 0};
      const int n = ::poll(&ready, 1, static_cast<int>(deadline.left().count()));
      if (n == 0)
        return text + "<no " + (toEnd ? "end of output" : "line") + " within " +
               std::to_string(timeout.count()) + " ms>";
      if (n < 0 && errno == EINTR) continue;
      char c;  // one byte at a time: nothing after the line is taken
      const ssize_t got = ::read(fds_[0], &c, 1);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return text;
      text += c;
      if (!toEnd && c == '\n') return text;
    }
  }
  int fds_[2] = {-1, -1};
};

// A launcher for one test that leaves nothing behind, whatever the test did: every worker is
// killed and reaped, then every stray. Exits are collected as reap() reports them.
struct Workers {
  PosixLauncher launcher{/*guardian=*/nullptr};
  std::map<pid_t, int> exits;  // worker -> wait status

  ~Workers() {
    launcher.killAll();
    launcher.killStrays();
  }
  void collect() {
    for (const ExitedWorker& exited : launcher.reap()) exits[exited.pid] = exited.waitStatus;
  }
  // The wait status of worker `pid` once reap() reports it, polling within `timeout`.
  std::optional<int> waitStatus(pid_t pid, std::chrono::milliseconds timeout = 5s) {
    const bool done = eventually(
        [&] {
          collect();
          return exits.count(pid) > 0;
        },
        timeout,
        [&] {
          return "worker " + std::to_string(pid) + " has not exited:\n" + processTree({pid});
        });
    if (!done) return std::nullopt;
    return exits.at(pid);
  }
  // True once process `pid` no longer exists; what comes back to this subreaper is reaped
  // meanwhile.
  bool gone(pid_t pid, std::chrono::milliseconds timeout = 5s) {
    return eventually(
        [&] {
          collect();
          return ::kill(pid, 0) != 0 && errno == ESRCH;
        },
        timeout,
        [&] { return "process " + std::to_string(pid) + " still exists:\n" + processTree({pid}); });
  }
};

ExecPlan shell(const std::string& script, int out = -1, int err = -1, std::string directory = {}) {
  return ExecPlan("/bin/sh", {"sh", "-c", script}, kShellEnvironment, out, err,
                  std::move(directory));
}

// The decimal pid a worker printed (its first line).
pid_t pidFrom(const std::string& text) {
  INFO("the worker printed: " << text);
  REQUIRE(!text.empty());
  REQUIRE(std::isdigit(static_cast<unsigned char>(text[0])));
  return static_cast<pid_t>(std::stol(text));
}

bool exitedWith(const std::optional<int>& status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}
bool killedBy(const std::optional<int>& status, int signal) {
  return status && WIFSIGNALED(*status) && WTERMSIG(*status) == signal;
}

TEST_CASE("a worker bound to CPUs runs on exactly those (--numa-binding)", "[posix_launcher]") {
  // The agent's own CPUs: the worker is bound to the last of them, which it may use.
  cpu_set_t agent;
  CPU_ZERO(&agent);
  REQUIRE(::sched_getaffinity(0, sizeof agent, &agent) == 0);
  int last = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &agent)) last = cpu;
  }
  REQUIRE(last >= 0);
  Workers workers;
  Pipe out;
  ExecPlan plan("/bin/grep", {"grep", "Cpus_allowed_list", "/proc/self/status"}, kShellEnvironment,
                out.writeEnd(), -1);
  plan.bindToCpus({last});
  const pid_t pid = workers.launcher.spawn(plan);
  CHECK(out.readAll(5s) == "Cpus_allowed_list:\t" + std::to_string(last) + "\n");
  CHECK(exitedWith(workers.waitStatus(pid), 0));
  // The agent's own affinity is untouched (the child shares its memory, not its mask).
  cpu_set_t after;
  CPU_ZERO(&after);
  REQUIRE(::sched_getaffinity(0, sizeof after, &after) == 0);
  CHECK(CPU_EQUAL(&agent, &after));
}

TEST_CASE("a worker gets exactly the argv and environment of its plan", "[posix_launcher]") {
  Workers workers;
  SECTION("the environment, and nothing else of the agent's") {
    // env prints its environment: the plan's entries, in order, byte for byte.
    Pipe out;
    const std::vector<std::string> environment = {"ONLY=1", "SPACES=a b  c", "EMPTY=", "LINES=x\ny",
                                                  "EQUALS=a=b"};
    const pid_t pid =
        workers.launcher.spawn(ExecPlan("/usr/bin/env", {"env"}, environment, out.writeEnd(), -1));
    CHECK(out.readAll(5s) == "ONLY=1\nSPACES=a b  c\nEMPTY=\nLINES=x\ny\nEQUALS=a=b\n");
    CHECK(exitedWith(workers.waitStatus(pid), 0));
  }
  SECTION("argv as given, argv[0] included") {
    Pipe out;
    const pid_t pid = workers.launcher.spawn(ExecPlan(
        "/bin/sh",
        {"worker-name", "-c", "printf '[%s]\\n' \"$0\" \"$@\"", "zero", "one", "two words", ""},
        kShellEnvironment, out.writeEnd(), -1));
    CHECK(out.readAll(5s) == "[zero]\n[one]\n[two words]\n[]\n");
    CHECK(exitedWith(workers.waitStatus(pid), 0));
    // What ps shows (the process's own argv[0]) is the plan's, not the path. Read until the
    // exec is complete: spawn() returns as the new program's memory is made, before its
    // arguments are in it.
    const pid_t named =
        workers.launcher.spawn(ExecPlan("/bin/sleep", {"worker-name", "5"}, {}, -1, -1));
    std::string cmdline;
    CHECK(eventually(
        [&] {
          std::getline(std::ifstream("/proc/" + std::to_string(named) + "/cmdline"), cmdline);
          return !cmdline.empty();
        },
        5s, [&] { return processTree({named}); }));
    CHECK(cmdline == std::string("worker-name\0005\0", 14));
    workers.launcher.signalAll(SIGKILL);
    CHECK(killedBy(workers.waitStatus(named), SIGKILL));
  }
}

TEST_CASE("a worker writes to the descriptors and runs in the directory of its plan",
          "[posix_launcher]") {
  Workers workers;
  TempDir dir;
  Pipe out;
  Pipe err;
  const pid_t pid = workers.launcher.spawn(
      shell("echo out; echo err >&2; pwd -P", out.writeEnd(), err.writeEnd(), dir.path));
  CHECK(out.readAll(5s) == "out\n" + std::filesystem::canonical(dir.path).string() + "\n");
  CHECK(err.readAll(5s) == "err\n");
  CHECK(exitedWith(workers.waitStatus(pid), 0));
}

TEST_CASE("a worker leads its own session and starts clean", "[posix_launcher]") {
  Workers workers;
  SECTION("its own session and process group, so that signals reach the whole group") {
    const pid_t pid = workers.launcher.spawn(ExecPlan("/bin/sleep", {"sleep", "30"}, {}, -1, -1));
    CHECK(::getsid(pid) == pid);
    CHECK(::getpgid(pid) == pid);
    CHECK(workers.launcher.anyRunning());
  }
  SECTION("no descriptor of the agent's but stdin, stdout and stderr") {
    // One the agent left inheritable (a store socket, another worker's pipe would be others).
    const int leaked = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
    REQUIRE(leaked >= 3);
    const pid_t pid = workers.launcher.spawn(ExecPlan("/bin/sleep", {"sleep", "30"}, {}, -1, -1));
    ::close(leaked);
    // Read from outside, once the exec has closed what it closes (spawn() returns a moment
    // before): a leaked descriptor would stay.
    std::set<std::string> open;
    CHECK(eventually(
        [&] {
          open.clear();
          for (const auto& entry :
               std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
            open.insert(entry.path().filename().string());
          }
          return open == std::set<std::string>{"0", "1", "2"};
        },
        2s,
        [&] {
          std::string seen;
          for (const std::string& fd : open) seen += fd + " ";
          return "open descriptors: " + seen;
        }));
  }
  SECTION("no signal ignored or blocked, whatever the agent's own dispositions") {
    // The agent ignores SIGPIPE and blocks signals around its threads; exec would keep both.
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    struct sigaction previousPipe = {};
    ::sigaction(SIGPIPE, &ignore, &previousPipe);
    sigset_t block;
    sigset_t previousMask;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    ::sigprocmask(SIG_BLOCK, &block, &previousMask);
    Pipe out;
    const pid_t pid = workers.launcher.spawn(ExecPlan(
        "/bin/grep", {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}, {}, out.writeEnd(), -1));
    ::sigprocmask(SIG_SETMASK, &previousMask, nullptr);
    ::sigaction(SIGPIPE, &previousPipe, nullptr);
    CHECK(out.readAll(5s) == "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
    CHECK(exitedWith(workers.waitStatus(pid), 0));
  }
}

TEST_CASE("reap() reports how each worker ended, without blocking", "[posix_launcher]") {
  Workers workers;
  const pid_t sleeper = workers.launcher.spawn(ExecPlan("/bin/sleep", {"sleep", "30"}, {}, -1, -1));
  // Nothing has ended: reap() returns at once with nothing.
  const auto start = std::chrono::steady_clock::now();
  CHECK(workers.launcher.reap().empty());
  CHECK(std::chrono::steady_clock::now() - start < 1s);  // not the sleeper's 30 s

  const pid_t ok = workers.launcher.spawn(shell("exit 0"));
  const pid_t three = workers.launcher.spawn(shell("exit 3"));
  const pid_t killed = workers.launcher.spawn(shell("kill -USR1 $$"));
  CHECK(exitedWith(workers.waitStatus(ok), 0));
  CHECK(exitedWith(workers.waitStatus(three), 3));
  CHECK(killedBy(workers.waitStatus(killed), SIGUSR1));
  CHECK(workers.exits.count(sleeper) == 0);
  CHECK(workers.launcher.anyRunning());

  workers.launcher.signalProcess(sleeper, SIGTERM);
  CHECK(killedBy(workers.waitStatus(sleeper), SIGTERM));
  CHECK_FALSE(workers.launcher.anyRunning());
  // Each end is reported once.
  CHECK(workers.launcher.reap().empty());
}

TEST_CASE("signalAll reaches what the workers started in their process groups",
          "[posix_launcher]") {
  Workers workers;
  SECTION("a grandchild of a running worker") {
    Pipe out;
    // The worker starts a child in its group, says its pid, and waits for it.
    const pid_t worker =
        workers.launcher.spawn(shell("sleep 30 >/dev/null & echo $!; wait", out.writeEnd()));
    const pid_t grandchild = pidFrom(out.readLine(5s));
    CHECK(::getpgid(grandchild) == worker);
    workers.launcher.signalAll(SIGTERM);
    CHECK(killedBy(workers.waitStatus(worker), SIGTERM));
    CHECK(workers.gone(grandchild));
  }
  SECTION("what an exited worker left behind in its group") {
    Pipe out;
    const pid_t worker =
        workers.launcher.spawn(shell("sleep 30 >/dev/null & echo $!", out.writeEnd()));
    const pid_t orphan = pidFrom(out.readAll(5s));
    CHECK(exitedWith(workers.waitStatus(worker), 0));
    CHECK_FALSE(workers.launcher.anyRunning());
    REQUIRE(::kill(orphan, 0) == 0);
    CHECK(::getpgid(orphan) == worker);
    workers.launcher.signalAll(SIGKILL);
    CHECK(workers.gone(orphan));
  }
}

TEST_CASE(
    "signalLeaders reaches each worker's own process only, and anyLeftBehind sees what an exited "
    "worker left in its group until it is gone",
    "[posix_launcher][drain]") {
  Workers workers;
  Pipe out;
  // A shell that dies of SIGTERM while its child (a trainer, a DataLoader worker) lives on.
  const pid_t worker =
      workers.launcher.spawn(shell("sleep 30 >/dev/null & echo $!; wait", out.writeEnd()));
  const pid_t child = pidFrom(out.readLine(5s));
  REQUIRE(::getpgid(child) == worker);
  CHECK_FALSE(workers.launcher.anyLeftBehind());  // its group's leader still runs
  workers.launcher.signalLeaders(SIGTERM);
  CHECK(killedBy(workers.waitStatus(worker), SIGTERM));
  CHECK_FALSE(workers.launcher.anyRunning());
  CHECK(::kill(child, 0) == 0);  // not signalled: still there, in the worker's group
  CHECK(workers.launcher.anyLeftBehind());
  ::kill(child, SIGKILL);
  CHECK(workers.gone(child));
  CHECK_FALSE(workers.launcher.anyLeftBehind());
}

// Both ways into the worker cgroup give the same worker: created in it by clone3 (no move, so no
// wait for the kernel's grace period: clone_spawn.h), and moving itself through cgroup.procs where
// clone3 cannot place it (here a directory descriptor that is no cgroup, as an older kernel or a
// cgroup v1 answers: the spawner falls back).
TEST_CASE("a worker is in the worker cgroup from its start, created there or moved there",
          "[posix_launcher]") {
  Workers workers;
  const std::string cgroup = workers.launcher.cgroupPath();
  if (cgroup.empty()) {
    WARN("skipped: cgroup v2 is not mounted or not writable here, so there is no worker cgroup");
    return;
  }
  const int directory = ::open(cgroup.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  const int procs = ::open((cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  const int notACgroup = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(directory >= 0);
  REQUIRE(procs >= 0);
  REQUIRE(notACgroup >= 0);
  CgroupTarget target;
  SECTION("created in it, with no cgroup.procs to write") { target = {directory, -1}; }
  SECTION("moving itself, where clone3 cannot place it") { target = {notACgroup, procs}; }
  CloneSpawner spawner;
  Pipe out;
  const pid_t pid =
      spawner.spawn(shell("sed -n 's/^0:://p' /proc/self/cgroup", out.writeEnd()), target);
  std::string membership = out.readAll(5s);
  int status = 0;
  CHECK(::waitpid(pid, &status, 0) == pid);
  CHECK(exitedWith(status, 0));
  if (!membership.empty() && membership.back() == '\n') membership.pop_back();
  INFO("the worker's cgroup: " << membership << "; the worker cgroup: " << cgroup);
  CHECK(!membership.empty());
  CHECK(cgroup.ends_with(membership));
  for (int fd : {directory, procs, notACgroup}) ::close(fd);
}

// After killStrays emptied the cgroup with cgroup.kill, the next worker must live: a kernel with
// cgroup.kill's fork-race fix kills every child later created in a killed cgroup by clone3
// (6.18 here), so the launcher moves workers in through cgroup.procs from then on.
TEST_CASE("a worker started after the worker cgroup was killed runs", "[posix_launcher]") {
  Workers workers;
  if (workers.launcher.cgroupPath().empty()) {
    WARN("skipped: cgroup v2 is not mounted or not writable here, so there is no worker cgroup");
    return;
  }
  Pipe strayOut;
  const pid_t worker =
      workers.launcher.spawn(shell("setsid sleep 30 >/dev/null & echo $!", strayOut.writeEnd()));
  const pid_t stray = pidFrom(strayOut.readAll(5s));
  CHECK(exitedWith(workers.waitStatus(worker), 0));
  workers.launcher.killStrays();  // the stray is in the cgroup: this writes cgroup.kill
  CHECK(workers.gone(stray));
  Pipe out;
  const pid_t next = workers.launcher.spawn(shell("sleep 0.1; echo alive", out.writeEnd()));
  CHECK(out.readAll(5s) == "alive\n");
  CHECK(exitedWith(workers.waitStatus(next), 0));
}

TEST_CASE("killStrays finds a descendant that left the worker's session", "[posix_launcher]") {
  Workers workers;
  Pipe out;
  // setsid leaves the worker's session and process group: no signal to the group reaches it.
  const pid_t worker =
      workers.launcher.spawn(shell("setsid sleep 30 >/dev/null & echo $!", out.writeEnd()));
  const pid_t stray = pidFrom(out.readAll(5s));
  CHECK(exitedWith(workers.waitStatus(worker), 0));
  REQUIRE(eventually([&] { return ::getsid(stray) == stray; }, 5s,
                     [&] { return processTree({stray}); }));
  workers.launcher.signalAll(SIGKILL);
  std::this_thread::sleep_for(50ms);
  CHECK(::kill(stray, 0) == 0);  // out of reach of the group's signal
  SECTION("as an orphan that came back to the agent, a subreaper") {
    workers.launcher.killStrays();
    CHECK(workers.gone(stray));
  }
  SECTION("in the worker cgroup, where cgroup v2 is writable") {
    if (workers.launcher.cgroupPath().empty()) {
      WARN("skipped: cgroup v2 is not mounted or not writable here, so there is no worker cgroup");
      return;
    }
    // The stray is in the cgroup even though it made a session of its own.
    std::ifstream cgroups("/proc/" + std::to_string(stray) + "/cgroup");
    std::string membership;
    for (std::string line; std::getline(cgroups, line);) {
      if (line.starts_with("0::")) membership = line.substr(3);
    }
    INFO("the stray's cgroup: " << membership
                                << "; the worker cgroup: " << workers.launcher.cgroupPath());
    CHECK(!membership.empty());
    CHECK(workers.launcher.cgroupPath().ends_with(membership));
    workers.launcher.killStrays();
    CHECK(workers.gone(stray));
  }
}

TEST_CASE("killStrays spares a process kept on purpose by this agent's workers, and no other",
          "[posix_launcher][detach]") {
  // `ddprun detach` puts DDPRUN_DETACHED=<the worker's DDPRUN_AGENT> in place of DDPRUN_AGENT
  // (core/kept_process.h); the launcher learns the marker from the plans it starts.
  Workers workers;
  Pipe out;
  const std::string marker = "4242-" + std::to_string(::getpid()) + "feedc0de";
  std::vector<std::string> environment = kShellEnvironment;
  environment.push_back("DDPRUN_AGENT=" + marker);
  // Three strays in sessions of their own: kept, kept by another agent, a bare flag.
  const std::string script = "DDPRUN_DETACHED=" + marker +
                             " setsid sleep 30 >/dev/null & echo $!; "
                             "DDPRUN_DETACHED=" +
                             marker +
                             "0 setsid sleep 30 >/dev/null & echo $!; "
                             "DDPRUN_DETACHED=1 setsid sleep 30 >/dev/null & echo $!";
  const pid_t worker = workers.launcher.spawn(
      ExecPlan("/bin/sh", {"sh", "-c", script}, environment, out.writeEnd(), -1));
  const pid_t kept = pidFrom(out.readLine(5s));
  const pid_t otherAgents = pidFrom(out.readLine(5s));
  const pid_t flagged = pidFrom(out.readLine(5s));
  CHECK(exitedWith(workers.waitStatus(worker), 0));
  // Out of the worker's process group (which killStrays kills too), back to this subreaper.
  for (pid_t stray : {kept, otherAgents, flagged}) {
    REQUIRE(eventually([&] { return ::getsid(stray) == stray; }, 5s,
                       [&] { return processTree({stray}); }));
  }
  // Where there is a worker cgroup, `ddprun detach` also leaves it for the agent's own.
  if (const std::string cgroup = workers.launcher.cgroupPath(); !cgroup.empty()) {
    const std::string parentProcs = cgroup.substr(0, cgroup.rfind('/')) + "/cgroup.procs";
    std::ofstream(parentProcs) << kept << "\n";
  }
  workers.launcher.killStrays();
  CHECK(workers.gone(otherAgents));
  CHECK(workers.gone(flagged));
  INFO(processTree({kept}));
  CHECK(::kill(kept, 0) == 0);
  // It is this test's to end: the launcher never will.
  ::kill(kept, SIGKILL);
  CHECK(workers.gone(kept));
}

TEST_CASE("the guardian spares a process kept on purpose when the agent dies",
          "[posix_launcher][detach][guardian]") {
  const std::string marker = "4343-" + std::to_string(::getpid()) + "0ddba11";
  // Started by the test itself: the guardian finds them by their environment alone.
  auto start = [](std::vector<std::string> environment) {
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
      ::execve("/bin/sleep", argv, envp.data());
      ::_exit(127);
    }
    return pid;
  };
  const pid_t holder = start({"DDPRUN_AGENT=" + marker});
  const pid_t keptHolder = start({"DDPRUN_AGENT=" + marker, "DDPRUN_DETACHED=" + marker});
  const pid_t detached = start({"DDPRUN_DETACHED=" + marker});
  const pid_t otherKept = start({"DDPRUN_AGENT=" + marker, "DDPRUN_DETACHED=1"});
  // Each has exec'd (its environ is sleep's) before the guardian looks.
  for (pid_t pid : {holder, keptHolder, detached, otherKept}) {
    REQUIRE(eventually(
        [&] {
          std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
          std::string name;
          return std::getline(comm, name) && name == "sleep";
        },
        5s, [&] { return processTree({pid}); }));
  }
  // The "agent": a child that starts a guardian, gives it the marker, and dies without a word.
  const pid_t agent = ::fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {
    auto guardian = Guardian::start();
    if (!guardian) ::_exit(3);
    guardian->killHoldersOf("DDPRUN_AGENT=" + marker);
    guardian.release();  // no destructor: as after kill -9
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(agent, &status, 0) == agent);
  REQUIRE(exitedWith(status, 0));
  auto killedBySignal = [](pid_t pid) {
    int how = 0;
    return ::waitpid(pid, &how, WNOHANG) == pid && WIFSIGNALED(how) && WTERMSIG(how) == SIGKILL;
  };
  CHECK(eventually([&] { return killedBySignal(holder); }, 10s,
                   [&] { return processTree({holder}); }));
  CHECK(eventually([&] { return killedBySignal(otherKept); }, 10s,
                   [&] { return processTree({otherKept}); }));
  for (pid_t pid : {keptHolder, detached}) {
    INFO("kept process " << pid << ":\n" << processTree({pid}));
    CHECK(::waitpid(pid, &status, WNOHANG) == 0);
    ::kill(pid, SIGKILL);
    CHECK(::waitpid(pid, &status, 0) == pid);
  }
}

TEST_CASE("belongsToWorkers: a running worker and what it started, nothing else",
          "[posix_launcher]") {
  Workers workers;
  Pipe out;
  // A grandchild in a session of its own still descends from the worker (its parent is the shell).
  const pid_t worker = workers.launcher.spawn(shell(
      "sleep 30 >/dev/null & echo $!; setsid sleep 30 >/dev/null & echo $!; wait", out.writeEnd()));
  const pid_t child = pidFrom(out.readLine(5s));
  const pid_t sessionLeader = pidFrom(out.readLine(5s));
  CHECK(workers.launcher.belongsToWorkers(worker));
  CHECK(workers.launcher.belongsToWorkers(child));
  CHECK(workers.launcher.belongsToWorkers(sessionLeader));
  CHECK_FALSE(workers.launcher.belongsToWorkers(::getpid()));   // the agent itself
  CHECK_FALSE(workers.launcher.belongsToWorkers(::getppid()));  // a process of nobody's job
  CHECK_FALSE(workers.launcher.belongsToWorkers(1));
  CHECK_FALSE(workers.launcher.belongsToWorkers(0x3fffffff));  // no such process
  // Once the worker is gone its orphans came back to this subreaper: no worker's any more.
  ::kill(worker, SIGKILL);
  REQUIRE(workers.waitStatus(worker));
  CHECK_FALSE(workers.launcher.belongsToWorkers(worker));
  CHECK_FALSE(workers.launcher.belongsToWorkers(child));
  CHECK_FALSE(workers.launcher.belongsToWorkers(sessionLeader));
}

TEST_CASE("killAll leaves no worker and nothing of their process groups", "[posix_launcher]") {
  Workers workers;
  std::vector<pid_t> pids;
  std::vector<pid_t> grandchildren;
  for (int i = 0; i < 3; ++i) {
    Pipe out;
    // SIGTERM ignored: only SIGKILL ends these.
    pids.push_back(workers.launcher.spawn(
        shell("trap '' TERM; sleep 30 >/dev/null & echo $!; exec sleep 30", out.writeEnd())));
    grandchildren.push_back(pidFrom(out.readLine(5s)));
  }
  workers.launcher.killAll();
  CHECK_FALSE(workers.launcher.anyRunning());
  for (pid_t pid : pids) {
    INFO("worker " << pid);
    // Reaped by killAll itself: not even a zombie is left.
    CHECK((::kill(pid, 0) != 0 && errno == ESRCH));
  }
  for (pid_t pid : grandchildren) CHECK(workers.gone(pid));
}

TEST_CASE("a program that cannot start is a SpawnError naming it", "[posix_launcher]") {
  Workers workers;
  TempDir dir;
  const std::string notExecutable = dir.path + "/data.txt";
  std::ofstream(notExecutable) << "not a program\n";
  const std::string garbage = dir.path + "/garbage";
  std::ofstream(garbage) << "\x01\x02\x03 not an ELF, no #!\n";
  REQUIRE(::chmod(garbage.c_str(), 0755) == 0);
  struct Row {
    std::string path;
    std::string directory;
    std::string reason;
  };
  const std::vector<Row> rows = {
      {dir.path + "/missing", "", "No such file or directory"},
      {notExecutable, "", "Permission denied"},
      {dir.path, "", "Permission denied"},  // a directory
      {garbage, "", "Exec format error"},
  };
  for (const Row& row : rows) {
    INFO("path " << row.path << ", directory '" << row.directory << "'");
    const ExecPlan plan(row.path, {"worker"}, {}, -1, -1, row.directory);
    CHECK_THROWS_MATCHES(workers.launcher.spawn(plan), SpawnError,
                         Catch::Message("cannot start " + row.path + ": " + row.reason));
    CHECK_FALSE(workers.launcher.anyRunning());
  }
  // The failed children were reaped by spawn itself: none is left, not even a zombie.
  CHECK(workers.launcher.reap().empty());
  errno = 0;
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("a child whose exec fails reports the errno and exits 127 or 126", "[posix_launcher]") {
  // child_exec.h's side alone, in a forked child of this (single-threaded) test: the status a
  // shell would give, and the failed step and errno through the pipe.
  TempDir dir;
  const std::string notExecutable = dir.path + "/data.txt";
  std::ofstream(notExecutable) << "not a program\n";
  struct Row {
    std::string path;
    int error;
    int status;
  };
  const std::vector<Row> rows = {
      {dir.path + "/missing", ENOENT, 127}, {notExecutable, EACCES, 126}, {dir.path, EACCES, 126}};
  for (const Row& row : rows) {
    INFO("path " << row.path);
    const ExecPlan plan(row.path, {"worker"}, {}, -1, -1);
    int errorPipe[2];
    REQUIRE(::pipe2(errorPipe, O_CLOEXEC) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) execChild(plan, errorPipe[1], ::getppid(), -1, nullptr);
    ::close(errorPipe[1]);
    const auto reported = readChildReport(errorPipe[0]);
    REQUIRE(reported);
    CHECK(reported->step == ChildStep::kExec);
    CHECK(reported->error == row.error);
    int status = 0;
    REQUIRE(eventually([&] { return ::waitpid(child, &status, WNOHANG) == child; }, 5s,
                       [&] { return processTree({child}); }));
    CHECK(exitedWith(status, row.status));
  }
}

}  // namespace
