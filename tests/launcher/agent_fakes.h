// The seams of the agent, faked for its unit tests: a manual clock that is also the event loop,
// a process launcher whose workers exit when the test says so, output that goes nowhere, and a
// worker store that is never really started. With the in-process store (InProcessStoreBackend)
// several AgentMachines form jobs in one test process, in milliseconds.
#pragma once

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/event_loop.h"
#include "core/process_launcher.h"
#include "core/rendezvous_client.h"
#include "core/stop_reason.h"
#include "core/stop_requests.h"
#include "core/worker_output.h"
#include "forwarding_store.h"
#include "hang/hang_evidence.h"
#include "hang/oom.h"
#include "hang/progress_monitor.h"
#include "hang/worker_activity.h"
#include "health/health_gate.h"
#include "machine/agent_machine.h"
#include "membership/membership.h"
#include "stores/store_backend.h"

namespace ddprun::test {

using launcher::EventLoop;

// Time moves only when the test says so; posted work and due timers run on the test's thread,
// inside runUntil() and advance().
// The health gate as the machine sees it: each check gives the next queued verdict (none queued:
// a pass) at once, and the post-round hook is counted.
class FakeHealthGate final : public launcher::HealthGate {
 public:
  void check(int round, std::function<void(launcher::HealthVerdict)> done) override {
    checkedRounds.push_back(round);
    launcher::HealthVerdict verdict = launcher::HealthVerdict::pass();
    if (!verdicts.empty()) {
      verdict = verdicts.front();
      verdicts.pop_front();
    }
    done(verdict);
  }
  void afterRound(int round, std::function<void()> done) override {
    afterRounds.push_back(round);
    done();
  }
  void cancel() override { cancelled = true; }

  std::deque<launcher::HealthVerdict> verdicts;  // the next checks' verdicts, in order
  std::vector<int> checkedRounds;                // each check's round, in order
  std::vector<int> afterRounds;                  // each post-round hook's round
  bool cancelled = false;
};

class ManualEventLoop final : public EventLoop {
 public:
  static constexpr std::chrono::seconds kWallStart{1767225600};
  TimePoint now() const override { return TimePoint(std::chrono::milliseconds(now_.load())); }
  // The wall clock moves with the manual one, from a fixed, recent-looking epoch second, so that
  // times in snapshots and events are plausible and the same in every run.
  WallTime wallNow() const override {
    return WallTime(kWallStart + std::chrono::milliseconds(now_.load()));
  }

  std::unique_ptr<Timer> after(std::chrono::milliseconds delay, Callback callback) override {
    auto armed = std::make_shared<bool>(true);
    timers_.push_back({now_.load() + delay.count(), nextTimer_++, std::move(callback), armed});
    return std::make_unique<ManualTimer>(armed);
  }

  void post(Callback callback) override {
    {
      std::lock_guard lock(mutex_);
      posted_.push_back(std::move(callback));
    }
    wake_.notify_all();
  }

  // Moves the clock by `delta` and runs the timers that became due, in order.
  void advance(std::chrono::milliseconds delta) {
    now_ += delta.count();
    for (;;) {
      auto due = timers_.end();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->due <= now_.load() && (due == timers_.end() || it->due < due->due)) due = it;
      }
      if (due == timers_.end()) break;
      PendingTimer timer = std::move(*due);
      timers_.erase(due);
      if (*timer.armed) timer.callback();
    }
    runPosted();
  }

  // Runs posted work (results of the rendezvous threads, exits) until `done` holds; false after
  // `patience` of real time (the threads work in real time).
  bool runUntil(const std::function<bool()>& done,
                std::chrono::milliseconds patience = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
      runPosted();
      if (done()) return true;
      std::unique_lock lock(mutex_);
      if (std::chrono::steady_clock::now() > deadline) return false;
      wake_.wait_for(lock, std::chrono::milliseconds(5), [this] { return !posted_.empty(); });
    }
  }

  void runPosted() {
    for (;;) {
      Callback next;
      {
        std::lock_guard lock(mutex_);
        if (posted_.empty()) return;
        next = std::move(posted_.front());
        posted_.pop_front();
      }
      next();
    }
  }

 private:
  class ManualTimer final : public Timer {
   public:
    explicit ManualTimer(std::shared_ptr<bool> armed) : armed_(std::move(armed)) {}
    ~ManualTimer() override { *armed_ = false; }
    void cancel() override { *armed_ = false; }

   private:
    std::shared_ptr<bool> armed_;
  };
  struct PendingTimer {
    std::int64_t due;
    std::uint64_t sequence;
    Callback callback;
    std::shared_ptr<bool> armed;
  };

  std::atomic<std::int64_t> now_{1'000'000};  // milliseconds; not zero (zero means "unset")
  std::vector<PendingTimer> timers_;
  std::uint64_t nextTimer_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Callback> posted_;
};

// Workers that exit when the test says so (or when signalled, if they obey); each exit reaches
// the machine the way SIGCHLD does: later, on the loop.
class FakeLauncher final : public launcher::ProcessLauncher {
 public:
  struct Worker {
    pid_t pid;
    std::map<std::string, std::string> environment;
    std::vector<std::string> argv;
    std::vector<int> cpus;  // the plan's CPU affinity (--numa-binding); empty: inherited
  };

  explicit FakeLauncher(EventLoop& loop) : loop_(loop) {}

  // Called (on the loop) after every exit: the test points it at AgentMachine::onChildExited.
  std::function<void()> childExited;
  // Whether workers die of the signals they are sent (SIGKILL always kills).
  bool obeySignals = true;
  // Spawns of these local ranks fail (LOCAL_RANK in the environment), with this errno (of the
  // exec when spawnFailsInExec).
  std::set<int> failingSpawns;
  int spawnErrno = ENOENT;
  bool spawnFailsInExec = true;
  // Processes the workers started (belongsToWorkers() says yes to them as to running workers).
  std::set<pid_t> descendants;

  pid_t spawn(const launcher::ExecPlan& plan) override {
    Worker worker{nextPid_++, {}, {}, {}};
    for (char* const* entry = plan.envp(); *entry != nullptr; ++entry) {
      const std::string text(*entry);
      const auto equals = text.find('=');
      worker.environment[text.substr(0, equals)] = text.substr(equals + 1);
    }
    for (char* const* arg = plan.argv(); *arg != nullptr; ++arg) worker.argv.push_back(*arg);
    if (const cpu_set_t* mask = plan.cpuAffinity()) {
      for (int cpu = 0; cpu < static_cast<int>(8 * plan.cpuAffinitySize()); ++cpu) {
        if (CPU_ISSET_S(cpu, plan.cpuAffinitySize(), mask)) worker.cpus.push_back(cpu);
      }
    }
    if (failingSpawns.count(std::stoi(worker.environment.at("LOCAL_RANK")))) {
      throw launcher::SpawnError(
          fmt::format("cannot start /bin/true: {}", std::strerror(spawnErrno)), spawnErrno,
          spawnFailsInExec);
    }
    running_.insert(worker.pid);
    spawned.push_back(worker);
    return worker.pid;
  }

  void signalAll(int signal) override {
    signals.push_back(signal);
    // Job control stops and continues; it ends no worker.
    if (signal == SIGSTOP || signal == SIGCONT) {
      stopped = signal == SIGSTOP;
      return;
    }
    if (signal == SIGKILL) leftBehind.clear();
    if (!obeySignals && signal != SIGKILL) return;
    for (pid_t pid : std::set<pid_t>(running_)) dieOf(pid, signal);
  }

  void signalLeaders(int signal) override {
    leaderSignals.push_back(signal);
    if (!obeySignals && signal != SIGKILL) return;
    for (pid_t pid : std::set<pid_t>(running_)) dieOf(pid, signal);
  }

  void signalProcess(pid_t pid, int signal) override {
    processSignals.push_back({pid, signal});
    if (running_.count(pid) > 0 && (obeySignals || signal == SIGKILL)) dieOf(pid, signal);
  }

  bool belongsToWorkers(pid_t pid) const override {
    return running_.count(pid) > 0 || descendants.count(pid) > 0;
  }

  bool anyRunning() const override { return !running_.empty(); }
  bool anyLeftBehind() const override { return !leftBehind.empty(); }

  std::vector<launcher::ExitedWorker> reap() override {
    std::vector<launcher::ExitedWorker> exited;
    exited.swap(exited_);
    return exited;
  }

  void killStrays() override {
    ++strayKills;
    leftBehind.clear();
  }

  void killAll() override {
    for (pid_t pid : running_) exited_.push_back({pid, SIGKILL});
    running_.clear();
  }

  // Worker `pid` exits with `code`.
  void exitWith(pid_t pid, int code) { end(pid, (code & 0xff) << 8); }
  // Worker `pid` dies of `signal`.
  void dieOf(pid_t pid, int signal) { end(pid, signal); }

  // The workers of the latest round (the last `count` spawned).
  std::vector<Worker> latest(int count) const {
    return std::vector<Worker>(spawned.end() - std::min<std::size_t>(count, spawned.size()),
                               spawned.end());
  }
  // Every worker of the latest round (the last `count` spawned) exits with `code`.
  void latestExitWith(int count, int code) {
    for (const Worker& worker : latest(count)) exitWith(worker.pid, code);
  }
  bool running(pid_t pid) const { return running_.count(pid) > 0; }

  std::vector<Worker> spawned;
  std::vector<int> signals;        // signalAll() calls: to every worker's whole tree
  std::vector<int> leaderSignals;  // signalLeaders() calls: to each worker's own process
  // Processes left in the groups of exited workers (anyLeftBehind()); the test sets them, a
  // SIGKILL to every tree or the stray sweep ends them.
  std::set<pid_t> leftBehind;
  std::vector<std::pair<pid_t, int>> processSignals;  // signalProcess() calls, in order
  int strayKills = 0;
  bool stopped = false;  // the last job-control signal was SIGSTOP

 private:
  void end(pid_t pid, int waitStatus) {
    if (running_.erase(pid) == 0) return;
    exited_.push_back({pid, waitStatus});
    loop_.post([this] {
      if (childExited) childExited();
    });
  }

  EventLoop& loop_;
  pid_t nextPid_ = 1000;
  std::set<pid_t> running_;
  std::vector<launcher::ExitedWorker> exited_;
};

// Workers' output goes nowhere; a drain completes at once (on the loop).
class NullOutput final : public launcher::WorkerOutput {
 public:
  explicit NullOutput(EventLoop& loop) : loop_(loop) {}
  launcher::ChildStreams prepare(int, int, int, int, const std::string&, bool) override {
    return {};
  }
  void started(int) override {}
  void abandon(int) override {}
  void drain(std::chrono::milliseconds, std::function<void()> done) override {
    loop_.post(std::move(done));
  }
  std::vector<std::string> stderrTail(int localRank) const override {
    auto it = stderrLines.find(localRank);
    return it == stderrLines.end() ? std::vector<std::string>{} : it->second;
  }
  void closeAll() override {}

  std::map<int, std::vector<std::string>> stderrLines;  // what each local rank "wrote"

 private:
  EventLoop& loop_;
};

// Group rank 0 "hosts" the workers' store: nothing starts, a port is handed out.
class FakeWorkerStores final : public launcher::WorkerStoreHost {
 public:
  std::uint16_t host(const std::string&) override { return ++hosted; }
  std::pair<std::string, std::uint16_t> reachFromWorkers(const std::string& host,
                                                         std::uint16_t port) override {
    return {host, port};
  }
  std::atomic<std::uint16_t> hosted{40000};
};

// What is written to the process's stderr (fd 2) while it lives: the agent prints its summary
// and hints there.
class CaptureStderr {
 public:
  CaptureStderr() : file_(std::tmpfile()), saved_(::dup(2)) {
    std::fflush(stderr);
    ::dup2(::fileno(file_), 2);
  }
  ~CaptureStderr() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    std::fclose(file_);
  }
  CaptureStderr(const CaptureStderr&) = delete;
  CaptureStderr& operator=(const CaptureStderr&) = delete;
  std::string text() const {
    std::fflush(stderr);
    std::string all;
    char buffer[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(::fileno(file_), buffer, sizeof buffer, at);
      if (n <= 0) return all;
      all.append(buffer, static_cast<std::size_t>(n));
      at += n;
    }
  }

 private:
  std::FILE* file_;
  int saved_;
};

// The in-process store as an agent's backend, with a way to make the agent vanish as kill -9
// would: sever() drops its connections without giving up their holds, so the store reports the
// node lost, and every later call of that agent fails as on a dead socket. silence() cuts the
// network instead: every call of this agent blocks (nothing reaches the store, nothing comes
// back) until heal(), when the calls in flight go through, late, as TCP delivers them.
class SeverableStoreBackend final : public launcher::StoreBackend {
 public:
  explicit SeverableStoreBackend(rendezvous::HashStore& store) : store_(store) {}

  std::unique_ptr<rendezvous::HoldingStore> connect(std::chrono::milliseconds callTimeout,
                                                    std::chrono::milliseconds) override {
    auto link = std::make_shared<Link>();
    link->store = store_.connect();
    link->store->setTimeout(callTimeout);
    std::lock_guard lock(mutex_);
    links_.push_back(link);
    return std::make_unique<Connection>(link, store_.holdLapse(), gate_);
  }

  void silence() {
    std::lock_guard lock(gate_->mutex);
    gate_->silent = true;
  }
  void heal() {
    {
      std::lock_guard lock(gate_->mutex);
      gate_->silent = false;
    }
    gate_->wake.notify_all();
  }
  // Liveness renewals (holds) waiting for the network now.
  int blockedHolds() const {
    std::lock_guard lock(gate_->mutex);
    return gate_->blockedHolds;
  }
  std::string address() const override { return "in-process:0"; }
  launcher::StoreTenancy tenancy() const override { return launcher::StoreTenancy::kOneJob; }

  void sever() {
    std::lock_guard lock(mutex_);
    for (auto& link : links_) {
      std::lock_guard linkLock(link->mutex);
      link->store.reset();  // destroyed when its last call in flight returns
    }
  }

 private:
  struct Link {
    std::mutex mutex;
    std::shared_ptr<rendezvous::HashStore> store;
  };
  struct Gate {
    mutable std::mutex mutex;
    std::condition_variable wake;
    bool silent = false;
    int blockedHolds = 0;
    // Blocks while the network is cut.
    void pass(bool hold) {
      std::unique_lock lock(mutex);
      if (!silent) return;
      if (hold) ++blockedHolds;
      wake.wait(lock, [this] { return !silent; });
      if (hold) --blockedHolds;
    }
  };
  // Every call goes to the link's store while it lasts; a hold waits for the network first.
  class Connection final : public ForwardingStore {
   public:
    Connection(std::shared_ptr<Link> link, rendezvous::HoldLapse lapse, std::shared_ptr<Gate> gate)
        : link_(std::move(link)), lapse_(lapse), gate_(std::move(gate)) {}
    // Dropping a connection closes it, as a TcpStore's socket is closed: its holds lapse.
    ~Connection() override {
      std::lock_guard lock(link_->mutex);
      link_->store.reset();
    }
    std::string hold(std::string_view k, std::string_view v, std::chrono::milliseconds ttl,
                     std::string_view nk, std::string_view nv) override {
      gate_->pass(/*hold=*/true);
      return ForwardingStore::hold(k, v, ttl, nk, nv);
    }
    rendezvous::HoldLapse holdLapse() const override { return lapse_; }

   private:
    std::shared_ptr<rendezvous::HoldingStore> target() const override {
      gate_->pass(/*hold=*/false);  // a hold passed already
      std::lock_guard lock(link_->mutex);
      if (!link_->store)
        throw rendezvous::StoreConnectionError("in-process store: connection severed");
      return link_->store;
    }
    std::shared_ptr<Link> link_;
    rendezvous::HoldLapse lapse_;  // the store's, still known once severed
    std::shared_ptr<Gate> gate_;
  };

  rendezvous::HashStore& store_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<Link>> links_;
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
};

// Heartbeat channels whose last report the test sets by hand.
class FakeHeartbeats final : public launcher::Heartbeats {
 public:
  std::string prepare(int localRank) override {
    reports.erase(localRank);
    return "/fake/heartbeats/" + std::to_string(localRank);
  }
  std::optional<EventLoop::WallTime> lastReport(int localRank) const override {
    auto it = reports.find(localRank);
    if (it == reports.end()) return std::nullopt;
    return it->second;
  }
  std::map<int, EventLoop::WallTime> reports;
};

// Stop requests as the machine makes them: a path per attempt, and each request kept.
class FakeStopRequests final : public launcher::StopRequests {
 public:
  struct Request {
    std::string path;
    std::string reason;
    EventLoop::WallTime deadline;
  };
  std::string prepare() override {
    current = "/fake/stop-" + std::to_string(++attempts);
    return current;
  }
  void request(std::string_view reason, EventLoop::WallTime deadline) override {
    requests.push_back({current, std::string(reason), deadline});
  }
  int attempts = 0;
  std::string current;
  std::vector<Request> requests;
};

// Work done by each worker's tree, as the test sets it: the total CPU time and I/O of the worker
// (one process per tree) so far.
class FakeActivity final : public launcher::WorkerActivity {
 public:
  std::vector<launcher::TreeSample> sample(const std::vector<pid_t>& workers) override {
    ++samples;
    std::vector<launcher::TreeSample> trees;
    for (pid_t pid : workers) {
      launcher::TreeSample tree;
      tree[pid] = launcher::ProcessWork{1, cpu[pid], io[pid]};
      trees.push_back(std::move(tree));
    }
    return trees;
  }
  std::map<pid_t, std::chrono::milliseconds> cpu;
  std::map<pid_t, std::uint64_t> io;
  int samples = 0;  // passes over the trees
};

// Evidence that arrives (posted, as from the real collector's thread) with one Python frame
// naming the pid, so a test can see which worker it was taken of.
class FakeEvidence final : public launcher::EvidenceCollector {
 public:
  explicit FakeEvidence(EventLoop& loop) : loop_(loop) {}
  void collect(pid_t pid, std::string saveTo,
               std::optional<launcher::FlightRecorderTarget> flightRecorder,
               std::function<void(launcher::HangEvidence)> done) override {
    requests.push_back(pid);
    flightRecorders.push_back(flightRecorder);
    launcher::HangEvidence evidence;
    evidence.pid = pid;
    evidence.savedTo = std::move(saveTo);  // as if written: the machine only names the file
    evidence.pythonStack =
        "Thread 0x1 (most recent call first):\n  File \"train.py\", line 7 in stuck_in_pid_" +
        std::to_string(pid) + "\n";
    if (flightRecorder) {
      launcher::FlightRecorderDump dump;
      dump.pipe = flightRecorder->pipe;
      dump.written = true;
      dump.file = flightRecorder->dump;
      evidence.flightRecorder = dump;
    }
    if (hold) {
      held.push_back([done = std::move(done), evidence] { done(evidence); });
    } else {
      loop_.post([done = std::move(done), evidence] { done(evidence); });
    }
  }
  std::vector<pid_t> requests;
  std::vector<std::optional<launcher::FlightRecorderTarget>> flightRecorders;  // per request
  // With `hold`, each collection finishes only when the test calls its entry of `held`.
  bool hold = false;
  std::vector<std::function<void()>> held;

 private:
  EventLoop& loop_;
};

// An OOM witness that blames the pids the test names.
class FakeOom final : public launcher::OomWitness {
 public:
  void attemptStarted() override { ++attempts; }
  std::string explain(pid_t pid) override {
    return oomKilled.count(pid) > 0 ? "killed by the kernel's OOM killer (test)" : "";
  }
  std::set<pid_t> oomKilled;
  int attempts = 0;
};

// One agent as the machine's tests make it: its record in the rendezvous and its identity, under
// one host name, so that a failure report's host says which agent it was.
inline launcher::NodeInfo fakeNodeInfo(const std::string& hostname, const std::string& address,
                                       int nproc) {
  launcher::NodeInfo node;
  node.address = address;
  node.hostname = hostname;
  node.nproc = nproc;
  return node;
}
inline launcher::AgentIdentity fakeIdentity(const std::string& hostname, const std::string& address,
                                            bool hostsStore, const std::string& scratchDir) {
  launcher::AgentIdentity id;
  id.hostsStore = hostsStore;
  id.hostname = hostname;
  id.address = address;
  id.agentMarker = "marker";
  id.scratchDir = scratchDir;
  return id;
}

// The machine runs round `round`'s workers.
inline bool runsRound(const launcher::AgentMachine& machine, int round) {
  return machine.state() == launcher::AgentMachine::State::kRunning &&
         machine.round().number == round;
}

// Records every outcome a rendezvous client gives, in order, before handing it to the machine.
struct EventRecorder final : launcher::RendezvousEvents {
  explicit EventRecorder(launcher::RendezvousEvents& next) : next_(next) {}
  void onRoundFormed(launcher::Round round) override {
    seen.push_back("formed " + std::to_string(round.number));
    next_.onRoundFormed(std::move(round));
  }
  void onRendezvousFailed(const launcher::RendezvousFailure& failure) override {
    seen.push_back("failed");
    next_.onRendezvousFailed(failure);
  }
  void onStop(int round, launcher::StopReason stop) override {
    seen.push_back("stop " + std::to_string(round) + " " + launcher::stopKindName(stop.kind));
    next_.onStop(round, std::move(stop));
  }
  void onStoreLost(const launcher::StoreLoss& loss) override {
    seen.push_back("store lost");
    next_.onStoreLost(loss);
  }
  std::vector<std::string> seen;

 private:
  launcher::RendezvousEvents& next_;
};

}  // namespace ddprun::test
