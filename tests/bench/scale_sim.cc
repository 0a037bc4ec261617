// Round formation at scale, in simulation (issue #22 point 6; scripts/bench.sh scale).
//
// N simulated agents, each a real Membership over its own store connections (control, watch,
// heartbeat: what an agent opens), no workers, against a running store: a ddprun-rendezvous
// daemon (c10d) or an etcd (etcd). The agents are threads of --procs processes (default 1), so
// that their connections fit the descriptor limit, which binds each process: on etcd an agent
// holds about twenty (a connection per concurrent call and per kept watch, and an epoll set per
// client), and this VM's hard limit is 20,000. The processes meet at every phase through barriers
// in shared memory, and count into shared counters. It times
//   open    every agent connects, gets a node id and starts holding its alive key;
//   form    from the moment every agent is open, all join round 0 at once, until the last one
//           knows the round (group rank 0 published its worker store, as an agent does);
//   reform  the last group rank announces it leaves (node_left) and goes; the others see the
//           stop and join the next round: from the announcement until the last knows it;
// and counts the store operations the agents made in each phase (requests, and the keys they
// named: a multiGet of N keys is one request and N keys; the bytes of the values the store sent
// back), so that a part that grows faster than N shows itself per node. With --store-pid, the
// store process's CPU seconds in each phase and its peak RSS (VmHWM) at the end; the simulator
// processes' own CPU seconds in each phase. Output: one JSON line on stdout.
//
// With --spares S (1 or more), a spare's place at scale instead (issue #38 point 5): N active
// agents at --nnodes N:N and S spares over MAX, every one of them passing the real health gate's
// built-in checks (NodeHealthGate::builtIn(): NVML when present, free space) before each join, as
// an agent does. It times
//   open    as above, the N + S agents;
//   form    the N active agents join round 0 (their gates first), until the last knows it;
//   settle  the spares pass their gates and join: until each waits for a place (MAX is full);
//   replace one active agent, alone in a process of its own, is SIGKILLed: its connections close
//           and it neither releases its hold nor revokes its lease, as a real lost agent.
//           ddprun's store reports the loss when the connection closes; etcd only when the lost
//           agent's lease ends, after its hold's TTL (--lost-attempts renewals of the keep-alive
//           interval). It holds the last group rank (--lost-slot last, the default: an
//           ordinary node) or the first (group rank 0, the host of the workers' store). The
//           survivors see the stop, pass their gates and rejoin, and a spare takes the place:
//           from the loss until the last member of the new round (the spare among them) knows
//           it. Also from the loss until the last survivor saw the stop (replace_detect_s), and
//           each agent's own gate times (first: NVML's load tried).
//
// A benchmark, never a timed test: bench_scale.py runs it under the shared lock.
#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/file_text.h"
#include "core/proc_stat.h"
#include "forwarding_store.h"
#include "health/node_health_gate.h"
#include "membership/membership.h"
#include "no_loop.h"
#include "stores/store_backends.h"

namespace {

using namespace ddprun::launcher;
using ddprun::rendezvous::HoldingStore;
using ddprun::rendezvous::ListedKeys;
using ddprun::test::ForwardingStore;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Requests and keys named, for every connection of every simulated agent (in shared memory:
// lock-free atomics work across processes).
struct Counts {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> keys{0};
  std::atomic<std::uint64_t> readBytes{0};  // of the values the store sent back
  void count(std::size_t named) {
    requests.fetch_add(1, std::memory_order_relaxed);
    keys.fetch_add(named, std::memory_order_relaxed);
  }
  void read(std::size_t bytes) { readBytes.fetch_add(bytes, std::memory_order_relaxed); }
};

// A connection that counts what goes through it (the store's own view, from the client side).
class CountingStore final : public ForwardingStore {
 public:
  CountingStore(std::unique_ptr<HoldingStore> inner, Counts& counts)
      : ForwardingStore(std::move(inner)), counts_(counts) {}
  void set(std::string_view key, std::string_view value) override {
    counts_.count(1);
    ForwardingStore::set(key, value);
  }
  std::string get(std::string_view key) override {
    counts_.count(1);
    std::string value = ForwardingStore::get(key);
    counts_.read(value.size());
    return value;
  }
  std::optional<std::string> tryGet(std::string_view key) override {
    counts_.count(1);
    std::optional<std::string> value = ForwardingStore::tryGet(key);
    counts_.read(value ? value->size() : 0);
    return value;
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    counts_.count(1);
    return ForwardingStore::add(key, delta);
  }
  std::int64_t takeTicket(std::string_view key) override {
    counts_.count(1);
    return ForwardingStore::takeTicket(key);
  }
  std::int64_t ticketCount(std::string_view key) override {
    counts_.count(1);
    return ForwardingStore::ticketCount(key);
  }
  std::string compareSet(std::string_view key, std::string_view expected,
                         std::string_view desired) override {
    counts_.count(1);
    std::string value = ForwardingStore::compareSet(key, expected, desired);
    counts_.read(value.size());
    return value;
  }
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    counts_.count(keys.size());
    ForwardingStore::wait(keys, timeout);
  }
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override {
    counts_.count(keys.size());
    return ForwardingStore::check(keys);
  }
  bool deleteKey(std::string_view key) override {
    counts_.count(1);
    return ForwardingStore::deleteKey(key);
  }
  std::int64_t numKeys() override {
    counts_.count(1);
    return ForwardingStore::numKeys();
  }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override {
    counts_.count(keys.size());
    std::vector<std::string> values = ForwardingStore::multiGet(keys);
    for (const std::string& value : values) counts_.read(value.size());
    return values;
  }
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::string>& values) override {
    counts_.count(keys.size());
    ForwardingStore::multiSet(keys, values);
  }
  void append(std::string_view key, std::string_view value) override {
    counts_.count(1);
    ForwardingStore::append(key, value);
  }
  std::vector<std::string> listKeys() override {
    counts_.count(1);
    return ForwardingStore::listKeys();
  }
  ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys) override {
    ListedKeys listed = ForwardingStore::listPrefix(prefix, maxKeys);
    counts_.count(std::max<std::size_t>(1, listed.keys.size()));
    return listed;
  }
  std::int64_t deletePrefix(std::string_view prefix) override {
    counts_.count(1);
    return ForwardingStore::deletePrefix(prefix);
  }
  std::string hold(std::string_view key, std::string_view value, std::chrono::milliseconds ttl,
                   std::string_view notifyKey, std::string_view notifyValue) override {
    counts_.count(1);
    return ForwardingStore::hold(key, value, ttl, notifyKey, notifyValue);
  }
  bool release(std::string_view key) override {
    counts_.count(1);
    return ForwardingStore::release(key);
  }
  std::vector<std::string> waitForAnyMissing(const std::vector<std::string>& keys,
                                             Duration timeout) override {
    counts_.count(keys.size());
    return ForwardingStore::waitForAnyMissing(keys, timeout);
  }

 private:
  Counts& counts_;
};

class CountingBackend final : public StoreBackend {
 public:
  CountingBackend(StoreBackend& inner, Counts& counts) : inner_(inner), counts_(counts) {}
  std::unique_ptr<HoldingStore> connect(std::chrono::milliseconds callTimeout,
                                        std::chrono::milliseconds connectTimeout) override {
    return std::make_unique<CountingStore>(inner_.connect(callTimeout, connectTimeout), counts_);
  }
  std::string address() const override { return inner_.address(); }
  StoreTenancy tenancy() const override { return inner_.tenancy(); }

 private:
  StoreBackend& inner_;
  Counts& counts_;
};

// A process's CPU seconds so far, the store's or a simulator process's (0 without a pid).
double cpuSeconds(pid_t pid) {
  if (pid <= 0) return 0;
  const auto stat = readProcStat(pid);
  if (!stat) return 0;
  return static_cast<double>(stat->userTicks + stat->systemTicks) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The store process's peak resident set in MiB (VmHWM; 0 without a pid).
double storePeakRssMiB(pid_t pid) {
  if (pid <= 0) return 0;
  const auto status = readFileText(fmt::format("/proc/{}/status", pid), nullptr, 64 * 1024);
  if (!status) return 0;
  const auto at = status->find("VmHWM:");
  if (at == std::string::npos) return 0;
  return std::strtod(status->c_str() + at + 6, nullptr) / 1024.0;
}

constexpr int kMaxProcs = 64;

struct Phase {
  double seconds = 0;
  double storeCpu = 0;
  double simCpu = 0;
  std::uint64_t requests = 0;
  std::uint64_t keys = 0;
  std::uint64_t readBytes = 0;
};

// What every simulator process shares: a MAP_SHARED mapping made before the fork. Each phase
// starts when every agent of every process reached it and ends when every agent finished it: at
// each meeting the last arrival (the barrier's serial thread) closes one phase and opens the
// next, and only then are the others let go (a second barrier).
struct Shared {
  pthread_barrier_t arrive;
  pthread_barrier_t leave;
  // The spare scenario's last meeting, after the loss: every agent but the lost one.
  pthread_barrier_t arriveAfterLoss;
  pthread_barrier_t leaveAfterLoss;
  pthread_mutex_t mutex;  // the phase records, the start mark and the failures
  Counts counts;
  std::atomic<int> stage{0};
  std::atomic<bool> failed{false};
  std::atomic<pid_t> pids[kMaxProcs];  // each process writes its own before its agents start
  int procs = 1;
  pid_t storePid = 0;
  int nodes = 0;   // active agents (MAX)
  int spares = 0;  // --spares: the spare scenario when more than 0
  Phase open, form, reform, settle, replace;
  // The spare scenario's replacement round: its members who know it (the last one ends the
  // replace phase), the spares among them, and when the last survivor saw the loss.
  std::atomic<int> placed{0};
  std::atomic<int> sparesSeated{0};
  std::atomic<bool> replaced{false};
  std::atomic<bool> lostOpened{false};  // --lost-slot first: the others open after it
  std::atomic<std::int64_t> detectNanos{0};
  int lostGroupRank = -1;
  int seatedGroupRank = -1;
  // Where the current phase started.
  Clock::time_point start;
  double storeCpuAtStart = 0;
  double simCpuAtStart = 0;
  std::uint64_t requestsAtStart = 0;
  std::uint64_t keysAtStart = 0;
  std::uint64_t readBytesAtStart = 0;
  int failures = 0;
  char firstFailure[512] = {};
};

// One run of an agent's gate: its wall time, and its thread's CPU time (the node's own cost: the
// wall time of thousands of simulated agents' gates at once on a few cores is mostly waiting for
// a core, or for the dynamic loader's lock as each tries to load NVML).
struct GateTime {
  double wallMs = -1;  // -1: not run
  double cpuMs = -1;
};

// Each agent's own gate times in the spare scenario, in shared memory.
struct GateTimes {
  GateTime first;  // before its first join: NVML's load tried, as an agent's first round
  GateTime again;  // before its rejoin after the loss (the survivors)
};

// The shared mutex is robust: a process that died holding it (killed mid-phase) must not leave
// the parent, which reports what finished, waiting for it for ever.
void lockShared(Shared& shared) {
  if (pthread_mutex_lock(&shared.mutex) == EOWNERDEAD) pthread_mutex_consistent(&shared.mutex);
}
void unlockShared(Shared& shared) { pthread_mutex_unlock(&shared.mutex); }

// The simulator processes' CPU seconds so far: the simulated agents' own cost, which on a small
// VM shares the cores with the store (if it nears cores x wall time, the simulator is the
// bottleneck).
double simCpuSeconds(const Shared& shared) {
  double total = 0;
  for (int k = 0; k < shared.procs; ++k) total += cpuSeconds(shared.pids[k].load());
  return total;
}

void startPhase(Shared& shared) {
  shared.storeCpuAtStart = cpuSeconds(shared.storePid);
  shared.simCpuAtStart = simCpuSeconds(shared);
  shared.requestsAtStart = shared.counts.requests.load();
  shared.keysAtStart = shared.counts.keys.load();
  shared.readBytesAtStart = shared.counts.readBytes.load();
  shared.start = Clock::now();
}

Phase endPhase(const Shared& shared) {
  Phase phase;
  phase.seconds = std::chrono::duration<double>(Clock::now() - shared.start).count();
  phase.storeCpu = cpuSeconds(shared.storePid) - shared.storeCpuAtStart;
  phase.simCpu = simCpuSeconds(shared) - shared.simCpuAtStart;
  phase.requests = shared.counts.requests.load() - shared.requestsAtStart;
  phase.keys = shared.counts.keys.load() - shared.keysAtStart;
  phase.readBytes = shared.counts.readBytes.load() - shared.readBytesAtStart;
  return phase;
}

// Every agent of every process meets here; the last arrival closes a phase and opens the next.
void meet(Shared& shared, bool afterLoss = false) {
  pthread_barrier_t& arrive = afterLoss ? shared.arriveAfterLoss : shared.arrive;
  pthread_barrier_t& leave = afterLoss ? shared.leaveAfterLoss : shared.leave;
  if (pthread_barrier_wait(&arrive) == PTHREAD_BARRIER_SERIAL_THREAD) {
    lockShared(shared);
    const int stage = shared.stage.load();
    if (stage == 0) startPhase(shared);
    if (stage == 1) {
      shared.open = endPhase(shared);
      startPhase(shared);
    }
    if (stage == 2) {
      shared.form = endPhase(shared);
      if (shared.spares > 0) startPhase(shared);  // settle
    }
    if (stage == 3) {
      // The re-form was started by the leaver's announcement; the replace phase, which follows
      // the settle, by the loss, and the last member of the new round ends it (placed()).
      if (shared.spares > 0)
        shared.settle = endPhase(shared);
      else
        shared.reform = endPhase(shared);
    }
    shared.stage.store(stage + 1);
    unlockShared(shared);
  }
  pthread_barrier_wait(&leave);
}

void fail(Shared& shared, const std::string& what) {
  lockShared(shared);
  if (shared.failures++ == 0) {
    std::snprintf(shared.firstFailure, sizeof shared.firstFailure, "%s", what.c_str());
  }
  shared.failed = true;
  unlockShared(shared);
}

// The figures so far (a phase that did not end reads 0): one JSON line. Under the mutex.
nlohmann::json result(const Shared& shared, const std::string& backendName, int nodes) {
  nlohmann::json line = {
      {"backend", backendName},
      {"nodes", nodes},
      {"procs", shared.procs},
      {"ok", shared.failures == 0},
      {"open_s", shared.open.seconds},
      {"form_s", shared.form.seconds},
      {"reform_s", shared.reform.seconds},
      {"store_cpu_open_s", shared.open.storeCpu},
      {"store_cpu_form_s", shared.form.storeCpu},
      {"store_cpu_reform_s", shared.reform.storeCpu},
      {"sim_cpu_form_s", shared.form.simCpu},
      {"sim_cpu_reform_s", shared.reform.simCpu},
      {"requests_per_node_form", static_cast<double>(shared.form.requests) / nodes},
      {"keys_per_node_form", static_cast<double>(shared.form.keys) / nodes},
      {"requests_per_node_reform", static_cast<double>(shared.reform.requests) / nodes},
      {"keys_per_node_reform", static_cast<double>(shared.reform.keys) / nodes},
      {"read_bytes_per_node_form", static_cast<double>(shared.form.readBytes) / nodes},
      {"read_bytes_per_node_reform", static_cast<double>(shared.reform.readBytes) / nodes},
      {"store_peak_rss_mib", storePeakRssMiB(shared.storePid)}};
  if (shared.spares > 0) {
    line["spares"] = shared.spares;
    line["settle_s"] = shared.settle.seconds;
    line["replace_s"] = shared.replace.seconds;
    line["replace_detect_s"] = static_cast<double>(shared.detectNanos.load()) / 1e9;
    line["store_cpu_replace_s"] = shared.replace.storeCpu;
    line["sim_cpu_replace_s"] = shared.replace.simCpu;
    line["requests_per_node_replace"] = static_cast<double>(shared.replace.requests) / nodes;
    line["keys_per_node_replace"] = static_cast<double>(shared.replace.keys) / nodes;
    line["read_bytes_per_node_replace"] = static_cast<double>(shared.replace.readBytes) / nodes;
    line["lost_group_rank"] = shared.lostGroupRank;
    line["seated_group_rank"] = shared.seatedGroupRank;
    line["spares_seated"] = shared.sparesSeated.load();
  }
  return line;
}

int usage(const std::string& problem) {
  std::cerr << "ddprun-scale-sim: " << problem
            << "; usage: ddprun-scale-sim --backend c10d|etcd --endpoint HOST:PORT --nodes N "
               "[--procs P] [--run-id ID] [--store-pid PID] [--timeout-s S] [--keep-alive-ms MS] "
               "[--spares S [--lost-attempts K] [--lost-slot first|last]]\n";
  return 2;
}

struct SimOptions {
  std::string backendName = "c10d";
  std::string endpoint;
  std::string runId = "scale";
  int nodes = 0;
  int procs = 1;
  int timeoutSeconds = 600;
  int keepAliveMs = 0;  // --keep-alive-ms: the agents' keep_alive_interval (0: the default, 1 s)
  int spares = 0;       // --spares: the spare scenario (0: forming and re-forming)
  // --lost-attempts: the lost agent's keep_alive_max_attempts, so its hold's TTL (ddprun's
  // default, 5). Only a store that sees a loss at the lease's end (etcd) waits for it.
  int lostAttempts = 5;
  // --lost-slot: the lost agent's group rank: last (an ordinary node) or first (group rank 0, the
  // host of the round's workers' store).
  bool lostLast = true;
};

// The agents' rendezvous settings: every simulated agent's, and the lost one's in the spare
// scenario (`lost`: its hold's TTL is ddprun's default, --lost-attempts renewals).
RendezvousConfig simConfig(const SimOptions& options, bool lost) {
  const int nodes = options.nodes;
  const auto colon = options.endpoint.rfind(':');
  RendezvousConfig config;
  config.backend = options.backendName == "etcd" ? RdzvBackend::kEtcd : RdzvBackend::kC10d;
  if (options.spares > 0) {
    // --nnodes N:N: the round forms at N; an agent over N is a spare.
    config.minNodes = nodes;
    config.maxNodes = nodes;
    config.spares = options.spares;
  } else {
    // --nnodes N-1:N: the round forms at N (max), and re-forms at once without the one that left
    // (min); last call never ends a forming round early here.
    config.minNodes = nodes - 1;
    config.maxNodes = nodes;
  }
  config.endpoint = options.endpoint;
  config.host = options.endpoint.substr(0, colon);
  config.port = static_cast<std::uint16_t>(std::atoi(options.endpoint.c_str() + colon + 1));
  config.runId = options.runId;
  config.settings.joinTimeout = std::chrono::seconds(options.timeoutSeconds);
  config.settings.readTimeout = std::chrono::seconds(options.timeoutSeconds);
  config.settings.lastCallTimeout = std::chrono::seconds(options.timeoutSeconds);
  // Renewals every second as an agent's (the store's load is real), but a hold lapses after 30 s
  // rather than 5: thousands of simulated agents' threads on two cores can wait seconds for a
  // core, and a heartbeat thread that was not scheduled is the simulator's delay, not the store's
  // (4,096 agents lost their own holds that way). The lost agent's hold keeps its real TTL: on
  // etcd that is how long its loss goes unseen.
  config.settings.keepAliveMaxAttempts = lost ? options.lostAttempts : 30;
  if (options.keepAliveMs > 0)
    config.settings.keepAliveInterval = std::chrono::milliseconds(options.keepAliveMs);
  if (config.backend == RdzvBackend::kEtcd) {
    ddprun::rendezvous::etcd::EtcdEndpoint member;
    member.host = config.host;
    member.port = config.port;
    config.etcdEndpoints = {member};
  }
  return config;
}

// Agent `i`'s node record.
NodeInfo simNode(int i) {
  NodeInfo self;
  self.address = "127.0.0.1";
  self.hostname = fmt::format("sim-{}", i);
  self.nproc = 8;
  self.pid = 100000 + i;
  return self;
}

// Forming and re-forming (no --spares): agent `i` of `nodes`.
void formAndReform(Shared& shared, const RendezvousConfig& config, StoreBackend& backend, int i,
                   int nodes) {
  const NodeInfo self = simNode(i);
  Membership membership(config, backend, self, [] { return Clock::now(); });
  bool ok = true;
  meet(shared);  // stage 0 -> open starts
  try {
    membership.open();
  } catch (const std::exception& error) {
    fail(shared, fmt::format("agent {} open: {}", i, error.what()));
    ok = false;
  }
  meet(shared);  // stage 1: open ends, form starts
  std::optional<Round> round;
  if (ok && !shared.failed) {
    try {
      round = membership.join(-1);
      if (round->hostsWorkerStore) membership.publishWorkerStore(round->number, "127.0.0.1", 29500);
    } catch (const std::exception& error) {
      fail(shared, fmt::format("agent {} join: {}", i, error.what()));
      membership.cancel();
    }
  }
  meet(shared);  // stage 2: form ends
  if (round && !shared.failed) {
    try {
      if (round->groupRank == nodes - 1) {
        // The leaver's announcement starts the re-form phase, not a meeting.
        lockShared(shared);
        startPhase(shared);
        unlockShared(shared);
        membership.announce(
            round->number,
            StopReason::nodeLeft(membership.self().id, round->groupRank, self.hostname, SIGTERM));
        membership.close(false);
      } else {
        membership.waitForStop(round->number);
        const Round next = membership.join(round->number + 1);
        if (next.hostsWorkerStore) membership.publishWorkerStore(next.number, "127.0.0.1", 29500);
      }
    } catch (const std::exception& error) {
      fail(shared, fmt::format("agent {} re-form: {}", i, error.what()));
    }
  }
  meet(shared);  // stage 3: re-form ends
  membership.close(false);
}

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The real gate's built-in checks, as an agent runs them before a join (no hooks: they run in
// the agent's loop); its time into `ms`. A verdict other than a pass fails the run: the
// simulator expects every node healthy.
double threadCpuMs() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

void passGate(NodeHealthGate& gate, GateTime& time) {
  const auto start = Clock::now();
  const double cpuStart = threadCpuMs();
  const std::optional<HealthVerdict> sick = gate.builtIn();
  time.cpuMs = threadCpuMs() - cpuStart;
  time.wallMs = msSince(start);
  if (sick) {
    throw std::runtime_error(fmt::format(
        "the health gate failed ({}: {}); the simulator needs a healthy machine (the free space "
        "it names)",
        sick->check, sick->reason));
  }
}

// A member of the replacement round knows it: the last of the N ends the replace phase.
void placed(Shared& shared, const Round& round, bool spare) {
  lockShared(shared);
  if (spare) {
    shared.sparesSeated.fetch_add(1);
    shared.seatedGroupRank = round.groupRank;
  }
  if (shared.placed.fetch_add(1) + 1 == shared.nodes) {
    shared.replace = endPhase(shared);
    shared.replaced = true;
  }
  unlockShared(shared);
}

// Group ranks follow the node ids (the order the agents registered; all simulated agents share
// one address): the lost agent takes the last group rank (--lost-slot last) by opening once every
// other agent has its node id, watched through a connection of its own.
void waitForTheOthers(const Shared& shared, StoreBackend& backend, const RendezvousConfig& config,
                      const SimOptions& options) {
  const auto patience = std::chrono::seconds(options.timeoutSeconds);
  const std::unique_ptr<HoldingStore> store = backend.connect(patience, 1s);
  const MembershipKeys keys(config.runId);
  const int others = options.nodes + options.spares - 1;
  const auto giveUp = Clock::now() + patience;
  while (store->ticketCount(keys.nextNodeId()) < others && !shared.failed) {
    if (Clock::now() > giveUp) {
      throw std::runtime_error(fmt::format("the other {} agents did not open within {} s", others,
                                           options.timeoutSeconds));
    }
    std::this_thread::sleep_for(10ms);
  }
}

// The spare scenario: agent `i` of `nodes` active ones (i < nodes) or a spare (i >= nodes);
// agent `lostIndex` is the one lost.
void spareAndReplace(Shared& shared, const RendezvousConfig& config,
                     const RendezvousConfig& lostConfig, StoreBackend& backend, int i, int nodes,
                     int lostIndex, GateTimes& gateTimes, const SimOptions& options) {
  const NodeInfo self = simNode(i);
  const bool spare = i >= nodes;
  const bool lost = i == lostIndex;
  HealthPolicy policy;
  NodeHealthFacts facts;
  facts.hostname = self.hostname;
  facts.address = self.address;
  facts.runId = config.runId;
  facts.agentMarker = fmt::format("{}-{}", config.runId, i);
  if (const char* tmp = std::getenv("TMPDIR")) facts.tmpDir = tmp;
  if (const char* mask = std::getenv("CUDA_VISIBLE_DEVICES")) facts.cudaVisibleDevices = mask;
  ddprun::test::NoLoop loop;  // never run: the gate's builtIn() runs on this thread
  NodeHealthGate gate(policy, facts, loop);
  Membership membership(lost ? lostConfig : config, backend, self, [] { return Clock::now(); });
  bool ok = true;
  meet(shared);  // stage 0 -> open starts
  try {
    if (lost && options.lostLast) waitForTheOthers(shared, backend, config, options);
    // --lost-slot first: the lost agent registers first, so the first node id, group rank 0.
    while (!lost && !options.lostLast && !shared.lostOpened && !shared.failed)
      std::this_thread::sleep_for(1ms);
    membership.open();
  } catch (const std::exception& error) {
    fail(shared, fmt::format("agent {} open: {}", i, error.what()));
    ok = false;
  }
  if (lost) shared.lostOpened = true;
  meet(shared);  // stage 1: open ends, form starts
  std::optional<Round> round;
  if (ok && !shared.failed) {
    try {
      passGate(gate, gateTimes.first);
      if (!spare) {
        round = membership.join(-1);
        if (round->hostsWorkerStore)
          membership.publishWorkerStore(round->number, "127.0.0.1", 29500);
      }
    } catch (const std::exception& error) {
      fail(shared, fmt::format("agent {} join: {}", i, error.what()));
      membership.cancel();
      ok = false;
    }
  }
  meet(shared);  // stage 2: form ends, settle starts
  // A spare's join blocks for as long as it waits for a place: on a thread of its own, while
  // this one says when it waits (settle) and, after the loss, ends it if it got no place.
  std::thread joiner;
  std::atomic<bool> joinerDone{false};
  if (spare && ok && !shared.failed) {
    joiner = std::thread([&] {
      try {
        const Round seat = membership.join(-1);
        if (seat.hostsWorkerStore) membership.publishWorkerStore(seat.number, "127.0.0.1", 29500);
        placed(shared, seat, true);
      } catch (const MembershipCancelled&) {
        // a spare left without a place: the replacement round was full
      } catch (const std::exception& error) {
        fail(shared, fmt::format("spare {} join: {}", i, error.what()));
      }
      joinerDone = true;
    });
    const auto giveUp = Clock::now() + std::chrono::seconds(options.timeoutSeconds);
    while (!membership.waitingForPlace() && !joinerDone && !shared.failed &&
           Clock::now() < giveUp) {
      std::this_thread::sleep_for(5ms);
    }
    if (!membership.waitingForPlace() && !shared.failed) {
      fail(shared,
           fmt::format("spare {} did not wait for a place within {} s{}", i, options.timeoutSeconds,
                       joinerDone ? " (its join ended first)" : ""));
    }
  }
  meet(shared);  // stage 3: settle ends; the loss starts the replace phase
  if (lost) {
    // The lost agent is alone in its process (main()), and is SIGKILLed: its connections close
    // and nothing of it runs on, so its hold is never released nor its lease revoked. Always,
    // even in a run that failed already: the last meeting does not count it.
    lockShared(shared);
    shared.lostGroupRank = round ? round->groupRank : -1;
    startPhase(shared);
    unlockShared(shared);
    ::kill(::getpid(), SIGKILL);
  }
  if (round && !shared.failed) {
    try {
      const StopReason stop = membership.waitForStop(round->number);
      lockShared(shared);
      const std::int64_t detect =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - shared.start).count();
      if (detect > shared.detectNanos.load()) shared.detectNanos = detect;
      unlockShared(shared);
      if (stop.kind != StopKind::kNodeLost) {
        throw std::runtime_error(fmt::format("round {} stopped for {}, not the node lost",
                                             round->number, stopKindName(stop.kind)));
      }
      passGate(gate, gateTimes.again);
      const Round next = membership.join(round->number + 1);
      if (next.hostsWorkerStore) membership.publishWorkerStore(next.number, "127.0.0.1", 29500);
      placed(shared, next, false);
    } catch (const std::exception& error) {
      fail(shared, fmt::format("agent {} replace: {}", i, error.what()));
    }
  }
  if (joiner.joinable()) {
    // The seated spare's joiner ends by itself; the others wait for a place in the new round
    // until the replace phase is over.
    const auto giveUp = Clock::now() + std::chrono::seconds(options.timeoutSeconds);
    while (!joinerDone && !shared.replaced && !shared.failed && Clock::now() < giveUp) {
      std::this_thread::sleep_for(5ms);
    }
    membership.cancel();
    joiner.join();
  }
  meet(shared, /*afterLoss=*/true);  // stage 4: replace is over
  membership.close(false);
}

// One simulator process: agents [begin, end) of the N (and the spares), each a thread with its
// own Membership.
int runAgents(Shared& shared, GateTimes* gateTimes, const SimOptions& options, int begin, int end) {
  std::signal(SIGPIPE, SIG_IGN);
  const RendezvousConfig config = simConfig(options, false);
  const RendezvousConfig lostConfig = simConfig(options, true);
  std::unique_ptr<StoreBackend> real = makeStoreBackend(config, {storeAccess(config).endpoint});
  CountingBackend backend(*real, shared.counts);
  // The lost agent: agent 0, alone in its process (main()); its place in the join order is the
  // race's.
  const int lostIndex = 0;

  std::vector<std::thread> agents;
  agents.reserve(static_cast<std::size_t>(end - begin));
  for (int i = begin; i < end; ++i) {
    agents.emplace_back([&, i] {
      if (options.spares > 0) {
        spareAndReplace(shared, config, lostConfig, backend, i, options.nodes, lostIndex,
                        gateTimes[i], options);
      } else {
        formAndReform(shared, config, backend, i, options.nodes);
      }
    });
  }
  for (auto& agent : agents) agent.join();
  return 0;
}

// The spare scenario's settings and each agent's own gate times, over the agents that ran the
// gate: the median and the slowest, before the first join and before the rejoin.
nlohmann::json spareFigures(const SimOptions& options, const GateTimes* gateTimes, int agents) {
  const double interval = options.keepAliveMs > 0 ? options.keepAliveMs / 1000.0 : 1.0;
  nlohmann::json figures = {{"keep_alive_interval_s", interval},
                            {"lost_hold_ttl_s", interval * options.lostAttempts},
                            {"lost_slot", options.lostLast ? "last" : "first"}};
  // "gate_first_cpu_ms_median", ...: per agent, the median and the slowest.
  const auto add = [&](const char* name, auto pick) {
    std::vector<double> ms;
    for (int i = 0; i < agents; ++i) {
      if (const double value = pick(gateTimes[i]); value >= 0) ms.push_back(value);
    }
    std::sort(ms.begin(), ms.end());
    figures[fmt::format("gate_{}_ms_median", name)] = ms.empty() ? 0 : ms[ms.size() / 2];
    figures[fmt::format("gate_{}_ms_max", name)] = ms.empty() ? 0 : ms.back();
    return ms.size();
  };
  figures["gate_agents"] = add("first_cpu", [](const GateTimes& t) { return t.first.cpuMs; });
  add("first_wall", [](const GateTimes& t) { return t.first.wallMs; });
  add("rejoin_cpu", [](const GateTimes& t) { return t.again.cpuMs; });
  add("rejoin_wall", [](const GateTimes& t) { return t.again.wallMs; });
  return figures;
}

// The partial figures of a run that gave up: what finished, and where the unfinished phase spent
// its time so far.
nlohmann::json gaveUp(Shared& shared, const SimOptions& options, const std::string& why) {
  lockShared(shared);
  nlohmann::json line = result(shared, options.backendName, options.nodes);
  line["ok"] = false;
  const int reached = shared.stage.load();
  // The phase under way at each stage: the re-form after a form, or a spare's settle and the
  // replace.
  const char* unfinished = reached == 2                         ? "form"
                           : reached == 3 && shared.spares == 0 ? "reform"
                           : reached == 3                       ? "settle"
                           : reached == 4 && shared.spares > 0  ? "replace"
                                                                : nullptr;
  if (unfinished != nullptr && !(reached == 4 && shared.replaced)) {
    const Phase partial = endPhase(shared);
    line["unfinished_phase"] = unfinished;
    line["unfinished_s"] = partial.seconds;
    line["unfinished_requests_per_node"] = static_cast<double>(partial.requests) / options.nodes;
    line["unfinished_keys_per_node"] = static_cast<double>(partial.keys) / options.nodes;
    line["unfinished_store_cpu_s"] = partial.storeCpu;
    line["unfinished_sim_cpu_s"] = partial.simCpu;
  }
  std::string first =
      fmt::format("{} in stage {} ({})", why, reached,
                  shared.spares > 0 ? "2: form, 3: settle, 4: replace" : "2: form, 3: re-form");
  // What had failed by then is often why the rest waited.
  if (shared.failures > 0) {
    line["failed_agents"] = shared.failures;
    first +=
        fmt::format("; {} agent(s) had failed first: {}", shared.failures, shared.firstFailure);
  }
  line["first_failure"] = first;
  unlockShared(shared);
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  SimOptions options;
  pid_t storePid = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    if (flag == "--backend")
      options.backendName = value;
    else if (flag == "--endpoint")
      options.endpoint = value;
    else if (flag == "--nodes")
      options.nodes = std::atoi(value.c_str());
    else if (flag == "--procs")
      options.procs = std::atoi(value.c_str());
    else if (flag == "--run-id")
      options.runId = value;
    else if (flag == "--store-pid")
      storePid = static_cast<pid_t>(std::atoi(value.c_str()));
    else if (flag == "--timeout-s")
      options.timeoutSeconds = std::atoi(value.c_str());
    else if (flag == "--keep-alive-ms")
      options.keepAliveMs = std::atoi(value.c_str());
    else if (flag == "--spares")
      options.spares = std::atoi(value.c_str());
    else if (flag == "--lost-attempts")
      options.lostAttempts = std::atoi(value.c_str());
    else if (flag == "--lost-slot") {
      if (value != "first" && value != "last") return usage("--lost-slot is first or last");
      options.lostLast = value == "last";
    } else
      return usage(fmt::format("unknown option {}", flag));
  }
  if (options.nodes < 2 || options.endpoint.rfind(':') == std::string::npos) {
    return usage("give --endpoint HOST:PORT and --nodes 2 or more");
  }
  if (options.backendName != "c10d" && options.backendName != "etcd")
    return usage("--backend is c10d or etcd");
  if (options.keepAliveMs < 0) return usage("--keep-alive-ms is 0 (the default interval) or more");
  if (options.spares < 0) return usage("--spares is 0 (forming and re-forming) or more");
  if (options.lostAttempts < 1) return usage("--lost-attempts is 1 or more");
  // Every simulated agent: the active ones and the spares.
  const int agents = options.nodes + options.spares;
  // The spare scenario's lost agent runs alone in one more process.
  const int lostProcs = options.spares > 0 ? 1 : 0;
  if (options.procs < 1 || options.procs + lostProcs > kMaxProcs ||
      options.procs > agents - lostProcs) {
    return usage(fmt::format("--procs is 1 to {} and at most the agents (--nodes plus --spares{})",
                             kMaxProcs - lostProcs, lostProcs ? ", less the lost one" : ""));
  }
  spdlog::set_level(
      spdlog::level::err);  // the waiting lines of thousands of agents are not the point

  // Before any thread: the processes are forked from here.
  void* memory =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return usage("cannot map shared memory for the simulator's processes");
  Shared& shared = *new (memory) Shared();
  shared.procs = options.procs;
  shared.storePid = storePid;
  shared.nodes = options.nodes;
  shared.spares = options.spares;
  void* gateMemory = ::mmap(nullptr, sizeof(GateTimes) * static_cast<std::size_t>(agents),
                            PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (gateMemory == MAP_FAILED)
    return usage("cannot map shared memory for the simulator's processes");
  GateTimes* gateTimes = new (gateMemory) GateTimes[static_cast<std::size_t>(agents)];
  pthread_barrierattr_t barrierShared;
  pthread_barrierattr_init(&barrierShared);
  pthread_barrierattr_setpshared(&barrierShared, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&shared.arrive, &barrierShared, static_cast<unsigned>(agents));
  pthread_barrier_init(&shared.leave, &barrierShared, static_cast<unsigned>(agents));
  pthread_barrier_init(&shared.arriveAfterLoss, &barrierShared,
                       static_cast<unsigned>(agents - lostProcs));
  pthread_barrier_init(&shared.leaveAfterLoss, &barrierShared,
                       static_cast<unsigned>(agents - lostProcs));
  pthread_mutexattr_t mutexShared;
  pthread_mutexattr_init(&mutexShared);
  pthread_mutexattr_setpshared(&mutexShared, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&mutexShared, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&shared.mutex, &mutexShared);

  // Agents [begin, end) per process: the lost agent (agent 0) alone first in the spare scenario,
  // then the others split over --procs. Only the --procs processes count in the simulator's CPU
  // (pids): the lost one's ends with it.
  struct Range {
    int begin;
    int end;
  };
  std::vector<Range> ranges;
  if (lostProcs > 0) ranges.push_back({0, 1});
  const int spread = agents - lostProcs;
  for (int k = 0; k < options.procs; ++k) {
    ranges.push_back(
        {lostProcs + static_cast<int>(static_cast<long>(spread) * k / options.procs),
         lostProcs + static_cast<int>(static_cast<long>(spread) * (k + 1) / options.procs)});
  }
  std::vector<pid_t> children;
  pid_t lostPid = 0;
  for (int r = 0; r < static_cast<int>(ranges.size()); ++r) {
    const int k = r - lostProcs;  // the process's slot in pids; -1: the lost agent's
    const auto [begin, end] = ranges[static_cast<std::size_t>(r)];
    const pid_t child = ::fork();
    if (child < 0) {
      for (const pid_t started : children) ::kill(started, SIGKILL);
      return usage("cannot fork the simulator's processes");
    }
    if (child == 0) {
      if (k >= 0) shared.pids[k] = ::getpid();
      int code = 1;
      try {
        code = runAgents(shared, gateTimes, options, begin, end);
      } catch (const std::exception& error) {
        fail(shared, fmt::format("simulator process {}: {}", k, error.what()));
      }
      std::fflush(nullptr);
      std::_Exit(code);
    }
    if (k < 0) lostPid = child;
    children.push_back(child);
  }

  // A wedged run must not outlive the benchmark's patience, nor a process that died leave the
  // others waiting at a meeting for ever: say so, with what finished, and leave.
  const auto deadline = Clock::now() + std::chrono::seconds(options.timeoutSeconds) + 60s;
  std::size_t running = children.size();
  std::string gaveUpWhy;
  while (running > 0 && gaveUpWhy.empty()) {
    int status = 0;
    const pid_t ended = ::waitpid(-1, &status, WNOHANG);
    if (ended > 0) {
      --running;
      if (ended == lostPid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        gaveUpWhy =
            WIFSIGNALED(status)
                ? fmt::format("a simulator process (pid {}) died of signal {}", ended,
                              WTERMSIG(status))
                : fmt::format("a simulator process (pid {}) exited {}", ended, WEXITSTATUS(status));
      }
      continue;
    }
    if (Clock::now() >= deadline) {
      gaveUpWhy = fmt::format("gave up after {} s", options.timeoutSeconds + 60);
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  if (!gaveUpWhy.empty()) {
    std::cerr << "ddprun-scale-sim: " << gaveUpWhy << "\n";
    const nlohmann::json line = gaveUp(shared, options, gaveUpWhy);
    for (const pid_t child : children) ::kill(child, SIGKILL);
    while (::waitpid(-1, nullptr, 0) > 0) {
    }
    std::cout << line.dump() << std::endl;
    return 3;
  }
  lockShared(shared);
  nlohmann::json line = result(shared, options.backendName, options.nodes);
  if (shared.spares > 0) {
    line.update(spareFigures(options, gateTimes, agents));
    // One loss, one place: exactly one spare in the new round.
    if (shared.failures == 0 && shared.sparesSeated.load() != 1) {
      fail(shared, fmt::format("{} spares took a place in the new round, not 1",
                               shared.sparesSeated.load()));
    }
  }
  if (shared.failures > 0) line["first_failure"] = std::string(shared.firstFailure);
  const bool ok = shared.failures == 0;
  line["ok"] = ok;
  unlockShared(shared);
  std::cout << line.dump() << std::endl;
  return ok ? 0 : 1;
}
